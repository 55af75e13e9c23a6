"""gpu.json (every figure with its command and the environment) and gpu.md (the tables), and the
goals of the campaign checked against the figures."""

from __future__ import annotations

import json
from pathlib import Path

from gpu_campaign import data_report
from gpu_campaign.data_report import fmt

GOALS = {
    "throughput": ("ResNet-50, synthetic, one GPU: the compiled default, `dlscale bench` with no flags (img/s)", 6000.0,
                   7200.0),
    "vs_bare": ("dlscale bench / bare PyTorch loop", 0.98, None),
    "vs_timm_compiled": ("dlscale bench default / timm benchmark.py --torchcompile (train), both compiled at the "
                         "default's batch", 1.00, None),
    "vs_timm_eager": ("dlscale bench / timm benchmark.py (train), both eager with the same settings", 1.00, None),
    "real_data": ("dlscale train on JPEGs / on synthetic input, compiled default, batch 512: nvImageCodec's hardware "
                  "decoder, the training crop decoded as a region", 0.90, 0.95),
    "real_data_threads": ("the same, the CPU path with 15 loader threads", 0.90, 0.95),
    "real_data_nvjpeg_shared": ("the same, nvJPEG fed by a thread, the decode shared with 15 loader threads (the best "
                                "earlier device arrangement)", 0.90, 0.95),
    "real_data_processes": ("the same, the CPU path with 15 worker processes", 0.90, 0.95),
    "cpu_per_image": ("CPU time per image, nvImageCodec's device path / the CPU path with loader threads (dlscale "
                      "loader)", None, None),
    "ddp_wrapper": ("the compiled default wrapped in DDP on one rank / unwrapped", None, None),
}
"""name -> (what, floor, goal): the campaign's targets; throughput has a floor and a higher goal (MLPerf's
7,160 img/s per H100 rounded up). Against timm like is compared with like: compiled with compiled at one batch,
eager with eager; each must be at least as fast as timm's own benchmark of the same work. Real data: each way of
feeding JPEGs at 0.90 of synthetic or more on 16 cores, 0.95 the stretch (REAL_DATA names their runs).
cpu_per_image must be at most 1/3: CPU_SHARE."""

REAL_DATA = {"real_data": "nvimgcodec", "real_data_threads": "threads", "real_data_nvjpeg_shared": "nvjpeg shared",
             "real_data_processes": "processes"}
"""Each real-data goal's arrangement: its runs are "train JPEG <name>" and "loader <name>" (decode.ARRANGEMENTS)."""

THROUGHPUT_GPU = "H100"
"""The GPU the throughput floor and goal are set for: on another (an H200 has more and faster memory) the figure
is shown and not judged."""

CPU_SHARE = 1.0 / 3.0
"""The GPU decode path may use at most this share of the CPU path's CPU time per image."""

DEFAULT_RUNS = (("baseline", "compiled default"), ("peers", "dlscale bench default"), ("floor", "default"))
"""Where the compiled default's own figure is measured (`dlscale bench` with no flags), in order of preference:
the baseline from an empty inductor cache, else the peers stage's, else the floor's alternated windows of it
(beside coordinate descent). The throughput goal is judged on it alone,
never on the fastest of the stages' figures: an eager peer, a lever not in the default or a DDP variant is
another configuration."""


HELPS = 1.01
"""A lever helps when its window beats the baseline's by this factor (1% or more) in most rounds: more than half
of the rounds in which both were measured (`helps`)."""

RULE = "beat the default by 1% or more in most rounds"
"""The lever rule in words, as the stage notes and docs/benchmarks.md state it."""

VERDICT_STAGES = ("levers_a", "levers_b", "combined", "floor")
"""The stages whose ratios the lever rule judges (gpu.md shows its verdict beside them)."""


def helps(ratio: dict) -> bool:
    """The lever rule: the per-round ratios (each round's pair of windows) at HELPS or more in most rounds."""
    rounds = ratio.get("per_round") or []
    return bool(rounds) and sum(p >= HELPS for p in rounds) * 2 > len(rounds)


def _verdict(ratio: dict) -> str:
    rounds = ratio.get("per_round") or []
    ahead = sum(p >= HELPS for p in rounds)
    return f"{'yes' if helps(ratio) else 'no'}, {ahead} of {len(rounds)}"


def _median(results: dict, stage: str, run: str) -> float | None:
    return results.get(stage, {}).get("medians", {}).get(run, {}).get("median")


def _ratio(results: dict, stage: str, numerator: str, denominator: str) -> float | None:
    for ratio in results.get(stage, {}).get("ratios", []):
        if (ratio["numerator"], ratio["denominator"]) == (numerator, denominator) and not ratio.get("chain"):
            return ratio["ratio"]
    return None


def _loader(results: dict, name: str) -> dict | None:
    """The real-data stage's loader run of that name, where it measured."""
    stage = results.get("decode", {})
    return next((r for r in stage.get("setup", []) + stage.get("runs", []) if r["name"] == name
                 and r.get("status") == "ok" and r.get("details")), None)


def _per_cpu_s(loader: dict | None) -> float | None:
    rows = (loader or {}).get("details", {}).get("rows", [])
    best = max((row.get("images_per_cpu_s") or 0 for row in rows), default=0)
    return best or None


def cores_needed(results: dict) -> dict | None:
    """Cores per GPU each way of feeding JPEGs would need to feed the synthetic training rate, from its loader's
    best images per CPU-second (read, decode or parse, crop, collate: the loader's whole CPU cost)."""
    rate = _median(results, "decode", "train synthetic")
    paths = {name: _per_cpu_s(_loader(results, f"loader {name}")) for name in REAL_DATA.values()}
    if not rate or not any(paths.values()):
        return None
    return {"synthetic_img_per_s": rate,
            "per_path": {path: {"images_per_cpu_s": per, "cores": rate / per} for path, per in paths.items() if per}}


def compiled_default(results: dict) -> tuple[str | None, float | None]:
    """The compiled default's img/s and where it was measured (DEFAULT_RUNS), or (None, None)."""
    for stage, name in DEFAULT_RUNS:
        median = _median(results, stage, name)
        if median is not None:
            return f"{stage} / {name}", median
    return None, None


def goals(results: dict, mode: str, device_name: str | None = None) -> list[dict]:
    """Each goal's figure and whether it is met; device_name: the GPU's (the throughput is judged on an
    H100 only, or where no name is known)."""
    source, default = compiled_default(results)
    device_path, cpu_path = _per_cpu_s(_loader(results, "loader nvimgcodec")), \
        _per_cpu_s(_loader(results, "loader threads"))
    values = {"throughput": default,
              "vs_bare": _ratio(results, "peers", "dlscale bench", "bare loop"),
              "vs_timm_compiled": _ratio(results, "peers", "dlscale bench default", "timm benchmark.py compiled"),
              "vs_timm_eager": _ratio(results, "peers", "dlscale bench", "timm benchmark.py"),
              **{goal: _ratio(results, "decode", f"train JPEG {name}", "train synthetic")
                 for goal, name in REAL_DATA.items()},
              "cpu_per_image": cpu_path / device_path if device_path and cpu_path else None,
              "ddp_wrapper": _ratio(results, "ddp", "DDP", "default")}
    rows = []
    for key, (what, floor, goal) in GOALS.items():
        value = values[key]
        met = None if value is None or floor is None or mode != "cuda" else value >= floor
        if key == "cpu_per_image" and value is not None and mode == "cuda":
            met = value <= CPU_SHARE
        rows.append({"goal": key, "what": what, "floor": floor, "goal_value": goal, "value": value, "met": met,
                     "goal_met": None if value is None or goal is None or mode != "cuda" else value >= goal})
    real = results.get("decode", {}).get("runs", [])
    warnings = list(dict.fromkeys(w for r in real if r["name"].startswith("train JPEG")
                                  for w in (r.get("details") or {}).get("input_bound_warnings", [])))
    rows[0]["source"] = source
    if mode == "cuda" and device_name and THROUGHPUT_GPU not in device_name:
        rows[0]["met"] = rows[0]["goal_met"] = None
        rows[0]["not_judged"] = f"the floor and goal are set for an {THROUGHPUT_GPU}; this GPU is an {device_name}"
    data_row = next(row for row in rows if row["goal"] == "real_data")
    data_row["input_bound_warnings"] = warnings
    data_row["cores_needed"] = cores_needed(results)
    return rows


def write_json(path: Path, document: dict) -> None:
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


# ----------------------------------------------------------------------------------- markdown

def _status(entry: dict) -> str:
    return entry["status"] if entry["status"] == "ok" else f"{entry['status']}"


def environment_lines(env: dict) -> list[str]:
    smi = env.get("nvidia_smi") or {}
    if env.get("cuda_available"):
        device = (f"- GPU: {env.get('device_name', '-')} ({fmt(env.get('gpu_memory_gib'))} GiB), driver "
                  f"{env.get('driver') or '-'}, max SM clock {smi.get('clocks.max.sm', '-')}, power limit "
                  f"{smi.get('power.limit', '-')}")
    else:
        device = "- no GPU: CPU only"
    return [device,
            f"- torch {env.get('torch')}, CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}, NCCL {env.get('nccl')}, "
            f"Python {env.get('python')}, triton {env.get('triton') or '-'}",
            f"- CPU: {env.get('cpu_model') or '-'}, {env.get('available_cores')} cores; {env.get('pillow')}; "
            f"torchvision {env.get('torchvision') or '-'}, timm {env.get('timm') or '-'}",
            f"- dlscale {env.get('dlscale')} at {env.get('git_sha') or 'a copy without git'}"]


def stage_table(result: dict) -> list[str]:
    unavailable = [f"- {r['name']}: unavailable: {r.get('error', '')}" for r in result.get("setup", []) +
                   result.get("runs", []) if r.get("status") == "unavailable"]
    if unavailable and not result.get("medians"):
        return unavailable
    lines = ["| run | settings | status | img/s per round | median |", "|---|---|---|---|---|"]
    for name, m in result.get("medians", {}).items():
        rounds = ", ".join(f"{v:,.1f}" for v in m["values"]) or "-"
        lines.append(f"| {name} | {m['settings'] or '-'} | {m['status']} | {rounds} | {fmt(m['median'])} |")
    ratios = [r for r in result.get("ratios", []) if not r.get("chain")]
    lever = result.get("name") in VERDICT_STAGES
    if ratios:
        lines += ["", "| ratio | of medians | per round |" + (" helps (rounds at 1.01 or more) |" if lever else ""),
                  "|---|---|---|" + ("---|" if lever else "")]
        lines += [f"| {r['numerator']} / {r['denominator']} | **{fmt(r['ratio'], 3)}** | "
                  f"{', '.join(f'{p:.3f}' for p in r['per_round']) or '-'} |" + (f" {_verdict(r)} |" if lever else "")
                  for r in ratios]
    return lines


def progression_table(result: dict) -> list[str]:
    chain = {r["numerator"]: r["ratio"] for r in result.get("ratios", []) if r.get("chain")}
    base = {r["numerator"]: r["ratio"] for r in result.get("ratios", []) if not r.get("chain")}
    lines = ["| step | adds | status | img/s (median) | MFU | x fp32 | x previous step |",
             "|---|---|---|---|---|---|---|"]
    for name, m in result.get("medians", {}).items():
        mfu = f"{100 * m['mfu']:.1f}%" if m.get("mfu") else "-"
        lines.append(f"| {name} | {m['settings'] or '-'} | {m['status']} | {fmt(m['median'])} | {mfu} | "
                     f"{fmt(base.get(name), 2)} | {fmt(chain.get(name), 2)} |")
    return lines


def data_tables(result: dict) -> list[str]:
    """The real-data stage: each arrangement's train run and loader, the shared decode's share, the JPEG engines,
    then every run's rounds and the ratios."""
    names = [ratio["numerator"].removeprefix("train JPEG ") for ratio in result.get("ratios", [])]
    return [*data_report.arrangement_table(result, names), "", *data_report.shared_line(result),
            *data_report.engines_lines(result), *stage_table(result)]


def curve_table(result: dict) -> list[str]:
    run = next((r for r in result.get("runs", []) if r.get("status") == "ok"), None)
    if run is None:
        return ["Not measured: " + "; ".join(r.get("error", r["status"]) for r in result.get("runs", []))]
    lines = [f"`{run['command']}`", "", "| batch per device | step ms | img/s |", "|---|---|---|"]
    for point in run["details"]["batch_curve"]:
        lines.append(f"| {point.get('batch_size')} | {fmt(point.get('step_time_ms'), 2)} | "
                     f"{fmt(point.get('img_per_sec') or point.get('img_per_sec_total_mean'))} |")
    return lines


def compile_lines(result: dict) -> list[str]:
    """The baseline's compile facts (what `dlscale bench` recorded of its torch.compile)."""
    run = next((r for r in result.get("runs", []) if r.get("status") == "ok"), None)
    if run is None:
        return []
    facts = {k: v for k, v in (run.get("details") or {}).items() if k.startswith("compile") and v is not None}
    return ["", f"The baseline's process took {fmt(run.get('seconds'))} s in all; its compile record: "
            + (", ".join(f"{k} {v}" for k, v in facts.items()) or "none") + "."]


def failures(results: dict) -> list[str]:
    lines = []
    for stage in results.values():
        for entry in stage.get("setup", []) + stage.get("runs", []):
            if entry.get("status") not in ("ok", "unavailable"):
                lines.append(f"- {stage['name']} / {entry['name']} (round {entry.get('round', 0)}): "
                             f"{entry['status']}: {entry.get('error', '')}")
    return lines


def markdown(document: dict) -> str:
    results, env = document["stages"], document.get("environment") or {}
    out = [f"# GPU campaign: {env.get('device_name', document['device'])}", "",
           f"`{document['command']}`, {document['started']}, {document['wall_s']:.0f} s of a "
           f"{document['budget_s']:.0f} s budget ({document['device']} mode).", "", *environment_lines(env), "",
           "## Goals", ""]
    if document["device"] != "cuda":
        out += ["A CPU rehearsal: tiny models, so nothing below is judged against the goals.", ""]
    out += ["| goal | floor | goal | measured | met |", "|---|---|---|---|---|"]
    for g in document["goals"]:
        met = "-" if g["met"] is None else ("yes" if g["met"] else "**no**")
        if g["goal_met"] is not None:
            met += f" (goal {'yes' if g['goal_met'] else 'no'})"
        out.append(f"| {g['what']} | {fmt(g['floor'], 2)} | {fmt(g['goal_value'], 2)} | {fmt(g['value'], 3)} "
                   f"| {met} |")
    if document["goals"] and document["goals"][0].get("source"):
        out.append(f"\nThe throughput is the compiled default's own, measured in {document['goals'][0]['source']}.")
    if document["goals"] and document["goals"][0].get("not_judged"):
        out.append(f"The throughput is not judged: {document['goals'][0]['not_judged']}.")
    real = next((g for g in document["goals"] if g["goal"] == "real_data"), {})
    warnings = real.get("input_bound_warnings", [])
    if warnings:
        more = f" ({len(warnings)} warnings over the JPEG runs; all in gpu.json)" if len(warnings) > 1 else ""
        out.append(f"\nInput-bound warning of the JPEG run{more}: {warnings[-1]}")
    need = real.get("cores_needed")
    for path, per in ((need or {}).get("per_path") or {}).items():
        out.append(f"\nJPEGs fed as {path}: the loader takes {per['images_per_cpu_s']:,.0f} img per CPU-second at "
                   f"best: feeding {need['synthetic_img_per_s']:,.0f} img/s takes about {per['cores']:.1f} cores per "
                   "GPU.")
    if document.get("stopped"):
        out.append(f"\nThe campaign was {document['stopped']}.")
    sections = {"wheels": data_report.wheels_lines, "baseline": lambda r: stage_table(r) + compile_lines(r),
                "levers_a": stage_table, "decode": data_tables, "floor": stage_table, "ddp": stage_table,
                "curve": curve_table, "levers_b": stage_table, "combined": stage_table, "peers": stage_table,
                "progression": progression_table, "choices": stage_table}
    for name, render in sections.items():
        if name in results:
            stage = results[name]
            out += ["", f"## {stage['title']}", "", *render(stage)]
            if stage.get("note"):
                out += ["", f"Note: {stage['note']}."]
    tiers = [r for stage in results.values() for r in stage.get("runs", []) if r.get("unit") == "passed"]
    if tiers:
        out += ["", "## GPU tests", ""]
    for run in tiers:
        d = run.get("details", {})
        where = f" (beside {run['beside']})" if run.get("beside") else ""
        out += [f"`{run.get('command', '')}`{where}: {run.get('status', '-')}, "
                f"{d.get('passed', '-')} passed, {d.get('failed', '-')} failed, {d.get('skipped', '-')} skipped "
                f"in {fmt(run.get('seconds'))} s.", ""]
        out += [f"- {t['test']}: {t['outcome']} {t['message'][:200]}" for t in d.get("tests", [])
                if t["outcome"] == "failed"]
    out += ["", "## Stages", "", "| stage | status | seconds | estimate | budget |", "|---|---|---|---|---|"]
    for stage in results.values():
        statuses = {e.get("status") for e in stage.get("setup", []) + stage.get("runs", [])} - {"unavailable"}
        status = "ok" if statuses <= {"ok"} else ", ".join(sorted(statuses))
        out.append(f"| {stage['name']} | {status} | {fmt(stage.get('seconds'))} | {fmt(stage['estimate_s'])} | "
                   f"{fmt(stage['budget_s'], 0)} |")
    problems = failures(results)
    if problems:
        out += ["", "Not measured or failed:", "", *problems]
    out += ["", "Every figure's command is in gpu.json (stages -> runs -> command); each command's output is in "
            "gpu.log."]
    return "\n".join(out) + "\n"


MACHINE_FIELDS = {"device_uuid": "GPU", "device_name": "device", "driver": "driver", "cpu_model": "CPU",
                  "available_cores": "cores"}
"""What identifies the machine of a campaign's environment: the GPU itself (its UUID), its name and driver, the
CPU and the cores the campaign could use."""


def other_machine(now: dict | None, then: dict | None) -> str | None:
    """Why two campaigns' environments are of different machines (the fields both record that differ), or None."""
    now, then = now or {}, then or {}
    differ = []
    for field, what in MACHINE_FIELDS.items():
        a, b = now.get(field), then.get(field)
        if field == "device_uuid":
            a, b = (str(v).removeprefix("GPU-") if v else None for v in (a, b))
        if a is not None and b is not None and a != b:
            differ.append(f"{what} {a} against {b}")
    return "; ".join(differ) or None


def comparison(document: dict, previous: dict, name: str) -> list[str]:
    """This run's goals and medians beside an earlier gpu.json's (docs/results/) of the same machine, each ratio
    marked as one across two runs; nothing but the reason where the machines differ."""
    env = previous.get("environment") or {}
    lines = ["", f"## Against {name}: another run", "",
             f"{name}: {env.get('device_name', '-')}, driver {env.get('driver') or '-'}, "
             f"torch {env.get('torch', '-')}, {previous.get('started', '-')}.", ""]
    differ = other_machine(document.get("environment"), env)
    if differ or document.get("device") != previous.get("device", document.get("device")):
        why = differ or f"{document.get('device')} mode against {previous.get('device')}"
        return lines + [f"Not compared: the two runs are of different machines ({why}); a ratio across machines "
                        "measures the machines as much as dlscale."]
    lines += ["Each ratio below divides this run's figure by that run's: a ratio across two runs, which holds the "
              "machine's drift between them besides any change of code (the tables above compare within one run).",
              "", "| figure | then | now | now / then (across runs) |", "|---|---|---|---|"]
    then_goals = {g["goal"]: g["value"] for g in previous.get("goals", [])}
    rows = [(g["what"], then_goals.get(g["goal"]), g["value"]) for g in document["goals"]]
    for stage, result in document["stages"].items():
        old = previous.get("stages", {}).get(stage, {}).get("medians", {})
        rows += [(f"{stage} / {run}", old.get(run, {}).get("median"), m["median"])
                 for run, m in result.get("medians", {}).items() if m["median"] is not None or run in old]
    for what, then, now in rows:
        change = now / then if isinstance(then, int | float) and isinstance(now, int | float) and then else None
        lines.append(f"| {what} | {fmt(then, 3)} | {fmt(now, 3)} | {fmt(change, 3)} |")
    return lines
