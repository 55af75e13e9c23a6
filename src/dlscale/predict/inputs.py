"""What `dlscale predict` starts from: run directories, published references, or FLOPs; a network
from a comm run, a platform or numbers; the loader's ceiling and a run's spread. JSON only (no torch).

Each reader returns its result with a sentence saying where it came from, which the prediction
prints and records.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.metrics.hardware import PEAK_TFLOPS
from dlscale.predict.compute import Fixed, fixed_for_device, from_one_point, from_points
from dlscale.predict.fixed import EXECUTIONS, FRAMEWORKS, Stack, device_key, stack_of
from dlscale.predict.layers import forward_macs, model_parameters
from dlscale.predict.model import workload_for_model
from dlscale.predict.network import Level, Network
from dlscale.predict.workload import GradSpec, Workload
from dlscale.report.references import RefSeries, load_reference, named_series
from dlscale.rundir import read_comm_run, read_run, read_summary

BACKWARD_FORWARD_RATIO = 2.0
"""Backward FLOPs = 2 x forward for conv nets (docs/references.md#training-flops-3x)."""


def _grad_bytes(precision: str | None) -> int:
    """Bytes per gradient element: torch's autocast keeps fp32 weights and gradients; apex O2
    keeps fp16 ones (HAL's published runs)."""
    return 2 if precision and "apex O2" in precision else 4


def workload_from_run(path: str | Path, fixed: Fixed | None = None, *, execution: str | None = None,
                      framework: str | None = None) -> tuple[Workload, float | None]:
    """A bench run on one rank (its batch curve when it measured several batch sizes), or a profile run:
    (workload, measured per-step spread or None). `fixed`: the fixed part for a run of one batch size
    (default: the shipped curve of its device, else modelled with the run's stack, else unknown). execution,
    framework: the stack to model that fixed part with instead of the run's own."""
    run = read_run(path, ("bench", "profile"))
    summary = run.summary
    model = summary.get("model")
    batch = int(summary["batch_size"])
    shape = {"image_size": int(summary.get("image_size") or 224),
             "num_classes": int(summary.get("num_classes") or 1000), "width": int(summary.get("width") or 64)}
    asked = {"execution": execution, "framework": framework}
    stack = replace(stack_of(summary), **{key: value for key, value in asked.items() if value})
    fixed = fixed or fixed_for_device(summary.get("device_name"), summary.get("precision"), stack, model or "resnet50")
    if summary["kind"] == "bench":
        if int(summary["world_size"]) != 1:
            raise ConfigError(f"{path} ran on {summary['world_size']} ranks: its step includes communication; "
                              "give a 1-rank bench run (dlscale scale --nproc 1,...  makes one)")
        curve = summary.get("batch_curve")
        if curve:
            step_time = from_points([(c["batch_size"], c["step_time_ms"] / 1e3) for c in curve],
                                    f"dlscale bench run {path}: steps at batch "
                                    f"{', '.join(str(c['batch_size']) for c in curve)}")
        else:
            step = batch / float(summary["img_per_sec_total_mean"])
            step_time = from_one_point(batch, step, fixed,
                                       f"dlscale bench run {path}: {batch / step:.1f} img/s at batch {batch}")
        workload = workload_for_model(model, batch_per_device=batch, step_time=step_time, **shape,
                                      **_cpu(run.env, summary), source=step_time.source)
        return workload, step_spread(summary)
    slowest = max(summary["breakdown"], key=lambda row: row["step_ms"])
    compute_ms = slowest["step_ms"] - slowest["data_ms"] - (slowest.get("exposed_comm_ms") or 0.0)
    fwd = slowest["forward_ms"] / compute_ms
    bwd = (slowest["backward_ms"] - (slowest.get("exposed_comm_ms") or 0.0)) / compute_ms
    source = (f"dlscale profile run {path}: {compute_ms:.1f} ms of compute per step (forward {100 * fwd:.0f}%, "
              f"backward {100 * bwd:.0f}%) at batch {batch}")
    workload = workload_for_model(model, batch_per_device=batch, step_time=from_one_point(
        batch, compute_ms / 1e3, fixed, source), **shape, forward_fraction=fwd, backward_fraction=bwd,
        **_cpu(run.env, summary), source=source)
    ready = summary.get("grad_ready")
    if ready:
        workload = replace(workload, grads=tuple(_grads_from_profile(ready)))
    return workload, None


def fixed_from_run(path: str | Path) -> Fixed:
    """--step-curve DIR: the fixed part fitted to a bench run's batch curve."""
    summary = read_summary(path, "bench")
    curve = summary.get("batch_curve")
    if not curve:
        raise ConfigError(f"{path} measured one batch size, so it has no step curve; run dlscale bench with a list, "
                          "e.g. --batch-size 16,32,64,128,256, on one device")
    if int(summary.get("world_size") or 1) != 1:
        raise ConfigError(f"{path} ran on {summary['world_size']} ranks; a step curve is one device's: run it on one")
    step_time = from_points([(c["batch_size"], c["step_time_ms"] / 1e3) for c in curve], str(path))
    return Fixed(step_time.fixed_s, f"{1e3 * step_time.fixed_s:.2f} ms, fitted to the batch curve of dlscale bench "
                                    f"run {path} ({summary.get('device_name') or summary.get('device')})",
                 kind="measured")


def _cpu(env: dict, summary: dict) -> dict:
    """A CPU run's threads per rank and the machine's cores (env.json): ranks share those cores."""
    if summary.get("device") != "cpu":
        return {}
    if not env.get("torch_threads") or not env.get("cpu_count"):
        return {}
    return {"cpu_threads": int(env["torch_threads"]), "cpu_cores": int(env["cpu_count"])}


def _grads_from_profile(ready: list[dict]) -> list[GradSpec]:
    last = max(r["ready_ms"] for r in ready) or 1.0
    return [GradSpec(int(r["numel"]), r["ready_ms"] / last) for r in sorted(ready, key=lambda r: r["ready_ms"])]


def step_spread(summary: dict) -> float | None:
    """Spread (std / mean) of one step's time from a bench run's per-iteration rates: an
    iteration is k steps, so the per-step spread is sqrt(k) x the per-iteration one (independent steps)."""
    rates = [r for rank in summary.get("iterations_per_rank") or [] for r in rank if r]
    if len(rates) < 2:
        return None
    times = [1.0 / r for r in rates]
    mean = statistics.fmean(times)
    return statistics.pstdev(times) / mean * math.sqrt(int(summary.get("num_batches_per_iter") or 1))


@dataclass(frozen=True)
class PublishedStep:
    """One published point a compute figure starts from."""

    batch: int
    devices: int
    nodes: int | None
    step_s: float
    """batch x devices / the published img/s: one device's step, with its run's own communication and waits."""
    algorithm: str | None = None
    """The allreduce algorithm the point's run used where it differs from its series' (SHARP at scale)."""
    bn_group: int = 1
    """Devices per BatchNorm group in the point's run."""


@dataclass(frozen=True)
class ReferenceFigure:
    """A shipped reference series as a compute figure: per batch per device, its point with the fewest devices."""

    spec: str
    """NAME:SERIES."""
    series: RefSeries
    steps: tuple[PublishedStep, ...]
    """The first is the series' smallest published point."""
    device: str
    text: str
    """Where the figure comes from, in words (the series, its rate per device, its sources)."""
    source: str
    """The series' sources (repository:path@commit)."""
    spread: float | None
    """The per-step spread its published interval implies (reference_spread), or None."""
    grad_bytes: int
    precision: str | None = None
    """The series' precision, as it states it (the fixed part's model reads its first word)."""
    stack: Stack = Stack()
    """How its steps issued their kernels (predict/fixed.py: execution, framework, optimizer, MXNet's bulk
    execution), from the reference's recipe."""

    @property
    def global_batch(self) -> int | None:
        """The global batch every published point kept (strong scaling), else None: several points, one
        global batch among them."""
        batches = {p.get("global_batch") or (p.get("batch_per_device") or self.series.meta.get("batch_per_device") or 0)
                   * p["devices"] for p in self.series.points if p.get("devices")}
        return int(batches.pop()) if len(self.series.points) >= 2 and len(batches) == 1 else None

    def workload(self, steps: Sequence[tuple[int, float]], *, model: str, fixed: Fixed | None = None,
                 grad_bytes: int | None = None, note: str = "") -> Workload:
        """The compute over these (batch, step seconds): the fit over two batch sizes or more, else the one
        step with `fixed` (default: the shipped curve of the device, else unknown)."""
        if len(steps) >= 2:
            at = ", ".join(f"{p.batch} at {p.devices} devices" for p in self.steps)
            said = note or "their own communication included"
            step_time = from_points(steps, f"published: {self.series.label}, batches {at} ({said}; {self.source})")
            step_time = replace(step_time, fixed_source=f"fitted to the series' {len(steps)} batch sizes per device",
                                fixed_kind="published")
        else:
            batch, seconds = steps[0]
            step_time = from_one_point(batch, seconds, fixed or fixed_for_device(self.device, self.precision,
                                                                                  self.stack, model),
                                       self.text + (f"; {note}" if note else ""))
        return workload_for_model(model, batch_per_device=self.steps[0].batch, step_time=step_time,
                                  grad_bytes_per_element=grad_bytes or self.grad_bytes, source=step_time.source)


def reference_figure(spec: str, file: str | None = None) -> ReferenceFigure:
    """NAME[:SERIES] of a shipped reference, or of the reference file `file` when NAME is its name (without
    SERIES: its first series that publishes images/s, a sample's where it has no scaling series)."""
    name, _, series_id = spec.partition(":")
    if file is not None and load_reference(file).name == name:
        spec = f"{file}:{series_id}" if series_id else file
    ref, series, _ = named_series(spec)
    name = ref.name
    points = sorted((p for p in series.points if series.value(p, "img_per_s") and p.get("devices")),
                    key=lambda p: p["devices"])
    if not points:
        raise ConfigError(f"{name}:{series.id} has no images/s to start from")
    first = points[0]
    batch = first.get("batch_per_device") or series.meta.get("batch_per_device")
    if not batch:
        raise ConfigError(f"{name}:{series.id} publishes no batch per device; give --batch-size")
    per_batch: dict[int, dict] = {}
    for p in points:
        per_batch.setdefault(int(p.get("batch_per_device") or batch), p)
    steps = tuple(PublishedStep(b, p["devices"], p.get("nodes"), b * p["devices"] / series.value(p, "img_per_s"),
                                p.get("algorithm"), int(p.get("bn_group") or 1)) for b, p in per_batch.items())
    rate = series.value(first, "img_per_s") / first["devices"]
    note = "" if first["devices"] == 1 else " (its own communication included)"
    text = (f"published: {series.label}, {rate:.1f} img/s per device at {first['devices']} device(s){note}, "
            f"batch {batch} ({ref.source_text(series)})")
    device = series.meta.get("device") or ref.hardware.get("device")
    return ReferenceFigure(f"{name}:{series.id}", series, steps, device, text, ref.source_text(series),
                           reference_spread(series, first)[0], _grad_bytes(series.meta.get("precision")),
                           series.meta.get("precision"), stack_of(ref.recipe_of(series)))


GIVEN = {"rate": "images/s of all the devices together (> 0)", "devices": "how many devices (a whole number >= 1)",
         "batch": "images per device per step (a whole number >= 1)", "nodes": "how many nodes (a whole number >= 1)",
         "device": "the device, as the peak table names it (H100, A100, V100-SXM2, MI300X)",
         "precision": "amp_bf16, amp_fp16, tf32 or fp32", "execution": "eager, compiled or cuda-graphs",
         "framework": "pytorch or mxnet (who issued the steps' kernels)"}
"""The fields of a figure given on the command line (--from-reference rate=...,devices=...,batch=...)."""


def given_figure(text: str) -> ReferenceFigure:
    """A published or measured rate given as such: rate=IMG_PER_S,devices=N,batch=B[,nodes=M][,device=D]
    [,precision=P][,execution=E][,framework=F], anchored in the command's setting as a shipped reference is in its
    own."""
    fields = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in GIVEN:
            raise ConfigError(f"--from-reference {text!r}: {part.strip()!r} is not KEY=VALUE with a key of "
                              f"{', '.join(GIVEN)}")
        fields[key.strip()] = value.strip()
    missing = [key for key in ("rate", "devices", "batch") if key not in fields]
    if missing:
        wanted = "; ".join(GIVEN[k] for k in missing)
        raise ConfigError(f"--from-reference {text!r} needs {', '.join(missing)} ({wanted})")
    rate = _given_number(fields, "rate", float)
    devices, batch = _given_number(fields, "devices", int), _given_number(fields, "batch", int)
    nodes = _given_number(fields, "nodes", int) if "nodes" in fields else None
    if fields.get("device") and device_key(fields["device"]) is None:
        raise ConfigError(f"--from-reference: device={fields['device']!r} is not a device dlscale knows the peak and "
                          f"memory bandwidth of; give one of {', '.join(PEAK_TFLOPS)}, or leave device out")
    execution, framework = fields.get("execution", "eager"), fields.get("framework", "pytorch")
    for key, value, known in (("execution", execution, EXECUTIONS), ("framework", framework, FRAMEWORKS)):
        if value not in known:
            raise ConfigError(f"--from-reference {text!r}: {key}={value!r}: {GIVEN[key]}")
    stack = Stack(execution, framework)
    point = {"devices": devices, "nodes": nodes, "batch_per_device": batch, "img_per_s": rate}
    meta = {"device": fields.get("device"), "precision": fields.get("precision"), "batch_per_device": batch}
    series = RefSeries("given", "point", "given on the command line", "scaling", (point,), meta)
    step = PublishedStep(batch, devices, nodes, batch * devices / rate)
    said = (f"given on the command line: {rate:,.1f} img/s at {devices} device(s) of batch {batch}"
            + (" (its own communication included)" if devices > 1 else ""))
    return ReferenceFigure("given:point", series, (step,), fields.get("device") or "", said, "the command line",
                           None, 4, fields.get("precision"), stack)


def _given_number(fields: dict, key: str, kind: type) -> int | float:
    try:
        value = kind(fields[key])
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0 or value > (1e12 if kind is float else 2**24):
        raise ConfigError(f"--from-reference: {key}={fields[key]!r}: {GIVEN[key]}")
    return value


def workload_from_reference(spec: str, *, model: str = "resnet50",
                            fixed: Fixed | None = None) -> tuple[Workload, float | None]:
    """NAME[:SERIES] of a shipped reference: its smallest published point, per device, as published (its own
    communication and stragglers included: anchor.py takes them out); where the series publishes two batch
    sizes per device or more, the fit over them (each at its fewest devices). Also the per-step spread its
    published interval implies, or None (reference_spread)."""
    figure = reference_figure(spec)
    return figure.workload([(p.batch, p.step_s) for p in figure.steps], model=model, fixed=fixed), figure.spread


def reference_spread(series, point: dict) -> tuple[float | None, int]:
    """The per-step spread of one device that a published point's 95% interval implies, and how many devices
    its step waited for. The interval is 1.96 x the std over iterations of the rate summed over N devices
    (BlueFog's and Horovod's benchmarks: docs/references.md#bluefog-benchmark): one device's is sqrt(N) x
    smaller relative to its 1/N share, so cv = ci x sqrt(N) / (1.96 x total); an iteration of k steps
    gives a step sqrt(k) x that (independent steps, dlscale's assumption; k = 10, the benchmark's default).
    The published run's step waited for one peer under BlueFog's dynamic one-peer exchange, for all N under
    an allreduce."""
    ci, total, n = point.get("img_per_s_ci95"), series.value(point, "img_per_s"), int(point.get("devices") or 1)
    waited = 2 if series.meta.get("dist_optimizer") == "neighbor_allreduce" and n > 1 else n
    if not ci or not total:
        return None, waited
    steps_per_iteration = 10
    return ci * math.sqrt(n) / (1.96 * total) * math.sqrt(steps_per_iteration), waited


PEAK_PRECISIONS = ("bf16", "fp16", "fp32")
"""The peak a device name stands for: its BF16 tensor peak, else FP16 (Volta, Turing), else FP32 (Pascal's P40)."""


def device_peak_dtype(device: str) -> str:
    """The precision whose peak --peak-tflops DEVICE takes (PEAK_PRECISIONS, the first the device has)."""
    known = PEAK_TFLOPS.get(device)
    if known is None:
        raise ConfigError(f"--peak-tflops {device!r}: give a number or one of {', '.join(PEAK_TFLOPS)}")
    return next(dtype for dtype in PEAK_PRECISIONS if dtype in known)


def workload_from_flops(model: str, *, batch: int, peak_tflops: float | str, mfu: float, image_size: int = 224,
                        num_classes: int = 1000, fixed: Fixed | None = None, stack: Stack | None = None) -> Workload:
    """Step = batch x training FLOPs per image / (peak x MFU); FLOPs from the layer table (3 x 2 x MACs).
    A device name takes its peak of device_peak_dtype. The fixed part: `fixed`, else the shipped curve of the
    named device, else its first-principles model for `stack`, else unknown."""
    device = peak_tflops if isinstance(peak_tflops, str) else None
    flops_dtype = "bf16"
    if device is not None:
        flops_dtype = device_peak_dtype(device)
        peak_tflops = PEAK_TFLOPS[device][flops_dtype]
    if not 0 < mfu <= 1:
        raise ConfigError(f"--mfu {mfu} must be in (0, 1]")
    if not 0 < float(peak_tflops) < math.inf:
        raise ConfigError(f"--peak-tflops {peak_tflops}: a peak must be a finite number of TFLOP/s above 0 (the step "
                          "time divides by it)")
    macs = forward_macs(model_parameters(model, num_classes=num_classes, image_size=image_size))
    flops = (1 + BACKWARD_FORWARD_RATIO) * 2 * macs
    step = batch * flops / (float(peak_tflops) * 1e12 * mfu)
    peak_said = f"{device}'s {flops_dtype} peak, " if device else ""
    source = (f"FLOPs: {flops / 1e9:.2f} GFLOP per image at {100 * mfu:.0f}% of {peak_said}"
              f"{float(peak_tflops):g} TFLOP/s")
    fixed = fixed or fixed_for_device(device, flops_dtype, stack or Stack(), model)
    step_time = from_one_point(batch, step, fixed, source)
    return workload_for_model(model, batch_per_device=batch, step_time=step_time, image_size=image_size,
                              num_classes=num_classes, source=source)


def network_from_comm_run(path: str | Path) -> Network:
    """The all_reduce fits of a dlscale comm run: per level when it spanned nodes.

    A fit gives t = a + S x 2(n-1)/n / B at the n ranks it measured; the latency a is spread
    over the ring's 2(n-1) steps (a per-step latency, no fixed base), so the model gives back the
    measured time at n and grows it with the step count elsewhere."""
    comm = read_comm_run(path)
    summary = comm.summary

    def level(name: str) -> Level | None:
        entry = comm.all_reduce(name)
        if not entry:
            return None
        fit = entry["fit"].get("in-place") or entry["fit"].get("out-of-place")
        if not fit or "error" in fit:
            return None
        return Level(fit["busbw_gbs"], fit["latency_us"] / max(2 * (entry["ranks"] - 1), 1))

    world = level("world")
    if world is None:
        raise ConfigError(f"{path} has no all_reduce fit; run dlscale comm --op all_reduce")
    intra, inter = level("intra") or world, level("inter") or world
    return Network(name=f"comm run {Path(path).name}", devices_per_node=int(summary["local_world_size"]),
                   intra=intra, inter=inter, base_us=0.0,
                   source=f"dlscale comm run {path}: all_reduce on {summary['world_size']} {summary['backend']} ranks, "
                          f"{intra.bandwidth_gbs:.3f} GB/s and {2 * intra.hop_us:.0f} us per 2 steps inside a node")


def network_from_numbers(devices_per_node: int, intra_gbps: float | None, inter_gbps: float | None,
                         latency_us: float | None, base: Network | None = None) -> Network:
    """--intra-gbps / --inter-gbps (Gbit/s of bus bandwidth) and --latency-us (per step), over a base network."""
    for flag, value in (("--intra-gbps", intra_gbps), ("--inter-gbps", inter_gbps), ("--latency-us", latency_us)):
        if value is not None and (value < 0 or (value == 0 and flag != "--latency-us")):
            raise ConfigError(f"{flag} {value} must be > 0")
    if base is None:
        if intra_gbps is None or inter_gbps is None:
            raise ConfigError("give a network: --platform NAME, --comm-run DIR, or both --intra-gbps and --inter-gbps")
        base = Network("given", devices_per_node, Level(0, 0), Level(0, 0), source="given on the command line")
    intra = Level(intra_gbps / 8 if intra_gbps else base.intra.bandwidth_gbs,
                  latency_us if latency_us is not None else base.intra.hop_us)
    inter = Level(inter_gbps / 8 if inter_gbps else base.inter.bandwidth_gbs,
                  latency_us if latency_us is not None else base.inter.hop_us)
    changed = [f for f, v in (("intra", intra_gbps), ("inter", inter_gbps), ("latency", latency_us)) if v is not None]
    source = base.source + (f"; {', '.join(changed)} given on the command line" if changed and base.source else "")
    return replace(base, devices_per_node=devices_per_node, intra=intra, inter=inter, source=source or base.source)


def loader_ceiling(path: str | Path, cores_per_device: float) -> tuple[float, str]:
    """Images/s per device the input pipeline can feed: the loader run's best images per CPU
    second (per core) x cores per device."""
    summary = read_summary(path, "loader")
    rates = [s["images_per_cpu_s"] for s in summary.get("settings", []) if s.get("images_per_cpu_s")]
    if not rates:
        raise ConfigError(f"{path}: the loader run recorded no images per CPU second")
    if cores_per_device <= 0:
        raise ConfigError("--cores-per-device must be > 0")
    per_core = max(rates)
    return per_core * cores_per_device, (f"dlscale loader run {path}: {per_core:.0f} img/s per core x "
                                         f"{cores_per_device:g} cores per device")

