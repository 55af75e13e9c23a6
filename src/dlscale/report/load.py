"""Read run directories and sweep directories: the report's only inputs.

A run directory holds summary.json (and config.json, env.json, metrics.jsonl) written by
`dlscale bench` or `dlscale train`; a sweep directory holds sweep.json and one run directory per
point that succeeded. A directory with neither is searched one level down, so `runs/` works.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.report.files import KINDS, number, read_json
from dlscale.report.loader import LoaderRun
from dlscale.report.predictions import PredictRun

SPEED_FLAGS = ("channels_last", "fused_optimizer", "cudnn_benchmark", "compile", "cuda_graphs")


@dataclass(frozen=True)
class Run:
    """One finished run, as its files describe it."""

    path: Path
    summary: dict
    config: dict = field(default_factory=dict)
    epochs: tuple[dict, ...] = ()
    """Per-epoch validation records (train runs): epoch, val_top1_pct, elapsed_s, ..."""
    sweep: str | None = None
    """Name of the sweep directory this run belongs to, if any."""
    point: dict = field(default_factory=dict)
    """The run's entry in sweep.json (settings, series, nnodes), if any."""

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def kind(self) -> str:
        return self.summary["kind"]

    @property
    def world_size(self) -> int:
        return int(self.summary["world_size"])

    @property
    def num_nodes(self) -> int:
        return int(self.point.get("nnodes") or self.summary.get("num_nodes") or 1)

    @property
    def total_ips(self) -> float | None:
        """Measured images/s summed over ranks."""
        key = "img_per_sec_total_mean" if self.kind == "bench" else "total_ips"
        return number(self.summary.get(key))

    @property
    def total_ci95(self) -> float | None:
        return number(self.summary.get("img_per_sec_total_ci95"))

    @property
    def per_rank_ips(self) -> float | None:
        if self.kind == "bench":
            return number(self.summary.get("img_per_sec_per_rank_mean"))
        total = self.total_ips
        return None if total is None else total / self.world_size

    @property
    def per_rank_ci95(self) -> float | None:
        return number(self.summary.get("img_per_sec_per_rank_ci95"))

    @property
    def global_batch(self) -> int | None:
        return self.summary.get("global_batch_size")

    @property
    def per_rank_batch(self) -> int | None:
        return self.summary.get("batch_size")

    @property
    def final_top1(self) -> float | None:
        return number(self.summary.get("final_top1_pct"))

    @property
    def train_time_s(self) -> float | None:
        return number(self.summary.get("train_time_s"))

    @property
    def options(self) -> tuple[str, ...]:
        """Speed options that were on, in a fixed order."""
        return tuple(flag for flag in SPEED_FLAGS if self.summary.get(flag))

    @property
    def setting(self) -> str:
        """Precision and speed options, e.g. 'amp_bf16 +channels_last'."""
        return " ".join([self.summary.get("precision", "?"), *(f"+{o}" for o in self.options)])

    @property
    def data(self) -> str:
        return str(self.summary.get("data") or self.config.get("data", {}).get("name") or "synthetic")


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
        if (path / "sweep.json").is_file():
            _load_sweep(path, found, seen)
        elif (path / "summary.json").is_file():
            _add_run(path, found, seen)
        else:
            children = sorted(p for p in path.iterdir() if p.is_dir())
            sweeps = [c for c in children if (c / "sweep.json").is_file()]
            runs = [c for c in children if (c / "summary.json").is_file()]
            if not sweeps and not runs:
                raise ConfigError(f"{path} holds no summary.json or sweep.json; give directories "
                                  "made by dlscale bench, train, scale, loader or predict")
            for child in sweeps:
                _load_sweep(child, found, seen)
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
    summary = read_json(path / "summary.json")
    if summary.get("kind") == "loader":
        found.loaders.append(LoaderRun(path, summary))
        return
    if summary.get("kind") == "predict":
        found.predictions.append(PredictRun(path, summary))
        return
    if summary.get("kind") == "comm":
        found.skipped.append(f"{path}: a dlscale comm run (its fits are dlscale predict --comm-run's input)")
        return
    if summary.get("kind") not in KINDS or "world_size" not in summary:
        found.skipped.append(f"{path}: summary.json is not from dlscale bench or train")
        return
    config = read_json(path / "config.json") if (path / "config.json").is_file() else {}
    found.runs.append(Run(path, summary, config, _epochs(path, summary), sweep, point or {}))


def _epochs(path: Path, summary: dict) -> tuple[dict, ...]:
    """The summary's history, else the metrics log's epoch records (last one per epoch wins)."""
    if summary.get("history"):
        return tuple(summary["history"])
    log = path / "metrics.jsonl"
    if not log.is_file():
        return ()
    by_epoch: dict[int, dict] = {}
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        if record.get("record") == "epoch":
            by_epoch[record["epoch"]] = record
    return tuple(by_epoch[e] for e in sorted(by_epoch))


def _load_sweep(path: Path, found: Collection, seen: set[Path]) -> None:
    sweep = read_json(path / "sweep.json")
    found.sweeps.append({**sweep, "path": str(path)})
    for point in sweep.get("points", []):
        run_dir = path / point["run_dir"]
        # A point submitted with `dlscale scale --no-wait` counts once its job has written its summary.
        if point.get("status") in ("ok", "submitted") and (run_dir / "summary.json").is_file():
            _add_run(run_dir, found, seen, sweep=path.name, point=point)
            continue
        error = point.get("error") or {"ok": "no summary.json", "submitted": "no summary.json yet: is its "
                                       f"SLURM job {point.get('job_id')} still running?"}.get(point.get("status"), "")
        found.failed.append(FailedPoint(
            sweep=path.name, name=point["name"], world_size=point["world_size"],
            nnodes=point.get("nnodes", 1), status=point.get("status", "unknown"),
            returncode=point.get("returncode"), error=error, series=point.get("series", ""),
            settings=point.get("settings", {}), group=point.get("group", ""),
        ))
