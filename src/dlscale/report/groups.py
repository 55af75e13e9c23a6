"""A report over many runs, in readable groups: one figure per sweep and per device kind.

Runs of one sweep are a group; runs outside sweeps are grouped by the device they ran on, so CPU runs
and GPU runs never share an axis. A `dlscale predict` run joins the group of the measured run it was
made from (`--from-run`), else the predictions' own group, so a prediction for a thousand H100s does
not stretch the axes of a CPU sweep.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.report.scaling import Series, device_label, series_labels
from dlscale.rundir import Run


@dataclass
class Group:
    title: str
    """'sweep-train, CPU (x86_64)' or 'runs on NVIDIA H100 80GB HBM3'."""
    runs: list[Run] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    predictions: list = field(default_factory=list)

    @property
    def slug(self) -> str:
        """The group in a file name."""
        return re.sub(r"[^A-Za-z0-9_.]+", "-", self.title).strip("-").lower()


def key_of(run: Run) -> tuple[str, str]:
    return (run.sweep or "", device_label(run))


def title_of(key: tuple[str, str]) -> str:
    sweep, device = key
    if sweep and device:
        return f"{sweep}, {device}"
    return sweep or f"runs on {device}"


def group(runs: list[Run], series: list[Series], predictions: list) -> list[Group]:
    """Groups in the order their first run appears; the predictions' own group last."""
    groups: dict[tuple[str, str], Group] = {}
    for run in runs:
        groups.setdefault(key_of(run), Group(title_of(key_of(run)))).runs.append(run)
    for s in series:
        first = next((r.run for r in s.rows if r.run is not None), None)
        key = key_of(first) if first else (dict(s.key).get("source", ""), "")
        if key not in groups:  # a sweep whose points all failed
            key = next((k for k in groups if k[0] and k[0] == key[0]), key)
        groups.setdefault(key, Group(title_of(key))).series.append(s)
    by_name = {run.name: key_of(run) for run in runs}
    for pred in predictions:
        key = by_name.get(_made_from(pred) or "", ("", "predictions"))
        groups.setdefault(key, Group("dlscale predict runs" if key == ("", "predictions") else title_of(key)))
        groups[key].predictions.append(pred)
    for g in groups.values():  # legend labels name only what differs inside the figure
        labels = series_labels([dict(s.key) for s in g.series])
        g.series = [Series(s.key, labels[s.key], s.rows) for s in g.series]
    return list(groups.values())


def _made_from(pred) -> str | None:
    """The name of the run directory a prediction took its compute from (`--from-run DIR` in its argv)."""
    argv = list(getattr(pred, "config", {}).get("argv") or [])
    for i, word in enumerate(argv):
        if word == "--from-run" and i + 1 < len(argv):
            return Path(argv[i + 1]).name
        if word.startswith("--from-run="):
            return Path(word.split("=", 1)[1]).name
    return None
