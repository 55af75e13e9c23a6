"""Accuracy plots: validation top-1 and top-5 per epoch or against time (HAL's and SC20's learning curves),
and the final top-1 change against the global batch (the accuracy flag)."""

from __future__ import annotations

from collections import defaultdict

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from dlscale.report.figure import figure, legend, log2_axis
from dlscale.report.overlay import drawn_on_plots, style
from dlscale.report.plots import rank_word
from dlscale.report.references import Reference
from dlscale.report.scaling import AccuracyRow, schedule_text

METRICS = (("val_top1_pct", "top-1"), ("val_top5_pct", "top-5"))


def curves(runs, flagged: set, x: str) -> Figure | str:
    """Validation top-1 (left) and top-5 (right, where the runs recorded it) per run, against epochs completed
    (x='epoch') or wall-clock seconds (x='elapsed_s'); one colour per run in both panels."""
    trained = sorted((r for r in runs if r.kind == "train" and r.epochs),
                     key=lambda r: (r.global_batch or 0, r.world_size, r.name))
    if not trained:
        return "no train run with epoch records"
    shown = [(key, name) for key, name in METRICS
             if any(e.get(key) is not None for r in trained for e in r.epochs)]
    if not shown:
        return "no train run recorded validation accuracy"
    by_epoch = x == "epoch"
    fig, axes = figure("Validation " + " and ".join(name for _, name in shown) + " vs "
                       + ("epoch" if by_epoch else "wall-clock time"), ncols=len(shown))
    for i, run in enumerate(trained):
        color = f"C{i % 10}"
        for ax, (key, _) in zip(axes, shown, strict=True):
            points = [(e[x] + (1 if by_epoch else 0), e[key]) for e in run.epochs
                      if e.get(x) is not None and e.get(key) is not None]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", markersize=3, color=color,
                        linestyle="--" if run.path in flagged else "-",
                        label=f"global batch {run.global_batch}, {rank_word(run.world_size)} ({run.name})")
    for ax, (_, name) in zip(axes, shown, strict=True):
        ax.set_title(f"validation {name}; dashed: final top-1 below the tolerance", fontsize=8)
        ax.set_xlabel("epochs completed" if by_epoch else "wall-clock time since training start (s)")
        if by_epoch:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(f"validation {name} (%)")
    legend(axes[-1], fig if len(trained) > 4 else None)
    return fig


def vs_batch(rows: list[AccuracyRow], tolerance: float, references: list[Reference]) -> Figure | str:
    refs = [s for ref in references for s in ref.of_kind("scaling") if drawn_on_plots(s)
            and len([p for p in s.points if "final_top1_pct" in p and "global_batch" in p]) >= 2]
    if len({r.run.global_batch for r in rows}) < 2 and not refs:
        return "needs train runs with two or more global batch sizes"
    fig, (ax,) = figure(
        "Final top-1 vs global batch",
        "change against the smallest global batch of the same model, data and schedule; below the red line: flagged",
    )
    xs = []
    groups = defaultdict(list)
    for r in rows:
        groups[(r.run.summary.get("model"), r.run.data, schedule_text(r.baseline))].append(r)
    several = len({(model, data) for model, data, _ in groups}) < len(groups)
    for (model, data, schedule), members in groups.items():
        label = f"ours: {model} / {data}" + (f", {schedule}" if several else "")
        ax.plot([m.run.global_batch for m in members], [m.delta_pts for m in members], "o", label=label)
        bad = [(m.run.global_batch, m.delta_pts) for m in members if m.flagged]
        if bad:
            ax.plot(*zip(*bad, strict=True), "x", color="red", markersize=12, mew=2, label="flagged")
        xs += [m.run.global_batch for m in members]
    for s in refs:
        pts = sorted((p["global_batch"], p["final_top1_pct"]) for p in s.points if "final_top1_pct" in p)
        ax.plot([b for b, _ in pts], [t - pts[0][1] for _, t in pts], **style(s, references), label=s.label)
        xs += [b for b, _ in pts]
    ax.axhline(0, color="black", linewidth=1)
    ax.axhline(-tolerance, color="red", linestyle="--", linewidth=1, label=f"tolerance: -{tolerance:g} points")
    log2_axis(ax, xs, "global batch (images per optimizer step)")
    ax.set_ylabel("final top-1 change (percentage points)")
    legend(ax, fig)
    return fig
