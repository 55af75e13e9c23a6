"""Published curves drawn beside ours: one factor per reference system, so its series keep their order.

References ran on other hardware, so their absolute figures are never drawn as measured by us. Every
series of one reference is multiplied by the same factor, chosen so that the reference's point nearest
our smallest run (in device count; the file's first series on a tie) matches ours per device:
throughput per device (images/s / devices), or device-seconds for times (seconds x devices). Between the
series of a reference the published ratios stay as published: HAL's May 64-GPU run (3,379 s) stays
faster than February's (4,071 s). The factor is in each series' legend label, so every drawn value
divides back to its JSON figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from dlscale.report.references import Reference, RefSeries

PER_DEVICE: Callable[[int, float], float] = lambda devices, value: value / devices  # noqa: E731
"""Throughput compared per device."""
DEVICE_SECONDS: Callable[[int, float], float] = lambda devices, value: value * devices  # noqa: E731
"""Times compared as device-seconds (the time one device would need at the same per-device rate)."""


@dataclass(frozen=True)
class Overlay:
    series: RefSeries
    curve: tuple[tuple[int, float], ...]
    """(devices, value) as the reference file publishes them."""
    factor: float
    """What every value is multiplied by on the plot (one per reference system)."""
    x: tuple[float, ...] = ()
    """Where each point is drawn, when not at its device count (nodes, loader workers)."""

    @property
    def xs(self) -> list[float]:
        return list(self.x) if self.x else [d for d, _ in self.curve]

    @property
    def ys(self) -> list[float]:
        return [v * self.factor for _, v in self.curve]

    @property
    def label(self) -> str:
        """The series' label after its factor (first, so that a cut legend label keeps it)."""
        scaled = "" if self.factor == 1.0 else f"x{self.factor:.3g}: "
        return scaled + self.series.label + (" [read off a plot]" if self.series.read_off_plot else "")


def drawn_on_plots(series: RefSeries) -> bool:
    """A reference series is drawn unless its file says "overlay": false (then it is in the tables only)."""
    return series.meta.get("overlay", True) is not False


def curves(references: list[Reference], key: str, kinds: tuple[str, ...] = ("scaling", "time_to_solution"),
           minimum: int = 2) -> list[tuple[RefSeries, list[tuple[int, float]]]]:
    """Drawable curves of `key` against devices: `minimum` points or more, not marked overlay: false."""
    out = []
    for ref in references:
        for s in ref.of_kind(*kinds):
            curve = s.curve(key)
            if len(curve) >= minimum and drawn_on_plots(s):
                out.append((s, curve))
    return out


def scaled(found: list[tuple[RefSeries, list[tuple[int, float]]]], anchor: tuple[int, float] | None,
           normalise: Callable[[int, float], float]) -> list[Overlay]:
    """Each curve with its reference's factor. anchor: (devices, value) of our smallest run; None: nothing of
    ours to compare with, so the curves are drawn as published (factor 1)."""
    factors: dict[str, float] = {}
    if anchor is not None:
        by_reference: dict[str, list[tuple[int, float]]] = {}
        for series, curve in found:
            by_reference.setdefault(series.reference, []).extend(curve)
        ours = normalise(*anchor)
        for name, points in by_reference.items():
            # min() keeps the first of equals: the file's first series, then its smallest device count
            devices, value = min(points, key=lambda p: abs(math.log2(p[0] / anchor[0])))
            factors[name] = ours / normalise(devices, value)
    return [Overlay(series, tuple(curve), factors.get(series.reference, 1.0)) for series, curve in found]


REF_COLORS = ("#7f7f7f", "#8c564b", "#bcbd22", "#17becf", "#9467bd", "#e377c2", "#2ca02c")
"""One colour per reference system; its series differ by marker. Our runs use the default cycle."""
REF_MARKERS = ("s", "^", "v", "D", "P", "X", "<", ">", "h", "p")


def style(series: RefSeries, references: list[Reference], star: bool = False) -> dict:
    """A reference series' line: its system's colour, its own marker, dotted."""
    names = [ref.name for ref in references]
    family = names.index(series.reference) if series.reference in names else 0
    ids = [s.id for s in references[family].series] if references else []
    index = ids.index(series.id) if series.id in ids else 0
    marker = ("*", "X", "P", "D")[index % 4] if star else REF_MARKERS[index % len(REF_MARKERS)]
    return {"color": REF_COLORS[family % len(REF_COLORS)], "linestyle": ":", "alpha": 0.9,
            "marker": marker, "markersize": 10 if star else 5}
