"""Causes in the device: another GPU model than the reference's, PCIe against SXM, a MIG slice, clocks
and power limits below the device's own (NVML's readings in env.json)."""

from __future__ import annotations

from dlscale.explain import effects
from dlscale.explain.context import Context, Result
from dlscale.explain.findings import Effect, Finding, RuledOut
from dlscale.explain.target import device_score


def device(ctx: Context) -> Result:
    return [*_model(ctx), *_settings(ctx)]


def _model(ctx: Context) -> Result:
    run, target = ctx.run, ctx.target
    if target is None:
        return []
    theirs = target.device
    sms = run.env.get("device_sm_count")
    score = device_score(run.device_name, theirs)
    peak = effects.peak_ratio(run.device_name, theirs, run.precision, str(target.recipe.get("precision") or ""), sms)
    if score == 0:
        return [Finding("device", f"another device: {run.device_name}, the reference {theirs}",
                        f"run: {run.device_name} ({run.device}); reference: {theirs} "
                        f"({target.reference.hardware.get('node', 'its node')})", peak,
                        "compare on the reference's device, or with a reference that ran this one (--reference)")]
    out: Result = []
    sxm = "SXM" in run.device_name.upper() or "DGX" in str(target.reference.hardware.get("node", ""))
    if "PCIE" in run.device_name.upper() and sxm:
        out.append(Finding("device", "a PCIe board; the reference ran SXM boards",
                           f"run: {run.device_name}; reference: {theirs} in {target.reference.hardware.get('node')}",
                           peak, "SXM boards run at a higher power limit and clock: compare like with like"))
    if "MIG" in run.device_name:
        out.append(Finding("device", "a MIG slice of the GPU",
                           f"run: {run.device_name} with {sms or 'unknown'} SMs", peak,
                           "run on the whole GPU (MIG disabled) to compare with a whole-GPU figure"))
    if not out:
        out.append(RuledOut("device", f"{run.device_name}: the reference's device ({theirs})"))
    return out


def _settings(ctx: Context) -> Result:
    """Applications clock and power limit against the board's own maximum and default (NVML, read when
    the run started: current clocks of an idle GPU say nothing, so they are evidence only)."""
    env = ctx.run.env
    devices = env.get("nvml_devices") or []
    if ctx.run.device != "cuda":
        return []
    if not devices:
        return [RuledOut("device", "clocks and power limit: not recorded (no NVML: pip install dlscale[gpu])")]
    uuid = str(env.get("device_uuid") or "")
    gpu = next((d for d in devices if uuid and uuid in str(d.get("uuid") or "")), devices[0])
    out: Result = []
    app, top = gpu.get("sm_clock_applications_mhz"), gpu.get("sm_clock_max_mhz")
    if app and top and app < top:
        clock = Effect(top / app, "SM clock ratio: compute-bound work runs at most in proportion to the clock (the "
                                  "run's own NVML readings)", bound=True)
        out.append(Finding("device", f"applications clock {app} MHz below the board's {top} MHz",
                           f"NVML: SM applications clock {app} MHz, maximum {top} MHz, at the start "
                           f"{gpu.get('sm_clock_mhz')} MHz", clock,
                           "reset the applications clocks (nvidia-smi -rac) or ask the cluster's admins"))
    limit, default = gpu.get("power_limit_w"), gpu.get("power_limit_default_w")
    if limit and default and limit < default:
        out.append(Finding("device", f"power limit {limit:.0f} W below the board's default {default:.0f} W",
                           f"NVML: power limit {limit:.0f} W, default {default:.0f} W, enforced "
                           f"{gpu.get('power_limit_enforced_w')} W",
                           Effect(None, "a lower power limit lowers the clock under load; by how much depends on the "
                                        "load (no shipped figure)"),
                           "restore the default power limit (nvidia-smi -pl) or ask the cluster's admins"))
    if not out:
        out.append(RuledOut("device", f"clocks and power limit: the board's own (applications clock {app} MHz of "
                                      f"{top}, power limit {limit} W of {default})"))
    return out
