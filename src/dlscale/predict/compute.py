"""One device's step as a function of its batch: t(b), measured or derived, never a constant per image.

A GPU's step has a part that does not shrink with the batch (kernel launches, small kernels at low
occupancy, the optimizer over every parameter, the step's synchronisation) and a part per image:

    t(b) = t0 + b x t1

Between measured batch sizes t(b) is interpolated linearly; beyond them it is the fit. Where only
one batch was measured, t1 follows from that point and a fixed part t0 taken from elsewhere (a
shipped per-device curve, a given --step-overhead-ms), or, where none exists, t0 is unknown and
taken as zero, and the StepTime says so (`fixed_known`). Pure Python: no torch.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from dlscale.errors import ConfigError
from dlscale.metrics.cost import IMAGENET_TRAIN_IMAGES
from dlscale.predict.fixed import Stack, device_key, floor
from dlscale.report.references import RefSeries, load_reference, reference_names

FIXED_KINDS = ("measured", "published", "given", "modelled", "unknown")
"""Where a fixed part comes from, best first: a curve dlscale measured; published figures at two batch sizes or
more; the command line; the first-principles model of predict/fixed.py; nothing (taken as zero)."""


@dataclass(frozen=True)
class Fixed:
    """The part of a device's step that does not shrink with the batch, and where it came from."""

    seconds: float
    source: str
    known: bool = True
    """False: nothing gives it, and it is taken as zero."""
    kind: str = "measured"
    """One of FIXED_KINDS."""

    def __post_init__(self) -> None:
        if self.kind not in FIXED_KINDS:
            raise ConfigError(f"unknown kind of fixed part {self.kind!r}; choose one of {', '.join(FIXED_KINDS)}")


UNKNOWN_FIXED = Fixed(0.0, "no step of this device measured at a second batch size", known=False, kind="unknown")


@dataclass(frozen=True)
class StepTime:
    points: tuple[tuple[int, float], ...]
    """Measured (batch, seconds per step), by batch; one point for a single figure."""
    fixed_s: float
    """t0: seconds per step that do not depend on the batch."""
    per_image_s: float
    """t1: seconds per image."""
    source: str
    """Where the measured points came from, in words."""
    fixed_source: str
    """Where t0 (and so t1) came from, in words."""
    fixed_known: bool = True
    """False: t0 is unknown and taken as zero."""
    fixed_kind: str = "measured"
    """Where t0 comes from: one of FIXED_KINDS."""

    def at(self, batch: int) -> float:
        """Seconds per step at `batch` images: interpolated between measured points, the fit beyond them."""
        if batch < 1:
            raise ConfigError(f"a batch must be >= 1 image per device, got {batch}")
        pts = self.points
        if len(pts) >= 2 and pts[0][0] <= batch <= pts[-1][0]:
            for (b0, t0), (b1, t1) in zip(pts, pts[1:], strict=False):  # each point with the next
                if b0 <= batch <= b1:
                    return t0 + (t1 - t0) * (batch - b0) / (b1 - b0)
        return self.fixed_s + self.per_image_s * batch

    def fixed_share(self, batch: int) -> float:
        """t0 as a fraction of the step at `batch`."""
        return self.fixed_s / self.at(batch)

    def describe(self) -> list[str]:
        """t(b) with its two parameters, each with its source; the measured points where there are several."""
        fixed = self.fixed_source if self.fixed_known else f"UNKNOWN, TAKEN AS ZERO: {self.fixed_source}"
        if self.fixed_kind == "modelled":
            fixed = f"MODELLED (no curve and no published steps at two batch sizes): {self.fixed_source}"
        lines = [f"t(b) = t0 + b x t1, t0 = {1e3 * self.fixed_s:.2f} ms, t1 = {1e3 * self.per_image_s:.4f} ms "
                 "per image",
                 f"t0 (fixed part): {fixed}"]
        if len(self.points) >= 2:
            measured = ", ".join(f"{b}: {1e3 * t:.2f} ms" for b, t in self.points)
            lines.append(f"t1 (per image): fitted with t0 to the steps at batch {measured} (interpolated between "
                         "them, the fit beyond)")
        else:
            batch, seconds = self.points[0]
            lines.append(f"t1 (per image): (t({batch}) - t0) / {batch}, t({batch}) = {1e3 * seconds:.2f} ms from the "
                         "compute figure")
        return lines


def fit_fixed_per_image(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of t = t0 + b t1 on relative errors (weights 1/t^2, so small and large batches count
    alike), t0 >= 0 (refitted through the origin if it comes out negative). Needs two batch sizes."""
    pairs = [(float(b), float(t)) for b, t in points]
    if len({b for b, _ in pairs}) < 2:
        raise ConfigError("a fit of t(b) = t0 + b x t1 needs steps measured at two batch sizes or more; this curve "
                          "has one, so it cannot extrapolate (measure more: dlscale bench --batch-size 16,32,64,...)")
    if any(t <= 0 or b < 1 for b, t in pairs):
        raise ConfigError(f"a step curve needs batches >= 1 and step times > 0, got {points}")
    w = [1.0 / t ** 2 for _, t in pairs]
    sw, sx = sum(w), sum(wi * b for wi, (b, _) in zip(w, pairs, strict=True))
    sy = sum(wi * t for wi, (_, t) in zip(w, pairs, strict=True))
    sxx = sum(wi * b * b for wi, (b, _) in zip(w, pairs, strict=True))
    sxy = sum(wi * b * t for wi, (b, t) in zip(w, pairs, strict=True))
    t1 = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    t0 = (sy - t1 * sx) / sw
    if t0 < 0:
        t0, t1 = 0.0, sxy / sxx
    if t1 <= 0:
        raise ConfigError(f"the step times {points} do not grow with the batch: no time per image can be fitted")
    return t0, t1


def from_points(points: Sequence[tuple[int, float]], source: str) -> StepTime:
    """A measured curve (two batch sizes or more): interpolation between its points, the fit beyond."""
    ordered = tuple(sorted((int(b), float(t)) for b, t in points))
    t0, t1 = fit_fixed_per_image(ordered)
    return StepTime(ordered, t0, t1, source, f"fitted to the {len(ordered)} measured batch sizes")


def from_one_point(batch: int, step_s: float, fixed: Fixed = UNKNOWN_FIXED, source: str = "") -> StepTime:
    """One measured step at `batch`, and a fixed part from elsewhere: t1 = (t(batch) - t0) / batch."""
    if step_s <= 0 or batch < 1:
        raise ConfigError(f"a step time must be > 0 and a batch >= 1 (got {step_s} s at batch {batch})")
    if not 0 <= fixed.seconds < step_s:
        raise ConfigError(f"the fixed part of the step ({1e3 * fixed.seconds:.2f} ms, {fixed.source}) must be >= 0 "
                          f"and below the step ({1e3 * step_s:.2f} ms at batch {batch})")
    return StepTime(((batch, step_s),), fixed.seconds, (step_s - fixed.seconds) / batch, source, fixed.source,
                    fixed.known, fixed.kind)


def with_fixed(step: StepTime, fixed: Fixed) -> StepTime:
    """The same measurement with another fixed part (--step-overhead-ms), anchored at its largest batch."""
    batch, seconds = step.points[-1]
    return from_one_point(batch, seconds, fixed, step.source)


def scaled(step: StepTime, factor: float) -> StepTime:
    """Every time x factor (the compute of CPU ranks that share their cores, for instance)."""
    return StepTime(tuple((b, t * factor) for b, t in step.points), step.fixed_s * factor, step.per_image_s * factor,
                    step.source, step.fixed_source, step.fixed_known, step.fixed_kind)


# ----------------------------------------------------------------------- shipped per-device curves


@dataclass(frozen=True)
class DeviceCurve:
    """A per-device step curve measured by `dlscale bench --batch-size ...` and shipped in
    references/device_steps.json, with the command, date and machine that produced it."""

    device: str
    fixed_s: float
    per_image_s: float
    points: tuple[tuple[int, float], ...]
    provenance: str

    def fixed(self) -> Fixed:
        return Fixed(self.fixed_s, f"{1e3 * self.fixed_s:.2f} ms, the {self.device} curve measured by dlscale bench "
                                   f"({self.provenance}; references/device_steps.json)", kind="measured")


def _device_steps() -> dict:
    return json.loads((resources.files("dlscale") / "references" / "device_steps.json").read_text())


def _curve_points(entry: dict) -> tuple[tuple[int, float], ...]:
    """(batch, seconds per step) of a device_steps.json entry's curve, by batch."""
    return tuple(sorted((int(c["batch_size"]), c["step_time_ms"] / 1e3) for c in entry["batch_curve"]))


def device_curve(device: str | None) -> DeviceCurve | None:
    """The shipped curve of the device type named in `device` ("H100-SXM5-80GB", "NVIDIA H100 80GB HBM3"),
    or None where none ships (or its entry awaits its measurement)."""
    if not device:
        return None
    for key, entry in _device_steps()["devices"].items():
        if key.lower() in device.lower() and entry.get("batch_curve"):
            points = _curve_points(entry)
            t0, t1 = fit_fixed_per_image(points)
            provenance = f"{entry['command']}, {entry['date']}, {entry['machine']}"
            return DeviceCurve(key, t0, t1, points, provenance)
    return None


# ----------------------------------------------------------------------- the fixed parts dlscale ships


def published_rate(series: RefSeries, point: dict) -> float:
    """Images/s of a published point; epoch-time series through the ImageNet training set size."""
    rate = series.value(point, "img_per_s")
    if rate is None and point.get("epoch_time_s"):
        rate = IMAGENET_TRAIN_IMAGES / point["epoch_time_s"]
    if rate is None:
        raise ConfigError(f"{series.reference}:{series.id} point {point} has no rate")
    return rate


def published_batch(series: RefSeries, point: dict) -> int:
    """A published point's batch per device: its own, else its series'."""
    return int(point.get("batch_per_device") or series.meta["batch_per_device"])


def published_step(series: RefSeries, point: dict) -> float:
    """Seconds per step of a published point: its batch per device x devices / its rate, its run's communication
    in."""
    return published_batch(series, point) * point["devices"] / published_rate(series, point)


def published_steps(series: RefSeries) -> dict[str | None, list[tuple[int, float]]]:
    """(batch, seconds per step) of each point of a series that publishes its rate, devices and batch, per step
    program (a point's `program`; None where it names none): batch x devices / rate, its run's communication in."""
    programs: dict[str | None, list[tuple[int, float]]] = {}
    for point in series.points:
        batched = point.get("batch_per_device") or series.meta.get("batch_per_device")
        if point.get("devices") and batched and (series.value(point, "img_per_s") or point.get("epoch_time_s")):
            step = (published_batch(series, point), published_step(series, point))
            programs.setdefault(point.get("program"), []).append(step)
    return programs


def shipped_fixed_parts(model: str = "resnet50") -> list[tuple[str, float]]:
    """(what, t0 in seconds) of every fixed part of `model` dlscale ships: each measured curve of
    references/device_steps.json, and the fit of t(b) = t0 + b x t1 to the published steps of each step program of
    a shipped series of that model at two batch sizes or more (their communication in: --validate takes it out of
    its fits, which needs the model of predict/model.py; scripts/fixed_part_check.py prints those). A fit at
    t0 = 0 (a line through the steps that crosses the step axis below zero) gives no fixed part and is left out."""
    found = [(f"the {key} curve (references/device_steps.json)", fit_fixed_per_image(_curve_points(entry))[0])
             for key, entry in _device_steps()["devices"].items() if entry.get("batch_curve")]
    for name in reference_names():
        reference = load_reference(name)
        if reference.model != model:
            continue
        for series in reference.series:
            for program, steps in published_steps(series).items():
                t0 = fit_fixed_per_image(steps)[0] if len({b for b, _ in steps}) >= 2 else 0.0
                if t0 > 0:
                    found.append((f"{name}:{series.id}" + (f" ({program})" if program else ""), t0))
    return found


@functools.cache
def known_range_ms() -> tuple[float, float]:
    """The lowest and highest fixed part of ResNet-50 that dlscale ships (shipped_fixed_parts), in ms: the range an
    unknown one is said to lie in. Read from the shipped files once per process, so it follows them."""
    parts = [seconds for _, seconds in shipped_fixed_parts()]
    return 1e3 * min(parts), 1e3 * max(parts)


def fixed_for_device(device: str | None, precision: str | None = None, execution: str | Stack | None = None,
                     model: str = "resnet50") -> Fixed:
    """The fixed part of a shipped curve for this device type; else, where its precision and execution (a mode, or
    the whole Stack that issues its kernels) are known, the first-principles model's (predict/fixed.py); else
    unknown, taken as zero, with the range it could be."""
    curve = device_curve(device)
    if curve is not None:
        return curve.fixed()
    what = f"no step curve of {device} ships (references/device_steps.json)" if device else "the device is not named"
    if precision and execution:
        modelled = floor(device, precision, execution, model)
        if modelled is not None:
            return Fixed(modelled.seconds, f"{modelled.describe()}; {what}; {MODEL_CHECK}", kind="modelled")
    if not device:
        why = "so its first-principles model has no peak to work from"
    elif device_key(device) is None:
        why = f"dlscale knows no peak and memory bandwidth of {device} for its first-principles model"
    else:
        why = f"the figure states no precision its model knows ({precision or 'none'})"
    low, high = known_range_ms()
    return Fixed(0.0, f"{what}, {why}: the fixed parts of ResNet-50 dlscale ships lie between {low:.2f} and "
                      f"{high:.2f} ms (measured, or fitted to published steps at two batch sizes or more, their "
                      "communication in)",
                 known=False, kind="unknown")


MODEL_CHECK = ("a floor: on the H100, whose curve was measured (2.63 ms with CUDA graphs), it gives 1.61 ms, 61% "
               "(docs/prediction.md#the-fixed-part-of-the-step)")
"""What the first-principles model was checked against (tests/unit/test_predict_fixed.py)."""


# ----------------------------------------------------------------------- shipped measured MFU


@dataclass(frozen=True)
class MeasuredMfu:
    """The highest MFU dlscale measured on a device type at one peak precision (references/device_mfu.json)."""

    device: str
    mfu: float
    peak_dtype: str
    what: str
    """The run: model, batch, settings, command, date, machine and where its record is kept."""


def measured_mfu(device: str | None, peak_dtype: str) -> MeasuredMfu | None:
    """The highest MFU shipped for this device type ("H100", "NVIDIA H100 80GB HBM3") at `peak_dtype`, else None."""
    if not device:
        return None
    data = json.loads((resources.files("dlscale") / "references" / "device_mfu.json").read_text())
    for key, entries in data["devices"].items():
        if key.lower() not in device.lower():
            continue
        found = [e for e in entries if e["peak_dtype"] == peak_dtype]
        if found:
            best = max(found, key=lambda e: e["mfu"])
            what = (f"{best['model']} at batch {best['batch_size']}, {best['what']}; `{best['command']}`, "
                    f"{best['date']}, {best['machine']}; {best['source']}")
            return MeasuredMfu(key, best["mfu"], peak_dtype, what)
    return None


def fastest_measured(model: str = "resnet50") -> tuple[float, str] | None:
    """The fastest one-device training rate shipped for `model` (references/device_mfu.json: img/s of the run
    whose MFU it records) and what ran it, or None."""
    data = json.loads((resources.files("dlscale") / "references" / "device_mfu.json").read_text())
    runs = [(entry, device) for device, entries in data["devices"].items() for entry in entries
            if entry.get("model") == model and entry.get("img_per_s")]
    if not runs:
        return None
    entry, device = max(runs, key=lambda run: run[0]["img_per_s"])
    return float(entry["img_per_s"]), (f"{model} on an {device} at batch {entry['batch_size']} as dlscale measured it "
                                       f"({entry['date']}, references/device_mfu.json)")
