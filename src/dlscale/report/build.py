"""`dlscale report`: run and sweep directories in; report.md, CSV files and PNG plots out."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.report import DEFAULT_TOLERANCE_PTS, io_rates, loader, plots, predictions
from dlscale.report import tables as t
from dlscale.report.compare import dist_optimizer_rows, progression_rows
from dlscale.report.load import Collection, load
from dlscale.report.references import Reference, load_reference, resolve_names
from dlscale.report.scaling import accuracy_rows, build_series, time_rows
from dlscale.rundir import check_output_dir, writing

PLOTS = {
    "throughput_vs_devices.png": "Throughput vs devices, with the ideal linear line",
    "efficiency_vs_devices.png": "Scaling efficiency vs devices",
    "time_to_solution_vs_devices.png": "Time to solution vs devices",
    "top1_vs_epoch.png": "Validation top-1 vs epoch for several global batch sizes",
    "top1_vs_time.png": "Validation top-1 vs wall-clock time",
    "accuracy_vs_batch.png": "Final top-1 vs global batch (the accuracy flag)",
    "progression.png": "Throughput over precision and speed settings",
    "dist_optimizers.png": "allreduce vs neighbor-allreduce (and other strategies)",
    "loader_workers.png": "Input pipeline: speedup vs DataLoader workers",
    "io_over_time.png": "I/O throughout training: read GB/s and read operations/s per log window",
}


@dataclass
class Report:
    out_dir: Path
    files: list[Path] = field(default_factory=list)
    not_drawn: dict[str, str] = field(default_factory=dict)
    """Plot file name -> why it was not drawn."""
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


def compute(collection: Collection, tolerance_pts: float) -> Figures:
    series = build_series(collection)
    accuracy = accuracy_rows(collection.runs, tolerance_pts)
    flags = {a.run.path: f"top-1 {a.delta_pts:+.2f} pts vs batch {a.baseline.global_batch}"
             for a in accuracy if a.flagged}
    efficiencies = {r.run.path: r.efficiency for s in series for r in s.ok_rows}
    return Figures(collection, series, accuracy, flags, time_rows(series),
                   progression_rows(collection.runs, efficiencies), dist_optimizer_rows(collection.runs, efficiencies),
                   io_rates.io_runs([r for r in collection.runs if r.kind == "train"]))


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
    tables = {
        "runs": t.runs_table(figures.collection.runs, price_per_device_hour),
        "scaling": t.scaling_table(figures.series, figures.flags),
        "speedup": t.time_table(figures.times),
        "accuracy": t.accuracy_table(figures.accuracy, tolerance_pts),
        "progression": t.compare_table(figures.progression),
        "dist_optimizers": t.compare_table(figures.strategies),
        "references": t.reference_table(refs),
        "loader": loader.table(figures.collection.loaders),
        "predictions": predictions.table(figures.collection.predictions, figures.collection.runs),
        "io": io_rates.table(figures.io_runs, io_epochs),
    }
    headers = {**t.CSV_HEADERS, "loader": loader.CSV, "predictions": predictions.CSV, "io": io_rates.CSV}
    for name, (_, raw) in tables.items():
        report.files.append(t.write_csv(out_dir / f"{name}.csv", headers[name], raw))
    report.files.append(t.write_csv(out_dir / "epochs.csv", t.EPOCH_CSV, t.epochs_rows(figures.collection.runs)))
    _draw(figures, refs, tolerance_pts, report, io_epochs)
    findings = {run.name: explain(run.path) for run in figures.collection.runs} if explain else {}
    text = _markdown(figures.collection, refs, tables, report, tolerance_pts, command, findings)
    with writing(out_dir / "report.md", "--output-dir") as path:
        path.write_text(text)
    report.files.insert(0, out_dir / "report.md")
    return report


def _draw(f: Figures, refs: list[Reference], tolerance_pts: float, report: Report,
          io_epochs: tuple[int, int] | None = None) -> None:
    flagged = set(f.flags)
    runs = f.collection.runs
    drawers = {
        "throughput_vs_devices.png": lambda p: plots.throughput(p, f.series, refs, flagged, f.collection.predictions),
        "efficiency_vs_devices.png": lambda p: plots.efficiency(p, f.series, refs, f.collection.predictions),
        "time_to_solution_vs_devices.png": lambda p: plots.time_to_solution(p, f.series, refs),
        "top1_vs_epoch.png": lambda p: plots.top1_curves(p, runs, flagged, "epoch"),
        "top1_vs_time.png": lambda p: plots.top1_curves(p, runs, flagged, "elapsed_s"),
        "accuracy_vs_batch.png": lambda p: plots.accuracy_vs_batch(p, f.accuracy, tolerance_pts, refs),
        "progression.png": lambda p: plots.progression(p, f.progression, refs),
        "dist_optimizers.png": lambda p: plots.dist_optimizers(p, f.strategies, refs),
        "loader_workers.png": lambda p: loader.speedup_plot(p, f.collection.loaders, refs),
        "io_over_time.png": lambda p: io_rates.plot(p, f.io_runs, io_epochs),
    }
    for name, draw in drawers.items():
        path = report.out_dir / name
        path.unlink(missing_ok=True)  # a plot left by an earlier report must not pass for this one
        reason = draw(path)
        if reason:
            report.not_drawn[name] = reason
        else:
            report.files.append(path)


def _markdown(collection: Collection, refs: list[Reference], tables: dict, report: Report,
              tolerance: float, command: str, findings: dict | None = None) -> str:
    def table(name: str, headers: list[str]) -> str:
        shown = tables[name][0]
        return t.markdown(headers, shown) if shown else "_No runs for this table._"

    sweeps = ", ".join(f"`{Path(s['path']).name}` ({s.get('mode', '?')} scaling, {s.get('command', '?')})"
                       for s in collection.sweeps) or "none"
    out = [
        "# dlscale report",
        "",
        f"Made by `{command or 'dlscale report'}` on {time.strftime('%Y-%m-%d %H:%M:%S')}.",
        f"{len(collection.runs)} runs; sweeps: {sweeps}; {len(collection.failed)} failed sweep points.",
        "",
        "## Runs",
        "",
        table("runs", t.RUNS_HEADERS),
        "",
        "## Scaling",
        "",
        "T is the total measured images/s over all ranks (benchmark: mean ± 1.96 x std over timed "
        "iterations; train: the whole run). speedup = T_N / T_base; efficiency = (T_N / N) / "
        "(T_base / N_base), with N_base the smallest world size of each series.",
        "",
        table("scaling", t.SCALING_HEADERS),
        "",
        "## Speedup in Marconi100's form: T_base / T_N",
        "",
        "T is the time of the whole training run (train), or the time for 1000 images at the measured "
        "rate (benchmark), so T_base / T_N is the speedup and N / N_base the ideal.",
        "",
        table("speedup", t.TIME_HEADERS),
        "",
        "## Accuracy",
        "",
        f"A run is flagged when its final top-1 is more than {tolerance:g} percentage "
        f"point{'' if tolerance == 1 else 's'} below the "
        "run with the smallest global batch of the same model and data (HAL: global batch 16,384 "
        "ended 4.66 points below 896), so a faster configuration that trains worse is not a win.",
        "",
        *(f"- **FLAG** {line}" for line in report.flagged),
        *([""] if report.flagged else []),
        table("accuracy", t.ACCURACY_HEADERS),
        "",
        "## Precision and speed settings",
        "",
        table("progression", t.COMPARE_HEADERS),
        "",
        "## Gradient synchronisation: allreduce vs neighbor-allreduce",
        "",
        table("dist_optimizers", t.COMPARE_HEADERS),
        "",
        "## Input pipeline (dlscale loader)",
        "",
        "The loader alone (decode, augment, collate): images/s per worker count and the speedup over "
        "the first; bytes from the processes' own I/O counters (file GB/s: bytes of the image files "
        "read; storage GB/s: reads that reached storage, so page-cache hits are not in it).",
        "",
        table("loader", loader.HEADERS),
        "",
        "## Predictions (dlscale predict)",
        "",
        "Each predicted point beside the measured run of the same model at the same world size, if there is one; "
        "error = predicted / measured - 1. How the model works: docs/prediction.md.",
        "",
        table("predictions", predictions.HEADERS),
        "",
        "## I/O throughout training",
        "",
        "What each train run's input pipeline read per second over all ranks (main processes and loader workers: "
        "/proc read bytes and read() calls; files the data sets opened), averaged over the epochs chosen with "
        "--io-epochs (HAL's report averages epochs 10 to 60).",
        "",
        table("io", io_rates.HEADERS),
        "",
        "## Why below the reference (dlscale explain)",
        "",
        "Each run against the published figure of its model, precision and device (or --explain-reference), every "
        "finding ranked as `dlscale explain RUN` prints it, largest estimated effect first: its effect, the run's "
        "evidence, where the estimate comes from and what to change (docs/explain.md).",
        "",
        *([line for name, lines in (findings or {}).items()
           for line in [f"- `{name}`: {lines[0]}", *(f"  {rest}" for rest in lines[1:])]] or ["_Not computed._"]),
        "",
    ]
    out += _reference_section(refs, tables)
    out += ["## Plots", ""]
    for name, caption in PLOTS.items():
        if name in report.not_drawn:
            out.append(f"- {caption}: not drawn ({report.not_drawn[name]}).")
        else:
            out += [f"### {caption}", "", f"![{caption}]({name})", ""]
    out += ["", "## Files", "", "CSV files beside this report: " + ", ".join(
        sorted(p.name for p in report.files if p.suffix == ".csv")) + ".", ""]
    if collection.skipped:
        out += ["Skipped: " + "; ".join(collection.skipped), ""]
    return "\n".join(out)


def _reference_section(refs: list[Reference], tables: dict) -> list[str]:
    if not refs:
        return ["## References", "", "None selected (`--reference hal,ngc,sc20,bluefog,horovod,dlperf,"
                "marconi100,mlperf` or `all`).", ""]
    out = ["## References", ""]
    for ref in refs:
        out += [f"### {ref.name}: {ref.title}", "", f"Hardware: {_hardware(ref.hardware)}. {ref.workload}.", "",
                "Sources:", ""]
        out += [f"- {s['where']}: {s['what']}" for s in ref.sources]
        out += ["", *(f"- {note}" for note in ref.notes), ""]
    out += [t.markdown(t.REFERENCE_HEADERS, tables["references"][0]), ""]
    return out


def _hardware(hardware: dict) -> str:
    return ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in hardware.items())
