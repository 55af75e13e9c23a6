"""The run directory's schema: its files, the version they carry, the figures every throughput run has
under one name, and the checks a file's fields pass when read. docs/architecture.md ("The run directory")
has the same as one table; a test keeps the two in step.
"""

from __future__ import annotations

from pathlib import Path

from dlscale.errors import ConfigError, shown
from dlscale.rundir.shape import Maybe, Some, check

VERSION = 1
"""The version this code writes as `schema` in config.json, env.json, summary.json and sweep.json. A file
without it was written before the field existed (up to commit 022c5c5; tests/fixtures/runs-022c5c5) and
reads as version 1: the same form."""

KINDS = ("bench", "train", "profile", "comm", "loader", "predict")
"""The `kind` of config.json and summary.json: the command that wrote the run directory."""

THROUGHPUT_KINDS = ("bench", "train")
"""The kinds of run that measured training throughput: the runs of report's tables and of explain."""

FILES = {
    "config.json": "what the run was asked to do: `kind` first, the command's resolved settings (every kind)",
    "env.json": "what it ran on: command, git state, host, packages; torch, CUDA, NCCL and the devices (every kind)",
    "summary.json": "what it measured, written when it ends: `kind`, `world_size` and the kind's figures",
    "metrics.jsonl": "one JSON object a line: train's log windows (`record: train`) and epochs (`record: epoch`), "
                     "profile's steps",
    "sweep.json": "a sweep directory's plan and each point's status, rewritten as points change (dlscale scale)",
    "mlflow.json": "the MLflow run a --mlflow run logs to (a resumed run continues it)",
}
"""Every file of a run or sweep directory that dlscale reads back, with what it holds."""

FIGURES: dict[str, dict[str, str]] = {
    "total_ips": {"bench": "img_per_sec_total_mean", "train": "total_ips"},
    "total_ci95": {"bench": "img_per_sec_total_ci95"},
    "per_rank_ips": {"bench": "img_per_sec_per_rank_mean"},
    "per_rank_ci95": {"bench": "img_per_sec_per_rank_ci95"},
    "compute_ips": {"bench": "compute_ips"},
}
"""The figures of a throughput run under one name each: name -> the summary.json key each kind writes it
under. A kind that is missing does not measure the figure (a train run's per-rank rate is its total over
its ranks: Run.per_rank_ips)."""

WHOLE_NUMBERS = {"world_size": ("bench", "train", "comm"), "num_nodes": ()}
"""summary.json's counts: positive whole numbers where present; required of the kinds named."""


def number(value) -> float | None:
    """A JSON number as a float; None for anything else (a missing key, null, true/false, text)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def stamped(data: dict) -> dict:
    """A file's object with the schema version right after `kind` (first where it has none); the other
    keys keep their order."""
    if "kind" not in data:
        return {"schema": VERSION, **data}
    out = {}
    for key, value in data.items():
        if key != "schema":
            out[key] = value
        if key == "kind":
            out["schema"] = VERSION
    return out


def unstamped(data: dict, file: Path) -> tuple[dict, int]:
    """(the object without its version, the version): files without one are version 1 (sweep.json's was
    called `format`). A version this code does not know is one line."""
    version = data.get("schema", data.get("format", 1) if data.get("kind") == "sweep" else 1)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= VERSION:
        raise ConfigError(f"{file}: schema {shown(version)} is not one this dlscale reads (1 to {VERSION}); read it "
                          "with the dlscale that wrote it")
    return {k: v for k, v in data.items() if k != "schema"}, version


# The shape of each file's fields that a reader uses (dlscale.rundir.shape): checked when the file is read, so a
# wrong type or range is one line naming the file and the field, and no reader meets it. "?": the field may be
# missing or null (written before it existed, or not measured).

RATE = "positive?"
"""Images/s, GB/s, a speedup: a measured rate is above 0."""
PER_RANK = Maybe(["number"])
"""One figure per rank (train: rank 0's mean over its log windows, per rank)."""
STRAGGLERS = Maybe({"slowest_rank": "index?", "straggler": "index?", "median_excess_pct": "number?", "pattern": "text?",
                    "windows": "index?", "slowest_windows": "index?"})
COMMON = {
    "kind": "text", "model": "text?", "precision": "text?", "device": "text?", "device_name": "text?",
    "launcher": "text?", "dist_optimizer": "text?", "topology": "text?", "data": "text?", "decode": "text?",
    "batch_size": "count?", "global_batch_size": "count?", "image_size": "count?", "width": "count?",
    "num_classes": "count?", "local_world_size": "count?", "price_per_device_hour": "positive?",
    "comm_time_ms_per_step": "nonnegative?", "comm_bytes_per_step": "nonnegative?", "mfu": "nonnegative?",
    "avg_power_w": "nonnegative?", "joules_per_image": "nonnegative?", "energy_j": "nonnegative?",
    "peak_memory_bytes": "nonnegative?", "channels_last": "flag?", "cudnn_benchmark": "flag?",
    "fused_optimizer": "flag?", "compile": "flag?", "cuda_graphs": "flag?", "compile_mode": "text?",
    "stragglers": STRAGGLERS, "compile_facts": "object?",
}
"""Fields several kinds write."""
MEASURED = Maybe({"time_us": "positive", "algbw_gbs": "nonnegative", "busbw_gbs": "nonnegative", "wrong": "index?"})
COLLECTIVE = {"ranks": "count", "rows": Maybe([{"size": "count", "out-of-place": MEASURED, "in-place": MEASURED}],
                                              null=False),
              "fit": {"*": Maybe(({"error": "text"}, {"latency_us": "number", "busbw_gbs": "positive"}))}}
"""A collective of a comm run at one level (results.world.all_reduce): its rows, and per column its fit or why
none."""
COMM_RUN = {"backend": "text", "local_world_size": "count", "world_size": "count"}
"""What a reader of a comm run's network needs beside its results (rundir.read_comm_run)."""
SUMMARY_SHAPES: dict[str, dict] = {
    "bench": {**COMMON, "batch_size": "count", "img_per_sec_total_mean": "positive",
              "img_per_sec_total_ci95": "nonnegative?", "img_per_sec_per_rank_mean": RATE,
              "img_per_sec_per_rank_ci95": "nonnegative?", "total_ips": RATE,
              "compute_ips": RATE, "iterations": Maybe(["number"]), "iterations_per_rank": Maybe([["number"]]),
              "rank_step_ms": Maybe([["number"]]), "rank_data_ms": Maybe([["number"]]),
              "rank_forward_ms": Maybe([["number"]]), "num_warmup_batches": "index?", "num_batches_per_iter": "count?",
              "num_iters": "count?", "step_time_ms": "positive?", "train_gflops_per_image": "positive?",
              "batch_curve": Maybe([{"batch_size": "count", "img_per_sec": "positive", "step_time_ms": "positive",
                                     "ci95": "nonnegative?"}])},
    "train": {**COMMON, "total_ips": RATE, "train_time_s": "nonnegative?", "decode_process": "flag?",
              "workers_kind": "text?", "cpu_decoder": "text?",
              "final_top1_pct": "number?",
              "final_top5_pct": "number?", "best_top1_pct": "number?", "best_top5_pct": "number?",
              "epochs_planned": "count?", "epochs_completed": "index?", "steps": "index?", "peak_lr": "number?",
              "time_to_target_s": "nonnegative?", "rank_step_ms": PER_RANK, "rank_data_ms": PER_RANK,
              "rank_forward_ms": PER_RANK, "rank_lead_ms": PER_RANK,
              "history": Maybe([{"epoch": "index?", "step": "index?", "val_top1_pct": "number?",
                                 "val_top5_pct": "number?", "val_loss": "number?", "elapsed_s": "nonnegative?",
                                 "throughput_img_per_s": RATE, "lr": "number?", "global_batch": "count?"}])},
    "profile": {**COMMON, "batch_size": "count", "step_ms": "positive?", "slowest_rank": "index?",
                "breakdown": Some({"rank": "index", "step_ms": "positive", "data_ms": "nonnegative",
                                   "forward_ms": "nonnegative", "backward_ms": "nonnegative", "*_ms": "number?"}),
                "grad_ready": Maybe([{"name": "text", "numel": "index", "ready_ms": "number"}])},
    "comm": {**COMMON, "backend": "text?", "results": Maybe({"*": {"*": COLLECTIVE}})},
    "loader": {**COMMON, "cores": "count?", "batches": "count?",
               "settings": Maybe([{"workers": "index", "images_per_s": "positive", "speedup": "positive",
                                   "images_per_cpu_s": RATE, "files_per_s": "nonnegative",
                                   "file_read_gb_per_s": "nonnegative", "storage_read_gb_per_s": "nonnegative",
                                   "cpu_cores_busy": "nonnegative", "device_ms_per_batch": "nonnegative?"}])},
    "predict": {**COMMON, "title": "text?", "global_batch": "count?", "max_devices": "count?",
                "devices": Maybe(["count"]), "strategy": "object?", "network": "object?", "inputs": "object?",
                "points": Maybe([{"devices": "count", "img_per_s_total": "positive", "efficiency": "nonnegative?",
                                  "limit": "text", "batch_per_device": "positive?"}])},
}
"""summary.json's fields per kind; a kind not named here (a future one) is checked for COMMON only."""
RECORD_SHAPE = {"record": "text?", "epoch": "index?", "step": "index?", "iteration": "index?",
                "throughput_img_per_s": RATE, "compute_img_per_s": RATE, "step_time_ms": "nonnegative?",
                "data_time_ms": "nonnegative?", "window_s": "nonnegative?", "elapsed_s": "nonnegative?",
                "comm_time_ms_per_step": "nonnegative?", "comm_bytes_per_step": "nonnegative?",
                "host_cpu_ms_per_image": "nonnegative?", "val_top1_pct": "number?", "val_top5_pct": "number?",
                "val_loss": "number?", "rank_step_ms": PER_RANK, "rank_data_ms": PER_RANK, "rank_forward_ms": PER_RANK,
                "*_gb_per_s": "nonnegative?", "*_per_s": "nonnegative?", "io_*": "nonnegative?"}
"""A metrics.jsonl record (train's log windows and epochs, profile's steps)."""
CONFIG_SHAPE = {"kind": "text?", "preset": "text?", "data": ("text?", {"name": "text?", "num_workers": "index?",
                                                                       "decode": "text?", "image_size": "count?"}),
                "model": ("text?", {"name": "text?", "width": "count?"}), "speed": "object?", "strategy": "object?",
                "plan": "object?", "argv": Maybe(["text"]), "world_size": "count?"}
ENV_SHAPE = {"device_name": "text?", "torch": "text?", "cuda": "text?", "nccl": "text?", "hostname": "text?",
             "cpu_count": "count?", "world_size": "count?", "packages": "object?", "env_vars": "object?",
             "command": "text?", "argv": Maybe(["text"])}
SWEEP_SHAPE = {"command": "text?", "args": Maybe(["text"]), "mode": "text?", "launcher": "text?",
               "nproc": Maybe(["count"]), "nnodes": Maybe(["count"]), "dist_optimizers": Maybe(["text"]),
               "precisions": Maybe(["text"]), "timeout_s": "positive?", "gpus_per_node": "count?",
               "points": Maybe([{"name": "text?", "run_dir": "text", "world_size": "count", "nnodes": "count?",
                                 "nproc_per_node": "count?", "status": "text?", "series": "text?", "group": "text?",
                                 "settings": "object?", "returncode": "whole?", "error": "text?", "job_id": "text?",
                                 "per_rank_batch": "count?", "global_batch": "count?", "elapsed_s": "nonnegative?",
                                 "logs": Maybe(["text"])}])}
"""sweep.json: its header and its points."""
SHAPES = {"config.json": CONFIG_SHAPE, "env.json": ENV_SHAPE, "sweep.json": SWEEP_SHAPE,
          "metrics.jsonl": RECORD_SHAPE}
"""The shape of each file but summary.json (whose shape depends on its kind: SUMMARY_SHAPES)."""


def check_summary(summary: dict, file: Path) -> None:
    """The fields every reader counts on: `kind` a known word, the counts positive whole numbers, each field a
    reader uses of its type (SUMMARY_SHAPES)."""
    kind = summary.get("kind")
    if not isinstance(kind, str):
        raise ConfigError(f"{file}: no kind; not a summary written by dlscale (re-run, or remove the directory)")
    check(summary, SUMMARY_SHAPES.get(kind, COMMON), file, what=f"not as dlscale {kind} writes it: re-run, or remove "
          "the directory")
    for key, required_of in WHOLE_NUMBERS.items():
        value = summary.get(key)
        if value is None:
            if kind in required_of:
                raise ConfigError(f"{file}: no {key}; not written by dlscale {kind}")
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{file}: {key} {shown(value)} is not a positive whole number; not as dlscale {kind} "
                              "writes it: re-run, or remove the directory")
