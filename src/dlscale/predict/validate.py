"""`dlscale predict --validate`: every published scaling point dlscale ships, predicted from that
system's own single-device figure and its documented hardware and software, never fitted to the
scaling points themselves; and measured gloo sweeps of this machine.

Each case names where every input comes from: the compute figure (the system's smallest
published point, per device), the platform (references/platforms.json, every figure sourced)
and the software facts that choose the strategy (sources in `software`). Points are compared
in the unit the source published: total img/s, an efficiency, or a speedup.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.predict.inputs import network_from_comm_run, workload_from_run
from dlscale.predict.model import Ceilings, Strategy, Workload, predict_point, workload_for_model
from dlscale.predict.platforms import platform
from dlscale.report.references import RefSeries, load_reference

MIB = 1024 * 1024
ONE_BUCKET = 1 << 40
IMAGENET_TRAIN_IMAGES = 1_281_167
"""ILSVRC-2012 training images (docs/references.md#imagenet-size): Marconi100 publishes epoch
times, not rates."""

TORCH_DDP = ("torch DDP, default 25 MiB buckets overlapped with backward, fp32 gradients under torch.cuda.amp "
             "(NVIDIA/DeepLearningExamples@0107cf27 PyTorch/Classification/ConvNets/image_classification/training.py)")


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
    in_goal: bool = True
    """Part of the set the accuracy goals are stated for (docs/prediction.md)."""


def _ngc(series: str, device: str) -> Case:
    return Case("NVIDIA DLE", "ngc", series, "dgx1-v100" if device == "V100" else "dgx-a100", Strategy(), TORCH_DDP)


CASES: tuple[Case, ...] = (
    Case("HAL", "hal", "feb", "hal-ac922", Strategy("gradient_allreduce", bucket_cap_bytes=ONE_BUCKET),
         "apex DDP(delay_allreduce=True): all gradients allreduced after backward, one call per dtype "
         "(richardkxu/distributed-pytorch@b2a3e175 imagenet_ddp_apex.py; NVIDIA/apex@47da14a0 "
         "apex/parallel/distributed.py allreduce_fallback); apex O2: fp16 gradients",
         grad_bytes=2, input_devices=2),
    Case("HAL", "hal", "may", "hal-ac922", Strategy("gradient_allreduce", bucket_cap_bytes=ONE_BUCKET),
         "as HAL feb; compute from the feb 2-GPU point (May published none below 4 GPUs)",
         grad_bytes=2, input_series="feb", input_devices=2),
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
         "16-GPU sample (it publishes no 1-GPU rate)",
         input_series="sample_16", input_devices=16),
    Case("BlueFog/Horovod", "bluefog", "horovod", "aws-p3.16xlarge",
         Strategy("allreduce", fusion_cycle_s=1e-3, bucket_cap_bytes=128 * MIB),
         "Horovod's DistributedOptimizer: tensor fusion every 1 ms cycle up to 128 MiB, overlapped with backward "
         "(horovod/horovod@2626dc87 horovod/common/operations.cc defaults; the version BlueFog ran is not stated); "
         "fp32; compute from BlueFog's 16-GPU sample",
         input_series="sample_16", input_devices=16),
    Case("MLPerf", "mlperf", "h100_strong", "dgx-h100", Strategy("gradient_allreduce", bucket_cap_bytes=64 * MIB),
         "Horovod with MXNet, 64 MiB fusion, 'no NCCL and BWD overlap' (config_DGXH100_multi_8x8x50.sh); "
         "fp16 gradients; compute from the 1-node result",
         grad_bytes=2, input_devices=8),
    Case("other shipped", "marconi100", "gpus_one_node", "marconi100", Strategy(),
         "torch DDP (pytorch/examples' main.py, enricogherardi/Profiling-of-Distributed-Training@1d06109e "
         "code/train.py); ResNet-50 as the README says (the code's default is ResNet-18); speedups of epoch time",
         in_goal=False),
    Case("other shipped", "marconi100", "nodes", "marconi100", Strategy(),
         "as marconi100 gpus_one_node; compute from its 1-GPU epoch time", input_series="gpus_one_node",
         in_goal=False),
    Case("other shipped", "sc20", "weak_scaling", "cori-gpu", Strategy(),
         "torch DDP, torch.cuda.amp (NERSC/sc20-dl-tutorial@5c9f83c9 train.py); ResNet-50 with the CIFAR stem on "
         "32 px, 100 classes; rates read off a plot", model="resnet50_cifar", image_size=32, num_classes=100,
         in_goal=False),
)

NOT_PREDICTED = {
    "horovod": "TensorFlow's Inception V3, ResNet-101 and VGG-16 on Pascal GPUs: no single-device rate of that "
               "system is shipped, and two of the models are not in dlscale's layer table",
}


@dataclass(frozen=True)
class Row:
    case: Case
    devices: int
    metric: str
    published: float
    predicted: float
    limit: str
    bound: str = ""

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1


def _rate(series: RefSeries, point: dict) -> float:
    """Images/s of a published point; epoch-time series through the ImageNet training set size."""
    rate = series.value(point, "img_per_s")
    if rate is None and point.get("epoch_time_s"):
        rate = IMAGENET_TRAIN_IMAGES / point["epoch_time_s"]
    if rate is None:
        raise ConfigError(f"{series.reference}:{series.id} point {point} has no rate")
    return rate


def _batch(series: RefSeries, point: dict) -> int:
    return int(point.get("batch_per_device") or series.meta["batch_per_device"])


def case_workload(case: Case) -> tuple[Workload, str]:
    ref = load_reference(case.reference)
    series = ref.get(case.input_series or case.series)
    point = series.point(devices=case.input_devices)
    batch = _batch(series, point)
    rate = _rate(series, point) / case.input_devices
    workload = workload_for_model(case.model, batch_per_device=batch, step_s=batch / rate,
                                  grad_bytes_per_element=case.grad_bytes, image_size=case.image_size,
                                  num_classes=case.num_classes)
    return workload, (f"compute: {case.reference}:{series.id} at {case.input_devices} device(s), {rate:.1f} img/s per "
                      f"device at batch {batch}; network: {case.platform}; software: {case.software}")


def run_case(case: Case) -> tuple[list[Row], str]:
    workload, inputs = case_workload(case)
    net = platform(case.platform).network()
    if case.devices_per_node:
        net = replace(net, devices_per_node=case.devices_per_node)
    series = load_reference(case.reference).get(case.series)
    same = (case.input_series or case.series) == case.series
    rows = []
    base_point = min(series.points, key=lambda p: p.get("devices", 0))
    for point in sorted(series.points, key=lambda p: p["devices"]):
        n = point["devices"]
        if same and n == case.input_devices:
            continue
        batch = point.get("batch_per_device") or series.meta.get("batch_per_device") or workload.batch_per_device
        predicted = predict_point(n, workload, case.strategy, net, batch=int(batch))
        if series.kind == "efficiency":
            single = workload.batch_per_device / workload.compute_s(workload.batch_per_device)
            rows.append(Row(case, n, "efficiency", point["efficiency"], predicted.img_per_s_per_device / single,
                            predicted.limit, point.get("bound", "")))
        elif series.value(point, "img_per_s") is not None:
            rows.append(Row(case, n, "img/s", series.value(point, "img_per_s"), predicted.img_per_s_total,
                            predicted.limit))
        elif "speedup" in point and n != base_point["devices"]:
            base = predict_point(base_point["devices"], workload, case.strategy, net, batch=int(batch))
            rows.append(Row(case, n, "speedup", point["speedup"], predicted.img_per_s_total / base.img_per_s_total,
                            predicted.limit))
    return rows, inputs


def validate_references(cases: Sequence[Case] = CASES) -> tuple[list[Row], dict[str, str]]:
    rows, inputs = [], {}
    for case in cases:
        case_rows, text = run_case(case)
        rows += case_rows
        inputs[f"{case.reference}:{case.series}"] = text
    return rows, inputs


def statistics_of(rows: Sequence[Row]) -> dict:
    errors = [abs(r.error) for r in rows]
    if not errors:
        return {"points": 0}
    worst = max(rows, key=lambda r: abs(r.error))
    return {"points": len(errors), "median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
            "worst": f"{worst.case.reference}:{worst.case.series} at {worst.devices}",
            "within_25pct": sum(e <= 0.25 for e in errors), "within_10pct": sum(e <= 0.10 for e in errors)}


def format_rows(rows: Sequence[Row]) -> list[str]:
    head = f"{'group':<16} {'series':<36} {'devices':>7}  {'metric':<10} {'published':>10} {'predicted':>10} " \
           f"{'error':>7}  limited by"
    lines = [head]
    for r in rows:
        fmt = "{:,.0f}" if r.metric == "img/s" else "{:.3f}"
        bound = {"lower": " (published: at least)", "approximate": " (published: about)"}.get(r.bound, "")
        lines.append(f"{r.case.group:<16} {r.case.reference + ':' + r.case.series:<36} {r.devices:>7}  {r.metric:<10} "
                     f"{fmt.format(r.published):>10} {fmt.format(r.predicted):>10} {100 * r.error:>+6.1f}%  "
                     f"{r.limit}{bound}")
    return lines


# ------------------------------------------------------------------------------ gloo sweeps


@dataclass(frozen=True)
class SweepRow:
    sweep: str
    series: str
    devices: int
    measured: float
    predicted: float
    """Compute and exposed communication: the prediction the goal is stated for."""
    with_stragglers: float
    """The same with the stragglers term from the 1-rank run's step spread (on a shared machine that
    spread is mostly other processes' load, which varies in time rather than per step)."""
    limit: str
    inputs: str

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1

    @property
    def error_with_stragglers(self) -> float:
        return self.with_stragglers / self.measured - 1


def validate_sweep(sweep_dir: str | Path, comm_dir: str | Path) -> list[SweepRow]:
    """Each series of a `dlscale scale --nproc 1,2,...` sweep: its larger world sizes predicted from its
    1-rank run and a comm run's fit (and again with the 1-rank run's step spread as stragglers)."""
    path = Path(sweep_dir)
    file = path / "sweep.json"
    if not file.is_file():
        raise ConfigError(f"{path}: no sweep.json; give a directory made by dlscale scale")
    sweep = json.loads(file.read_text())
    net = network_from_comm_run(comm_dir)
    by_series: dict[str, dict[int, Path]] = {}
    for point in sweep.get("points", []):
        run_dir = path / point["run_dir"]
        if point.get("status") == "ok" and (run_dir / "summary.json").is_file() and point.get("nnodes", 1) == 1:
            by_series.setdefault(point.get("series", ""), {})[point["world_size"]] = run_dir
    rows = []
    for series, runs in by_series.items():
        if 1 not in runs:
            continue
        workload, spread = workload_from_run(runs[1])
        from_run = json.loads((runs[1] / "summary.json").read_text())
        strategy = Strategy(from_run.get("dist_optimizer") or "allreduce", topology=from_run.get("topology") or "exp2")
        for n, run_dir in sorted(runs.items()):
            if n == 1:
                continue
            measured = json.loads((run_dir / "summary.json").read_text())["img_per_sec_total_mean"]
            point = predict_point(n, workload, strategy, net)
            noisy = predict_point(n, workload, strategy, net, Ceilings(step_cv=spread))
            inputs = (f"compute: {workload.source}; step spread {100 * (spread or 0):.1f}%; network: {net.source}")
            rows.append(SweepRow(path.name, series or "sweep", n, measured, point.img_per_s_total,
                                 noisy.img_per_s_total, point.limit, inputs))
    if not rows:
        raise ConfigError(f"{path}: no series with a 1-rank run and a larger one on one node")
    return rows
