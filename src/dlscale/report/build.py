"""`dlscale report`: run and sweep directories in; report.md, CSV files and PNG plots out.

Figures are drawn per group (report/groups.py: a sweep, or the loose runs of one device kind): with one
group a plot is `NAME.png`, with several `NAME-<group>.png` each. Each selected reference's own figures
are `reference-<name>.png`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure

from dlscale.report import (
    DEFAULT_TOLERANCE_PTS,
    accuracy,
    epoch_plot,
    io_rates,
    loader,
    markdown,
    plots,
    predictions,
    reference_plots,
)
from dlscale.report import tables as t
from dlscale.report import workers as worker_plots
from dlscale.report.compare import dist_optimizer_rows, precision_grids, progression_rows
from dlscale.report.figure import save
from dlscale.report.groups import Group, group
from dlscale.report.load import Collection, load
from dlscale.report.references import Reference, load_reference, resolve_names
from dlscale.report.scaling import accuracy_rows, build_series, time_rows
from dlscale.rundir import check_output_dir, writing

PLOTS = {
    "throughput_vs_devices.png": "Throughput vs devices, with the ideal linear line and the node boundary",
    "efficiency_vs_devices.png": "Scaling efficiency vs devices",
    "time_to_solution_vs_devices.png": "Time to solution vs devices",
    "epoch_time_vs_devices.png": "Epoch time vs devices in one node and vs nodes (Marconi100)",
    "accuracy_vs_epoch.png": "Validation top-1 and top-5 vs epoch for several global batch sizes",
    "accuracy_vs_time.png": "Validation top-1 and top-5 vs wall-clock time",
    "accuracy_vs_batch.png": "Final top-1 vs global batch (the accuracy flag)",
    "progression.png": "Throughput over precision and speed settings",
    "dist_optimizers.png": "allreduce vs neighbor-allreduce (and other strategies)",
    "loader_workers.png": "Input pipeline and training vs DataLoader workers",
    "io_over_time.png": "I/O throughout training: read GB/s and read operations/s per log window",
    "reference.png": "Each selected reference's throughput, as published",
}
GROUPED = ("throughput_vs_devices.png", "efficiency_vs_devices.png", "time_to_solution_vs_devices.png",
           "epoch_time_vs_devices.png", "accuracy_vs_epoch.png", "accuracy_vs_time.png", "progression.png",
           "dist_optimizers.png")
"""Plots drawn once per group; the others once per report (reference.png once per reference)."""


@dataclass
class Report:
    out_dir: Path
    files: list[Path] = field(default_factory=list)
    not_drawn: dict[str, str] = field(default_factory=dict)
    """Plot name -> why no figure of it was drawn."""
    drawn: dict[str, list[tuple[str, Path]]] = field(default_factory=dict)
    """Plot name -> (group or reference, file) of each figure drawn."""
    passed: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    """Plot name -> (group, why not) for the groups without one, where others have it."""
    flagged: list[str] = field(default_factory=list)
    """One line per run whose top-1 fell below the tolerance."""


@dataclass
class Figures:
    """Everything the report computes from the runs, before any of it is written."""

    collection: Collection
    series: list
    accuracy: list
    flags: dict
    """Run path -> short note, for runs whose top-1 fell below the tolerance."""
    times: list
    progression: list
    strategies: list
    io_runs: list
    """Train runs with per-window read counters (report.io_rates.IORun)."""
    groups: list[Group] = field(default_factory=list)
    precisions: list = field(default_factory=list)
    """Runs that differ only in precision (compare.PrecisionGrid): NGC's and Paddle's wide table."""


def compute(collection: Collection, tolerance_pts: float) -> Figures:
    series = build_series(collection)
    accuracy_of = accuracy_rows(collection.runs, tolerance_pts)
    flags = {a.run.path: f"top-1 {a.delta_pts:+.2f} pts vs batch {a.baseline.global_batch}"
             for a in accuracy_of if a.flagged}
    efficiencies = {r.run.path: (r.efficiency, r.flag, r.host) for s in series for r in s.ok_rows}
    return Figures(collection, series, accuracy_of, flags, time_rows(series),
                   progression_rows(collection.runs, efficiencies), dist_optimizer_rows(collection.runs, efficiencies),
                   io_rates.io_runs([r for r in collection.runs if r.kind == "train"]),
                   group(collection.runs, series, collection.predictions), precision_grids(collection.runs))


def build_report(paths: list, out_dir: Path, references: list[str] = (),
                 tolerance_pts: float = DEFAULT_TOLERANCE_PTS, command: str = "",
                 price_per_device_hour: float | None = None, io_epochs: tuple[int, int] | None = None,
                 explain: Callable[[Path], list[str]] | None = None) -> Report:
    """explain: lines for a run directory (dlscale explain's findings; the CLI passes them in, since
    explain/ sits above report/ in the layers)."""
    refs = [load_reference(name) for name in resolve_names(list(references))]
    figures = compute(load(paths), tolerance_pts)
    check_output_dir(out_dir, "--output-dir", "the report folder")
    report = Report(out_dir)
    report.flagged = [f"{a.run.name}: final top-1 {a.run.final_top1:.2f}% is {-a.delta_pts:.2f} points below "
                      f"{a.baseline.name} (global batch {a.baseline.global_batch}, {a.baseline.final_top1:.2f}%)"
                      for a in figures.accuracy if a.flagged]
    runs = figures.collection.runs
    tables = {
        "runs": t.runs_table(runs, price_per_device_hour),
        "scaling": t.scaling_table(figures.series, figures.flags),
        "speedup": t.time_table(figures.times),
        "accuracy": t.accuracy_table(figures.accuracy, tolerance_pts),
        "progression": t.compare_table(figures.progression),
        "dist_optimizers": t.compare_table(figures.strategies),
        "references": t.reference_table(refs),
        "loader": loader.table(figures.collection.loaders),
        "predictions": predictions.table(figures.collection.predictions, runs),
        "io": io_rates.table(figures.io_runs, io_epochs),
        "epochs": (t.epochs_table(runs), t.epochs_rows(runs)),
        "precisions": ([], t.precision_csv(figures.precisions)),
    }
    headers = {**t.CSV_HEADERS, "loader": loader.CSV, "predictions": predictions.CSV, "io": io_rates.CSV,
               "epochs": t.EPOCH_CSV, "precisions": t.PRECISION_CSV}
    for name, (_, raw) in tables.items():
        report.files.append(t.write_csv(out_dir / f"{name}.csv", headers[name], raw))
    _save_all(figures, refs, tolerance_pts, report, io_epochs)
    findings = {run.name: explain(run.path) for run in runs} if explain else {}
    text = markdown.report(figures, refs, tables, report, tolerance_pts, command, findings, PLOTS)
    with writing(out_dir / "report.md", "--output-dir") as path:
        path.write_text(text)
    report.files.insert(0, out_dir / "report.md")
    return report


def figures_of(f: Figures, refs: list[Reference], tolerance_pts: float,
               io_epochs: tuple[int, int] | None = None) -> Iterator[tuple[str, str, Figure | str]]:
    """(plot name, group or reference title, the Figure or why none) of every figure of the report, drawn one
    at a time; the title is '' for plots drawn once per report."""
    drew: set[str] = set()
    for g in f.groups:
        for name, title, drawn in _group_figures(g, f, refs):
            drew |= {name} if not isinstance(drawn, str) else set()
            yield name, title, drawn
    alone = {"throughput_vs_devices.png": lambda: plots.throughput([], refs, set()),
             "efficiency_vs_devices.png": lambda: plots.efficiency([], refs),
             "progression.png": lambda: plots.progression([], refs)}
    for name, draw in alone.items():
        if name not in drew and refs:  # the published figures alone, once: no group of ours has them
            yield name, "", draw()
    runs = f.collection.runs
    yield "accuracy_vs_batch.png", "", accuracy.vs_batch(f.accuracy, tolerance_pts, refs)
    yield "loader_workers.png", "", worker_plots.plot(f.collection.loaders, runs, refs)
    yield "io_over_time.png", "", io_rates.plot(f.io_runs, io_epochs)
    for ref in refs:
        yield "reference.png", ref.name, reference_plots.plot(ref)
    if not refs:
        yield "reference.png", "", "no --reference selected"


def _group_figures(g: Group, f: Figures, refs: list[Reference]) -> Iterator[tuple[str, str, Figure | str]]:
    paths = {r.run.path for s in g.series for r in s.rows if r.run is not None} | {r.path for r in g.runs}
    flagged = set(f.flags) & paths
    progression = [r for r in f.progression if r.run.path in paths]
    strategies = [r for r in f.strategies if r.run.path in paths]
    drawers = (
        ("throughput_vs_devices.png", plots.throughput, (g.series, refs, flagged, g.predictions, False)),
        ("efficiency_vs_devices.png", plots.efficiency, (g.series, refs, g.predictions, False)),
        ("time_to_solution_vs_devices.png", plots.time_to_solution, (g.series, refs)),
        ("epoch_time_vs_devices.png", epoch_plot.plot, (g.series, refs)),
        ("accuracy_vs_epoch.png", accuracy.curves, (g.runs, flagged, "epoch")),
        ("accuracy_vs_time.png", accuracy.curves, (g.runs, flagged, "elapsed_s")),
        ("progression.png", plots.progression, (progression, refs, False)),
        ("dist_optimizers.png", plots.dist_optimizers, (strategies, refs)),
    )
    for name, draw, args in drawers:
        yield name, g.title, draw(*args)


def _save_all(f: Figures, refs: list[Reference], tolerance_pts: float, report: Report,
              io_epochs: tuple[int, int] | None = None) -> None:
    """Every figure saved under its file name (a stale one of the same name removed first); the plots that
    none was drawn of, and the groups left without one, with the reason."""
    _remove_stale(report.out_dir)
    several = len(f.groups) > 1
    for name, title, drawn in figures_of(f, refs, tolerance_pts, io_epochs):
        if isinstance(drawn, str):
            report.passed.setdefault(name, []).append((title, drawn))
            continue
        path = report.out_dir / file_name(name, title, several or name == "reference.png")
        save(drawn, path)
        report.files.append(path)
        report.drawn.setdefault(name, []).append((title, path))
    for name in list(report.passed):
        if name not in report.drawn:  # not one figure of it: the first reason stands for all
            report.not_drawn[name] = report.passed.pop(name)[0][1]


def file_name(name: str, title: str, suffixed: bool) -> str:
    if not (suffixed and title):
        return name
    stem = name.removesuffix(".png")
    return f"{stem}-{Group(title).slug}.png"


def _remove_stale(out_dir: Path) -> None:
    """A plot left by an earlier report must not pass for this one."""
    for name in PLOTS:
        stem = name.removesuffix(".png")
        for path in (out_dir / name, *out_dir.glob(f"{stem}-*.png")):
            path.unlink(missing_ok=True)
