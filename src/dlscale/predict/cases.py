"""The published systems `dlscale predict --validate` predicts: one case per series, each with where every input
comes from (the compute figure's series and point, the platform, the software facts that choose the strategy and
their sources, the terms beyond compute and network). The points themselves are in references/*.json."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from dlscale.errors import ConfigError, shown
from dlscale.predict.model import OVERLAPS, STRATEGIES, Strategy
from dlscale.predict.network import ALGORITHMS
from dlscale.predict.platforms import platform
from dlscale.report.references import Reference, load_reference

MIB = 1024 * 1024
ONE_BUCKET = 1 << 40

TORCH_DDP = ("torch DDP, default 25 MiB buckets overlapped with backward, fp32 gradients under torch.cuda.amp "
             "(NVIDIA/DeepLearningExamples@0107cf27 PyTorch/Classification/ConvNets/image_classification/training.py)")
THESIS_WORKERS_PER_GPU = 16
"""Marconi100's runs load with 16 DataLoader workers per GPU unless the workers sweep varies them
(enricogherardi/Profiling-of-Distributed-Training@1d06109e README.md)."""
HAL_PRINT_FREQ = 10
"""HAL's timed windows: batch_time is updated every print_freq = 10 steps, from a timer started before the
epoch's DataLoader iterator (richardkxu/distributed-pytorch@06f1d519 imagenet_ddp_apex.py, train())."""


@dataclass(frozen=True)
class Case:
    group: str
    reference: str
    series: str
    platform: str
    strategy: Strategy
    software: str
    """The documented software facts behind the strategy, with their sources."""
    grad_bytes: int = 4
    model: str = "resnet50"
    image_size: int = 224
    num_classes: int = 1000
    input_series: str | None = None
    """Series holding the compute figure (default: this series)."""
    input_devices: int = 1
    devices_per_node: int | None = None
    """Overrides the platform's when the runs used fewer devices per node."""
    rate: str = "train"
    """Which rate the published figure is, in a few words: the training rate (over an epoch, between
    evaluations), an epoch time; every shipped one leaves start-up and evaluation out."""
    terms: tuple[str, ...] = ()
    """Terms beyond compute and network, by name: "stragglers" (the compute figure's published interval),
    "node_loader" (the thesis's workers sweep), "epoch_start" (a loader start-up inside HAL's timed windows)."""
    path: str | None = None
    """The reference file the case reads (--reference-file), where its reference is not shipped."""


def case_reference(case: Case) -> Reference:
    """The reference a case reads: its file (--reference-file), else the shipped one of its name."""
    return _reference(case.path or case.reference)


def shipped_reference(name: str) -> Reference:
    """A shipped reference, read once per process (as the cases' are)."""
    return _reference(name)


@functools.lru_cache(maxsize=64)
def _reference(name_or_path: str) -> Reference:
    """A reference read (and its shape checked) once per process: the validation asks for each many times."""
    return load_reference(name_or_path)


def _ngc(series: str, device: str) -> Case:
    return Case("NVIDIA DLE", "ngc", series, "dgx1-v100" if device == "V100" else "dgx-a100", Strategy(), TORCH_DDP,
                rate="train, epoch mean")


CASES: tuple[Case, ...] = (
    Case("HAL", "hal", "feb", "hal-ac922", Strategy("gradient_allreduce", bucket_cap_bytes=ONE_BUCKET),
         "apex DDP(delay_allreduce=True): all gradients allreduced after backward, one call per dtype "
         "(richardkxu/distributed-pytorch@b2a3e175 imagenet_ddp_apex.py; NVIDIA/apex@47da14a0 "
         "apex/parallel/distributed.py allreduce_fallback); apex O2: fp16 gradients",
         grad_bytes=2, input_devices=2, terms=("epoch_start",), rate="train, loader start in"),
    Case("HAL", "hal", "may", "hal-ac922", Strategy("gradient_allreduce", bucket_cap_bytes=ONE_BUCKET),
         "as HAL feb; compute from the feb 2-GPU point (May published none below 4 GPUs)",
         grad_bytes=2, input_series="feb", input_devices=2, terms=("epoch_start",), rate="train, loader start in"),
    *(_ngc(s, "A100" if s.startswith("a100") else "V100") for s in (
        "a100_80gb_amp", "a100_80gb_tf32", "v100_16gb_amp", "v100_16gb_fp32", "v100_32gb_amp", "v100_32gb_fp32",
        "a100_40gb_amp_2006", "a100_40gb_tf32_2006", "v100_16gb_amp_2006")),
    *(Case("DLPerf", "dlperf", s, "dlperf-v100", Strategy(), TORCH_DDP + "; NGC 20.03 code not read, assumed the same")
      for s in ("dlperf_amp", "dlperf_fp32", "dlperf_amp_static_loss_scale")),
    *(Case("DLPerf", "dlperf", s, "dlperf-v100", Strategy(),
           TORCH_DDP + "; PaddlePaddle Perf states no network: DLPerf's one 100 Gb/s port per node assumed")
      for s in ("paddle_amp", "paddle_fp32")),
    *(Case("DLPerf", "dlperf", s, "dgx-a100", Strategy(), TORCH_DDP) for s in ("paddle_a100_amp", "paddle_a100_fp32")),
    Case("BlueFog/Horovod", "bluefog", "neighbor_allreduce", "aws-p3.16xlarge",
         Strategy("neighbor_allreduce", overlap="step", schedule="inner_outer"),
         "BlueFog's pytorch_benchmark.py: adapt-with-combine (exchange under forward and backward), on several "
         "machines one rank per machine sends outside each step (Bluefog-Lib/bluefog@9ee376a7 "
         "examples/pytorch_benchmark.py, GetInnerOuterExpo2DynamicSendRecvRanks); fp32; compute from BlueFog's "
         "16-GPU sample on 4 machines of 4 GPUs (it publishes no 1-GPU rate); a step waits for its one peer",
         input_series="sample_16", input_devices=16, terms=("stragglers",), rate="synthetic"),
    Case("BlueFog/Horovod", "bluefog", "horovod", "aws-p3.16xlarge",
         Strategy("allreduce", fusion_cycle_s=5e-3, bucket_cap_bytes=64 * MIB),
         "Horovod's DistributedOptimizer: tensor fusion every 5 ms cycle up to 64 MiB, overlapped with backward "
         "(horovod/horovod v0.19-v0.20 horovod/common/operations.cc defaults, the releases of BlueFog's time; the "
         "version BlueFog ran is not stated); fp32; an allreduce waits for all 128 GPUs; compute from BlueFog's "
         "16-GPU sample", input_series="sample_16", input_devices=16, terms=("stragglers",), rate="synthetic"),
    Case("MLPerf", "mlperf", "h100_strong", "dgx-h100", Strategy("gradient_allreduce", bucket_cap_bytes=64 * MIB),
         "Horovod with MXNet, 64 MiB fusion, 'no NCCL and BWD overlap' (config_DGXH100_multi_8x8x50.sh); "
         "fp16 gradients; compute from the 1-node result",
         grad_bytes=2, input_devices=8, rate="train, epoch median"),
    Case("Marconi100", "marconi100", "gpus_one_node", "marconi100", Strategy(),
         "torch DDP (pytorch/examples' main.py, enricogherardi/Profiling-of-Distributed-Training@1d06109e "
         "code/train.py); ResNet-50 as the README says (the code's default is ResNet-18); speedups of epoch time; "
         "16 loader workers per GPU on the node's 32 cores", terms=("node_loader",), rate="epoch time"),
    Case("Marconi100", "marconi100", "nodes", "marconi100", Strategy(),
         "as marconi100 gpus_one_node; compute from its 1-GPU epoch time", input_series="gpus_one_node",
         terms=("node_loader",), rate="epoch time"),
    Case("SC20", "sc20", "weak_scaling", "cori-gpu", Strategy(),
         "torch DDP, torch.cuda.amp (NERSC/sc20-dl-tutorial@5c9f83c9 train.py); ResNet-50 with the CIFAR stem on "
         "32 px, 100 classes; rates read off a plot", model="resnet50_cifar", image_size=32, num_classes=100,
         rate="train, off a plot"),
)

MXNET_HOROVOD = ("NVIDIA's MXNet ResNet-50 with Horovod: gradients allreduced after backward ('# Default is no NCCL "
                 "and BWD overlap', config_DGXA100_multi_*.sh) in fusions of up to 64 MiB (HOROVOD_FUSION_THRESHOLD="
                 "67108864), fp16 gradients; SHARP where the configuration asks for it (SBATCH_NETWORK=sharp)")


def _mlperf_scale_cases() -> tuple[Case, ...]:
    """One case per series of references/mlperf_scale.json: its platform and NVIDIA's MXNet setting; the compute
    from the series' smallest point (ABCI, one point: from the DGX-1 node of the same round, the same V100)."""
    cases = []
    for series in load_reference("mlperf_scale").series:
        first = min(series.points, key=lambda p: p["devices"])
        input_series, input_devices = (series.id, first["devices"]) if len(series.points) > 1 else ("dgx1_v06", 8)
        cases.append(Case("MLPerf", "mlperf_scale", series.id, series.meta["platform"],
                          Strategy("gradient_allreduce", bucket_cap_bytes=64 * MIB),
                          f"{MXNET_HOROVOD}; {series.meta.get('setting', '')}", grad_bytes=2,
                          input_series=None if input_series == series.id else input_series,
                          input_devices=input_devices, rate="train, between evals"))
    return tuple(cases)


CASES = CASES + _mlperf_scale_cases()

SERIES_CHOICES = (("dist_optimizer", STRATEGIES), ("algorithm", ALGORITHMS), ("overlap", OVERLAPS))
"""The fields of a reference series that choose its strategy, and the values each takes."""


def series_strategy(meta: dict, where: str) -> Strategy:
    """The strategy a reference series states (dist_optimizer, algorithm, overlap, bucket_cap_mb), torch DDP's
    defaults where it states none (allreduce in 25 MiB buckets overlapped with backward; another strategy's
    exchange after backward). A field given a value it does not take is one line naming `where` (the series), the
    field and its value."""
    for name, choices in SERIES_CHOICES:
        if meta.get(name) is not None and meta[name] not in choices:
            raise ConfigError(f"{where}: {name}={shown(meta[name])}; choose one of {', '.join(choices)}")
    name = meta.get("dist_optimizer") or "allreduce"
    return Strategy(name, algorithm=meta.get("algorithm") or "auto",
                    overlap=meta.get("overlap") or ("backward" if name == "allreduce" else "none"),
                    bucket_cap_bytes=int((meta.get("bucket_cap_mb") or 25) * MIB))


def file_cases(path: str, *, strict: bool = True) -> tuple[Case, ...]:
    """A case per scaling series of a reference file (--reference-file) that publishes images/s at two device
    counts or more: its platform, its strategy as the series states it (dist_optimizer, algorithm, overlap,
    bucket_cap_mb, grad_bytes; torch DDP's defaults where it states none), the compute from its smallest point.
    `strict`: every such series must name its platform, and one series at least must be there (--validate);
    else those without one are left to the command's setting (--from-reference)."""
    ref = load_reference(path)
    cases = []
    for series in ref.of_kind("scaling"):
        if len(series.curve("img_per_s")) < 2 or not (strict or series.meta.get("platform")):
            continue
        meta = series.meta
        if not meta.get("platform"):
            raise ConfigError(f"{path}: series {series.id} names no platform: the validation takes its own "
                              "communication out on its machine; add \"platform\" (dlscale predict --list-platforms)")
        platform(meta["platform"])  # one line listing the known ones when it is not
        strategy = series_strategy(meta, f"{path}: series {series.id}")
        first = min(series.points, key=lambda p: p.get("devices") or 0)
        cases.append(Case(f"file {ref.name}", ref.name, series.id, meta["platform"], strategy,
                          meta.get("setting") or "as the file states it", grad_bytes=int(meta.get("grad_bytes") or 4),
                          input_devices=first["devices"], rate=meta.get("rate") or "train", path=path))
    if not cases and strict:
        raise ConfigError(f"{path}: no series to validate: give a scaling series with img_per_s at two device counts "
                          "or more")
    return tuple(cases)


NOT_PREDICTED = {
    "horovod": "TensorFlow's Inception V3, ResNet-101 and VGG-16 on Pascal GPUs: no single-device rate of that "
               "system is shipped, and two of the models are not in dlscale's layer table",
}
