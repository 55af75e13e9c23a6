"""Run directories and sweep directories for a report, through dlscale.rundir's reader.

A run directory holds summary.json (and config.json, env.json, metrics.jsonl) written by
`dlscale bench` or `dlscale train`; a sweep directory holds sweep.json and one run directory per
point that succeeded. A directory with neither is searched one level down, so `runs/` works.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.report.loader import LoaderRun
from dlscale.report.predictions import PredictRun
from dlscale.rundir import THROUGHPUT_KINDS, Run, Sweep, is_run, is_sweep, read_run, read_sweep


@dataclass(frozen=True)
class FailedPoint:
    """A sweep point that produced no run: why, and where its log is."""

    sweep: str
    name: str
    world_size: int
    nnodes: int
    status: str
    returncode: int | None
    error: str
    series: str
    settings: dict
    group: str = ""


@dataclass
class Collection:
    runs: list[Run] = field(default_factory=list)
    failed: list[FailedPoint] = field(default_factory=list)
    sweeps: list[dict] = field(default_factory=list)
    """Each sweep.json read, with its directory under 'path'."""
    skipped: list[str] = field(default_factory=list)
    """Directories passed over, each with the reason."""
    loaders: list = field(default_factory=list)
    """Runs of `dlscale loader` (report.loader.LoaderRun)."""
    predictions: list = field(default_factory=list)
    """Runs of `dlscale predict` (report.predictions.PredictRun)."""


def load(paths: list[str | Path]) -> Collection:
    if not paths:
        raise ConfigError("give at least one run or sweep directory")
    found = Collection()
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            raise ConfigError(f"{path}: no such directory; give run or sweep directories")
        if is_sweep(path):
            _load_sweep(read_sweep(path), found, seen)
        elif is_run(path):
            _add_run(path, found, seen)
        else:
            children = sorted(p for p in path.iterdir() if p.is_dir())
            sweeps = [c for c in children if is_sweep(c)]
            runs = [c for c in children if is_run(c)]
            if not sweeps and not runs:
                raise ConfigError(f"{path} holds no summary.json or sweep.json; give directories "
                                  "made by dlscale bench, train, scale, loader or predict")
            for child in sweeps:
                _load_sweep(read_sweep(child), found, seen)
            for child in runs:
                _add_run(child, found, seen)
    if not found.runs and not found.failed and not found.loaders and not found.predictions:
        skipped = f" (skipped: {'; '.join(found.skipped)})" if found.skipped else ""
        raise ConfigError("no finished run was found in " + ", ".join(map(str, paths)) + skipped)
    return found


def _add_run(path: Path, found: Collection, seen: set[Path], sweep: str | None = None,
             point: dict | None = None) -> None:
    key = path.resolve()
    if key in seen:
        return
    seen.add(key)
    run = read_run(path, None, sweep=sweep, point=point)
    if run.kind == "loader":
        found.loaders.append(LoaderRun(path, run.summary))
    elif run.kind == "predict":
        found.predictions.append(PredictRun(path, run.summary, run.config))
    elif run.kind == "comm":
        found.skipped.append(f"{path}: a dlscale comm run (its fits are dlscale predict --comm-run's input)")
    elif run.kind not in THROUGHPUT_KINDS:
        found.skipped.append(f"{path}: summary.json is not from dlscale bench or train")
    else:
        found.runs.append(run)


def _load_sweep(sweep: Sweep, found: Collection, seen: set[Path]) -> None:
    found.sweeps.append({**sweep.as_dict(), "path": str(sweep.path)})
    for point in sweep.points:
        if sweep.is_finished(point):
            _add_run(sweep.run_dir(point), found, seen, sweep=sweep.name, point=point)
            continue
        error = point.get("error") or {"ok": "no summary.json", "submitted": "no summary.json yet: is its "
                                       f"SLURM job {point.get('job_id')} still running?"}.get(point.get("status"), "")
        found.failed.append(FailedPoint(
            sweep=sweep.name, name=point.get("name") or point["run_dir"], world_size=point["world_size"],
            nnodes=point.get("nnodes", 1), status=point.get("status", "unknown"),
            returncode=point.get("returncode"), error=error, series=point.get("series", ""),
            settings=point.get("settings", {}), group=point.get("group", ""),
        ))

