"""Scaling figures from runs: series, speedup, efficiency, time to solution, the accuracy flag.

Definitions (T = total images/s measured over all ranks, N = world size, base = the smallest
world size of a series that produced a number):

    speedup(N)    = T_N / T_base
    efficiency(N) = (T_N / N) / (T_base / N_base)      1.0 = every rank as fast as at the base

An efficiency above 100% cannot be true for the same work per rank: its row carries the mark and
its likely cause (report/flags.py). Time to solution (train runs) uses Marconi100's form, time_base /
time_N, against the ideal N / N_base. A run is flagged when its final top-1 is more than a stated
tolerance below the run with the smallest global batch of the same model, data and schedule: HAL's May
run at global batch 16,384 finished 90 epochs faster than any other (3,379 s) yet ended at 71.93% top-1,
4.66 points below the series' smallest batch (references/hal.json), which is not a win. Runs of other
schedules (epochs, LR schedule, steps per epoch) are not compared: a 2-epoch run below a 90-epoch one
says nothing about its batch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from dlscale.report.flags import above_ideal, host_note
from dlscale.report.load import Collection, FailedPoint
from dlscale.rundir import Run

PART_ORDER = ("source", "device", "kind", "model", "image_size", "precision", "options", "dist_optimizer", "swept",
              "group", "epochs", "batch", "run")
DEFAULT_LABEL_PARTS = ("kind", "model", "precision", "options", "dist_optimizer", "group")


def efficiency(total: float, n: int, base_total: float, base_n: int) -> float:
    return (total / n) / (base_total / base_n)


@dataclass(frozen=True)
class Row:
    world_size: int
    nnodes: int
    run: Run | None
    speedup: float | None = None
    efficiency: float | None = None
    status: str = "ok"
    error: str = ""
    base: Run | None = None
    """The run this row's speedup and efficiency are against (its series' smallest world size)."""
    flag: str = ""
    """Why the efficiency cannot be true, when it is above 100% (report/flags.py); '' otherwise."""
    host: str = ""
    """Which of the run and its baseline did not measure the model's speed, and why (report/flags.py)."""

    @property
    def total_ips(self) -> float | None:
        return self.run.total_ips if self.run else None


@dataclass
class Series:
    key: tuple
    label: str
    rows: list[Row] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return dict(self.key).get("kind", "")

    @property
    def ok_rows(self) -> list[Row]:
        return [r for r in self.rows if r.run is not None and r.total_ips is not None]

    @property
    def base(self) -> Row | None:
        rows = self.ok_rows
        return rows[0] if rows else None


def run_parts(run: Run) -> dict:
    """What identifies a run's series: everything but the world size (and its batch)."""
    s = run.summary
    return {
        "source": run.sweep or "", "device": device_label(run), "kind": run.kind, "model": s.get("model"),
        "image_size": f"{s.get('image_size')}px" if run.kind == "bench" else run.data,
        "precision": s.get("precision"), "options": "+".join(run.options),
        "dist_optimizer": s.get("dist_optimizer"), "group": run.point.get("group", ""),
        "swept": " ".join(f"{k}={v}" for k, v in run.point.get("settings", {}).items()
                          if k not in ("dist_optimizer", "precision")),
        "epochs": f"{s['epochs_planned']} epochs" if run.kind == "train" and s.get("epochs_planned") else "",
    }


def device_label(run: Run) -> str:
    """'CPU (x86_64)' or the accelerator's name: runs on other kinds of device are never one curve."""
    if run.device != "cpu":
        return run.device_name
    return "CPU" if run.device_name in ("cpu", "") else f"CPU ({run.device_name})"


def build_series(collection: Collection) -> list[Series]:
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in collection.runs:
        groups[tuple(run_parts(run).items())].append(run)
    keyed: dict[tuple, list[Run]] = {}
    for key, runs in groups.items():
        keyed.update(_split_duplicates(dict(key), runs))
    labels = series_labels([dict(k) for k in keyed])
    series = []
    for key, runs in keyed.items():
        runs = sorted(runs, key=lambda r: (r.world_size, r.num_nodes, r.name))
        series.append(Series(key, labels[key], _rows(runs)))
    _attach_failed(series, collection.failed)
    return sorted(series, key=lambda s: s.label)


def _split_duplicates(parts: dict, runs: list[Run]) -> dict[tuple, list[Run]]:
    """Runs that share a world size cannot share a curve: tell them apart by batch, then by name."""
    if len({(r.world_size, r.num_nodes) for r in runs}) == len(runs):
        return {tuple(parts.items()): runs}
    by_batch: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        by_batch[tuple({**parts, "batch": f"batch {run.per_rank_batch}/rank"}.items())].append(run)
    if all(len({r.world_size for r in rs}) == len(rs) for rs in by_batch.values()):
        return dict(by_batch)
    return {tuple({**parts, "run": r.name}.items()): [r] for r in runs}


def series_labels(keys: list[dict]) -> dict[tuple, str]:
    """Short legend labels: only the parts that differ between series."""
    varying = [p for p in PART_ORDER if len({str(k.get(p, "")) for k in keys}) > 1]
    shown = varying or [p for p in DEFAULT_LABEL_PARTS]
    labels = {}
    for key in keys:
        words = [str(key[p]) for p in shown if key.get(p) not in (None, "")]
        labels[tuple(key.items())] = " ".join(words) or "runs"
    return labels


def _rows(runs: list[Run]) -> list[Row]:
    base = next((r for r in runs if r.total_ips), None)
    rows = []
    for run in runs:
        if base is None or run.total_ips is None:
            rows.append(Row(run.world_size, run.num_nodes, run, host=host_note(run)))
            continue
        value = efficiency(run.total_ips, run.world_size, base.total_ips, base.world_size)
        rows.append(Row(run.world_size, run.num_nodes, run, speedup=run.total_ips / base.total_ips,
                        efficiency=value, base=base, flag=above_ideal(run, base, value), host=host_note(run, base)))
    return rows


def scaling_metrics(series: list[Series]) -> list[tuple[int, dict[str, float]]]:
    """Per world size (the step), each series' figures as metrics: total_img_per_s, per_rank_img_per_s,
    speedup, efficiency_pct (and efficiency_above_100pct = 1 where it cannot be true, host_disturbed = 1 where
    the run's or its baseline's rate is not the model's speed), prefixed by the series' label when there are
    several (for MLflow)."""
    by_size: dict[int, dict[str, float]] = defaultdict(dict)
    for s in series:
        prefix = "_".join(s.label.split()) + "/" if len(series) > 1 else ""
        for row in s.ok_rows:
            efficiency_pct = None if row.efficiency is None else 100 * row.efficiency
            values = {"total_img_per_s": row.total_ips, "per_rank_img_per_s": row.total_ips / row.world_size,
                      "speedup": row.speedup, "efficiency_pct": efficiency_pct,
                      "efficiency_above_100pct": 1.0 if row.flag else None,
                      "host_disturbed": 1.0 if row.host else None}
            by_size[row.world_size].update({prefix + k: v for k, v in values.items() if v is not None})
    return sorted(by_size.items())


def _attach_failed(series: list[Series], failed: list[FailedPoint]) -> None:
    """A failed point joins the curve of its sweep's runs with the same settings, else a curve of
    failed points of its own."""
    for point in failed:
        row = Row(point.world_size, point.nnodes, None, status=point.status, error=point.error)
        own_key = (("source", point.sweep), ("series", point.series), ("group", point.group))
        home = next((s for s in series if s.key == own_key or any(
            r.run and r.run.sweep == point.sweep and r.run.point.get("settings") == point.settings
            and r.run.point.get("group", "") == point.group for r in s.rows)), None)
        if home is None:
            home = Series(own_key, f"{point.sweep} {point.series}".strip())
            series.append(home)
        home.rows.append(row)
        home.rows.sort(key=lambda r: (r.world_size, r.nnodes))


# ------------------------------------------------------------------ time to solution (train runs)


@dataclass(frozen=True)
class TimeRow:
    series: str
    world_size: int
    run: Run
    time_s: float
    speedup: float
    """time_base / time_N (Marconi100's form)."""
    ideal: float
    """N / N_base."""
    base: Run | None = None

    @property
    def efficiency(self) -> float:
        return self.speedup / self.ideal

    @property
    def flag(self) -> str:
        return above_ideal(self.run, self.base, self.efficiency) if self.base else ""

    @property
    def host(self) -> str:
        return host_note(self.run, self.base)


def time_rows(series: list[Series]) -> list[TimeRow]:
    """Marconi100-form speedup of every series. Train runs: the whole run's training time.
    Benchmark runs: the time for a fixed number of images, so time_base/time_N = T_N/T_base."""
    rows = []
    for s in series:
        timed = [(r, _time_of(r.run)) for r in s.ok_rows]
        timed = [(r, t) for r, t in timed if t]
        if not timed:
            continue
        base_row, base_time = timed[0]
        for row, time in timed:
            rows.append(TimeRow(s.label, row.world_size, row.run, time, base_time / time,
                                row.world_size / base_row.world_size, base_row.run))
    return rows


def _time_of(run: Run) -> float | None:
    if run.kind == "train":
        return run.train_time_s
    return 1000.0 / run.total_ips if run.total_ips else None


# ------------------------------------------------------------------------------ accuracy flag


@dataclass(frozen=True)
class AccuracyRow:
    run: Run
    baseline: Run
    delta_pts: float
    """Final top-1 minus the smallest-batch run's, in percentage points."""
    flagged: bool


def schedule_of(run: Run) -> tuple:
    """What a run's accuracy depends on besides its batch: epochs, LR schedule and warm-up, steps per epoch
    (config.json's schedule and max_steps_per_epoch; the summary's epochs_planned)."""
    config = getattr(run, "config", None) or {}
    schedule = config.get("schedule") or {}
    epochs = run.summary.get("epochs_planned") or schedule.get("epochs")
    return (epochs, schedule.get("name"), schedule.get("warmup_epochs"), config.get("max_steps_per_epoch"))


def schedule_text(run: Run) -> str:
    """'30 epochs, cosine LR, 5 steps per epoch': what schedule_of compares, in words."""
    epochs, name, _, steps = schedule_of(run)
    words = [f"{epochs} epochs" if epochs else "", f"{name} LR" if name else "",
             f"{steps} steps per epoch" if steps else ""]
    return ", ".join(w for w in words if w) or "schedule not recorded"


def accuracy_rows(runs: list[Run], tolerance_pts: float) -> list[AccuracyRow]:
    """Every train run with a final top-1, against the smallest global batch of its model, data and schedule."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        if run.kind == "train" and run.final_top1 is not None and run.global_batch:
            groups[(run.summary.get("model"), run.data, schedule_of(run))].append(run)
    rows = []
    for members in groups.values():
        smallest = min(r.global_batch for r in members)
        baseline = max((r for r in members if r.global_batch == smallest), key=lambda r: r.final_top1)
        for run in sorted(members, key=lambda r: (r.global_batch, r.world_size, r.name)):
            delta = run.final_top1 - baseline.final_top1
            rows.append(AccuracyRow(run, baseline, delta, delta < -tolerance_pts))
    return rows


def flagged_paths(rows: list[AccuracyRow]) -> set:
    return {row.run.path for row in rows if row.flagged}
