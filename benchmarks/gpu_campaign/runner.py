"""Running the plan: each command as a subprocess with a deadline, its output appended to the log,
its figure read back (readers.py); rounds interleaved; medians and ratios per stage. A failed or timed-out
command is recorded and the campaign goes on."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from gpu_campaign.alternate import by_round
from gpu_campaign.plan import OVERRUN, Run, Stage, may_start, round_fits, run_limit_s
from gpu_campaign.readers import READ_ANYWAY, READERS

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
    nvjpg: Callable | str | None = None
    """Makes a JPEG-engine sampler per command (nvjpg.sampler_factory), or why none can be made; None: not asked."""
    on_record: Callable[[dict], None] = lambda partial: None
    """Called with the stage's result so far after each command: gpu.json is rewritten, so that a campaign
    stopped mid-stage keeps every command that ended."""

    def fill(self, text: str, round_index: int) -> str:
        text = text.replace("{work}", str(self.work)).replace("{round}", str(round_index))
        for key, value in self.values.items():
            text = text.replace("{" + key + "}", value)
        return text

    def elapsed(self) -> float:
        return time.monotonic() - self.started


# ---------------------------------------------------------------------------------- commands

def _stop(process: subprocess.Popen) -> None:
    """End the command and everything it started (its own process group), politely first."""
    for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
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


def _not_started(run: Run, ctx: Context, stage: str, left: float) -> dict | None:
    """Why the run is not started (status and error of its record), or None: what it needs is missing, too little
    time is left, or an earlier run measured its input too slow."""
    missing = ctx.values.get(f"unavailable:{run.needs}") if run.needs else None
    if missing:
        return {"status": "unavailable", "error": missing}
    if not may_start(left, run.estimate_s, run.reader):
        return {"status": "not_run", "error": f"budget: {max(left, 0):.0f} s left, ~{run.estimate_s:.0f} s "
                f"estimated; run it alone with --stages {stage}:{run.name.replace(' ', '_')}"}
    slow = _too_slow(run, ctx)
    return {"status": "not_run", "error": slow} if slow else None


def _sampler(run: Run, ctx: Context):
    """The run's JPEG-engine sampler, started; or None (and why, as its record's figures) where it has none."""
    if not run.nvjpg or ctx.nvjpg is None:
        return None, None
    if isinstance(ctx.nvjpg, str):
        return None, {"unavailable": ctx.nvjpg}
    try:
        sampler = ctx.nvjpg()
        sampler.start()
    except Exception as error:  # noqa: BLE001 - a driver without the queries: recorded, never a zero
        return None, {"unavailable": f"{type(error).__name__}: {error}"}
    return sampler, None


def _environment(run: Run, ctx: Context) -> dict[str, str]:
    """The command's environment: the campaign's, its own, and first on its PYTHONPATH what it needs installed
    (ctx.values "pythonpath:<needs>": the wheels stage's folder)."""
    env = {**ctx.env, **run.env}
    installed = ctx.values.get(f"pythonpath:{run.needs}") if run.needs else None
    if installed:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [installed, env.get("PYTHONPATH")]))
    return env


def execute(run: Run, ctx: Context, stage: str, round_index: int, deadline: float) -> dict:
    """Run one command until it ends or the deadline; its record for gpu.json."""
    argv = [ctx.fill(a, round_index) for a in run.argv]
    shown = Run(run.name, argv, run.reader, run.estimate_s).command("python3", ctx.pythonpath)
    record = {"name": run.name, "round": round_index, "command": shown, "estimate_s": run.estimate_s}
    left = deadline - time.monotonic()
    refused = _not_started(run, ctx, stage, left)
    if refused:
        ctx.say(f"[{ctx.elapsed():5.0f} s] {stage}: {run.name}: {refused['status'].replace('_', ' ')}, "
                f"{refused['error']}")
        return {**record, **refused}
    sampler, engines = _sampler(run, ctx)
    started = time.monotonic()
    process = subprocess.Popen([ctx.python, *argv], cwd=ctx.root, env=_environment(run, ctx), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    limit = run_limit_s(run.estimate_s)
    try:
        out, _ = process.communicate(timeout=max(min(left, limit), 1.0))
        status = "ok" if process.returncode == 0 else "failed"
    except subprocess.TimeoutExpired:
        _stop(process)
        out, _ = process.communicate()
        status = "timeout" if left <= limit else "overran"
    except BaseException:  # the campaign is stopped (SIGTERM): its command and what it started go with it
        _stop(process)
        raise
    finally:
        engines = sampler.stop() if sampler is not None else engines
    seconds = time.monotonic() - started
    ctx.log.write(f"\n### {stage} / {run.name} / round {round_index}: {status} after {seconds:.1f} s "
                  f"(exit {process.returncode})\n$ {shown}\n{out[-LOG_TAIL_CHARS:]}\n")
    ctx.log.flush()
    record.update({"status": status, "seconds": round(seconds, 2), "returncode": process.returncode})
    if engines is not None:
        record["nvjpg"] = engines
    status = _read(run, ctx, record, out, round_index)
    value = record.get("value")
    shown_value = f" {value:.1f} {record.get('unit')}" if isinstance(value, float) else ""
    ctx.say(f"[{ctx.elapsed():5.0f} s] {stage}: {run.name} (round {round_index}) {status}{shown_value} "
            f"in {seconds:.1f} s")
    return record


def _read(run: Run, ctx: Context, record: dict, out: str, round_index: int) -> str:
    """The command's figures into its record (its reader's), or why there are none; its status."""
    status = record["status"]
    path = Path(ctx.fill(run.output, round_index)) if run.output else None
    if status == "ok" or run.reader in READ_ANYWAY:
        try:
            record.update(READERS[run.reader](run, out, path, ctx))
        except Exception as exc:  # noqa: BLE001 - recorded; the campaign goes on
            if status == "ok":  # a command stopped at the deadline, or failed, and wrote nothing keeps its status
                status = record["status"] = "failed"
                record["error"] = f"could not read its result: {type(exc).__name__}: {exc}"
    if status != "ok" and "error" not in record:
        tail = [line for line in out.strip().splitlines() if line.strip()][-3:]
        why = {"timeout": "timed out at the deadline; ",
               "overran": f"stopped after {run_limit_s(run.estimate_s):.0f} s, {OVERRUN:g} times its estimate; "
               }.get(status, "")
        record["error"] = why + " | ".join(tail)[-600:]
    return status


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
            _so_far(stage, result, ctx, started)
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
            _so_far(stage, result, ctx, started)
        result["rounds_done"] = round_index + 1
    result["seconds"] = round(time.monotonic() - started, 1)
    result.update(summarize(stage, result["runs"]))
    return result


def _so_far(stage: Stage, result: dict, ctx: Context, started: float) -> None:
    """The stage's result so far, with its medians and ratios, to ctx.on_record (which cannot stop the stage: the
    stage's own result is written when it ends)."""
    try:
        ctx.on_record({**result, "setup": list(result["setup"]), "runs": list(result["runs"]),
                       "seconds": round(time.monotonic() - started, 1), "unfinished": True,
                       **summarize(stage, result["runs"])})
    except Exception:  # noqa: BLE001
        ctx.say(f"the record so far of stage {stage.name} could not be written:\n{traceback.format_exc()}")


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
