"""Tables as (headers, rows): formatted for report.md and the terminal, raw for CSV files.

Each `*_table` function returns two row lists over the same headers: `shown` (strings with
units and rounding as printed) and `raw` (full-precision numbers for the CSV).
"""

from __future__ import annotations

import csv
import html
import re
from pathlib import Path

from dlscale.metrics.cost import imagenet_epoch_cost, train_costs
from dlscale.metrics.host_load import run_disturbance
from dlscale.report.compare import CompareRow, PrecisionGrid
from dlscale.report.epochs import epoch_times
from dlscale.report.flags import HOST_MARK, MARK, host_cell
from dlscale.report.references import Reference
from dlscale.report.scaling import AccuracyRow, Series, TimeRow
from dlscale.rundir import writing

NONE = "—"


def fmt(value, spec: str = ".1f", suffix: str = "") -> str:
    return NONE if value is None else f"{value:{spec}}{suffix}"


def with_ci(value, ci) -> str:
    if value is None:
        return NONE
    return f"{value:.1f}" if ci is None else f"{value:.1f} ± {ci:.1f}"


MARKUP = re.compile(r"[\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
"""Markdown's marks that text from a record could use to add markup: code, emphasis, links and images, table
cells, strike-through (an underscore inside a word marks nothing)."""


def plain(text: object) -> str:
    """Text from run records (names, labels, errors, a reference file's words) as report.md shows it: on one line,
    `<`, `>` and `&` as HTML's entities and markdown's marks escaped, so that a record adds neither HTML nor
    markup nor a link to the report."""
    escaped = html.escape(" ".join(str(text).split()), quote=False)
    return MARKUP.sub(lambda found: "\\" + found.group(0), escaped)


def code(text: object) -> str:
    """Text from a record as a code span: literal inside it (HTML and markup included), on one line, and no
    backtick to end it early."""
    return "`" + " ".join(str(text).split()).replace("`", "'") + "`"


def markdown(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(plain(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_csv(path: Path, headers: list[str], rows: list[list]) -> Path:
    with writing(path, "--output-dir"), open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(headers)
        writer.writerows([["" if v is None else v for v in row] for row in rows])
    return path


# ----------------------------------------------------------------------------------- the tables


SCALING_HEADERS = ["series", "world size", "nodes", "total img/s ± 95%", "per-rank img/s ± 95%",
                   "speedup", "efficiency", "final top-1 %", "time to target", "status", "run"]
SCALING_CSV = ["series", "world_size", "nnodes", "total_img_per_s", "total_img_per_s_ci95",
               "per_rank_img_per_s", "per_rank_img_per_s_ci95", "speedup", "efficiency",
               "final_top1_pct", "target_top1_pct", "time_to_target_s", "accuracy_flag", "efficiency_flag",
               "host_flag", "baseline_run", "status", "error", "run_dir"]


def efficiency_cell(value: float | None, flag: str = "", host: str = "") -> str:
    """'90.0%', '152.7% (!)' for an efficiency that cannot be true (its cause is in the row's status), '31.0% (?)'
    for one of a run or baseline whose rate is not the model's speed (report/flags.py host_note)."""
    marks = (MARK if flag else "") + (HOST_MARK if host else "")
    return fmt(None if value is None else 100 * value, ".1f", "%") + marks


def time_to_target(run) -> str:
    """'412.0 s to 75.00%', 'not reached (75.00%)' for a run that had a target, else —."""
    target = run.summary.get("target_top1_pct")
    if target is None:
        return NONE
    seconds = run.summary.get("time_to_target_s")
    return f"not reached ({target:.2f}%)" if seconds is None else f"{seconds:.1f} s to {target:.2f}%"


def scaling_table(series: list[Series], flags: dict | None = None) -> tuple[list, list]:
    """flags maps a run path to a short note (the accuracy flag). An efficiency above 100% is marked, and
    the status says why it cannot be true."""
    flags = flags or {}
    shown, raw = [], []
    for s in series:
        for row in s.rows:
            run = row.run
            if run is None:
                status = f"{row.status}: {row.error}".strip(": ")
                shown.append([s.label, row.world_size, row.nnodes, *[NONE] * 6, status, NONE])
                raw.append([s.label, row.world_size, row.nnodes, *[None] * 13, row.status, row.error, None])
                continue
            flag = flags.get(run.path, "")
            status = "; ".join(["ok", *(note for note in (flag, row.flag) if note),
                                *([f"not the model's speed: {row.host}"] if row.host else [])])
            shown.append([
                s.label, row.world_size, row.nnodes, host_cell(with_ci(run.total_ips, run.total_ci95), run),
                host_cell(with_ci(run.per_rank_ips, run.per_rank_ci95), run), fmt(row.speedup, ".2f", "x"),
                efficiency_cell(row.efficiency, row.flag, row.host), fmt(run.final_top1, ".2f"), time_to_target(run),
                status, run.name,
            ])
            raw.append([s.label, row.world_size, row.nnodes, run.total_ips, run.total_ci95, run.per_rank_ips,
                        run.per_rank_ci95, row.speedup, row.efficiency, run.final_top1,
                        run.summary.get("target_top1_pct"), run.summary.get("time_to_target_s"), flag or None,
                        row.flag or None, row.host or None, row.base.name if row.base else None, "ok", None,
                        str(run.path)])
    return shown, raw


def baselines(series: list[Series]) -> list[str]:
    """One line per series: the run its speedup and efficiency are against."""
    lines = []
    for s in series:
        base = s.base
        if base is not None:
            lines.append(f"{s.label}: {base.run.name} ({base.world_size} rank{'' if base.world_size == 1 else 's'}, "
                         f"{base.nnodes} node{'' if base.nnodes == 1 else 's'}, {base.total_ips:,.1f} img/s)")
    return lines


RUNS_HEADERS = ["run", "kind", "model", "precision + options", "dist optimizer", "world size", "global batch",
                "total img/s", "final top-1 %", "train time s", "W per GPU", "J/img", "cost per epoch", "path"]


def runs_table(runs, price_per_device_hour: float | None = None) -> tuple[list, list]:
    """One row per run. Cost per epoch: a train run's mean epoch (validation included), a bench run's
    ImageNet epoch at its rate, at the run's own price or the report's (metrics/cost.py)."""
    shown, raw = [], []
    for r in sorted(runs, key=lambda r: (r.kind, r.world_size, r.name)):
        s = r.summary
        values = [r.name, r.kind, s.get("model"), r.setting, s.get("dist_optimizer"), r.world_size,
                  r.global_batch, r.total_ips, r.final_top1, r.train_time_s, s.get("avg_power_w"),
                  s.get("joules_per_image"), _epoch_cost(r, price_per_device_hour), str(r.path)]
        raw.append([*values, run_disturbance(r)])
        shown.append([*values[:7], host_cell(fmt(r.total_ips), r), fmt(r.final_top1, ".2f"),
                      fmt(r.train_time_s, ".2f"), fmt(values[10]), fmt(values[11], ".3f"), fmt(values[12], ".2f"),
                      values[13]])
    return shown, raw


def _epoch_cost(run, price: float | None) -> float | None:
    price = run.summary.get("price_per_device_hour") or price
    if price is None:
        return None
    if run.kind == "train":
        return train_costs(list(run.epochs), run.train_time_s, run.world_size, price).get("cost_per_epoch")
    return imagenet_epoch_cost(run.total_ips, run.world_size, price)


TIME_HEADERS = ["series", "world size", "time", "T_base / T_N", "ideal N / N_base", "efficiency", "run"]


def time_table(rows: list[TimeRow]) -> tuple[list, list]:
    shown, raw = [], []
    for r in rows:
        unit = "s" if r.run.kind == "train" else "s per 1000 img"
        flag = r.flag
        host = r.host
        shown.append([r.series, r.world_size, host_cell(f"{r.time_s:.2f} {unit}", r.run), f"{r.speedup:.2f}",
                      f"{r.ideal:.2f}", efficiency_cell(r.efficiency, flag, host), r.run.name])
        raw.append([r.series, r.world_size, r.time_s, r.speedup, r.ideal, r.efficiency, flag or None, host or None,
                    str(r.run.path)])
    return shown, raw


ACCURACY_HEADERS = ["run", "model / data", "world size", "global batch", "final top-1 %", "best top-1 %",
                    "vs smallest batch (pts)", "flag"]


def accuracy_table(rows: list[AccuracyRow], tolerance_pts: float) -> tuple[list, list]:
    shown, raw = [], []
    for a in rows:
        r = a.run
        what = f"{r.summary.get('model')} / {r.data}"
        best = r.summary.get("best_top1_pct")
        flag = f"more than {tolerance_pts:g} pts below batch {a.baseline.global_batch}" if a.flagged else ""
        shown.append([r.name, what, r.world_size, r.global_batch, fmt(r.final_top1, ".2f"), fmt(best, ".2f"),
                      f"{a.delta_pts:+.2f}", ("FLAG: " + flag) if flag else "ok"])
        raw.append([r.name, what, r.world_size, r.global_batch, r.final_top1, best, a.delta_pts, a.flagged])
    return shown, raw


COMPARE_HEADERS = ["runs compared", "world size", "setting", "total img/s ± 95%", "vs first", "efficiency", "run"]


def compare_table(rows: list[CompareRow]) -> tuple[list, list]:
    shown, raw = [], []
    for c in rows:
        shown.append([c.group, c.world_size, c.setting, host_cell(with_ci(c.run.total_ips, c.run.total_ci95), c.run),
                      fmt(c.ratio, ".2f", "x"), efficiency_cell(c.efficiency, c.flag, c.host), c.run.name])
        raw.append([c.group, c.world_size, c.setting, c.run.total_ips, c.ratio, c.efficiency, c.flag or None,
                    c.host or None, str(c.run.path)])
    return shown, raw


PRECISION_CSV = ["runs_compared", "world_size", "per_rank_batch", "precision", "total_img_per_s",
                 "total_img_per_s_ci95", "ratio_to_first", "host_flag", "path"]


def precision_tables(grids: list[PrecisionGrid]) -> list[tuple[str, list[str], list[list]]]:
    """One wide table per grid, as NGC's and PaddlePaddle's pages print them: a row per device count, a column
    of total img/s per precision (batch per rank in the header), and the last precision over the first."""
    out = []
    for grid in grids:
        first, last = grid.precisions[0], grid.precisions[-1]
        headers = ["devices", *(f"{p} img/s (batch {grid.per_rank_batch}/rank)" for p in grid.precisions),
                   f"{last} / {first}"]
        rows = []
        for world in grid.world_sizes:
            runs = [grid.cells.get((world, p)) for p in grid.precisions]
            ratio = runs[-1].total_ips / runs[0].total_ips if runs[0] and runs[-1] else None
            rows.append([world, *(host_cell(with_ci(r.total_ips, r.total_ci95), r) if r else NONE for r in runs),
                         fmt(ratio, ".2f", "x")])
        out.append((grid.group, headers, rows))
    return out


def precision_csv(grids: list[PrecisionGrid]) -> list[list]:
    raw = []
    for grid in grids:
        for world in grid.world_sizes:
            first = grid.cells.get((world, grid.precisions[0]))
            for precision in grid.precisions:
                run = grid.cells.get((world, precision))
                if run:
                    ratio = run.total_ips / first.total_ips if first and first.total_ips else None
                    raw.append([grid.group, world, grid.per_rank_batch, precision, run.total_ips, run.total_ci95,
                                ratio, run_disturbance(run), str(run.path)])
    return raw


EPOCH_CSV = ["run", "world_size", "global_batch", "epoch", "val_top1_pct", "val_top5_pct", "val_loss",
             "epoch_time_s", "elapsed_s", "throughput_img_per_s"]
EPOCH_HEADERS = ["run", "epoch", "epoch time s", "elapsed s", "img/s", "val top-1 %", "val top-5 %"]


def epochs_rows(runs) -> list[list]:
    """Every epoch record with its own time (SC20's "Time taken for epoch N"), beside the time since the start."""
    rows = []
    for r in runs:
        own = dict(epoch_times(r))
        for e in r.epochs:
            rows.append([r.name, r.world_size, e.get("global_batch", r.global_batch), e.get("epoch"),
                         e.get("val_top1_pct"), e.get("val_top5_pct"), e.get("val_loss"), own.get(e.get("epoch")),
                         e.get("elapsed_s"), e.get("throughput_img_per_s")])
    return rows


def epochs_table(runs) -> list[list[str]]:
    """The epoch lines of report.md: each epoch's own time first, as SC20's log prints it."""
    shown = []
    for r in runs:
        own = dict(epoch_times(r))
        for e in r.epochs:
            shown.append([r.name, e.get("epoch"), fmt(own.get(e.get("epoch")), ".2f"), fmt(e.get("elapsed_s"), ".2f"),
                          fmt(e.get("throughput_img_per_s")), fmt(e.get("val_top1_pct"), ".2f"),
                          fmt(e.get("val_top5_pct"), ".2f")])
    return shown


REFERENCE_HEADERS = ["reference", "series", "devices", "img/s", "time s", "efficiency", "final top-1 %",
                     "final top-5 %", "read off plot"]


def reference_table(references: list[Reference]) -> tuple[list, list]:
    shown, raw = [], []
    for ref in references:
        for s in ref.series:
            eff = dict(s.efficiency_curve())
            for p in s.points:
                devices = p.get("devices")
                values = [ref.name, s.label, devices, s.value(p, "img_per_s"), s.value(p, "time_s"),
                          eff.get(devices), s.value(p, "final_top1_pct"), s.value(p, "final_top5_pct"),
                          s.read_off_plot]
                raw.append(values)
                shown.append([ref.name, s.label, fmt(devices, "d") if devices else p.get("setting", NONE),
                              fmt(values[3], ",.1f"), fmt(values[4], ",.2f"),
                              fmt(None if values[5] is None else 100 * values[5], ".1f", "%"),
                              fmt(values[6], ".2f"), fmt(values[7], ".2f"), "yes" if s.read_off_plot else "no"])
    return shown, raw


CSV_HEADERS = {
    "runs": ["run", "kind", "model", "setting", "dist_optimizer", "world_size", "global_batch",
             "total_img_per_s", "final_top1_pct", "train_time_s", "avg_power_w", "joules_per_image",
             "cost_per_epoch", "path", "host_flag"],
    "scaling": SCALING_CSV,
    "speedup": ["series", "world_size", "time_s", "speedup_time_base_over_time_n", "ideal", "efficiency",
                "efficiency_flag", "host_flag", "path"],
    "accuracy": ["run", "model_data", "world_size", "global_batch", "final_top1_pct", "best_top1_pct",
                 "delta_pts_vs_smallest_batch", "flagged"],
    "progression": ["group", "world_size", "setting", "total_img_per_s", "ratio_to_first", "efficiency",
                    "efficiency_flag", "host_flag", "path"],
    "dist_optimizers": ["group", "world_size", "dist_optimizer", "total_img_per_s", "ratio_to_first",
                        "efficiency", "efficiency_flag", "host_flag", "path"],
    "references": ["reference", "series", "devices", "img_per_s", "time_s", "efficiency", "final_top1_pct",
                   "final_top5_pct", "read_off_plot"],
}
"""Column names of each CSV file: machine-friendly, units in the name."""
