"""Which published figure a run is compared with: the shipped reference series that ran the same model,
precision and device (`dlscale explain` picks the fastest of them: the figure to reach), or the one
named with --reference NAME[:SERIES]; `--reference none` compares with nothing, and so does a run that no
shipped reference matches (NoMatchingReference says why; explain goes on without one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlscale.errors import ConfigError
from dlscale.report.references import Reference, RefSeries, load_reference, named_series, reference_names
from dlscale.rundir import Run


class NoMatchingReference(ConfigError):
    """No shipped reference ran the run's model, precision and device (none was named)."""


@dataclass(frozen=True)
class Target:
    reference: Reference
    series: RefSeries
    devices: int
    """The device count of the published point compared with."""
    per_device_ips: float

    @property
    def spec(self) -> str:
        return f"{self.reference.name}:{self.series.id}"

    @property
    def device(self) -> str:
        return _series_device(self.reference, self.series) or "?"

    @property
    def recipe(self) -> dict:
        return self.reference.recipe_of(self.series)

    @property
    def software(self) -> dict:
        return self.reference.software

    def cite(self, *, recipe: bool = False) -> str:
        """Where a figure (or the recipe) comes from, short: the reference file and its source ids, which
        the Reference line (describe) and docs/references.md spell out."""
        ids = list(self.recipe.get("source", [])) if recipe else []
        ids = ids or list(self.series.meta.get("source", []))
        return f"references/{self.reference.name}.json, sources {', '.join(dict.fromkeys(ids))}"

    def describe(self) -> str:
        where = "; ".join(f"{s['id']}: {s['where']}" for s in self.reference.sources if s["id"] != "notes")
        return (f"{self.spec}: {self.series.label}, {self.per_device_ips:.1f} img/s per device at {self.devices} "
                f"device(s) (references/{self.reference.name}.json; {where})")


def precision_family(precision: str | None) -> str:
    """amp_fp16, amp_bf16 and fp16 (MXNet's mixed precision) are one family, 'amp'; fp32 and tf32 their own."""
    word = (precision or "").split()[0].lower() if precision else ""
    return "amp" if word.startswith("amp") or word == "fp16" else word


def _device_words(text: str) -> list[str]:
    return [w.lower() for w in re.split(r"[\s\-_/,()]+", text) if w and w.lower() not in ("nvidia", "tesla", "dgx-1")]


def device_score(run_device: str, series_device: str) -> int:
    """2: every word of the series' device in the run's device name (V100 32GB in Tesla V100-SXM2-32GB);
    1: its first word, the GPU model (V100); 0: another device."""
    words, name = _device_words(series_device), run_device.lower()
    if not words or words[0] not in name:
        return 0
    return 2 if all(word in name for word in words) else 1


def _series_device(ref: Reference, series: RefSeries) -> str:
    return str(series.meta.get("device") or ref.hardware.get("device") or "")


def _compared_point(series: RefSeries, devices: int) -> tuple[int, float] | None:
    curve = series.curve("img_per_s")
    if not curve:
        return None
    exact = [(n, v) for n, v in curve if n == devices]
    n, value = exact[0] if exact else curve[0]
    return n, value / n


def choose(run: Run, spec: str | None) -> Target | None:
    """The reference series to compare with; None for `none`; NoMatchingReference when none matches, a
    ConfigError of one line for a named one that does not exist."""
    if spec is not None and spec.strip().lower() == "none":
        return None
    if spec:
        return _named(run, spec)
    found = []
    for name in reference_names():
        ref = load_reference(name)
        if ref.model != run.model:
            continue
        for series in ref.of_kind("scaling"):
            device = _series_device(ref, series)
            exact = (series.meta.get("precision") or "").split(" ")[0] == run.precision
            family = precision_family(series.meta.get("precision")) == precision_family(run.precision)
            point = _compared_point(series, run.world_size)
            if point and family and device_score(run.device_name, device):
                found.append(((exact, device_score(run.device_name, device), point[1]),
                              Target(ref, series, point[0], point[1])))
    if not found:
        raise NoMatchingReference(f"no published reference ran {run.model} in {run.precision} on {run.device_name}, "
                                  "so the run is compared with nothing (--reference none); name one with --reference "
                                  "NAME[:SERIES] (e.g. ngc:v100_16gb_amp; dlscale report --reference all lists them)")
    return max(found, key=lambda item: item[0])[1]


def _named(run: Run, spec: str) -> Target:
    def closest(ref: Reference, candidates: list[RefSeries]) -> RefSeries:
        return max(candidates, key=lambda s: (precision_family(s.meta.get("precision")) ==
                                              precision_family(run.precision),
                                              device_score(run.device_name, _series_device(ref, s))))

    ref, series, candidates = named_series(spec, closest)
    name = spec.partition(":")[0]
    point = _compared_point(series, run.world_size)
    if point is None:
        raise ConfigError(f"{name}:{series.id} publishes no images/s per device count to compare with; choose one of "
                          f"{', '.join(s.id for s in candidates) or '(none)'}")
    return Target(ref, series, point[0], point[1])
