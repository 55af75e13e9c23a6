"""PNG plots of a report (the style of report/figure.py).

Every figure is 800 x 500 pixels with a title, axis labels with units and a legend. Each
function returns None when it drew its file, or the reason it did not (no data for it).

References ran on other hardware, so their absolute figures are never overlaid as they are: on
the throughput and time plots a reference curve is scaled so that its first point matches our
first point (per device), which compares shapes; efficiencies and ratios are drawn unscaled.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

from dlscale.report.compare import CompareRow
from dlscale.report.figure import figure, legend, log2_axis, save
from dlscale.report.references import Reference, RefSeries
from dlscale.report.scaling import AccuracyRow, Series

REF_COLORS = ("#7f7f7f", "#8c564b", "#bcbd22", "#17becf", "#9467bd", "#e377c2", "#2ca02c")
"""One colour per reference system; its series differ by marker. Our runs use the default cycle."""
REF_MARKERS = ("s", "^", "v", "D", "P", "X", "<", ">", "h", "p")
SCALED_NOTE = "references: other hardware, scaled so their first point matches ours"


DEVICES = "devices (ranks; GPUs in the references)"
PLAIN = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}")


def _log_y(ax) -> None:
    """A log y axis labelled 30, 100, 1,000 rather than 3 x 10^1."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(PLAIN)
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def _ref_style(series: RefSeries, references: list[Reference], star: bool = False) -> dict:
    names = [ref.name for ref in references]
    family = names.index(series.reference) if series.reference in names else 0
    index = [s.id for s in references[family].series].index(series.id) if references else 0
    marker = ("*", "X", "P", "D")[index % 4] if star else REF_MARKERS[index % len(REF_MARKERS)]
    return {"color": REF_COLORS[family % len(REF_COLORS)], "linestyle": ":", "alpha": 0.9,
            "marker": marker, "markersize": 10 if star else 5}


def _ref_label(s: RefSeries) -> str:
    return s.label + (" [read off a plot]" if s.read_off_plot else "")


def _ref_curves(references: list[Reference], key: str) -> list[tuple[RefSeries, list]]:
    """Drawable curves of `key` against devices: two points or more, not marked overlay: false."""
    out = []
    for ref in references:
        for s in ref.of_kind("scaling", "time_to_solution"):
            curve = s.curve(key)
            if len(curve) >= 2 and s.meta.get("overlay", True):
                out.append((s, curve))
    return out


def _main_series(series: list[Series]) -> Series | None:
    """The series references are scaled to: the one with the most world sizes."""
    return max(series, key=lambda s: len(s.ok_rows), default=None)


def _rank_word(n: int) -> str:
    return f"{n} rank" + ("" if n == 1 else "s")


# -------------------------------------------------------------------------------------- plots


PREDICTED_STYLE = {"linestyle": "-.", "marker": "x", "alpha": 0.9}
"""Predicted curves (dlscale predict runs): drawn as predicted, absolute, never scaled."""


def _predicted(ax, predictions, key: str, scale: float = 1.0) -> list[int]:
    xs = []
    for pred in predictions:
        points = [p for p in pred.points if p.get(key) is not None]
        if points:
            ax.plot([p["devices"] for p in points], [scale * p[key] for p in points], **PREDICTED_STYLE,
                    label=pred.label)
            xs += [p["devices"] for p in points]
    return xs


def throughput(path: Path, series: list[Series], references: list[Reference], flagged: set,
               predictions=()) -> str | None:
    drawn = [s for s in series if s.ok_rows]
    refs = _ref_curves(references, "img_per_s")
    if not drawn and not refs and not predictions:
        return "no run with a measured or predicted throughput"
    main = _main_series(drawn)
    fig, (ax,) = figure("Training throughput vs devices", SCALED_NOTE if refs and main else "")
    xs = []
    for i, s in enumerate(drawn):
        rows = s.ok_rows
        n = [r.world_size for r in rows]
        ci = [r.run.total_ci95 or 0.0 for r in rows]
        line = ax.errorbar(n, [r.total_ips for r in rows], yerr=ci, marker="o", capsize=3,
                           label=s.label + (" (bars: 95% interval)" if any(ci) else ""))
        base = rows[0]
        ax.plot(n, [base.total_ips * k / base.world_size for k in n], linestyle="--", color=line[0].get_color(),
                alpha=0.6, label="ideal: linear from the smallest run" if i == 0 else None)
        bad = [(r.world_size, r.total_ips) for r in rows if r.run.path in flagged]
        if bad:
            ax.plot(*zip(*bad, strict=True), "x", color="red", markersize=12, mew=2, label="top-1 below tolerance")
        xs += n
    for s, curve in refs:
        factor = 1.0
        if main:
            ours = main.base
            factor = (ours.total_ips / ours.world_size) / (curve[0][1] / curve[0][0])
        ax.plot([d for d, _ in curve], [v * factor for _, v in curve], **_ref_style(s, references),
                label=_ref_label(s))
        xs += [d for d, _ in curve]
    xs += _predicted(ax, predictions, "img_per_s_total")
    log2_axis(ax, xs, DEVICES)
    if refs or predictions:
        _log_y(ax)
    ax.set_ylabel("throughput (images/s, all ranks)")
    legend(ax, fig)
    save(fig, path)
    return None


def efficiency(path: Path, series: list[Series], references: list[Reference], predictions=()) -> str | None:
    drawn = [s for s in series if len(s.ok_rows) >= 2]
    curves = [(s, s.efficiency_curve()) for ref in references for s in ref.series
              if s.kind in ("scaling", "efficiency") and s.meta.get("overlay", True)]
    curves = [(s, c) for s, c in curves if len(c) >= 2 or (c and s.kind == "efficiency")]
    if not drawn and not curves and not predictions:
        return "needs one series with two or more world sizes"
    fig, (ax,) = figure("Scaling efficiency vs devices", "efficiency = (T_N / N) / (T_base / N_base), "
                         "T = total images/s, base = smallest world size")
    xs = []
    for s in drawn:
        rows = s.ok_rows
        ax.plot([r.world_size for r in rows], [100 * r.efficiency for r in rows], marker="o", label=s.label)
        xs += [r.world_size for r in rows]
    for s, curve in curves:
        ax.plot([d for d, _ in curve], [100 * e for _, e in curve],
                **_ref_style(s, references, star=s.kind == "efficiency"), label=_ref_label(s))
        xs += [d for d, _ in curve]
    xs += _predicted(ax, predictions, "efficiency", scale=100)
    ax.axhline(100, color="black", linestyle="--", linewidth=1, label="ideal (100%)")
    log2_axis(ax, xs, DEVICES)
    ax.set_ylim(0, max(115, ax.get_ylim()[1]))
    ax.set_ylabel("scaling efficiency (% of linear, per device)")
    legend(ax, fig)
    save(fig, path)
    return None


def time_to_solution(path: Path, series: list[Series], references: list[Reference]) -> str | None:
    timed = {id(s): [r for r in s.ok_rows if r.run.train_time_s] for s in series if s.kind == "train"}
    drawn = [s for s in series if len(timed.get(id(s), [])) >= 2]
    if not drawn:
        return "needs train runs at two or more world sizes"
    refs = _ref_curves(references, "time_s")
    fig, (ax,) = figure("Time to solution vs devices", "training time of the whole run"
                         + ("; " + SCALED_NOTE if refs else ""))
    xs = []
    for i, s in enumerate(drawn):
        rows = timed[id(s)]
        n = [r.world_size for r in rows]
        line = ax.plot(n, [r.run.train_time_s for r in rows], marker="o", label=s.label)
        base = rows[0]
        ax.plot(n, [base.run.train_time_s * base.world_size / k for k in n], linestyle="--",
                color=line[0].get_color(), alpha=0.6, label="ideal: time x N_base / N" if i == 0 else None)
        xs += n
    main = timed[id(max(drawn, key=lambda s: len(timed[id(s)])))][0]
    for s, curve in refs:
        factor = main.run.train_time_s / curve[0][1]
        ax.plot([d for d, _ in curve], [v * factor for _, v in curve], **_ref_style(s, references),
                label=_ref_label(s))
        xs += [d for d, _ in curve]
    log2_axis(ax, xs, DEVICES)
    _log_y(ax)
    ax.set_ylabel("time to solution (s)")
    legend(ax, fig)
    save(fig, path)
    return None


def top1_curves(path: Path, runs, flagged: set, x: str) -> str | None:
    """Validation top-1 per run against epoch (x='epoch') or wall-clock seconds (x='elapsed_s')."""
    trained = sorted((r for r in runs if r.kind == "train" and r.epochs),
                     key=lambda r: (r.global_batch or 0, r.world_size, r.name))
    if not trained:
        return "no train run with epoch records"
    by_epoch = x == "epoch"
    fig, (ax,) = figure("Validation top-1 vs " + ("epoch" if by_epoch else "wall-clock time"),
                         "one line per run; dashed: final top-1 below the tolerance")
    for run in trained:
        points = [(e[x] + (1 if by_epoch else 0), e["val_top1_pct"]) for e in run.epochs
                  if e.get(x) is not None and e.get("val_top1_pct") is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", markersize=3,
                    linestyle="--" if run.path in flagged else "-",
                    label=f"global batch {run.global_batch}, {_rank_word(run.world_size)} ({run.name})")
    ax.set_xlabel("epochs completed" if by_epoch else "wall-clock time since training start (s)")
    if by_epoch:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("validation top-1 (%)")
    legend(ax, fig)
    save(fig, path)
    return None


def accuracy_vs_batch(path: Path, rows: list[AccuracyRow], tolerance: float,
                      references: list[Reference]) -> str | None:
    refs = [s for ref in references for s in ref.of_kind("scaling")
            if len([p for p in s.points if "final_top1_pct" in p and "global_batch" in p]) >= 2]
    if len({r.run.global_batch for r in rows}) < 2 and not refs:
        return "needs train runs with two or more global batch sizes"
    fig, (ax,) = figure(
        "Final top-1 vs global batch",
        "change against the smallest global batch of the same model and data; below the red line a run is flagged",
    )
    xs = []
    groups = defaultdict(list)
    for r in rows:
        groups[f"ours: {r.run.summary.get('model')} / {r.run.data}"].append(r)
    for label, members in groups.items():
        ax.plot([m.run.global_batch for m in members], [m.delta_pts for m in members], "o", label=label)
        bad = [(m.run.global_batch, m.delta_pts) for m in members if m.flagged]
        if bad:
            ax.plot(*zip(*bad, strict=True), "x", color="red", markersize=12, mew=2, label="flagged")
        xs += [m.run.global_batch for m in members]
    for s in refs:
        pts = sorted((p["global_batch"], p["final_top1_pct"]) for p in s.points if "final_top1_pct" in p)
        ax.plot([b for b, _ in pts], [t - pts[0][1] for _, t in pts], **_ref_style(s, references), label=s.label)
        xs += [b for b, _ in pts]
    ax.axhline(0, color="black", linewidth=1)
    ax.axhline(-tolerance, color="red", linestyle="--", linewidth=1, label=f"tolerance: -{tolerance:g} points")
    log2_axis(ax, xs, "global batch (images per optimizer step)")
    ax.set_ylabel("final top-1 change (percentage points)")
    legend(ax, fig)
    save(fig, path)
    return None


def _bars(ax, groups: list, labels: list, values: dict, notes: dict, errors: dict | None = None) -> None:
    """Grouped bars: a cluster per group, a bar per label; values[(group, label)] is the height,
    errors[(group, label)] its 95% half-width where measured."""
    width = 0.8 / max(len(labels), 1)
    errors = errors or {}
    for j, label in enumerate(labels):
        present = [(i, g) for i, g in enumerate(groups) if (g, label) in values]
        bars = ax.bar([i + (j - (len(labels) - 1) / 2) * width for i, _ in present],
                      [values[(g, label)] for _, g in present], width * 0.95, label=str(label),
                      yerr=[errors.get((g, label)) or 0.0 for _, g in present], capsize=3,
                      error_kw={"elinewidth": 1, "alpha": 0.6})
        ax.bar_label(bars, labels=[notes.get((g, label), "") for _, g in present], fontsize=7)
    ax.set_xticks(range(len(groups)), [str(g).replace(" +", "\n+") for g in groups], fontsize=8)


def progression(path: Path, rows: list[CompareRow], references: list[Reference]) -> str | None:
    refs = [s for ref in references for s in ref.of_kind("progression")]
    first = rows[0].group if rows else None
    mine = [r for r in rows if r.group == first]
    if not mine and not refs:
        return "needs runs that differ only in precision or speed options"
    fig, axes = figure("Throughput over precision and speed settings", ncols=2 if mine and refs else 1)
    if mine:
        ax = axes[0]
        worlds = sorted({r.world_size for r in mine})
        values = {(r.setting, _rank_word(r.world_size)): r.run.total_ips for r in mine}
        notes = {(r.setting, _rank_word(r.world_size)): f"{r.ratio:.2f}x" for r in mine if r.ratio}
        errors = {(r.setting, _rank_word(r.world_size)): r.run.total_ci95 for r in mine}
        _bars(ax, list(dict.fromkeys(r.setting for r in mine)), [_rank_word(w) for w in worlds], values, notes,
              errors)
        ax.set_title(f"ours: {first}", fontsize=8)
        ax.set_xlabel("setting (label: speedup over the first; bars: 95% interval)")
        ax.set_ylabel("throughput (images/s, all ranks)")
        legend(ax)
    if refs:
        ax = axes[-1]
        names, ratios, colors = [], [], []
        for s in refs:
            first_rate = s.value(s.points[0], "img_per_s")
            for p in s.points:
                names.append(f"{s.meta.get('short', s.label)}: {p['setting']}")
                ratios.append(s.value(p, "img_per_s") / first_rate)
                colors.append(_ref_style(s, references)["color"])
        bars = ax.barh(range(len(names)), ratios, color=colors)
        ax.bar_label(bars, labels=[f"{r:.2f}x" for r in ratios], fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_title("published, 1 GPU (ranges: middle value)", fontsize=8)
        ax.set_xlabel("throughput over the series' first setting (x)")
    save(fig, path)
    return None


def dist_optimizers(path: Path, rows: list[CompareRow], references: list[Reference]) -> str | None:
    first = rows[0].group if rows else None
    mine = [r for r in rows if r.group == first]
    if not mine:
        return "needs runs that differ only in --dist-optimizer"
    fig, (left, right) = figure(f"Gradient synchronisation strategies: {first}", ncols=2)
    worlds = sorted({r.world_size for r in mine})
    names = list(dict.fromkeys(r.setting for r in mine))
    values = {(r.world_size, r.setting): r.run.total_ips for r in mine}
    notes = {(r.world_size, r.setting): f"{r.ratio:.2f}x" for r in mine if r.ratio}
    _bars(left, worlds, names, values, notes, {(r.world_size, r.setting): r.run.total_ci95 for r in mine})
    left.set_xlabel("devices (ranks); label: over the first strategy; bars: 95%")
    left.set_ylabel("throughput (images/s, all ranks)")
    legend(left)
    xs = list(worlds)
    for name in names:
        pts = sorted((r.world_size, 100 * r.efficiency) for r in mine if r.setting == name and r.efficiency)
        if pts:
            right.plot(*zip(*pts, strict=True), marker="o", label=name)
    for ref in references:
        for s in ref.of_kind("efficiency"):
            curve = s.efficiency_curve()
            right.plot([d for d, _ in curve], [100 * e for _, e in curve], **_ref_style(s, references, star=True),
                       label=s.label)
            xs += [d for d, _ in curve]
    right.axhline(100, color="black", linestyle="--", linewidth=1, label="ideal (100%)")
    log2_axis(right, xs, "devices (ranks)")
    right.set_ylim(0, max(115, right.get_ylim()[1]))
    right.set_ylabel("scaling efficiency (%)")
    legend(right)
    save(fig, path)
    return None
