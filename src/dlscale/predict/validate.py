"""`dlscale predict --validate`: every published scaling point dlscale ships, predicted from that
system's own smallest published point and its documented hardware and software, never fitted to the
point it predicts.

Each case names where every input comes from: the compute figure (the system's smallest published
point, per device; with two batch sizes per device published, the fit over them), the platform
(references/platforms.json, every figure sourced), the software facts that choose the strategy
(sources in `software`), and the terms a system needs beyond compute and network, each from a source
of its own: the input pipeline of a node (Marconi100's thesis, its workers sweep), a loader start-up
inside a timed window (HAL's program), the stragglers a published interval implies (BlueFog's
sample). A parameter taken from a published point is never used to predict that point: every row
records the points that fed it (`fed_by`), and a test checks that its own point is not among them.
Points are compared in the unit the source published: total img/s, an efficiency, or a speedup.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from dlscale.errors import ConfigError
from dlscale.predict.compute import fixed_for_device, from_one_point, from_points
from dlscale.predict.fixed import execution_of
from dlscale.predict.inputs import reference_spread
from dlscale.predict.model import (
    Ceilings,
    EpochStart,
    NodeLoader,
    Point,
    Strategy,
    Workload,
    compute_for_step,
    predict_point,
    workload_for_model,
)
from dlscale.predict.network import Network
from dlscale.predict.platforms import platform
from dlscale.report.references import RefSeries, load_reference

MIB = 1024 * 1024
ONE_BUCKET = 1 << 40
IMAGENET_TRAIN_IMAGES = 1_281_167
"""ILSVRC-2012 training images (docs/references.md#imagenet-size): Marconi100 publishes epoch
times, not rates."""

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
    terms: tuple[str, ...] = ()
    """Terms beyond compute and network, by name: "stragglers" (the compute figure's published interval),
    "node_loader" (the thesis's workers sweep), "epoch_start" (a loader start-up inside HAL's timed windows)."""


def _ngc(series: str, device: str) -> Case:
    return Case("NVIDIA DLE", "ngc", series, "dgx1-v100" if device == "V100" else "dgx-a100", Strategy(), TORCH_DDP)


CASES: tuple[Case, ...] = (
    Case("HAL", "hal", "feb", "hal-ac922", Strategy("gradient_allreduce", bucket_cap_bytes=ONE_BUCKET),
         "apex DDP(delay_allreduce=True): all gradients allreduced after backward, one call per dtype "
         "(richardkxu/distributed-pytorch@b2a3e175 imagenet_ddp_apex.py; NVIDIA/apex@47da14a0 "
         "apex/parallel/distributed.py allreduce_fallback); apex O2: fp16 gradients",
         grad_bytes=2, input_devices=2, terms=("epoch_start",)),
    Case("HAL", "hal", "may", "hal-ac922", Strategy("gradient_allreduce", bucket_cap_bytes=ONE_BUCKET),
         "as HAL feb; compute from the feb 2-GPU point (May published none below 4 GPUs)",
         grad_bytes=2, input_series="feb", input_devices=2, terms=("epoch_start",)),
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
         input_series="sample_16", input_devices=16, terms=("stragglers",)),
    Case("BlueFog/Horovod", "bluefog", "horovod", "aws-p3.16xlarge",
         Strategy("allreduce", fusion_cycle_s=5e-3, bucket_cap_bytes=64 * MIB),
         "Horovod's DistributedOptimizer: tensor fusion every 5 ms cycle up to 64 MiB, overlapped with backward "
         "(horovod/horovod v0.19-v0.20 horovod/common/operations.cc defaults, the releases of BlueFog's time; the "
         "version BlueFog ran is not stated); fp32; an allreduce waits for all 128 GPUs; compute from BlueFog's "
         "16-GPU sample", input_series="sample_16", input_devices=16, terms=("stragglers",)),
    Case("MLPerf", "mlperf", "h100_strong", "dgx-h100", Strategy("gradient_allreduce", bucket_cap_bytes=64 * MIB),
         "Horovod with MXNet, 64 MiB fusion, 'no NCCL and BWD overlap' (config_DGXH100_multi_8x8x50.sh); "
         "fp16 gradients; compute from the 1-node result",
         grad_bytes=2, input_devices=8),
    Case("Marconi100", "marconi100", "gpus_one_node", "marconi100", Strategy(),
         "torch DDP (pytorch/examples' main.py, enricogherardi/Profiling-of-Distributed-Training@1d06109e "
         "code/train.py); ResNet-50 as the README says (the code's default is ResNet-18); speedups of epoch time; "
         "16 loader workers per GPU on the node's 32 cores", terms=("node_loader",)),
    Case("Marconi100", "marconi100", "nodes", "marconi100", Strategy(),
         "as marconi100 gpus_one_node; compute from its 1-GPU epoch time", input_series="gpus_one_node",
         terms=("node_loader",)),
    Case("SC20", "sc20", "weak_scaling", "cori-gpu", Strategy(),
         "torch DDP, torch.cuda.amp (NERSC/sc20-dl-tutorial@5c9f83c9 train.py); ResNet-50 with the CIFAR stem on "
         "32 px, 100 classes; rates read off a plot", model="resnet50_cifar", image_size=32, num_classes=100),
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
                          input_devices=input_devices))
    return tuple(cases)


CASES = CASES + _mlperf_scale_cases()

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
    fed_by: tuple[tuple[str, str], ...] = ()
    """(parameter, published point reference:series@devices) for every point that fed a parameter of this
    prediction."""

    @property
    def fed_points(self) -> set[str]:
        return {pid for _, pid in self.fed_by}

    def fed_text(self) -> str:
        """'compute: hal:feb@2; loader start: marconi100:workers@1 worker' (each parameter once)."""
        by_parameter: dict[str, list[str]] = {}
        for parameter, pid in self.fed_by:
            if pid not in by_parameter.setdefault(parameter, []):
                by_parameter[parameter].append(pid)
        return "; ".join(f"{parameter}: {', '.join(pids)}" for parameter, pids in by_parameter.items())

    @property
    def point_id(self) -> str:
        return point_id(self.case.reference, self.case.series, self.devices)

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1


def point_id(reference: str, series: str, devices: int | str) -> str:
    return f"{reference}:{series}@{devices}"


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


# ----------------------------------------------------------------------------- the terms


@dataclass
class Terms:
    """A case's ceilings and where each came from: the points that fed them, and a sentence."""

    ceilings: Ceilings = field(default_factory=Ceilings)
    fed_by: list[tuple[str, str]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


def thesis_loader() -> tuple[NodeLoader, list[str], str]:
    """Marconi100's node loader from its thesis's workers sweep at 4 GPUs (neither point is predicted):
    one worker per GPU gives one worker's rate (4 workers on 32 cores, loader-bound), eight per GPU the
    node's rate with a worker on every core (32 workers)."""
    series = load_reference("marconi100").get("workers")
    one, full = series.point(workers=1), series.point(workers=8)
    worker = _rate(series, one) / (one["workers"] * one["devices"])
    node = _rate(series, full)
    text = (f"a node's loader (marconi100:workers at 1 and 8 workers per GPU on 4 GPUs: {worker:.1f} img/s per worker, "
            f"{node:.0f} img/s with the node's 32 cores full; {THESIS_WORKERS_PER_GPU} workers per GPU)")
    return (NodeLoader(worker, node, THESIS_WORKERS_PER_GPU),
            [point_id("marconi100", "workers", "1 worker"), point_id("marconi100", "workers", "8 workers")], text)


PARAMETERS = {"node_loader": "node loader", "epoch_start": "loader start", "stragglers": "stragglers"}
"""The parameter each term sets, as the table names it."""


def case_terms(case: Case) -> Terms:
    terms = Terms()
    for name in case.terms:
        if name == "node_loader":
            loader, fed, text = thesis_loader()
            terms.ceilings = replace(terms.ceilings, node_loader=loader)
        elif name == "epoch_start":
            loader, fed, _ = thesis_loader()
            fed = fed[:1]
            start = EpochStart(loader.worker_img_per_s, IMAGENET_TRAIN_IMAGES, HAL_PRINT_FREQ)
            terms.ceilings = replace(terms.ceilings, epoch_start=start)
            text = (f"the epoch's loader start-up in HAL's timed windows (its timer starts before the DataLoader's "
                    f"iterator; windows of {HAL_PRINT_FREQ} steps): one worker makes the first batch at "
                    f"{loader.worker_img_per_s:.1f} img/s, the rate of a loader worker on the same node type "
                    "(marconi100:workers, 1 worker per GPU; IBM AC922, POWER9)")
        elif name == "stragglers":
            series = load_reference(case.reference).get(case.input_series or case.series)
            cv, _ = reference_spread(series, series.point(devices=case.input_devices))
            terms.ceilings = replace(terms.ceilings, step_cv=cv)
            fed = [point_id(case.reference, series.id, case.input_devices)]
            text = (f"stragglers: a per-step spread of {100 * (cv or 0):.1f}% from the interval of "
                    f"{case.reference}:{series.id} (inputs.reference_spread)")
        else:
            raise ConfigError(f"unknown term {name!r}")
        terms.fed_by += [(PARAMETERS[name], pid) for pid in fed]
        terms.texts.append(text)
    return terms


# ----------------------------------------------------------------------------- the compute


def _compute_points(case: Case) -> tuple[RefSeries, list[tuple[str, int, dict]]]:
    """The compute figure's series and its candidate points: per batch per device, the point with the fewest
    devices (the case's own input point first)."""
    series = load_reference(case.reference).get(case.input_series or case.series)
    first = series.point(devices=case.input_devices)
    chosen = {_batch(series, first): first}
    for p in sorted(series.points, key=lambda p: p.get("devices", 0)):
        if p.get("devices") and (series.value(p, "img_per_s") or p.get("epoch_time_s")):
            chosen.setdefault(_batch(series, p), p)
    return series, [(point_id(case.reference, series.id, p["devices"]), b, p) for b, p in chosen.items()]


def point_setting(case: Case, point: dict, net: Network) -> tuple[Strategy, Network]:
    """The strategy and network of one published point: the case's, with the point's own algorithm (SHARP where
    its configuration asks for it) and its own devices per node."""
    strategy = replace(case.strategy, algorithm=point["algorithm"]) if point.get("algorithm") else case.strategy
    if point.get("nodes"):
        net = replace(net, devices_per_node=max(point["devices"] // point["nodes"], 1))
    return strategy, net


def anchored_step(case: Case, point: dict, batch: int, step_s: float, terms: Terms, net: Network) -> float:
    """A published step with what the model adds there in the case's setting taken out (its communication,
    stragglers and loader start-up: model.compute_for_step), so that the point's own devices give it back;
    as published where the model's additions alone exceed it."""
    strategy, here = point_setting(case, point, net)

    def at(compute_s: float) -> Point:
        work = workload_for_model(case.model, batch_per_device=batch, step_time=from_one_point(batch, compute_s),
                                  grad_bytes_per_element=case.grad_bytes, image_size=case.image_size,
                                  num_classes=case.num_classes)
        return predict_point(point["devices"], work, strategy, here, terms.ceilings, batch=batch)

    solved = compute_for_step(step_s, at)
    return solved[0] if solved else step_s


def case_workload(case: Case, terms: Terms, predicted: str | None = None) -> tuple[Workload, list[str]]:
    """The compute of a case, never from the point `predicted` (reference:series@devices): the fit over
    the series' batch sizes without it, else the input point with the shipped fixed part of the device (or
    an unknown one). Each figure is anchored: its own communication, stragglers and loader start-up out."""
    series, candidates = _compute_points(case)
    usable = [(pid, b, p) for pid, b, p in candidates if pid != predicted]
    net = platform(case.platform).network()
    if case.devices_per_node:
        net = replace(net, devices_per_node=case.devices_per_node)
    steps, fed = [], []
    for pid, batch, p in usable:
        steps.append((batch, anchored_step(case, p, batch, batch * p["devices"] / _rate(series, p), terms, net)))
        fed.append(pid)
    ref = load_reference(case.reference)
    device = series.meta.get("device") or ref.hardware.get("device")
    text = f"{case.reference}:{series.id} at {case.input_devices} device(s)"
    if len(steps) >= 2:
        step_time = from_points(steps, text)
        step_time = replace(step_time, fixed_source=f"fitted to {', '.join(fed)}", fixed_kind="published")
    else:
        batch, step = steps[0]
        step_time = from_one_point(batch, step, fixed_for_device(device, series.meta.get("precision"),
                                                                 execution_of(ref.recipe_of(series)), case.model),
                                   text)
        fed = fed[:1]
    workload = workload_for_model(case.model, batch_per_device=steps[0][0], step_time=step_time,
                                  grad_bytes_per_element=case.grad_bytes, image_size=case.image_size,
                                  num_classes=case.num_classes)
    return workload, fed


def _inputs_text(case: Case, workload: Workload, fed: list[str], terms: Terms) -> str:
    step = workload.step_time
    fixed = step.fixed_source if step.fixed_known else f"unknown, taken as zero: {step.fixed_source}"
    rate = workload.batch_per_device / workload.step_s
    return (f"compute: {case.reference}:{case.input_series or case.series} at {case.input_devices} device(s), "
            f"{rate:.1f} img/s per device at batch {workload.batch_per_device} ({', '.join(fed)}); "
            f"t0 {1e3 * step.fixed_s:.2f} ms ({fixed}); network: {case.platform}; software: "
            f"{case.software}" + "".join(f"; {t}" for t in terms.texts))


# ----------------------------------------------------------------------------- the cases


def run_case(case: Case) -> tuple[list[Row], str]:
    net = platform(case.platform).network()
    if case.devices_per_node:
        net = replace(net, devices_per_node=case.devices_per_node)
    terms = case_terms(case)
    series = load_reference(case.reference).get(case.series)
    same = (case.input_series or case.series) == case.series
    rows, text = [], ""
    base_point = min(series.points, key=lambda p: p.get("devices", 0))
    for point in sorted(series.points, key=lambda p: p["devices"]):
        n = point["devices"]
        if same and n == case.input_devices:
            continue
        own = point_id(case.reference, case.series, n)
        workload, fed = case_workload(case, terms, predicted=own)
        text = text or _inputs_text(case, workload, fed, terms)
        fed_by = tuple([("compute", pid) for pid in fed] + terms.fed_by)
        batch = int(point.get("batch_per_device") or series.meta.get("batch_per_device") or workload.batch_per_device)
        strategy, here = point_setting(case, point, net)
        predicted = predict_point(n, workload, strategy, here, terms.ceilings, batch=batch)
        if series.kind == "efficiency":
            single = workload.batch_per_device / workload.compute_s(workload.batch_per_device)
            rows.append(Row(case, n, "efficiency", point["efficiency"], predicted.img_per_s_per_device / single,
                            predicted.limit, point.get("bound", ""), fed_by))
        elif series.value(point, "img_per_s") is not None:
            rows.append(Row(case, n, "img/s", series.value(point, "img_per_s"), predicted.img_per_s_total,
                            predicted.limit, fed_by=fed_by))
        elif "speedup" in point and n != base_point["devices"]:
            base = predict_point(base_point["devices"], workload, case.strategy, net, terms.ceilings, batch=batch)
            rows.append(Row(case, n, "speedup", point["speedup"], predicted.img_per_s_total / base.img_per_s_total,
                            predicted.limit, fed_by=fed_by))
    return rows, text


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
           f"{'error':>7}  {'limited by':<24} parameters from"
    lines = [head]
    for r in rows:
        fmt = "{:,.0f}" if r.metric == "img/s" else "{:.3f}"
        bound = {"lower": " (published: at least)", "approximate": " (published: about)"}.get(r.bound, "")
        lines.append(f"{r.case.group:<16} {r.case.reference + ':' + r.case.series:<36} {r.devices:>7}  {r.metric:<10} "
                     f"{fmt.format(r.published):>10} {fmt.format(r.predicted):>10} {100 * r.error:>+6.1f}%  "
                     f"{r.limit + bound:<24} {r.fed_text()}")
    return lines
