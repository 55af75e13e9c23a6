"""The shared style of every report figure: 800 x 500 pixels, a title, a grid, a legend that fits.

Drawn headless: matplotlib's Agg canvas and Figure objects, no pyplot state. `layout_problems` says
what would make a drawn figure hard to read (tick labels that run together, a legend with too many
entries, text cut off at the figure's edge), measured on the figure's own objects; the tests ask it
of every plot.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: before anything draws

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullLocator  # noqa: E402

from dlscale.rundir import writing  # noqa: E402

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 5.0, 100
"""Every PNG is 800 x 500 pixels."""
MAX_INSIDE_LEGEND = 8
"""Legends with more entries go right of the plot."""
MAX_LEGEND = 28
"""Entries one column right of the plot holds at 6 pt in 500 pixels; more go in two columns."""
MAX_LABEL_CHARS = 52
"""A legend label longer than this loses its middle (…): the tables beside the plot carry the whole name."""
SUBTITLE_CHARS = 90
"""A subtitle (8 pt) longer than this goes on to a second line."""
MAX_TICKS = 11
"""A log-2 axis with more ticks than this (or ticks closer than 1.25x) is ticked at every k-th power of 2."""


def figure(title: str, subtitle: str = "", ncols: int = 1):
    """A figure of ncols axes side by side, titled, with a light grid: (figure, axes)."""
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)  # the canvas layout_problems draws on
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    fig.suptitle(title, fontsize=12)
    if subtitle and ncols == 1:  # wrapped: a legend right of the plot leaves the axes about 500 pixels
        axes[0].set_title(textwrap.fill(subtitle, SUBTITLE_CHARS), fontsize=8, color="#555555")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def save(fig: Figure, path: Path, flag: str = "--output-dir") -> None:
    """The PNG; one line naming `flag` when it cannot be written (dlscale.rundir.writing)."""
    with writing(path, flag):
        fig.savefig(path, dpi=DPI)


def shorten(label: str, limit: int = MAX_LABEL_CHARS) -> str:
    """The label's start and end with … between (series often differ only at the end: AMP or FP32)."""
    if len(label) <= limit:
        return label
    head = (limit - 1) * 3 // 5
    return label[:head].rstrip() + "…" + label[len(label) - (limit - 1 - head):].lstrip()


def legend(ax, fig: Figure | None = None) -> None:
    """One entry per label (a label drawn twice is listed once), each cut to MAX_LABEL_CHARS; inside the
    axes when short, right of the plot when a long reference list needs room (fig given), in two columns
    past MAX_LEGEND entries."""
    handles, labels = ax.get_legend_handles_labels()
    unique: dict[str, object] = {}
    for handle, label in zip(handles, labels, strict=True):
        unique.setdefault(label, handle)
    if not unique:
        return
    entries = [shorten(label) for label in unique]
    if fig is not None and len(unique) > MAX_INSIDE_LEGEND:
        columns = 1 if len(unique) <= MAX_LEGEND else 2
        ax.legend(list(unique.values()), [shorten(e, MAX_LABEL_CHARS // columns + 8) for e in entries],
                  loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=6 if columns == 1 else 5,
                  borderaxespad=0, ncols=columns)
    else:
        ax.legend(list(unique.values()), entries, fontsize=7, loc="best")


def log2_ticks(values) -> list[int]:
    """The values themselves when they are few and apart; else powers of 2 over their span, every k-th so
    that at most MAX_TICKS remain."""
    ticks = sorted({int(v) for v in values if v and v > 0})
    if not ticks:
        return []
    crowded = len(ticks) > MAX_TICKS or any(b / a < 1.25 for a, b in zip(ticks, ticks[1:], strict=False))
    if not crowded:
        return ticks
    first, last = math.floor(math.log2(ticks[0])), math.ceil(math.log2(ticks[-1]))
    step = max(1, math.ceil((last - first + 1) / MAX_TICKS))
    return [2**k for k in range(first, last + 1, step)]


def tick_text(value: float) -> str:
    """1, 2, ... 512, then 1k, 2k, 16k (k = 1024): short enough that log-2 ticks never run together."""
    if value >= 1024:
        return f"{value / 1024:.3g}k"
    return f"{value:g}"


def log2_axis(ax, values, label: str) -> None:
    """A base-2 log x axis ticked at the values, or at powers of two where values would crowd."""
    ticks = log2_ticks(values)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(label)


# ------------------------------------------------------------------------------ readability checks


def layout_problems(fig: Figure, max_legend: int = 2 * MAX_LEGEND) -> list[str]:
    """What makes a drawn figure hard to read, from its own objects after drawing: tick labels of one axis
    that overlap, a legend of more than max_legend entries, and any title, axis label, tick label or legend
    reaching past the figure's edge. An empty list: none of these."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    edge = fig.bbox
    problems = []
    for index, ax in enumerate(fig.axes):
        where = f"axes {index} ({ax.get_title() or ax.get_ylabel() or 'untitled'})"
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            boxes = _tick_label_boxes(axis, renderer)
            for (text_a, a), (text_b, b) in zip(boxes, boxes[1:], strict=False):
                if a.overlaps(b):
                    problems.append(f"{where}: {name} tick labels {text_a!r} and {text_b!r} overlap")
            problems += [f"{where}: {name} tick label {text!r} is cut off" for text, box in boxes
                         if not _inside(box, edge)]
        for text in (ax.xaxis.label, ax.yaxis.label, ax.title):
            if text.get_text() and text.get_visible() and not _inside(text.get_window_extent(renderer), edge):
                problems.append(f"{where}: {text.get_text()!r} is cut off")
        box = ax.get_legend()
        if box is not None:
            entries = len(box.get_texts())
            if entries > max_legend:
                problems.append(f"{where}: the legend has {entries} entries (more than {max_legend})")
            if not _inside(box.get_window_extent(renderer), edge):
                problems.append(f"{where}: the legend reaches past the figure's edge")
    title = getattr(fig, "_suptitle", None)  # what fig.suptitle() made
    if title is not None and not _inside(title.get_window_extent(renderer), edge):
        problems.append(f"the title {title.get_text()!r} is cut off")
    return problems


def _tick_label_boxes(axis, renderer) -> list:
    """(text, window extent) of the visible major tick labels inside the view, in axis order."""
    low, high = sorted(axis.get_view_interval())
    boxes = []
    for tick in axis.get_major_ticks():
        label = tick.label1
        inside = low - 1e-9 * abs(low) <= tick.get_loc() <= high + 1e-9 * abs(high)
        if inside and label.get_visible() and label.get_text():
            boxes.append((tick.get_loc(), label.get_text(), label.get_window_extent(renderer)))
    return [(text, box) for _, text, box in sorted(boxes, key=lambda b: b[0])]


def _inside(box, edge, slack: float = 1.0) -> bool:
    return (box.x0 >= edge.x0 - slack and box.y0 >= edge.y0 - slack and box.x1 <= edge.x1 + slack
            and box.y1 <= edge.y1 + slack)
