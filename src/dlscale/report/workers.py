"""Marconi100's workers figure both ways: the input pipeline alone (`dlscale loader`: img/s speedup over
its first worker count) and training (epoch time of train runs that differ only in data.num_workers, as
`dlscale scale --set-sweep data.num_workers=1,2,4,8,16 -- train ...` makes them), with the thesis'
figures beside them when `--reference marconi100` is given (4 V100s: 4.0x at 16 workers)."""

from __future__ import annotations

from collections import defaultdict

from matplotlib.figure import Figure

from dlscale.report.epochs import epoch_time
from dlscale.report.figure import figure, legend
from dlscale.report.loader import LoaderRun, worker_kind
from dlscale.report.overlay import style
from dlscale.report.plots import log_y, rank_word
from dlscale.report.references import Reference
from dlscale.rundir import Run, number


def plot(loaders: list[LoaderRun], train_runs: list[Run], references: list[Reference]) -> Figure | str:
    """Left, each loader run's speedup over its first worker count; right, where train runs differ only in
    their workers, their epoch time against workers."""
    sweeps = worker_sweeps(train_runs)
    if not loaders and not sweeps:
        return "needs runs of dlscale loader, or train runs that differ only in data.num_workers"
    panels = [p for p in ("loader", "train") if (loaders if p == "loader" else sweeps)]
    fig, axes = figure("Input pipeline vs DataLoader workers", ncols=len(panels))
    for ax, panel in zip(axes, panels, strict=True):
        if panel == "loader":
            workers = _speedups(ax, loaders, [] if sweeps else references)
        else:
            workers = _epoch_times(ax, sweeps, references)
        ticks = sorted(set(workers))
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.set_xlabel("loader workers per rank (0: main process)")
        legend(ax)
    return fig


def _speedups(ax, loaders: list[LoaderRun], references: list[Reference]) -> list[int]:
    """Speedup over each loader run's first worker count; Marconi100's published speedups beside them when no
    training sweep takes its epoch times."""
    workers: list[int] = []
    for run in loaders:
        rate = max(s["images_per_s"] for s in run.settings)
        kinds = [k for k in ("process", "thread") if any(worker_kind(s) == k for s in run.settings)] or ["process"]
        for kind in kinds:  # one line per kind of worker, each from the main process's setting (0 workers)
            points = [(s["workers"], s["speedup"]) for s in run.settings if worker_kind(s) in ("main", kind)]
            workers += [w for w, _ in points]
            said = f", {kind}es" if kind == "process" and len(kinds) > 1 else f", {kind}s" if len(kinds) > 1 else ""
            ax.plot([w for w, _ in points], [v for _, v in points], marker="o",
                    label=f"{run.name} ({run.summary.get('decode')} decode{said}, best {rate:.0f} img/s)")
    for ref in references:
        for series in ref.of_kind("workers"):
            points = [(p["workers"], p["speedup"]) for p in series.points]
            workers += [w for w, _ in points]
            ax.plot(*zip(*points, strict=True), linestyle=":", marker="s", color="gray",
                    label=f"{series.label} (epoch-time speedup)")
    ax.set_ylabel("speedup over the first setting (x)")
    ax.set_title("the loader alone (dlscale loader): img/s over its first setting", fontsize=8)
    return workers



def workers_of(run: Run) -> int | None:
    """The DataLoader workers per rank a train run used (config.json data.num_workers)."""
    value = number(run.data_settings.get("num_workers"))
    return int(value) if value is not None else None


def worker_sweeps(runs: list[Run]) -> dict[str, list[tuple[int, float, Run]]]:
    """Train runs that differ only in their loader workers: label -> (workers, epoch time, run), by workers."""
    groups: dict[tuple, list[tuple[int, float, Run]]] = defaultdict(list)
    for run in runs:
        workers, seconds = workers_of(run) if run.kind == "train" else None, epoch_time(run)
        if workers is None or not seconds:
            continue
        key = (run.sweep or "", run.model, run.data, run.setting, run.summary.get("dist_optimizer"), run.world_size,
               run.per_rank_batch, run.device_name)
        groups[key].append((workers, seconds, run))
    out = {}
    for (sweep, model, data, setting, _, world, batch, _), members in groups.items():
        if len({w for w, _, _ in members}) >= 2:
            label = (f"{sweep}: " if sweep else "") + f"{model} / {data}, {setting}, {rank_word(world)} x {batch}"
            out[label] = sorted(members, key=lambda m: (m[0], m[2].name))
    return out


def _epoch_times(ax, sweeps: dict, references: list[Reference]) -> list[int]:
    """Epoch time against workers per training sweep, Marconi100's worker series scaled by one factor (first in
    its label) to our epoch time at the worker count nearest its own largest; returns the worker counts drawn."""
    drawn = []
    for label, members in sweeps.items():
        ax.plot([w for w, _, _ in members], [t for _, t, _ in members], marker="o", label=label)
        drawn += [w for w, _, _ in members]
    ours = [(w, t) for members in sweeps.values() for w, t, _ in members]
    for ref in references:
        for series in ref.of_kind("workers"):
            points = [(p["workers"], p["epoch_time_s"]) for p in series.points if "epoch_time_s" in p]
            if not points:
                continue
            factor = 1.0
            if ours:
                top_w, top_t = max(points)
                mine = min(ours, key=lambda o: (abs(o[0] - top_w), o[1]))
                factor = mine[1] / top_t
            ax.plot([w for w, _ in points], [t * factor for _, t in points], **style(series, references),
                    label=f"x{factor:.3g}: {series.label}")
            drawn += [w for w, _ in points]
    log_y(ax)
    ax.set_ylabel("epoch time (s)")
    ax.set_title("training: mean epoch after the first", fontsize=8)
    return drawn
