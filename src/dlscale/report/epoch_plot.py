"""Epoch time against devices in one node and against nodes, as Marconi100's thesis draws it, with the
thesis' epoch times beside ours (one factor per reference, in device-seconds: report/overlay.py)."""

from __future__ import annotations

import dataclasses

from matplotlib.figure import Figure

from dlscale.report import overlay
from dlscale.report.epochs import epoch_time
from dlscale.report.figure import figure, legend, log2_axis
from dlscale.report.overlay import Overlay, style
from dlscale.report.plots import log_y
from dlscale.report.references import Reference
from dlscale.report.scaling import Series


def _timed(series: list[Series]) -> list[tuple[Series, list[tuple[int, int, float]]]]:
    """Per train series, its (world size, nodes, epoch time) rows."""
    out = []
    for s in series:
        rows = [(r.world_size, r.nnodes, epoch_time(r.run)) for r in s.ok_rows if r.run.kind == "train"]
        rows = [row for row in rows if row[2]]
        if rows:
            out.append((s, rows))
    return out


def _one_node(timed: list) -> list[tuple[str, list[tuple[int, int, float]]]]:
    """The one-node rows of series that differ only in their processes per node (a sweep over --nproc and
    --nnodes makes one series per value): Marconi100's GPUs-in-one-node curve."""
    buckets: dict[tuple, tuple[str, list]] = {}
    for s, rows in timed:
        group = dict(s.key).get("group")
        label = " ".join(w for w in s.label.split() if w != group) or "one node"
        key = tuple((k, v) for k, v in s.key if k != "group")
        buckets.setdefault(key, (label, []))[1].extend(r for r in rows if r[1] == 1)
    return [(label, sorted(set(rows))) for label, rows in buckets.values() if len({r[0] for r in rows}) >= 2]


def plot(series: list[Series], references: list[Reference]) -> Figure | str:
    """Left: epoch time against devices inside one node; right (where nodes vary): against nodes."""
    timed = _timed(series)
    one_node = _one_node(timed)
    by_nodes = [(s.label, rows) for s, rows in timed if len({r[1] for r in rows}) >= 2]
    if not one_node and not by_nodes:
        return "needs train runs with epoch records at two or more world sizes"
    anchor = min(((w, t) for _, rows in timed for w, _, t in rows), default=None)
    refs = overlay.scaled(overlay.curves(references, "epoch_time_s", kinds=("scaling",)), anchor,
                          overlay.DEVICE_SECONDS)
    ref_nodes = [_at_nodes(o) for o in refs if _spans_nodes(o)]
    ref_one = [o for o in refs if not _spans_nodes(o)]
    panels = [p for p in (("devices in one node", one_node, ref_one), ("nodes", by_nodes, ref_nodes)) if p[1]]
    fig, axes = figure("Epoch time vs devices" + (" and nodes" if by_nodes else "") + " (Marconi100's form)",
                       ncols=len(panels))
    for ax, (axis, mine, drawn_refs) in zip(axes, panels, strict=True):
        xs = []
        for label, rows in mine:
            at = [r[0] if axis != "nodes" else r[1] for r in rows]
            line = ax.plot(at, [r[2] for r in rows], marker="o", label=label)
            ax.plot(at, [rows[0][2] * at[0] / a for a in at], linestyle="--", color=line[0].get_color(), alpha=0.6,
                    label="ideal: T_base x N_base / N")
            xs += at
        for o in drawn_refs:
            ax.plot(o.xs, o.ys, **style(o.series, references), label=o.label)
            xs += o.xs
        log2_axis(ax, xs, f"{axis} (ranks; GPUs in the references)" if axis != "nodes" else "nodes")
        log_y(ax)
        ax.set_title("mean epoch after the first, validation included", fontsize=8)
        ax.set_ylabel("epoch time (s)")
        legend(ax, fig if len(panels) == 1 else None)
    return fig


def _spans_nodes(o: Overlay) -> bool:
    return len({p.get("nodes") for p in o.series.points if p.get("nodes")}) >= 2


def _at_nodes(o: Overlay) -> Overlay:
    nodes = {p["devices"]: p["nodes"] for p in o.series.points if "devices" in p and "nodes" in p}
    return dataclasses.replace(o, x=tuple(nodes[d] for d, _ in o.curve))
