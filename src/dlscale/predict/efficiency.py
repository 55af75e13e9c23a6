"""--validate's block of published scaling efficiencies dlscale ships no rates for (references/large_batch.json):
Goyal et al. 2017, Akiba et al. 2017, Jia et al. 2018, Mikami et al. 2018, each at 256 to 2,048 GPUs.

Each is predicted as a user of `dlscale predict` would predict it from what its paper publishes, and from nothing
else: the compute is the run's own end-to-end rate (its time to train and epochs at its device count), anchored
there (its own communication and stragglers taken out in the setting below, as `--from-reference rate=...` does);
the machine is a shipped platform's nodes on the fabric the paper names (`--nics --nic-gbps --transport`); the
strategy is the series' where it states one, else dlscale's default; the spread of step times is the platform
kind's default (predict/spread.py). The predicted efficiency is the per-device rate at the published device count
over that at the published base. Nothing is fitted to the efficiency it is judged on: the efficiency is not an
input, and the rate comes from the time to train, another published figure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlscale.errors import ConfigError
from dlscale.metrics.cost import IMAGENET_TRAIN_IMAGES
from dlscale.predict.cases import series_strategy, shipped_reference
from dlscale.predict.ceilings import Ceilings
from dlscale.predict.compute import from_one_point
from dlscale.predict.model import Point, Strategy, compute_for_step, predict_point, workload_for_model
from dlscale.predict.network import Network
from dlscale.predict.platforms import platform
from dlscale.predict.spread import default_spread
from dlscale.report.references import RefSeries

REFERENCE = "large_batch"


@dataclass(frozen=True)
class EfficiencyRow:
    series: RefSeries
    devices: int
    base: int
    published: float
    predicted: float
    bound: str
    point: Point
    """The prediction at the published device count (its step and terms)."""
    inputs: str

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1

    @property
    def spec(self) -> str:
        return f"{self.series.reference}:{self.series.id}"


@dataclass(frozen=True)
class _Setting:
    network: Network
    strategy: Strategy
    grad_bytes: int
    ceilings: Ceilings
    text: str


def _setting(series: RefSeries) -> _Setting:
    meta = series.meta
    chosen = platform(meta["platform"]).with_fabric(meta.get("nics"), meta.get("nic_gbps"), meta.get("transport"))
    strategy = series_strategy(meta, f"{series.reference}:{series.id}")
    spread = default_spread(chosen.kind)
    cv = spread.cv if spread else None
    text = (f"network: {chosen.label}; strategy: {strategy.describe()}; stragglers: "
            f"{'none' if spread is None else spread.source}")
    return _Setting(chosen.network(), strategy, int(meta.get("grad_bytes") or 4), Ceilings(step_cv=cv), text)


def _at(setting: _Setting, point: dict) -> Network:
    """The setting's network with the point's own devices per node, where it states its nodes."""
    if point.get("nodes"):
        return replace(setting.network, devices_per_node=max(point["devices"] // point["nodes"], 1))
    return setting.network


def check(series: RefSeries) -> EfficiencyRow:
    """The series' published efficiency against the one predicted from its time to train (module docstring)."""
    judged = next((p for p in series.points if p.get("efficiency")), None)
    timed = next((p for p in series.points if series.value(p, "train_time_s") and p.get("epochs")), None)
    if judged is None or timed is None:
        raise ConfigError(f"{series.reference}:{series.id}: an efficiency check needs a point with an efficiency and "
                          "one with a time to train and its epochs")
    base = judged.get("base_devices", 1)  # a whole number >= 1: report/references.py checked it when reading
    if base >= judged["devices"]:
        raise ConfigError(f"{series.reference}:{series.id}: base_devices must be below the point's {judged['devices']} "
                          f"devices, got {base}")
    batch = int(timed.get("batch_per_device") or series.meta["batch_per_device"])
    rate = float(timed["epochs"]) * IMAGENET_TRAIN_IMAGES / series.value(timed, "train_time_s")
    step = batch * timed["devices"] / rate
    setting = _setting(series)
    work = workload_for_model("resnet50", batch_per_device=batch, step_s=step,
                              grad_bytes_per_element=setting.grad_bytes)

    def at(compute_s: float, devices: int = timed["devices"], point: dict = timed) -> Point:
        here = replace(work, step_time=from_one_point(batch, compute_s))
        return predict_point(devices, here, setting.strategy, _at(setting, point), setting.ceilings, batch=batch)

    solved = compute_for_step(step, at)
    compute = solved[0] if solved else step
    at_n = at(compute, judged["devices"], judged)
    at_base = at(compute, base, {"devices": base})
    inputs = (f"compute: {rate:,.0f} img/s end-to-end on {timed['devices']} GPUs ({timed['epochs']:g} epochs in "
              f"{series.value(timed, 'train_time_s'):,.0f} s), a step of {1e3 * step:.2f} ms at batch {batch}, "
              f"{1e3 * compute:.2f} ms of it compute once the model's own communication and stragglers there are "
              f"taken out; {setting.text}; base: {base} device(s) ({judged.get('efficiency_source', '')})")
    return EfficiencyRow(series, judged["devices"], base, judged["efficiency"],
                         at_n.img_per_s_per_device / at_base.img_per_s_per_device, judged.get("bound", ""), at_n,
                         inputs)


def efficiency_rows(name: str = REFERENCE) -> list[EfficiencyRow]:
    """One row per efficiency series of the reference, in its order."""
    return [check(series) for series in shipped_reference(name).of_kind("efficiency")]
