"""The run directory's schema: its files, the version they carry, the figures every throughput run has
under one name, and the checks a file's fields pass when read. docs/architecture.md ("The run directory")
has the same as one table; a test keeps the two in step.
"""

from __future__ import annotations

from pathlib import Path

from dlscale.errors import ConfigError

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
        raise ConfigError(f"{file}: schema {version!r} is not one this dlscale reads (1 to {VERSION}); read it with "
                          "the dlscale that wrote it")
    return {k: v for k, v in data.items() if k != "schema"}, version


def check_summary(summary: dict, file: Path) -> None:
    """The fields every reader counts on: `kind` a known word, the counts positive whole numbers."""
    kind = summary.get("kind")
    if not isinstance(kind, str):
        raise ConfigError(f"{file}: no kind; not a summary written by dlscale (re-run, or remove the directory)")
    for key, required_of in WHOLE_NUMBERS.items():
        value = summary.get(key)
        if value is None:
            if kind in required_of:
                raise ConfigError(f"{file}: no {key}; not written by dlscale {kind}")
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{file}: {key} {value!r} is not a positive whole number; not as dlscale {kind} "
                              "writes it: re-run, or remove the directory")
