"""PNG plots of a report's scaling figures (the style of report/figure.py).

Every figure is 800 x 500 pixels with a title, axis labels with units and a legend. Each function
returns the drawn Figure, or the reason it drew none (no data for it); report/build.py saves it.

References ran on other hardware, so their absolute figures are never overlaid as they are: on the
throughput and time plots every series of one reference is scaled by one factor (report/overlay.py),
which compares shapes and keeps the reference's own order; efficiencies and ratios are drawn unscaled.
Where runs cross from one node to several, a dash-dotted line marks the boundary (HAL's seed: 2 to 4
GPUs within a node, 4 to 64 across nodes). An efficiency above 100% is ringed in red with its likely
cause (report/flags.py).
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from dlscale.metrics.host_load import run_disturbance
from dlscale.report import overlay
from dlscale.report.compare import CompareRow
from dlscale.report.figure import figure, legend, log2_axis
from dlscale.report.flags import short_cause
from dlscale.report.overlay import Overlay, drawn_on_plots, style
from dlscale.report.references import Reference
from dlscale.report.scaling import Row, Series

SCALED_NOTE = "references (other hardware): one factor per system, in its label, matches ours per device"
DEVICES = "devices (ranks; GPUs in the references)"
PLAIN = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 10 else f"{v:g}")
IMPOSSIBLE = "efficiency above 100%: impossible (report.md)"
HOST = "not the model's speed: the host (report.md)"
PREDICTED_STYLE = {"linestyle": "-.", "marker": "x", "alpha": 0.9}
"""Predicted curves (dlscale predict runs): drawn as predicted, absolute, never scaled."""


def log_y(ax) -> None:
    """A log y axis labelled 30, 100, 1,000 rather than 3 x 10^1."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(PLAIN)
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))


def main_series(series: list[Series]) -> Series | None:
    """The series references are scaled to: the one with the most world sizes."""
    return max(series, key=lambda s: len(s.ok_rows), default=None)


def rank_word(n: int) -> str:
    return f"{n} rank" + ("" if n == 1 else "s")


def node_boundaries(ax, series: list[Series], overlays: list[Overlay] = (), references: list[Reference] = ()) -> None:
    """A dash-dotted line between the largest world size inside one node and the smallest across nodes, for
    our series and for references whose points say their nodes; one line per place, naming whose it is."""
    marks: dict[tuple[int, int], list[str]] = {}
    for s in series:
        split = _split([(r.world_size, r.nnodes) for r in s.ok_rows])
        if split:
            marks.setdefault(split, []).append("ours")
    for o in overlays:
        nodes = {p["devices"]: p.get("nodes") for p in o.series.points if "devices" in p}
        split = _split([(d, nodes.get(d)) for d, _ in o.curve if nodes.get(d)])
        if split:
            marks.setdefault(split, []).append(o.series.reference)
    colors = {o.series.reference: style(o.series, references)["color"] for o in overlays}
    texts = 0
    for (inside, across), who in sorted(marks.items()):
        x = (inside * across) ** 0.5
        ours = "ours" in who
        ax.axvline(x, color="black" if ours else colors.get(who[0], "gray"), linestyle="-.", linewidth=0.9,
                   alpha=0.7, label=f"node boundary ({', '.join(dict.fromkeys(who))}): {inside} in a node | "
                                    f"{across} across")
        if ours:  # the words on our own boundaries only, one below the other
            ax.text(x, 0.98 - 0.05 * texts, "in node | across nodes", transform=ax.get_xaxis_transform(),
                    ha="center", va="top", fontsize=6, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})
            texts += 1


def _split(points: list[tuple[int, int]]) -> tuple[int, int] | None:
    inside = [n for n, nodes in points if nodes == 1]
    across = [n for n, nodes in points if nodes > 1]
    return (max(inside), min(across)) if inside and across and max(inside) < min(across) else None


def mark_impossible(ax, rows: list[Row], y) -> None:
    """Red rings on rows whose efficiency is above 100%, each annotated with its efficiency and first cause."""
    for row in rows:
        if row.flag:
            x, value = row.world_size, y(row)
            ax.plot([x], [value], "o", markerfacecolor="none", markeredgecolor="red", markersize=13, mew=1.5,
                    label=IMPOSSIBLE)
            ax.annotate(f"{100 * row.efficiency:.0f}%: {short_cause(row.run, row.base)}", (x, value),
                        xytext=(6, -12), textcoords="offset points", fontsize=6, color="red")


def mark_host(ax, points: list[tuple[float, float]]) -> None:
    """Grey squares on the points of figures that are not the model's speed (report/flags.py host_note)."""
    for x, y in points:
        ax.plot([x], [y], "s", markerfacecolor="none", markeredgecolor="gray", markersize=12, mew=1.5, label=HOST)


def predicted(ax, predictions, key: str, scale: float = 1.0) -> list[int]:
    xs = []
    for pred in predictions:
        points = [p for p in pred.points if p.get(key) is not None]
        if points:
            ax.plot([p["devices"] for p in points], [scale * p[key] for p in points], **PREDICTED_STYLE,
                    label=pred.label)
            xs += [p["devices"] for p in points]
    return xs


# -------------------------------------------------------------------------------------- plots


def throughput(series: list[Series], references: list[Reference], flagged: set, predictions=(),
               alone: bool = True) -> Figure | str:
    """alone=False: only with a run or prediction of ours (a report draws the references alone once)."""
    drawn = [s for s in series if s.ok_rows]
    found = overlay.curves(references, "img_per_s")
    if not drawn and not predictions and (not found or not alone):
        return "no run with a measured or predicted throughput"
    main = main_series(drawn)
    refs = overlay.scaled(found, (main.base.world_size, main.base.total_ips) if main else None, overlay.PER_DEVICE)
    fig, (ax,) = figure("Training throughput vs devices", SCALED_NOTE if refs and main else "")
    xs = []
    for i, s in enumerate(drawn):
        rows = s.ok_rows
        n = [r.world_size for r in rows]
        ci = [r.run.total_ci95 or 0.0 for r in rows]
        line = ax.plot(n, [r.total_ips for r in rows], marker="o",
                       label=s.label + (" (bars: 95% interval)" if any(ci) else ""))
        if any(ci):
            ax.errorbar(n, [r.total_ips for r in rows], yerr=ci, fmt="none", ecolor=line[0].get_color(), capsize=3)
        base = rows[0]
        ax.plot(n, [base.total_ips * k / base.world_size for k in n], linestyle="--", color=line[0].get_color(),
                alpha=0.6, label="ideal: linear from the smallest run" if i == 0 else None)
        bad = [(r.world_size, r.total_ips) for r in rows if r.run.path in flagged]
        if bad:
            ax.plot(*zip(*bad, strict=True), "x", color="red", markersize=12, mew=2, label="top-1 below tolerance")
        mark_impossible(ax, rows, lambda r: r.total_ips)
        mark_host(ax, [(r.world_size, r.total_ips) for r in rows if run_disturbance(r.run)])
        xs += n
    for o in refs:
        ax.plot(o.xs, o.ys, **style(o.series, references), label=o.label)
        xs += o.xs
    xs += predicted(ax, predictions, "img_per_s_total")
    node_boundaries(ax, drawn, refs, references)
    log2_axis(ax, xs, DEVICES)
    if refs or predictions:
        log_y(ax)
    ax.set_ylabel("throughput (images/s, all ranks)")
    legend(ax, fig)
    return fig


def efficiency(series: list[Series], references: list[Reference], predictions=(), alone: bool = True) -> Figure | str:
    """alone=False: only with a series or prediction of ours (a report draws the references alone once)."""
    drawn = [s for s in series if len(s.ok_rows) >= 2]
    curves = [(s, s.efficiency_curve()) for ref in references for s in ref.series
              if s.kind in ("scaling", "efficiency") and drawn_on_plots(s)]
    curves = [(s, c) for s, c in curves if len(c) >= 2 or (c and s.kind == "efficiency")]
    if not drawn and not predictions and (not curves or not alone):
        return "needs one series with two or more world sizes"
    fig, (ax,) = figure("Scaling efficiency vs devices", "efficiency = (T_N / N) / (T_base / N_base), "
                         "T = total images/s, base = each series' smallest world size (report.md names it)")
    xs = []
    for s in drawn:
        rows = s.ok_rows
        ax.plot([r.world_size for r in rows], [100 * r.efficiency for r in rows], marker="o", label=s.label)
        mark_impossible(ax, rows, lambda r: 100 * r.efficiency)
        mark_host(ax, [(r.world_size, 100 * r.efficiency) for r in rows if r.host])
        xs += [r.world_size for r in rows]
    for s, curve in curves:
        ax.plot([d for d, _ in curve], [100 * e for _, e in curve],
                **style(s, references, star=s.kind == "efficiency"),
                label=s.label + (" [read off a plot]" if s.read_off_plot else ""))
        xs += [d for d, _ in curve]
    xs += predicted(ax, predictions, "efficiency", scale=100)
    ax.axhline(100, color="black", linestyle="--", linewidth=1, label="ideal (100%)")
    node_boundaries(ax, drawn)
    log2_axis(ax, xs, DEVICES)
    ax.set_ylim(0, max(115, ax.get_ylim()[1]))
    ax.set_ylabel("scaling efficiency (% of linear, per device)")
    legend(ax, fig)
    return fig


def time_to_solution(series: list[Series], references: list[Reference]) -> Figure | str:
    timed = {id(s): [r for r in s.ok_rows if r.run.train_time_s] for s in series if s.kind == "train"}
    drawn = [s for s in series if len(timed.get(id(s), [])) >= 2]
    if not drawn:
        return "needs train runs at two or more world sizes"
    main = timed[id(max(drawn, key=lambda s: len(timed[id(s)])))][0]
    refs = overlay.scaled(overlay.curves(references, "train_time_s"), (main.world_size, main.run.train_time_s),
                          overlay.DEVICE_SECONDS)
    fig, (ax,) = figure("Time to solution vs devices", "training time of the whole run"
                         + ("; " + SCALED_NOTE.replace("per device", "in device-seconds") if refs else ""))
    xs = []
    for i, s in enumerate(drawn):
        rows = timed[id(s)]
        n = [r.world_size for r in rows]
        line = ax.plot(n, [r.run.train_time_s for r in rows], marker="o", label=s.label)
        base = rows[0]
        ax.plot(n, [base.run.train_time_s * base.world_size / k for k in n], linestyle="--",
                color=line[0].get_color(), alpha=0.6, label="ideal: time x N_base / N" if i == 0 else None)
        xs += n
    for o in refs:
        ax.plot(o.xs, o.ys, **style(o.series, references), label=o.label)
        xs += o.xs
    node_boundaries(ax, drawn, refs, references)
    log2_axis(ax, xs, DEVICES)
    log_y(ax)
    ax.set_ylabel("time to solution (s)")
    legend(ax, fig)
    return fig


def _bars(ax, groups: list, labels: list, values: dict, notes: dict, errors: dict | None = None) -> None:
    """Grouped bars: a cluster per group, a bar per label; values[(group, label)] is the height,
    errors[(group, label)] its 95% half-width where measured. Tick labels are wrapped at ' +' and turned
    when they would not fit side by side."""
    width = 0.8 / max(len(labels), 1)
    errors = errors or {}
    for j, label in enumerate(labels):
        present = [(i, g) for i, g in enumerate(groups) if (g, label) in values]
        bars = ax.bar([i + (j - (len(labels) - 1) / 2) * width for i, _ in present],
                      [values[(g, label)] for _, g in present], width * 0.95, label=str(label),
                      yerr=[errors.get((g, label)) or 0.0 for _, g in present], capsize=3,
                      error_kw={"elinewidth": 1, "alpha": 0.6})
        ax.bar_label(bars, labels=[notes.get((g, label), "") for _, g in present], fontsize=7)
    texts = [str(g).replace(" +", "\n+") for g in groups]
    longest = max((len(line) for t in texts for line in t.splitlines()), default=0)
    slot_px = ax.get_position().width * ax.figure.bbox.width / max(len(groups), 1)
    turned = longest * 6 > 0.8 * slot_px  # about 6 pixels per character at 7 pt
    # turned: each label stands on its side, its lines side by side, a line's height (10 px) each
    ax.set_xticks(range(len(groups)), texts, fontsize=7, rotation=90 if turned else 0, linespacing=1.0)


def progression(rows: list[CompareRow], references: list[Reference], alone: bool = True) -> Figure | str:
    """Our first comparison group (left) beside the published progressions (right); alone=False: only when we
    have one (a report draws the published ones once by themselves)."""
    refs = [s for ref in references for s in ref.of_kind("progression")]
    first = rows[0].group if rows else None
    mine = [r for r in rows if r.group == first]
    if not mine and (not refs or not alone):
        return "needs runs that differ only in precision or speed options"
    fig, axes = figure("Throughput over precision and speed settings", ncols=2 if mine and refs else 1)
    if mine:
        ax = axes[0]
        worlds = sorted({r.world_size for r in mine})
        values = {(r.setting, rank_word(r.world_size)): r.run.total_ips for r in mine}
        notes = {(r.setting, rank_word(r.world_size)): f"{r.ratio:.2f}x" for r in mine if r.ratio}
        errors = {(r.setting, rank_word(r.world_size)): r.run.total_ci95 for r in mine}
        _bars(ax, list(dict.fromkeys(r.setting for r in mine)), [rank_word(w) for w in worlds], values, notes,
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
                colors.append(style(s, references)["color"])
        bars = ax.barh(range(len(names)), ratios, color=colors)
        ax.bar_label(bars, labels=[f"{r:.2f}x" for r in ratios], fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_title("published, 1 GPU (ranges: middle value)", fontsize=8)
        ax.set_xlabel("throughput over the series' first setting (x)")
    return fig


def dist_optimizers(rows: list[CompareRow], references: list[Reference]) -> Figure | str:
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
        for r in mine:
            if r.setting == name and r.flag:
                right.plot([r.world_size], [100 * r.efficiency], "o", markerfacecolor="none",
                           markeredgecolor="red", markersize=13, mew=1.5, label=IMPOSSIBLE)
        mark_host(right, [(r.world_size, 100 * r.efficiency) for r in mine
                          if r.setting == name and r.host and r.efficiency])
    for ref in references:
        for s in filter(drawn_on_plots, ref.of_kind("efficiency")):
            curve = s.efficiency_curve()
            right.plot([d for d, _ in curve], [100 * e for _, e in curve], **style(s, references, star=True),
                       label=s.label)
            xs += [d for d, _ in curve]
    right.axhline(100, color="black", linestyle="--", linewidth=1, label="ideal (100%)")
    log2_axis(right, xs, "devices (ranks)")
    right.set_ylim(0, max(115, right.get_ylim()[1]))
    right.set_ylabel("scaling efficiency (%)")
    legend(right)
    return fig
