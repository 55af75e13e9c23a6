"""How each command's figure is read back into its record (Run.reader names one of READERS): from the file it
wrote (Run.output) or its output. A reader may set placeholders for the runs after it (ctx.values) or their
environment (ctx.env)."""

from __future__ import annotations

import json
import statistics
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_campaign.decode import SHARE, device_share
from gpu_campaign.plan import RATES, Run

if TYPE_CHECKING:
    from gpu_campaign.runner import Context


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
    """`dlscale loader`'s fastest setting: its img/s, CPU ms and device ms per image, and which decoder (and which
    of its backends) decoded. The rate and workers go to "<sets>_ips" and "<sets>_workers" for the runs after it;
    the shared arrangement's loader also sets {share} (decode.SHARE)."""
    summary = json.loads(path.read_text())
    rows = summary["settings"]
    best = max(rows, key=lambda row: row["images_per_s"])
    device_ms = best.get("device_ms_per_batch")
    per_image = device_ms / summary["batch_size"] if device_ms is not None else None
    key = run.sets or "loader"
    ctx.values[f"{key}_workers"] = str(best["workers"])
    ctx.values[f"{key}_ips"] = str(best["images_per_s"])
    if key == SHARE[0]:  # the device's share of the decode, where the workers decode the rest at their rate
        share = device_share(float(ctx.values.get(f"{SHARE[1]}_ips") or 0) or None, per_image,
                             float(ctx.values.get("synthetic_ips") or RATES["compiled"]))
        ctx.values["share"] = f"{share:.2f}"
    kept = ("decoded_by_backend",)
    scalars = {k: v for k, v in summary.items() if not isinstance(v, dict | list)}
    figures = {"images_per_s": best["images_per_s"], "cpu_ms_per_image": best.get("cpu_ms_per_image"),
               "device_ms_per_image": per_image, "workers": best["workers"], "workers_kind": best.get("workers_kind"),
               **{k: best[k] for k in ("decoder", "decoded_by_backend", "decoded_on_device", "decoded_by_workers",
                                       "refused_by_device") if k in best}}
    return {"value": best["images_per_s"], "unit": "img/s",
            "details": {"rows": [{k: v for k, v in row.items() if not isinstance(v, dict | list) or k in kept}
                                 for row in rows],
                        "best": figures, "best_workers": best["workers"], "summary": scalars,
                        **({"share": float(ctx.values["share"])} if key == SHARE[0] else {})}}


def read_wheels(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    """wheels.py's record: where nvImageCodec was installed goes first on the PYTHONPATH of the runs that need it
    ("pythonpath:nvimgcodec"; the others run in the machine's own environment); where it cannot decode the device
    path, "unavailable:nvimgcodec" says why (the runs that need it are not started). simplejpeg, where it installed,
    goes on the PYTHONPATH of the CPU path's data runs ("pythonpath:simplejpeg"; without it they decode with
    Pillow, never refused)."""
    record = json.loads(path.read_text())
    if record.get("unavailable"):
        ctx.values["unavailable:nvimgcodec"] = record["unavailable"]
    elif record.get("target"):
        ctx.values["pythonpath:nvimgcodec"] = record["target"]
    if record.get("target") and (record.get("versions") or {}).get("simplejpeg"):  # the CPU path's decoder
        ctx.values["pythonpath:simplejpeg"] = record["target"]
    return {"value": None, "unit": None, "details": record}


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
    cpu_ms = [r["host_cpu_ms_per_image"] for r in steady if r.get("host_cpu_ms_per_image") is not None]
    if run is not None and run.sets:  # the synthetic run's rate: the model's, for the shared decode's share
        ctx.values[run.sets] = str(images / seconds)
    return {"value": images / seconds, "unit": "img/s",
            "details": {"windows": len(steady), "seconds": seconds,
                        "window_img_per_s": [r["throughput_img_per_s"] for r in steady],
                        "data_time_ms": statistics.median(r["data_time_ms"] for r in steady),
                        "step_time_ms": statistics.median(r["step_time_ms"] for r in steady),
                        "host_cpu_ms_per_image": statistics.median(cpu_ms) if cpu_ms else None,
                        "input_bound_warnings": warnings, "summary_total_ips": summary.get("total_ips"),
                        "decode_path": summary.get("decode"), **_data_settings(path)}}


def _data_settings(path: Path) -> dict:
    """The run's loader workers and decode arrangement as its config.json has them (the run's own, not the stage's
    placeholders: the device path's runs take other workers than the CPU path's)."""
    config = path / "config.json"
    data = json.loads(config.read_text()).get("data", {}) if config.exists() else {}
    keys = ("num_workers", "workers_kind", "decode", "decoder", "device_decode_share", "device_feed",
            "device_feed_depth")
    return {key: data[key] for key in keys if key in data}


def read_nothing(run: Run, out: str, path: Path | None, ctx: Context) -> dict:
    return {"value": None, "unit": None, "details": {"output": out.strip().splitlines()[-1:] if out.strip() else []}}


READERS = {"env": read_env, "pytest": read_pytest, "bench": read_bench, "bare": read_bare, "timm": read_timm,
           "loader": read_loader, "train": read_train, "none": read_nothing, "alternate": read_alternate,
           "curve": read_curve, "wheels": read_wheels}

READ_ANYWAY = ("pytest", "alternate", "wheels")
"""Readers of commands whose report outlives their failure: failed tests, failed variants, an install that did not
give a working nvImageCodec."""
