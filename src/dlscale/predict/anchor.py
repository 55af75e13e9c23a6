"""A published figure as a prediction's compute, with its own communication and stragglers taken out.

A rate published at N devices (BlueFog's 4,310.6 img/s on 16 GPUs, MLPerf's 314,118 on 64) holds the
communication and the waits of its own run. Taken as the compute, the prediction adds them once more and
at the reference's own device count gives less than its own figure (2,803 img/s from BlueFog's 4,310.6).
So the compute is the step to which dlscale predict's model, on the reference's own machine and with its
own strategy, adds the published step's communication and stragglers: at its own device count, in its own
setting, the prediction is the published figure.

The reference's own setting is the one `dlscale predict --validate` documents for its system (a Case of
validate.py: strategy, platform, gradient bytes, each with its sources). A prediction that names no
strategy, or no network, takes the reference's; a reference without a documented setting is anchored
with the command's, and the header says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlscale.predict.cases import CASES, Case
from dlscale.predict.ceilings import Ceilings
from dlscale.predict.compute import UNKNOWN_FIXED, Fixed
from dlscale.predict.inputs import PublishedStep, ReferenceFigure
from dlscale.predict.model import Point, Strategy, compute_for_step, predict_point
from dlscale.predict.network import Network
from dlscale.predict.platforms import platform
from dlscale.predict.workload import Workload


@dataclass(frozen=True)
class Setting:
    """How a published figure's run communicated: its strategy, network and gradient bytes."""

    strategy: Strategy
    network: Network
    grad_bytes: int
    text: str
    """Where the setting comes from, in words."""
    cores_per_node: int | None = None
    """The platform's CPU cores per node, where it states them."""
    kind: str | None = None
    """The platform's kind of machine (its default spread of step times)."""
    documented: bool = True
    """False: the command's setting, taken for the reference's (none is documented)."""


def documented_case(figure: ReferenceFigure, cases: tuple[Case, ...] = CASES) -> Case | None:
    """The validation's case of the figure's series: its own, else one that takes its compute from it with the
    strategy the series states (BlueFog's sample: BlueFog's case, not Horovod's). `cases`: the shipped ones and
    a reference file's."""
    name, series = figure.spec.split(":")
    cases = [c for c in cases if c.reference == name and series in (c.series, c.input_series)]
    stated = figure.series.meta.get("dist_optimizer")
    fitting = [c for c in cases if stated is None or c.strategy.name == stated]
    own = [c for c in fitting if c.series == series]
    return (own or fitting or [None])[0]


def own_setting(figure: ReferenceFigure, cases: tuple[Case, ...] = CASES) -> Setting | None:
    case = documented_case(figure, cases)
    if case is None:
        return None
    chosen = platform(case.platform)
    net = chosen.network()
    if case.devices_per_node:
        net = replace(net, devices_per_node=case.devices_per_node)
    return Setting(case.strategy, net, case.grad_bytes, f"{case.platform}; {case.software} (predict/validate.py's "
                   f"case {case.reference}:{case.series})", chosen.value("cpu_cores_per_node"), kind=chosen.kind)


@dataclass(frozen=True)
class Anchored:
    workload: Workload
    lines: tuple[str, ...]
    """What was taken out of which published step, for the prediction's header."""


def anchored(figure: ReferenceFigure, setting: Setting, *, model: str, fixed: Fixed | None,
             step_cv: float | None) -> Anchored:
    """The figure's compute with, at each published point of more than one device, what the model adds there in
    `setting` taken out; points it cannot anchor (the model's additions alone exceed the step) stay as published."""
    steps, lines = [], []
    for published in figure.steps:
        if published.devices == 1:
            steps.append((published.batch, published.step_s))
            continue
        solved = _compute_step(figure, published, setting, model, step_cv)
        if solved is None:
            steps.append((published.batch, published.step_s))
            lines.append(f"at {published.devices} devices the model's communication and stragglers alone exceed the "
                         f"published step ({1e3 * published.step_s:.2f} ms): used as published, its own included")
            continue
        compute_s, point = solved
        steps.append((published.batch, compute_s))
        lines.append(f"at {published.devices} devices (batch {published.batch}) the model adds "
                     f"{point.exposed_ms:.2f} ms of exposed communication and {point.stragglers_ms:.2f} ms of "
                     "stragglers in the reference's "
                     f"setting: taken out of the published {1e3 * published.step_s:.2f} ms step, the compute is "
                     f"{1e3 * compute_s:.2f} ms, and the prediction there in that setting is the published "
                     f"{published.batch * published.devices / published.step_s:,.1f} img/s")
    note = "its own communication and stragglers taken out: anchored, below" if lines else ""
    workload = figure.workload(steps, model=model, fixed=fixed, grad_bytes=setting.grad_bytes, note=note)
    return Anchored(workload, tuple(lines))


def _compute_step(figure: ReferenceFigure, published: PublishedStep, setting: Setting, model: str,
                  step_cv: float | None) -> tuple[float, Point] | None:
    """The compute step whose prediction at the published point's devices and batch, in `setting`, is the
    published step; None where even no compute gives it."""
    net = setting.network
    if published.nodes:  # the published run's own layout
        net = replace(net, devices_per_node=max(published.devices // published.nodes, 1))
    ceilings = Ceilings(step_cv=step_cv)

    def point(compute_s: float) -> Point:
        # Only t(batch) matters at the published batch: no fixed part is needed to evaluate it.
        work = figure.workload([(published.batch, compute_s)], model=model, fixed=UNKNOWN_FIXED,
                               grad_bytes=setting.grad_bytes)
        strategy = replace(setting.strategy, algorithm=published.algorithm or setting.strategy.algorithm,
                           norm_group=published.bn_group)
        return predict_point(published.devices, work, strategy, net, ceilings, batch=published.batch)

    return compute_for_step(published.step_s, point)


def setting_notes(figure: ReferenceFigure | None, own: Setting | None, net: Network,
                  strategy: Strategy) -> dict[str, str]:
    """Where a reference's prediction took its strategy and network from, for its header."""
    if figure is None:
        return {}
    if own is None:
        return {"setting": "dlscale documents no setting of this reference: its communication is taken to be this "
                           "command's strategy on this network"}
    alike = strategy.communicates_as(own.strategy)
    ours = [what for what, same in (("strategy", alike), ("network", net == own.network)) if same]
    said = f"{' and '.join(ours)}: the reference's own" if ours else \
        "neither the strategy nor the network is the reference's own"
    if not alike:
        said += (f"; this command's strategy is not the reference's ({own.strategy.describe()}): the published "
                 "figure is given back at its device count only in the reference's own")
    return {"setting": f"{said} ({own.text})"}
