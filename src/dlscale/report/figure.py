"""The shared style of every report figure: 800 x 500 pixels, a title, a grid, a legend that fits.

Drawn headless: matplotlib's Agg canvas and Figure objects, no pyplot state.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: before anything draws

from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullLocator  # noqa: E402

from dlscale.rundir import writing  # noqa: E402

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 5.0, 100
"""Every PNG is 800 x 500 pixels."""
MAX_INSIDE_LEGEND = 8
"""Legends with more entries go right of the plot."""


def figure(title: str, subtitle: str = "", ncols: int = 1):
    """A figure of ncols axes side by side, titled, with a light grid: (figure, axes)."""
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    fig.suptitle(title, fontsize=12)
    if subtitle and ncols == 1:
        axes[0].set_title(subtitle, fontsize=8, color="#555555")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def save(fig: Figure, path: Path, flag: str = "--output-dir") -> None:
    """The PNG; one line naming `flag` when it cannot be written (dlscale.rundir.writing)."""
    with writing(path, flag):
        fig.savefig(path, dpi=DPI)


def legend(ax, fig: Figure | None = None) -> None:
    """Inside the axes when short; right of the plot when a long reference list needs room."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    if fig is not None and len(handles) > MAX_INSIDE_LEGEND:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=6, borderaxespad=0)
    else:
        ax.legend(fontsize=7, loc="best")


def log2_axis(ax, values, label: str) -> None:
    """A base-2 log x axis ticked at the values, or at powers of two where values would crowd."""
    ticks = sorted({int(v) for v in values if v})
    if len(ticks) > 10 or any(b / a < 1.25 for a, b in zip(ticks, ticks[1:], strict=False)):
        ticks = [2**k for k in range(ticks[0].bit_length() - 1, ticks[-1].bit_length() + 1)
                 if ticks[0] <= 2**k * 1.5 and 2**k <= ticks[-1] * 1.5]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(label)
