"""Where estimated effects come from: published figures that dlscale ships (references/*.json, each
with its primary source in docs/references.md) and datasheet peaks (metrics/hardware.py). Each function
returns an Effect whose text names its source, or an unknown Effect that says why there is none; no
constant here is chosen by hand.
"""

from __future__ import annotations

from dlscale.explain.findings import Effect
from dlscale.explain.target import Target, device_score, precision_family
from dlscale.metrics.hardware import PEAKS, known_device
from dlscale.report.references import RefSeries, load_reference

FLOPS_DTYPE = {"fp32": "fp32", "tf32": "tf32", "amp_fp16": "fp16", "amp_bf16": "bf16", "fp16": "fp16"}
"""The peak a precision runs at (dlscale.precision's flops_dtype)."""


def _sc20_progression() -> RefSeries:
    return load_reference("sc20").get("progression")


def _step(series: RefSeries, before: str, after: str) -> tuple[float, float, float]:
    """(after / before, low, high) img/s between two settings of a progression series; a published range
    gives low and high."""
    first = series.value(series.point(setting=before), "img_per_s")
    point = series.point(setting=after)
    low, high = point.get("img_per_s_range") or (point["img_per_s"], point["img_per_s"])
    return series.value(point, "img_per_s") / first, low / first, high / first


def channels_last() -> Effect:
    """SC20's "+ NHWC" step on one V100 with AMP (the only published NHWC step dlscale ships)."""
    ratio, low, high = _step(_sc20_progression(), "+ AMP", "+ NHWC")
    return Effect(ratio, f"SC20's + NHWC step with AMP on a V100: 1795 -> 2075-2250 img/s, {low:.2f}-{high:.2f}x "
                         "(references/sc20.json progression, docs/references.md#sc20-figures)")


def extra_options() -> Effect:
    """SC20's "extra opts" step: fused SGD, zero_grad(set_to_none=True) and cudnn.benchmark together."""
    ratio, low, high = _step(_sc20_progression(), "+ NHWC", "+ extra opts")
    return Effect(ratio, f"SC20's + extra opts step on a V100 (apex FusedSGD, set_to_none and cudnn.benchmark "
                         f"together): {low:.2f}-{high:.2f}x (references/sc20.json progression, "
                         "docs/references.md#sc20-figures)", bound=True)


def precision(target: Target | None, run_precision: str, device: str) -> Effect:
    """The speed-up of the reference's precision over the run's, from the reference's own published
    ratio, else a shipped progression on the same GPU model, else SC20's FP32 -> AMP step on a V100."""
    ref_precision = (target.recipe.get("precision") if target else "") or ""
    if precision_family(ref_precision) != "amp" or precision_family(run_precision) not in ("fp32", "tf32"):
        return Effect(None, f"no published figure compares {run_precision} with {ref_precision.split(' ')[0]}")
    if target is not None:
        point = next((p for p in target.series.points if p.get("devices") == target.devices), None)
        if point and point.get("amp_over_fp32"):
            return Effect(float(point["amp_over_fp32"]),
                          f"{target.series.label}: the published AMP / {'TF32' if 'A100' in target.device else 'FP32'}"
                          f" speed-up at {target.devices} device(s) ({target.cite()}; docs/references.md#"
                          f"{target.reference.name}-figures)")
    for name in ("ngc", "sc20"):
        for series in load_reference(name).of_kind("progression"):
            if not device_score(device, str(series.meta.get("device", ""))):
                continue
            settings = [p.get("setting", "") for p in series.points]
            before = next((s for s in settings if s.split(" ")[0].lower() in ("fp32", "tf32", "baseline")), None)
            after = next((s for s in settings if "AMP" in s), None)
            if before and after:
                ratio = _step(series, before, after)[0]
                return Effect(ratio, f"{series.label}: {before} -> {after} (references/{name}.json "
                                     f"{series.id}, docs/references.md#{'ngc' if name == 'ngc' else 'sc20'}-figures)")
    ratio = _step(_sc20_progression(), "baseline (fp32)", "+ AMP")[0]
    return Effect(ratio, "SC20's FP32 -> AMP step on a V100, 680 -> 1795 img/s (references/sc20.json, "
                         "docs/references.md#sc20-figures); measured on another GPU than this one")


def peak_ratio(run_device: str, ref_device: str, run_precision: str, ref_precision: str,
               run_sms: int | None = None) -> Effect:
    """The reference device's datasheet peak over the run's, each at its precision
    (docs/references.md#nvidia-peak-tflops): what the hardware alone allows, a ceiling on the effect."""
    run_key, ref_key = known_device(run_device), known_device(_datasheet_name(ref_device))
    run_dtype, ref_dtype = FLOPS_DTYPE.get(run_precision.split(" ")[0]), FLOPS_DTYPE.get(ref_precision.split(" ")[0])
    if run_key is None or ref_key is None:
        missing = run_device if run_key is None else ref_device
        return Effect(None, f"no datasheet peak for {missing} in dlscale's table (metrics/hardware.py)")
    run_peak = PEAKS[run_key].tflops.get(run_dtype or "")
    ref_peak = PEAKS[ref_key].tflops.get(ref_dtype or "")
    if not run_peak or not ref_peak:
        return Effect(None, "no datasheet peak at these precisions (metrics/hardware.py)")
    share = 1.0
    if "MIG" in run_device and run_sms:
        share = min(run_sms / PEAKS[run_key].sms, 1.0)
    return Effect(ref_peak / (run_peak * share),
                  f"datasheet peaks, {ref_key} {ref_peak:g} TFLOP/s ({ref_dtype}) over {run_key} "
                  f"{run_peak * share:g} ({run_dtype}{', this MIG slice' if share < 1 else ''}) "
                  "(docs/references.md#nvidia-peak-tflops)", bound=True)


def _datasheet_name(series_device: str) -> str:
    """A reference's device in the words of the peak table: DGX-1's V100s are SXM2 boards."""
    if "V100" in series_device and "PCIE" not in series_device.upper():
        return series_device + " V100-SXM2"
    return series_device
