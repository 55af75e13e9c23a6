"""Published reference figures shipped as data files (`dlscale/references/*.json`).

Each file holds one reference system: its hardware, its sources (repository@commit or URL),
notes on how each figure was obtained, and series of points. Figures are stored in the units the
source published them in (`train_time_h: 14` for NVIDIA's "~14 h"); the few conversions the
report needs (hours to seconds, the middle of a published range) happen here, in one place.
Figures read off a plot carry `"read_off_plot": true` on their series.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from dlscale.errors import ConfigError, shown
from dlscale.rundir import read_json
from dlscale.rundir.shape import Maybe, check

SERIES_KINDS = ("scaling", "efficiency", "progression", "time_to_solution", "sample", "workers")


@dataclass(frozen=True)
class RefSeries:
    reference: str
    id: str
    label: str
    kind: str
    """One of SERIES_KINDS: what the points describe."""
    points: tuple[dict, ...]
    meta: dict = field(default_factory=dict)
    """Everything else the file says about the series: device, precision, batch, sources."""

    @property
    def read_off_plot(self) -> bool:
        return bool(self.meta.get("read_off_plot"))

    def value(self, point: dict, key: str) -> float | None:
        """A point's figure in the report's units, or None where the source gives none.

        img_per_s: the published rate, or the middle of a published range.
        train_time_s: seconds from train_time_s / train_time_min / train_time_h.
        time_s: the time to solution, else the epoch time (both fall with more devices alike).
        """
        if key == "img_per_s" and "img_per_s" not in point and "img_per_s_range" in point:
            low, high = point["img_per_s_range"]
            return (low + high) / 2
        if key == "train_time_s" and "train_time_s" not in point:
            if "train_time_min" in point:
                return point["train_time_min"] * 60.0
            if "train_time_h" in point:
                return point["train_time_h"] * 3600.0
            return None
        if key == "time_s":
            time = self.value(point, "train_time_s")
            return time if time is not None else self.value(point, "epoch_time_s")
        value = point.get(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def curve(self, key: str) -> list[tuple[int, float]]:
        """(devices, value) for every point that has both, by device count."""
        pairs = [(p["devices"], self.value(p, key)) for p in self.points if "devices" in p]
        return sorted((d, v) for d, v in pairs if v is not None)

    def point(self, **match) -> dict:
        for p in self.points:
            if all(p.get(k) == v for k, v in match.items()):
                return p
        raise KeyError(f"{self.reference}/{self.id} has no point with {match}")

    def efficiency_curve(self) -> list[tuple[int, float]]:
        """Per-device efficiency against the series' smallest device count.

        Published efficiencies are used as given; elsewhere it is derived from img/s, or from
        the time to solution when no rate is published: (T_N / N) / (T_base / N_base).
        """
        published = dict(self.curve("efficiency"))
        derived: dict[int, float] = {}
        rates = self.curve("img_per_s")
        times = self.curve("time_s")
        if self.kind == "scaling" and len(rates) >= 2:
            (n0, t0) = rates[0]
            derived = {n: (t / n) / (t0 / n0) for n, t in rates}
        elif self.kind == "scaling" and len(times) >= 2:
            (n0, s0) = times[0]
            derived = {n: (s0 / s) / (n / n0) for n, s in times}
        return sorted({**derived, **published}.items())


@dataclass(frozen=True)
class Reference:
    name: str
    title: str
    hardware: dict
    workload: str
    sources: tuple[dict, ...]
    notes: tuple[str, ...]
    series: tuple[RefSeries, ...]
    model: str | None = None
    """The dlscale model name of the published runs (resnet50), where they ran one."""
    recipe: dict = field(default_factory=dict)
    """How the published runs trained (channels_last, cudnn_benchmark, fused_optimizer, compile, cuda_graphs,
    data_backend, loader_workers), with its sources; a series' own "recipe" adds to it (recipe_of)."""
    software: dict = field(default_factory=dict)
    """What the published runs ran on (torch, CUDA, a container), with its sources."""

    def get(self, series_id: str) -> RefSeries:
        for s in self.series:
            if s.id == series_id:
                return s
        raise KeyError(f"reference {shown(self.name)} has no series {shown(series_id)}")

    def of_kind(self, *kinds: str) -> list[RefSeries]:
        return [s for s in self.series if s.kind in kinds]

    def recipe_of(self, series: RefSeries) -> dict:
        """The reference's recipe with the series' own settings over it, and its precision and batch."""
        recipe = {**self.recipe, **series.meta.get("recipe", {})}
        recipe["source"] = sorted({*self.recipe.get("source", []), *series.meta.get("recipe", {}).get("source", [])})
        for key in ("precision", "batch_per_device"):
            if series.meta.get(key) is not None:
                recipe[key] = series.meta[key]
        return recipe

    def source_text(self, series: RefSeries) -> str:
        ids = series.meta.get("source", [])
        where = {s["id"]: s["where"] for s in self.sources}
        return "; ".join(where[i] for i in ids if i in where)


def reference_dir():
    return resources.files("dlscale") / "references"


NOT_REFERENCES = frozenset({"platforms", "device_steps", "device_mfu"})
"""Shipped data files beside the references that are not one: platforms.json is `dlscale predict`'s machines,
device_steps.json its per-device step curves measured by `dlscale bench --batch-size`, device_mfu.json the
MFU dlscale measured per device (what `--mfu` is checked against)."""


def reference_names() -> list[str]:
    """The references shipped with dlscale, by file name."""
    return sorted(name for name in (p.name.removesuffix(".json") for p in reference_dir().iterdir()
                                    if p.name.endswith(".json")) if name not in NOT_REFERENCES)


POINT = {"devices": Maybe("count", null=False), "nodes": Maybe("count", null=False),
         "workers": Maybe("index", null=False), "global_batch": "count?", "batch_per_device": "count?",
         "chart_throughput": "number?", "efficiency": "positive?", "speedup": "positive?",
         "img_per_s": "positive?", "img_per_s_ci95": "nonnegative?", "img_per_s_range": Maybe(["positive"]),
         "amp_over_fp32": "positive?", "train_time_h": "positive?", "train_time_min": "positive?",
         "train_time_s": "positive?", "epoch_time_s": ("positive?", ["positive"]), "lr": "positive?",
         "final_top1_pct": "number?", "final_top5_pct": "number?", "epoch_time": "text?", "setting": "text?",
         "note": "text?", "bound": "text?", "preset": "text?", "efficiency_source": "text?",
         "approximate_time": "flag?", "algorithm": "text?", "bn_group": "count?", "epochs": "positive?",
         "eval_s": "nonnegative?", "runs": "count?", "program": "text?", "config": "text?", "base_devices": "count?"}
"""The figures of a published point, by key: what the report, explain and predict read of it."""
RECIPE = Maybe({"source": Maybe(["text"], null=False)}, null=False)
REFERENCE = {
    "name": "text", "title": "text", "hardware": Maybe("object", null=False), "workload": Maybe("text", null=False),
    "model": "text?", "sources": [{"id": "text", "where": "text"}], "notes": Maybe(["text"], null=False),
    "recipe": RECIPE, "software": RECIPE,
    "series": [{"id": "text", "label": "text", "kind": "text", "source": Maybe(["text"], null=False), "points": [POINT],
                "read_off_plot": "flag?", "device": "text?", "precision": "text?", "batch_per_device": "count?",
                "dist_optimizer": "text?", "short": "text?", "recipe": RECIPE,
                "platform": "text?", "algorithm": "text?", "overlap": "text?", "bucket_cap_mb": "positive?",
                "grad_bytes": "count?", "rate": "text?", "stack": "text?", "setting": "text?", "overlay": "flag?",
                "nics": "count?", "nic_gbps": "positive?", "transport": "text?"}],
}
"""A reference file's shape (dlscale.rundir.shape): checked when it is read, so that no reader meets a wrong
field. A series' platform, algorithm, overlap, bucket_cap_mb, grad_bytes and dist_optimizer describe how its runs
communicated, which dlscale predict takes out of their figures and validates against (docs/prediction.md#your-own-
published-points); nics, nic_gbps and transport put its platform's nodes on another fabric; rate and stack say which
rate the figures are and what software ran them; overlay: false keeps it off the report's plots. A point's program
and config name the step program its run executed, its base_devices what a published efficiency is relative to."""


def load_reference(name_or_path: str) -> Reference:
    """A shipped reference by name (`hal`), or a reference file of the same format by path: one line naming the
    file and its first wrong field when it is not one."""
    if name_or_path.endswith(".json"):
        path = Path(name_or_path)
        if not path.is_file():
            raise ConfigError(f"--reference {name_or_path}: no such file")
    else:
        names = reference_names()
        if name_or_path not in names:
            raise ConfigError(f"unknown --reference {shown(name_or_path)}; choose from {', '.join(names)}, all, "
                              "or give a .json file in the same format")
        path = Path(str(reference_dir() / f"{name_or_path}.json"))
    how = "see dlscale/references/hal.json for the format"
    data = check(read_json(path, fix=how), REFERENCE, path, what=how)
    try:
        return _parse(data, name_or_path)
    except ValueError as error:
        raise ConfigError(f"reference {name_or_path}: malformed ({error}); {how}") from None


def named_series(spec: str, choose=None) -> tuple[Reference, RefSeries, list[RefSeries]]:
    """NAME[:SERIES] of a reference -> the reference, the scaling series named (or, without :SERIES, the
    one `choose` picks from those that publish images/s, the first without `choose`), and those series. A
    reference with no scaling series in images/s offers its samples that have them (BlueFog's 16-GPU one)."""
    name, _, series_id = spec.partition(":")
    ref = load_reference(name)
    candidates = [s for s in ref.of_kind("scaling") if s.curve("img_per_s")] or \
        [s for s in ref.of_kind("sample") if s.curve("img_per_s")]
    if series_id:
        try:
            return ref, ref.get(series_id), candidates
        except KeyError:
            raise ConfigError(f"reference {name} has no series {shown(series_id)}; choose one of "
                              f"{', '.join(s.id for s in candidates) or '(none with img/s)'}") from None
    if not candidates:
        raise ConfigError(f"reference {name} publishes no images/s per device count")
    return ref, (choose(ref, candidates) if choose else candidates[0]), candidates


def resolve_names(values: list[str]) -> list[str]:
    """`--reference hal,ngc --reference sc20` or `all` -> names in the order given, no repeats."""
    names: list[str] = []
    for value in values:
        for part in (p.strip() for p in value.split(",")):
            chosen = reference_names() if part == "all" else [part] if part else []
            names.extend(n for n in chosen if n not in names)
    return names


def _parse(data: dict, where: str) -> Reference:
    source_ids = {s["id"] for s in data["sources"]}
    series = []
    for raw in data["series"]:
        meta = {k: v for k, v in raw.items() if k not in ("id", "label", "kind", "points")}
        if raw["kind"] not in SERIES_KINDS:
            raise ValueError(f"series {raw['id']}: kind {shown(raw['kind'])} is not one of {SERIES_KINDS}")
        missing = [s for s in meta.get("source", []) if s not in source_ids]
        if not meta.get("source") or missing:
            raise ValueError(f"series {raw['id']} must name its sources (unknown: {missing})")
        if not raw["points"]:
            raise ValueError(f"series {raw['id']} has no points")
        series.append(RefSeries(data["name"], raw["id"], raw["label"], raw["kind"],
                                tuple(raw["points"]), meta))
    for part in (data.get("recipe") or {}, data.get("software") or {}, *(s.meta.get("recipe") or {} for s in series)):
        missing = [s for s in part.get("source") or [] if s not in source_ids]
        if missing:
            raise ValueError(f"recipe or software names unknown sources {missing}")
    return Reference(
        name=data["name"], title=data["title"], hardware=data.get("hardware") or {},
        workload=data.get("workload") or "", sources=tuple(data["sources"]),
        notes=tuple(data.get("notes") or ()), series=tuple(series), model=data.get("model"),
        recipe=data.get("recipe") or {}, software=data.get("software") or {},
    )
