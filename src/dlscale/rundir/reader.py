"""The one reader of run and sweep directories: report, explain, predict and the sweep read through it.

Standard library only (explain, predict and report start without torch or matplotlib). Every problem
with a directory or a file is one line naming it (a ConfigError); run directories written before the
schema carried a version read as version 1 (schema.unstamped).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.rundir.files import is_dir, is_file, read_json, read_records
from dlscale.rundir.run import CommRun, Run
from dlscale.rundir.schema import COMM_RUN, SHAPES, THROUGHPUT_KINDS, check_summary, unstamped
from dlscale.rundir.shape import check

WRITTEN_BY = "not as dlscale writes it: re-run, or remove the directory"


def is_run(path: str | Path) -> bool:
    """A directory with a summary.json: a finished run (or one that has written its summary)."""
    return is_file(Path(path) / "summary.json")


def is_sweep(path: str | Path) -> bool:
    return is_file(Path(path) / "sweep.json")


def read_summary(path: str | Path, *kinds: str, flag: str = "") -> dict:
    """summary.json of a run directory whose kind is one of `kinds` (any kind when none is named)."""
    return _summary(Path(path), kinds, flag)[0]


def read_run(path: str | Path, kinds: tuple[str, ...] | None = THROUGHPUT_KINDS, *, flag: str = "",
             sweep: str | None = None, point: dict | None = None) -> Run:
    """A run directory (of one of `kinds`; None: any) with everything it holds: summary, config, environment,
    metrics.jsonl's log windows and epochs. `sweep` and `point`: the sweep it belongs to and its entry there."""
    directory = Path(path)
    summary, version = _summary(directory, kinds or (), flag)
    records = read_records(directory / "metrics.jsonl")
    for record in records:
        check(record, SHAPES["metrics.jsonl"], directory / "metrics.jsonl", what=WRITTEN_BY)
    windows = tuple(r for r in records if r.get("record") == "train")
    return Run(directory, summary, read_optional(directory / "config.json"), read_optional(directory / "env.json"),
               windows, _epochs(summary, records), sweep, point or {}, version)


def read_optional(file: Path) -> dict:
    """A run's config.json or env.json without its version; {} when the run has none."""
    if not is_file(file):
        return {}
    return check(unstamped(read_json(file), file)[0], SHAPES.get(file.name, {}), file, what=WRITTEN_BY)


def read_runs(path: str | Path) -> list[Run]:
    """A bench or train run directory, or a sweep directory's finished points (smallest world size first)."""
    directory = Path(path)
    if not is_sweep(directory):
        if is_dir(directory) and not is_run(directory):
            raise ConfigError(f"{directory} holds no summary.json: not a finished run of dlscale bench or train "
                              "(nor a sweep: no sweep.json)")
        return [read_run(directory)]
    sweep = read_sweep(directory)
    runs = [read_run(run_dir) for _, run_dir in sweep.finished()]
    if not runs:
        raise ConfigError(f"{directory}: the sweep has no finished point to explain")
    return sorted(runs, key=lambda r: (r.world_size, r.name))


def read_comm_run(path: str | Path, flag: str = "--comm-run") -> CommRun:
    """A run directory of dlscale comm."""
    summary = read_summary(path, "comm", flag=flag)
    return CommRun(Path(path), check(summary, COMM_RUN, Path(path) / "summary.json", what=WRITTEN_BY))


def _summary(directory: Path, kinds: tuple[str, ...], flag: str) -> tuple[dict, int]:
    prefix, made_by = f"{flag} " if flag else "", " or ".join(kinds) if kinds else "bench, train, comm or predict"
    if not is_dir(directory):
        raise ConfigError(f"{prefix}{directory}: no such directory, so no summary.json; give a run directory of "
                          f"dlscale {made_by}")
    file = directory / "summary.json"
    if not is_file(file):
        raise ConfigError(f"{prefix}{directory} holds no summary.json: not a finished run of dlscale {made_by}")
    summary, version = unstamped(read_json(file, f" dlscale {kinds[0] if kinds else 'command'}"), file)
    if kinds and summary.get("kind") not in kinds:
        kind = summary.get("kind") if isinstance(summary.get("kind"), str) else "unknown"
        raise ConfigError(f"{prefix}{directory} is a {kind} run; give a run directory of dlscale {made_by}")
    check_summary(summary, file)
    return summary, version


def _epochs(summary: dict, records: tuple[dict, ...]) -> tuple[dict, ...]:
    """The summary's history, else metrics.jsonl's epoch records (the last one of each epoch wins: a
    resumed run writes an epoch again)."""
    history = summary.get("history")
    if isinstance(history, list) and history:
        return tuple(h for h in history if isinstance(h, dict))
    by_epoch: dict[int, dict] = {}
    for record in records:
        if record.get("record") == "epoch" and isinstance(record.get("epoch"), int):
            by_epoch[record["epoch"]] = record
    return tuple(by_epoch[e] for e in sorted(by_epoch))


# ------------------------------------------------------------------------------------------ sweeps


@dataclass(frozen=True)
class Sweep:
    """A sweep directory of dlscale scale: sweep.json's header and its points."""

    path: Path
    header: dict
    """sweep.json without its points (command, mode, launcher, nproc, ...)."""
    points: tuple[dict, ...]
    """Each point: name, run_dir (inside the sweep), world_size, nnodes, status, error, series, settings, ..."""
    schema: int = 1

    @property
    def name(self) -> str:
        return self.path.name

    def as_dict(self) -> dict:
        return {**self.header, "points": list(self.points)}

    def run_dir(self, point: dict) -> Path:
        return self.path / point["run_dir"]

    def is_finished(self, point: dict, statuses: tuple[str, ...] = ("ok", "submitted")) -> bool:
        """The point's status is one of `statuses` and its run wrote its summary (a point submitted with
        `dlscale scale --no-wait` counts once its job has)."""
        return point.get("status") in statuses and is_run(self.run_dir(point))

    def finished(self, statuses: tuple[str, ...] = ("ok", "submitted")) -> list[tuple[dict, Path]]:
        """(point, run directory) of each finished point."""
        return [(p, self.run_dir(p)) for p in self.points if self.is_finished(p, statuses)]


def read_sweep(path: str | Path) -> Sweep:
    directory = Path(path)
    file = directory / "sweep.json"
    if not is_file(file):
        raise ConfigError(f"{directory}: no sweep.json; give a directory made by dlscale scale")
    data, version = unstamped(read_json(file, " dlscale scale"), file)
    check(data, SHAPES["sweep.json"], file, what="not as dlscale scale writes it: re-run, or remove the directory")
    points = data.get("points") or []
    empty = next((i for i, p in enumerate(points) if not p["run_dir"]), None)
    if empty is not None:
        raise ConfigError(f"{file}: points[{empty}].run_dir is empty; not as dlscale scale writes it: re-run, or "
                          "remove the directory")
    return Sweep(directory, {k: v for k, v in data.items() if k != "points"}, tuple(points), version)
