"""report.md: every table, the flags, the baselines, the references with their sources, the plots."""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import quote

from dlscale.metrics.host_load import run_disturbance
from dlscale.report import io_rates, loader, predictions
from dlscale.report import tables as t
from dlscale.report.flags import HOST_MARK, MARK
from dlscale.report.references import Reference

MAX_EPOCH_ROWS = 120
"""report.md lists at most this many epoch lines; epochs.csv holds all of them."""


def report(figures, refs: list[Reference], tables: dict, made, tolerance: float, command: str,
           findings: dict | None = None, captions: dict | None = None) -> str:
    """figures: build.Figures; made: build.Report (the files written, the plots drawn and not); captions: plot
    file name -> its heading, in the order report.md shows them."""
    collection = figures.collection
    sweeps = ", ".join(f"{t.code(Path(s['path']).name)} ({t.plain(s.get('mode', '?'))} scaling, "
                       f"{t.plain(s.get('command', '?'))})" for s in collection.sweeps) or "none"
    out = [
        "# dlscale report",
        "",
        f"Made by {t.code(command or 'dlscale report')} on {time.strftime('%Y-%m-%d %H:%M:%S')}.",
        f"{len(collection.runs)} runs; sweeps: {sweeps}; {len(collection.failed)} failed sweep points.",
        f"Plots are drawn per group, a sweep or the runs of one device kind: {_groups(figures.groups)}.",
        "",
        "## Runs",
        "",
        *_host(collection.runs),
        _table(tables, "runs", t.RUNS_HEADERS),
        "",
        *_scaling(figures, tables),
        *_precision_section(figures.precisions),
        "## Epochs",
        "",
        "Each epoch's own time (training and validation, as SC20's log prints \"Time taken for epoch N\") beside "
        "the time since training started.",
        "",
        *_epochs(tables),
        "## Accuracy",
        "",
        f"A run is flagged when its final top-1 is more than {tolerance:g} percentage "
        f"point{'' if tolerance == 1 else 's'} below the "
        "run with the smallest global batch of the same model, data and schedule (epochs, LR schedule, steps per "
        "epoch; HAL: global batch 16,384 ended 4.66 points below 896), so a faster configuration that trains worse "
        "is not a win. Runs of other schedules are not compared.",
        "",
        *(f"- **FLAG** {t.plain(line)}" for line in made.flagged),
        *([""] if made.flagged else []),
        _table(tables, "accuracy", t.ACCURACY_HEADERS),
        "",
        "## Precision and speed settings",
        "",
        _table(tables, "progression", t.COMPARE_HEADERS),
        "",
        "## Gradient synchronisation: allreduce vs neighbor-allreduce",
        "",
        _table(tables, "dist_optimizers", t.COMPARE_HEADERS),
        "",
        *_rest(tables, findings),
    ]
    out += _reference_section(refs, tables)
    out += _plots(made, captions or {})
    out += ["", "## Files", "", "CSV files beside this report: " + ", ".join(
        sorted(p.name for p in made.files if p.suffix == ".csv")) + ".", ""]
    if collection.skipped:
        out += ["Skipped: " + "; ".join(map(t.plain, collection.skipped)), ""]
    return "\n".join(out)


def _scaling(figures, tables: dict) -> list[str]:
    """The scaling table with each series' baseline and every efficiency above 100%, then Marconi100's form."""
    return [
        "## Scaling",
        "",
        "T is the total measured images/s over all ranks (benchmark: mean ± 1.96 x std over timed "
        "iterations; train: the whole run). speedup = T_N / T_base; efficiency = (T_N / N) / "
        "(T_base / N_base), with N_base the smallest world size of each series. Time to target: seconds until "
        "validation top-1 first reached the run's --target-accuracy.",
        "",
        "Baseline of each series (what its speedup and efficiency are against):",
        "",
        *(f"- {t.plain(line)}" for line in t.baselines(figures.series)),
        "",
        *_impossible(figures),
        _table(tables, "scaling", t.SCALING_HEADERS),
        "",
        "## Speedup in Marconi100's form: T_base / T_N",
        "",
        "T is the time of the whole training run (train), or the time for 1000 images at the measured "
        "rate (benchmark), so T_base / T_N is the speedup and N / N_base the ideal; the baseline is each "
        f"series' smallest world size, as above. An efficiency marked{MARK} is above 100%: its cause is in the "
        "scaling table's status.",
        "",
        _table(tables, "speedup", t.TIME_HEADERS),
        "",
    ]


def _table(tables: dict, name: str, headers: list[str]) -> str:
    shown = tables[name][0]
    return t.markdown(headers, shown) if shown else "_No runs for this table._"


def _groups(groups) -> str:
    return "; ".join(t.plain(f"{g.title} ({len(g.runs)} runs)" if g.runs else g.title) for g in groups) or "none"


def _impossible(figures) -> list[str]:
    """Every efficiency above 100% with its likely cause, before the table that prints it."""
    lines = ["- **ABOVE 100%** " + t.plain(f"{s.label} at {r.world_size} ranks ({r.run.name} against {r.base.name}): "
                                           f"{r.flag}") for s in figures.series for r in s.ok_rows if r.flag]
    if not lines:
        return []
    return [f"Efficiencies above 100% cannot be true for the same work per rank; they are marked{MARK} and not "
            "to be read as superlinear scaling:", "", *lines, ""]


def _host(runs) -> list[str]:
    """Every run whose own record shows its rates are not the model's speed, before the tables that show them."""
    lines = [f"- **HOST** {run.name}: {reason}" for run in runs if (reason := run_disturbance(run))]
    if not lines:
        return []
    return [f"The rates of these runs are not the model's speed, as their own records show (their threads' share "
            f"of the time, an interval wider than its mean; the load average beside them): they, and every speedup "
            f"and efficiency against them, are marked{HOST_MARK}; run them again where nothing else runs:", "",
            *lines, ""]


def _precision_section(grids) -> list[str]:
    if not grids:
        return []
    out = ["## Precisions side by side (NGC's and PaddlePaddle's table)", "",
           "Runs that differ only in precision: total images/s ± 95% per device count and precision, and the last "
           "precision over the first (precisions.csv).", ""]
    for group, headers, rows in t.precision_tables(grids):
        out += [f"{t.plain(group)}:", "", t.markdown(headers, rows), ""]
    return out


def _epochs(tables: dict) -> list[str]:
    shown = tables["epochs"][0]
    if not shown:
        return ["_No train run with epoch records._", ""]
    out = [t.markdown(t.EPOCH_HEADERS, shown[:MAX_EPOCH_ROWS]), ""]
    if len(shown) > MAX_EPOCH_ROWS:
        out += [f"The first {MAX_EPOCH_ROWS} of {len(shown)} epoch lines; epochs.csv holds all of them.", ""]
    return out


def _rest(tables: dict, findings: dict | None) -> list[str]:
    return [
        "## Input pipeline (dlscale loader)",
        "",
        "The loader alone (decode, augment, collate): images/s per worker count and the speedup over "
        "the first; bytes from the processes' own I/O counters (file GB/s: bytes of the image files "
        "read; storage GB/s: reads that reached storage, so page-cache hits are not in it).",
        "",
        _table(tables, "loader", loader.HEADERS),
        "",
        "## Predictions (dlscale predict)",
        "",
        "Each predicted point beside the measured run of the same model at the same world size, if there is one; "
        "error = predicted / measured - 1. How the model works: docs/prediction.md.",
        "",
        _table(tables, "predictions", predictions.HEADERS),
        "",
        "## I/O throughout training",
        "",
        "What each train run's input pipeline read per second over all ranks (main processes and loader workers: "
        "/proc read bytes and read() calls; files the data sets opened), averaged over the epochs chosen with "
        "--io-epochs (HAL's report averages epochs 10 to 60).",
        "",
        _table(tables, "io", io_rates.HEADERS),
        "",
        "## Why below the reference (dlscale explain)",
        "",
        "Each run against the published figure of its model, precision and device (or --explain-reference), every "
        "finding ranked as `dlscale explain RUN` prints it, largest estimated effect first: its effect, the run's "
        "evidence, where the estimate comes from and what to change (docs/explain.md).",
        "",
        # explain.text.markdown escapes the record values in its lines
        *([line for name, lines in (findings or {}).items()
           for line in [f"- {t.code(name)}: {lines[0]}", *(f"  {rest}" for rest in lines[1:])]] or ["_Not computed._"]),
        "",
    ]


def _reference_section(refs: list[Reference], tables: dict) -> list[str]:
    if not refs:
        return ["## References", "", "None selected (`--reference hal,ngc,sc20,bluefog,horovod,dlperf,"
                "marconi100,mlperf` or `all`).", ""]
    out = ["## References", ""]
    for ref in refs:
        out += [f"### {t.plain(ref.name)}: {t.plain(ref.title)}", "",
                f"Hardware: {t.plain(_hardware(ref.hardware))}. {t.plain(ref.workload)}.", "", "Sources:", ""]
        out += [f"- {t.plain(s['where'])}: {t.plain(s['what'])}" for s in ref.sources]
        out += ["", *(f"- {t.plain(note)}" for note in ref.notes), ""]
    out += [t.markdown(t.REFERENCE_HEADERS, tables["references"][0]), ""]
    return out


def _plots(made, captions: dict) -> list[str]:
    out = ["## Plots", ""]
    for name, caption in captions.items():
        if name in made.not_drawn:
            out += [f"- {caption}: not drawn ({t.plain(made.not_drawn[name])}).", ""]
            continue
        drawn = made.drawn.get(name, [])
        out += [f"### {caption}", ""]
        for title, path in drawn:
            if len(drawn) > 1 or name in made.passed:
                out += [f"#### {t.plain(title)}", ""]
            out += [f"![{caption}{': ' + t.plain(title) if title else ''}]({quote(path.name)})", ""]
        reasons: dict[str, list[str]] = {}
        for title, reason in made.passed.get(name, []):
            reasons.setdefault(reason, []).append(title)
        out += [f"Not drawn for {t.plain(', '.join(titles))}: {t.plain(reason)}." for reason, titles in reasons.items()]
        out += [""] if reasons else []
    return out


def _hardware(hardware: dict) -> str:
    return ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in hardware.items())
