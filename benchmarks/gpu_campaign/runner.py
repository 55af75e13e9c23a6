"""Running the plan: each command as a subprocess with a deadline, its output appended to the log,
its figure read back; rounds interleaved; medians and ratios per stage. A failed or timed-out
command is recorded and the campaign goes on."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from gpu_campaign.alternate import by_round
from gpu_campaign.plan import OVERRUN, Run, Stage, may_start, round_fits, run_limit_s

LOG_TAIL_CHARS = 200_000
"""Output kept per command in gpu.log (the end of it): the log stays far below 16 MiB."""


@dataclass
class Context:
    python: str
    root: Path
    work: Path
    env: dict[str, str]
    log: TextIO
    deadline: float
    """time.monotonic() after which no command runs."""
    pythonpath: bool
    """Commands are shown with PYTHONPATH=src (dlscale is not installed)."""
    values: dict[str, str] = field(default_factory=dict)
    """Placeholders filled in when a command starts: {workers}."""
    results: dict[str, dict] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    say: Callable[[str], None] = print

    def fill(self, text: str, round_index: int) -> str:
        text = text.replace("{work}", str(self.work)).replace("{round}", str(round_index))
        for key, value in self.values.items():
            text = text.replace("{" + key + "}", value)
        return text

    def elapsed(self) -> float:
        return time.monotonic() - self.started


# ------------------------------------------------------------------------------------ readers

def read_env(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    return {"value": None, "unit": None, "details": json.loads(out[out.index("{"):])}


def read_pytest(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    root = ET.parse(path).getroot()
    cases = []
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "failed" if tag in ("failure", "error") else "skipped"
                message = (node.get("message") or node.text or "")[:400]
                break
        cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                      "seconds": float(case.get("time") or 0.0), "message": message})
    counts = {k: sum(1 for c in cases if c["outcome"] == k) for k in ("passed", "failed", "skipped")}
    return {"value": counts["passed"], "unit": "passed", "details": {**counts, "tests": cases}}


def read_bench(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    s = json.loads(path.read_text())
    keep = ("img_per_sec_total_ci95", "mfu", "peak_tflops", "step_time_ms", "peak_memory_bytes", "device_name",
            "precision", "channels_last", "fused_optimizer", "cudnn_benchmark", "compile", "compile_mode",
            "cuda_graphs", "iterations", "stem_channels", "batch_size")
    details = {k: s.get(k) for k in keep} | {k: v for k, v in s.items() if k.startswith("compile") and k not in keep}
    if run.sets and s.get("batch_size"):  # the default's batch: its peers run at the same one
        ctx.values[run.sets] = str(s["batch_size"])
    return {"value": s["img_per_sec_total_mean"], "unit": "img/s", "details": details}


def read_bare(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    s = json.loads(path.read_text())
    return {"value": s["img_per_sec_mean"], "unit": "img/s",
            "details": {"img_per_sec_ci95": s["img_per_sec_ci95"], "iterations": s["iterations"]}}


def read_timm(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    result = json.loads(out.split("--result", 1)[1])
    if "error" in result:
        raise ValueError(f"timm reported: {result['error']}")
    return {"value": result["train_samples_per_sec"], "unit": "img/s",
            "details": {k: result.get(k) for k in ("train_step_time", "train_batch_size", "train_img_size")}}


def read_loader(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    summary = json.loads(path.read_text())
    rows = summary["settings"]
    best = max(rows, key=lambda row: row["images_per_s"])
    ctx.values[getattr(run, "sets", None) or "workers"] = str(best["workers"])
    if getattr(run, "sets", None) != "gpu_workers":
        ctx.values["workers_ips"] = str(best["images_per_s"])
    else:  # the device path's loader: the share of the decode the device takes where the workers decode the rest
        ctx.values["device_loader_ips"] = str(best["images_per_s"])
        from gpu_campaign.decode import device_share
        from gpu_campaign.plan import RATES

        baseline = [r["value"] for r in ctx.results.get("baseline", {}).get("runs", []) if _figure(r)]
        device_ms = best.get("device_ms_per_batch")
        share = device_share(float(ctx.values.get("workers_ips") or 0) or None,
                             device_ms / summary["batch_size"] if device_ms else None,
                             statistics.median(baseline) if baseline else RATES["compiled"])
        ctx.values["share"] = f"{share:.2f}"
    scalars = {k: v for k, v in summary.items() if not isinstance(v, dict | list)}
    return {"value": best["images_per_s"], "unit": "img/s",
            "details": {"rows": [{k: v for k, v in row.items() if not isinstance(v, dict | list)} for row in rows],
                        "best_workers": best["workers"], "summary": scalars}}


def read_overlap(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    """benchmarks/decode_overlap.py's figures; the arrangement it found fastest goes to the train runs after it."""
    figures = json.loads(path.read_text())
    settings = figures["best"]["settings"]
    ctx.values["device_feed"] = settings.get("data.device_feed", "inline")
    ctx.values["step_stream"] = settings.get("speed.step_stream", "false")
    lines = [line for line in out.splitlines() if line.startswith(("decode of one batch", "synchronising calls"))]
    return {"value": figures["best"]["of_synthetic"], "unit": "of synthetic",
            "details": {**figures, "verdict": lines}}


def read_alternate(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    """alternate.py's figures: every variant's windows; run_stage turns them into a record per window."""
    return {"value": None, "unit": None, "details": json.loads(path.read_text())}


def read_curve(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    """A `dlscale bench --batch-size B1,B2,...` summary: its batch curve."""
    summary = json.loads(path.read_text())
    curve = summary.get("batch_curve") or []
    return {"value": None, "unit": None, "details": {"batch_curve": curve, "device_name": summary.get("device_name")}}


def read_train(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    """img/s over the log windows of epochs after the first, without each epoch's first window (its
    data wait holds the workers' restart): their images over their seconds, so that a starved window
    weighs as long as it lasted (a median of the windows' rates hides an input-bound run whose windows
    alternate between a full prefetch queue and an empty one); the input-bound warnings the run printed."""
    records = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    windows = [r for r in records if r.get("record") == "train"]
    later = [r for r in windows if r["epoch"] >= 1] or windows
    first_of_epoch = {min(r["iteration"] for r in later if r["epoch"] == e) for e in {r["epoch"] for r in later}}
    steady = [r for r in later if r["iteration"] not in first_of_epoch] or later
    warnings = [line.strip() for line in out.splitlines() if "input-bound" in line]
    summary = json.loads((path / "summary.json").read_text())
    seconds = sum(r["window_s"] for r in steady)
    images = sum(r["throughput_img_per_s"] * r["window_s"] for r in steady)
    return {"value": images / seconds, "unit": "img/s",
            "details": {"windows": len(steady), "seconds": seconds,
                        "window_img_per_s": [r["throughput_img_per_s"] for r in steady],
                        "data_time_ms": statistics.median(r["data_time_ms"] for r in steady),
                        "step_time_ms": statistics.median(r["step_time_ms"] for r in steady),
                        "input_bound_warnings": warnings, "summary_total_ips": summary.get("total_ips"),
                        **_data_settings(path)}}


def _data_settings(path: Path) -> dict:
    """The run's loader workers and decode arrangement as its config.json has them (the run's own, not the stage's
    placeholders: the device path's runs take other workers than the CPU path's)."""
    config = path / "config.json"
    data = json.loads(config.read_text()).get("data", {}) if config.exists() else {}
    keys = ("num_workers", "workers_kind", "decode", "device_decode_share", "device_feed", "device_feed_depth")
    return {key: data[key] for key in keys if key in data}


def read_nothing(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    return {"value": None, "unit": None, "details": {"output": out.strip().splitlines()[-1:] if out.strip() else []}}


READERS = {"env": read_env, "pytest": read_pytest, "bench": read_bench, "bare": read_bare, "timm": read_timm,
           "loader": read_loader, "train": read_train, "none": read_nothing, "alternate": read_alternate,
           "curve": read_curve, "overlap": read_overlap}


# ---------------------------------------------------------------------------------- commands

def _stop(process: subprocess.Popen) -> None:
    """End the command and everything it started (its own process group), politely first."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _too_slow(run: Run, ctx: Context) -> str | None:
    """Why the run is not started: the rate an earlier run measured for its input is below its min_rate."""
    if run.min_rate is None or run.min_rate[0] not in ctx.values:
        return None
    key, needed = run.min_rate
    measured = float(ctx.values[key])
    if measured >= needed:
        return None
    return (f"{key} measured {measured:.0f} img/s, under the {needed:.0f} img/s at which it would end within "
            f"its limit of {run_limit_s(run.estimate_s):.0f} s")


def execute(run: Run, ctx: Context, stage: str, round_index: int, deadline: float) -> dict:
    """Run one command until it ends or the deadline; its record for gpu.json."""
    argv = [ctx.fill(a, round_index) for a in run.argv]
    shown = Run(run.name, argv, run.reader, run.estimate_s).command("python3", ctx.pythonpath)
    record = {"name": run.name, "round": round_index, "command": shown, "estimate_s": run.estimate_s}
    left = deadline - time.monotonic()
    if not may_start(left, run.estimate_s, run.reader):
        ctx.say(f"[{ctx.elapsed():5.0f} s] {stage}: {run.name}: not run, {left:.0f} s left, "
                f"~{run.estimate_s:.0f} s needed")
        return {**record, "status": "not_run", "error": f"budget: {max(left, 0):.0f} s left, ~{run.estimate_s:.0f} s "
                f"estimated; run it alone with --stages {stage}:{run.name.replace(' ', '_')}"}
    slow = _too_slow(run, ctx)
    if slow:
        ctx.say(f"[{ctx.elapsed():5.0f} s] {stage}: {run.name}: not run, {slow}")
        return {**record, "status": "not_run", "error": slow}
    started = time.monotonic()
    process = subprocess.Popen([ctx.python, *argv], cwd=ctx.root, env={**ctx.env, **run.env}, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    limit = run_limit_s(run.estimate_s)
    try:
        out, _ = process.communicate(timeout=max(min(left, limit), 1.0))
        status = "ok" if process.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        _stop(process)
        out, _ = process.communicate()
        status = "timeout" if left <= limit else "overran"
    seconds = time.monotonic() - started
    ctx.log.write(f"\n### {stage} / {run.name} / round {round_index}: {status} after {seconds:.1f} s "
                  f"(exit {process.returncode})\n$ {shown}\n{out[-LOG_TAIL_CHARS:]}\n")
    ctx.log.flush()
    record.update({"status": status, "seconds": round(seconds, 2), "returncode": process.returncode})
    path = Path(ctx.fill(run.output, round_index)) if run.output else None
    if status == "ok" or run.reader in ("pytest", "alternate"):  # failed tests, failed variants leave their report
        try:
            record.update(READERS[run.reader](run, out, path, ctx))
        except Exception as exc:  # noqa: BLE001 - recorded; the campaign goes on
            if status == "ok":  # a command stopped at the deadline, or failed, and wrote nothing keeps its status
                status = record["status"] = "failed"
                record["error"] = f"could not read its result: {type(exc).__name__}: {exc}"
    if status != "ok" and "error" not in record:
        tail = [line for line in out.strip().splitlines() if line.strip()][-3:]
        why = {"timeout": "timed out at the deadline; ",
               "overran": f"stopped after {limit:.0f} s, {OVERRUN:g} times its estimate; "}.get(status, "")
        record["error"] = why + " | ".join(tail)[-600:]
    value = record.get("value")
    shown_value = f" {value:.1f} {record.get('unit')}" if isinstance(value, float) else ""
    ctx.say(f"[{ctx.elapsed():5.0f} s] {stage}: {run.name} (round {round_index}) {status}{shown_value} "
            f"in {seconds:.1f} s")
    return record


# ------------------------------------------------------------------------------------- stages

def run_stage(stage: Stage, ctx: Context) -> dict:
    started = time.monotonic()
    deadline = min(ctx.deadline, started + stage.budget_s)
    ctx.say(f"[{ctx.elapsed():5.0f} s] stage {stage.name}: {stage.title} (budget {stage.budget_s:.0f} s, "
            f"estimate {stage.estimate_s():.0f} s)")
    for key, value in stage.values.items():
        ctx.values.setdefault(key, value)
    result = {"name": stage.name, "title": stage.title, "note": stage.note, "budget_s": stage.budget_s,
              "estimate_s": round(stage.estimate_s(), 1), "setup": [], "runs": [], "rounds_done": 0}
    for run in stage.setup:
        if run.unavailable is not None:
            result["setup"].append({"name": run.name, "round": 0, "status": "unavailable", "error": run.unavailable,
                                    "command": run.command("python3", ctx.pythonpath)})
        else:
            result["setup"].append(execute(run, ctx, stage.name, 0, deadline))
    live = [r for r in stage.runs if r.unavailable is None and r.reuse is None]
    for run in stage.runs:
        if run.unavailable is not None:
            result["runs"].append({"name": run.name, "round": 0, "status": "unavailable", "error": run.unavailable,
                                   "command": run.command("python3", ctx.pythonpath)})
        elif run.reuse is not None:
            result["runs"].extend(_reused(run, ctx))
    for round_index in range(stage.rounds):
        round_s = sum(r.estimate_s for r in live)
        if round_index > 0 and not round_fits(deadline - time.monotonic(), round_s):
            result["note"] = (result["note"] + "; " if result["note"] else "") + \
                f"{round_index} of {stage.rounds} rounds (the stage's time budget)"
            break
        for run in live:
            record = execute(run, ctx, stage.name, round_index, deadline)
            result["runs"].append(record)
            if run.reader == "alternate" and record.get("status") in ("ok", "failed") and record.get("details"):
                result["runs"] += windows(record)
            if run.also is not None:
                result["runs"].append(beside(run, record, ctx, round_index))
        result["rounds_done"] = round_index + 1
    result["seconds"] = round(time.monotonic() - started, 1)
    result.update(summarize(stage, result["runs"]))
    return result


def beside(run: Run, record: dict, ctx: Context, round_index: int) -> dict:
    """The record of the command alternate.py ran beside its compilations, read by its own reader."""
    also = run.also
    shown = Run(also.name, [ctx.fill(a, round_index) for a in also.argv], also.reader, 0.0)
    entry = {"name": also.name, "round": round_index, "command": shown.command("python3", ctx.pythonpath),
             "estimate_s": also.estimate_s, "beside": run.name}
    done = (record.get("details") or {}).get("also")
    if not done:
        return {**entry, "status": "not_run", "error": f"{run.name} did not run it ({record.get('status')})"}
    log = Path(done["log"]).read_text(errors="replace") if Path(done["log"]).is_file() else ""
    ctx.log.write(f"\n### beside {run.name} / {also.name}: {done['status']} after {done['seconds']:.1f} s\n"
                  f"$ {entry['command']}\n{log[-LOG_TAIL_CHARS:]}\n")
    entry.update(status=done["status"], seconds=round(done["seconds"], 2), returncode=done["returncode"])
    path = Path(ctx.fill(also.output, round_index)) if also.output else None
    try:
        entry.update(READERS[also.reader](also, log, path, ctx))
    except Exception as exc:  # noqa: BLE001 - recorded; the campaign goes on
        entry.update(status="failed", error=f"could not read its result: {type(exc).__name__}: {exc}")
    return entry


def windows(record: dict) -> list[dict]:
    """An alternated run's variants as records, one per window, each under the round it was timed in, so that
    medians and ratios come out as for separate runs and each ratio pairs windows of one round; each names the
    flags that made it."""
    out = []
    for name, variant in record["details"].get("variants", {}).items():
        base = {"name": name, "variant_of": record["name"], "variant_flags": variant["flags"],
                "command": variant["command"], "details": {k: v for k, v in variant.items()
                                                           if k not in ("windows_img_per_s", "window_rounds",
                                                                        "flags")}}
        if not variant["windows_img_per_s"]:
            out.append({**base, "round": 0, "status": "failed", "error": variant.get("error") or "no window"})
        out += [{**base, "round": k, "status": "ok", "value": rate, "unit": "img/s"}
                for k, rate in by_round(variant).items()]
    return out


def _reused(run: Run, ctx: Context) -> list[dict]:
    stage, name = run.reuse.split("/", 1)
    found = [dict(r, name=run.name, reused_from=run.reuse) for r in ctx.results.get(stage, {}).get("runs", [])
             if r["name"] == name]
    return found or [{"name": run.name, "round": 0, "status": "not_run", "error": f"{run.reuse} did not run"}]


def summarize(stage: Stage, records: list[dict]) -> dict:
    """Per run: the values of its rounds and their median; the stage's ratios of medians, with the
    ratio of each round's pair (a b in the same round) beside it."""
    by_name: dict[str, dict] = {}
    settings = {run.name: run.settings for run in stage.runs if run.reader != "alternate"}
    for record in records:
        if record.get("variant_of") and record["name"] not in settings:
            settings[record["name"]] = " ".join(record["variant_flags"]) or "the GPU default"
    for name in stage.variants:
        settings.setdefault(name, None)
    for run_name, run_settings in settings.items():
        mine = [r for r in records if r["name"] == run_name]
        values = [r["value"] for r in mine if r.get("status") == "ok" and isinstance(r.get("value"), int | float)]
        statuses = sorted({r["status"] for r in mine})
        mfu = [r["details"]["mfu"] for r in mine if r.get("status") == "ok" and (r.get("details") or {}).get("mfu")]
        by_name[run_name] = {"values": values, "median": statistics.median(values) if values else None,
                             "mfu": statistics.median(mfu) if mfu else None,
                             "unit": next((r.get("unit") for r in mine if r.get("unit")), None),
                             "status": "ok" if values else (statuses[0] if statuses else "not_run"),
                             "settings": run_settings}
    ratios = [_ratio(a, b, by_name, records) for a, b in stage.ratios]
    if stage.chain:
        done = [r.name for r in stage.runs if by_name.get(r.name, {}).get("median") is not None]
        ratios += [dict(_ratio(b, a, by_name, records), chain=True) for a, b in zip(done, done[1:], strict=False)]
    return {"medians": by_name, "ratios": ratios}


def _figure(record: dict) -> bool:
    """A record that holds a figure (an alternated run's own record holds its variants', not one)."""
    return record.get("status") == "ok" and isinstance(record.get("value"), int | float)


def _ratio(a: str, b: str, by_name: dict, records: list[dict]) -> dict:
    top, bottom = by_name.get(a, {}).get("median"), by_name.get(b, {}).get("median")
    value = top / bottom if top is not None and bottom else None
    pairs = []
    rounds = {r["round"] for r in records}
    for k in sorted(rounds):
        x = [r["value"] for r in records if r["name"] == a and r["round"] == k and _figure(r)]
        y = [r["value"] for r in records if r["name"] == b and r["round"] == k and _figure(r)]
        if x and y and y[0]:
            pairs.append(x[0] / y[0])
    return {"numerator": a, "denominator": b, "ratio": value, "per_round": pairs}
