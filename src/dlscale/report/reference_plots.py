"""A reference's own throughput figures, readable: one figure per selected reference, as its source prints them.

Bars per device count (a cluster each), one bar per series (FP32, AMP; V100, A100), the height the
published images/s per device, the label the published images/s over all devices: NGC's and
PaddlePaddle's tables drawn. Series marked `"overlay": false` stay in the tables only.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from dlscale.report.figure import figure, legend, shorten
from dlscale.report.overlay import drawn_on_plots
from dlscale.report.references import Reference

MAX_SERIES = 8
"""More bars than this in a cluster would not be readable; the reference's table has every series."""


def plot(reference: Reference) -> Figure | str:
    series = [s for s in reference.of_kind("scaling") if drawn_on_plots(s) and s.curve("img_per_s")]
    if not series:
        return f"{reference.name} publishes no images/s per device count"
    series = series[:MAX_SERIES]
    counts = sorted({d for s in series for d, _ in s.curve("img_per_s")})
    fig, (ax,) = figure(shorten(f"{reference.name}: {reference.title}", 80),
                        "bar: published images/s per device; label: published images/s over all devices (rounded)"
                        + ("; read off a plot: hatched" if any(s.read_off_plot for s in series) else ""))
    width = 0.8 / len(series)
    for j, s in enumerate(series):
        rates = dict(s.curve("img_per_s"))
        present = [(i, n) for i, n in enumerate(counts) if n in rates]
        bars = ax.bar([i + (j - (len(series) - 1) / 2) * width for i, _ in present],
                      [rates[n] / n for _, n in present], width * 0.95, label=s.label,
                      hatch="//" if s.read_off_plot else None)
        ax.bar_label(bars, labels=[_total(rates[n]) for _, n in present], fontsize=6 if len(series) > 4 else 7,
                     rotation=90 if len(series) > 6 else 0, padding=2)
    ax.set_xticks(range(len(counts)), [str(n) for n in counts])
    ax.set_xlabel("devices (GPUs)")
    ax.set_ylabel("images/s per device")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.25)  # room for the labels above the bars
    legend(ax, fig if len(series) > 4 else None)
    return fig


def _total(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:g}"
