"""`dlscale predict --validate`: every published scaling point dlscale ships, predicted from that
system's own smallest published point and its documented hardware and software, never fitted to the
point it predicts.

Each case names where every input comes from: the compute figure (the system's smallest published
point, per device; with two batch sizes per device published, the fit over them: over the smallest point and
the other points of the predicted point's own step program where the points name one, since a fit across
configurations puts their differences into the fixed part; else a fixed part from another series of the same
device and stack, the device's measured curve or its modelled floor), the platform
(references/platforms.json, every figure sourced), the software facts that choose the strategy
(sources in `software`), and the terms a system needs beyond compute and network, each from a source
of its own: the input pipeline of a node (Marconi100's thesis, its workers sweep), a loader start-up
inside a timed window (HAL's program), the stragglers a published interval implies (BlueFog's
sample). A parameter taken from a published point is never used to predict that point: every row
records the points that fed it (`fed_by`), and a test checks that its own point is not among them.
Points are compared in the unit the source published: total img/s, an efficiency, or a speedup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from dlscale.errors import ConfigError
from dlscale.metrics.cost import IMAGENET_TRAIN_IMAGES
from dlscale.predict.cases import CASES, HAL_PRINT_FREQ, THESIS_WORKERS_PER_GPU, Case, case_reference
from dlscale.predict.ceilings import Ceilings, EpochStart, NodeLoader
from dlscale.predict.compute import (
    Fixed,
    fit_fixed_per_image,
    fixed_for_device,
    from_one_point,
    from_points,
    published_batch,
    published_rate,
    published_step,
)
from dlscale.predict.fixed import device_key, stack_of
from dlscale.predict.inputs import reference_spread
from dlscale.predict.model import Point, Strategy, compute_for_step, predict_point, workload_for_model
from dlscale.predict.network import Network
from dlscale.predict.platforms import platform
from dlscale.predict.spread import default_spread
from dlscale.predict.workload import Workload
from dlscale.report.references import RefSeries, load_reference


@dataclass(frozen=True)
class Row:
    case: Case
    devices: int
    metric: str
    published: float
    predicted: float
    limit: str
    bound: str = ""
    fed_by: tuple[tuple[str, str], ...] = ()
    """(parameter, published point reference:series@devices) for every point that fed a parameter of this
    prediction."""
    point: Point | None = None
    """The predicted point (its step, compute and rate), for the end-to-end time where the source gives one."""
    published_point: dict | None = None

    @property
    def fed_points(self) -> set[str]:
        return {pid for _, pid in self.fed_by}

    def fed_text(self) -> str:
        """'compute: hal:feb@2; loader start: marconi100:workers@1 worker' (each parameter once)."""
        by_parameter: dict[str, list[str]] = {}
        for parameter, pid in self.fed_by:
            if pid not in by_parameter.setdefault(parameter, []):
                by_parameter[parameter].append(pid)
        return "; ".join(f"{parameter}: {', '.join(pids)}" for parameter, pids in by_parameter.items())

    @property
    def point_id(self) -> str:
        return point_id(self.case.reference, self.case.series, self.devices)

    @property
    def error(self) -> float:
        return self.predicted / self.published - 1


def point_id(reference: str, series: str, devices: int | str) -> str:
    return f"{reference}:{series}@{devices}"


# ----------------------------------------------------------------------------- the terms


@dataclass
class Terms:
    """A case's ceilings and where each came from: the points that fed them, and a sentence."""

    ceilings: Ceilings = field(default_factory=Ceilings)
    fed_by: list[tuple[str, str]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)


def thesis_loader() -> tuple[NodeLoader, list[str], str]:
    """Marconi100's node loader from its thesis's workers sweep at 4 GPUs (neither point is predicted):
    one worker per GPU gives one worker's rate (4 workers on 32 cores, loader-bound), eight per GPU the
    node's rate with a worker on every core (32 workers)."""
    series = load_reference("marconi100").get("workers")
    one, full = series.point(workers=1), series.point(workers=8)
    worker = published_rate(series, one) / (one["workers"] * one["devices"])
    node = published_rate(series, full)
    text = (f"a node's loader (marconi100:workers at 1 and 8 workers per GPU on 4 GPUs: {worker:.1f} img/s per worker, "
            f"{node:.0f} img/s with the node's 32 cores full; {THESIS_WORKERS_PER_GPU} workers per GPU)")
    return (NodeLoader(worker, node, THESIS_WORKERS_PER_GPU),
            [point_id("marconi100", "workers", "1 worker"), point_id("marconi100", "workers", "8 workers")], text)


PARAMETERS = {"node_loader": "node loader", "epoch_start": "loader start", "stragglers": "stragglers"}
"""The parameter each term sets, as the table names it."""


def case_terms(case: Case) -> Terms:
    terms = Terms()
    for name in case.terms:
        if name == "node_loader":
            loader, fed, text = thesis_loader()
            terms.ceilings = replace(terms.ceilings, node_loader=loader)
        elif name == "epoch_start":
            loader, fed, _ = thesis_loader()
            fed = fed[:1]
            start = EpochStart(loader.worker_img_per_s, IMAGENET_TRAIN_IMAGES, HAL_PRINT_FREQ)
            terms.ceilings = replace(terms.ceilings, epoch_start=start)
            text = (f"the epoch's loader start-up in HAL's timed windows (its timer starts before the DataLoader's "
                    f"iterator; windows of {HAL_PRINT_FREQ} steps): one worker makes the first batch at "
                    f"{loader.worker_img_per_s:.1f} img/s, the rate of a loader worker on the same node type "
                    "(marconi100:workers, 1 worker per GPU; IBM AC922, POWER9)")
        elif name == "stragglers":
            series = case_reference(case).get(case.input_series or case.series)
            cv, _ = reference_spread(series, series.point(devices=case.input_devices))
            terms.ceilings = replace(terms.ceilings, step_cv=cv)
            fed = [point_id(case.reference, series.id, case.input_devices)]
            text = (f"stragglers: a per-step spread of {100 * (cv or 0):.1f}% from the interval of "
                    f"{case.reference}:{series.id} (inputs.reference_spread)")
        else:
            raise ConfigError(f"unknown term {name!r}")
        terms.fed_by += [(PARAMETERS[name], pid) for pid in fed]
        terms.texts.append(text)
    default = default_spread(platform(case.platform).kind)
    if terms.ceilings.step_cv is None and default is not None:
        terms.ceilings = replace(terms.ceilings, step_cv=default.cv)
        terms.fed_by.append(("stragglers", default.point))
        terms.texts.append(f"stragglers: a per-step spread of {default.source}")
    return terms


# ----------------------------------------------------------------------------- the compute


def same_program(point: dict, program: str | None) -> bool:
    """Whether a published point ran the step program `program` (MXNet's NETWORK symbol of its configuration
    file): a point or a prediction that names none matches any."""
    return program is None or point.get("program") in (None, program)


def _compute_points(case: Case, program: str | None = None,
                    predicted: str | None = None) -> tuple[RefSeries, list[tuple[str, int, dict]]]:
    """The compute figure's series and the points that may feed a prediction's compute: the case's own input point
    (the compute figure, whatever its program) and, per batch per device, the point with the fewest devices of those
    that ran `program`; never the point `predicted` (reference:series@devices)."""
    series = case_reference(case).get(case.input_series or case.series)
    first = series.point(devices=case.input_devices)
    chosen = {published_batch(series, first): first}
    for p in sorted(series.points, key=lambda p: p.get("devices", 0)):
        if p.get("devices") and (series.value(p, "img_per_s") or p.get("epoch_time_s")) and same_program(p, program) \
                and point_id(case.reference, series.id, p["devices"]) != predicted:
            chosen.setdefault(published_batch(series, p), p)
    return series, [(point_id(case.reference, series.id, p["devices"]), b, p) for b, p in chosen.items()]


def point_setting(case: Case, point: dict, net: Network) -> tuple[Strategy, Network]:
    """The strategy and network of one published point: the case's, with the point's own algorithm (SHARP where
    its configuration asks for it) and its own devices per node."""
    strategy = replace(case.strategy, algorithm=point.get("algorithm") or case.strategy.algorithm,
                       norm_group=int(point.get("bn_group") or case.strategy.norm_group))
    if point.get("nodes"):
        net = replace(net, devices_per_node=max(point["devices"] // point["nodes"], 1))
    return strategy, net


def anchored_step(case: Case, point: dict, batch: int, step_s: float, terms: Terms, net: Network) -> float:
    """A published step with what the model adds there in the case's setting taken out (its communication,
    stragglers and loader start-up: model.compute_for_step), so that the point's own devices give it back;
    as published where the model's additions alone exceed it."""
    strategy, here = point_setting(case, point, net)
    base = workload_for_model(case.model, batch_per_device=batch, step_s=step_s, grad_bytes_per_element=case.grad_bytes,
                              image_size=case.image_size, num_classes=case.num_classes)

    def at(compute_s: float) -> Point:
        work = replace(base, step_time=from_one_point(batch, compute_s))
        return predict_point(point["devices"], work, strategy, here, terms.ceilings, batch=batch)

    solved = compute_for_step(step_s, at)
    return solved[0] if solved else step_s


def case_workload(case: Case, terms: Terms, predicted: str | None = None,
                  program: str | None = None) -> tuple[Workload, list[str], list[str]]:
    """The compute of a case, never from the point `predicted` (reference:series@devices): the fit over
    the series' batch sizes without it, else the input point with a fixed part from elsewhere (stack_fixed,
    else the device's: its measured curve or its first-principles model, else unknown). Each figure is
    anchored: its own communication, stragglers and loader start-up out. Also the points that fed the compute,
    and those that fed the fixed part."""
    series, usable = _compute_points(case, program, predicted)
    net = case_network(case)
    steps, fed = [], []
    for pid, batch, p in usable:
        steps.append((batch, anchored_step(case, p, batch, published_step(series, p), terms, net)))
        fed.append(pid)
    ref = case_reference(case)
    device = series.meta.get("device") or ref.hardware.get("device")
    text = f"{case.reference}:{series.id} at {case.input_devices} device(s)"
    fixed_fed: list[str] = []
    if len(steps) >= 2:
        step_time = from_points(steps, text)
        step_time = replace(step_time, fixed_source=f"fitted to {', '.join(fed)}", fixed_kind="published")
    else:
        batch, step = steps[0]
        fixed, fixed_fed = stack_fixed(case, predicted, program)
        if fixed is None:
            fixed = fixed_for_device(device, series.meta.get("precision"), stack_of(ref.recipe_of(series)),
                                     case.model)
            fixed_fed = [DEVICE_FIXED[fixed.kind]]
        step_time = from_one_point(batch, step, fixed, text)
        fed = fed[:1]
    workload = workload_for_model(case.model, batch_per_device=steps[0][0], step_time=step_time,
                                  grad_bytes_per_element=case.grad_bytes, image_size=case.image_size,
                                  num_classes=case.num_classes)
    return workload, fed, fixed_fed


DEVICE_FIXED = {"measured": "references/device_steps.json", "modelled": "predict/fixed.py's floor",
                "unknown": "none (taken as zero)"}
"""What fed a fixed part that no published point gave, as the table's `parameters from` names it."""


def case_network(case: Case) -> Network:
    net = platform(case.platform).network()
    return replace(net, devices_per_node=case.devices_per_node) if case.devices_per_node else net


def stack_fixed(case: Case, predicted: str | None = None, program: str | None = None) -> tuple[Fixed | None, list[str]]:
    """The fixed part fitted to another shipped series of the same device and software stack that publishes two
    batch sizes per device or more (MLPerf's DGX A100 runs for Azure's, of the same NGC container), anchored in
    that series' own setting, never from the point `predicted`; (None, []) where there is none. The series with
    the most points is taken."""
    series = case_reference(case).get(case.input_series or case.series)
    stack, device = series.meta.get("stack"), device_key(series.meta.get("device"))
    if not stack or device is None:
        return None, []
    best = None
    for other in CASES:
        if other is case or other.input_series:
            continue
        them = case_reference(other).get(other.series)
        if them.id == series.id or them.meta.get("stack") != stack or device_key(them.meta.get("device")) != device:
            continue
        _, usable = _compute_points(other, program, predicted)
        if len({b for _, b, _ in usable}) >= 2 and (best is None or len(usable) > len(best[1])):
            best = (other, usable)
    if best is None:
        return None, []
    other, usable = best
    them, terms, net = case_reference(other).get(other.series), case_terms(other), case_network(other)
    steps = [(b, anchored_step(other, p, b, published_step(them, p), terms, net)) for _, b, p in usable]
    t0, _ = fit_fixed_per_image(steps)
    fed = [pid for pid, _, _ in usable]
    return Fixed(t0, f"{1e3 * t0:.2f} ms, fitted to {', '.join(fed)} (the same {device} and {stack}; their own "
                     "communication out)", kind="published"), fed


def _inputs_text(case: Case, workload: Workload, fed: list[str], terms: Terms) -> str:
    step = workload.step_time
    fixed = step.fixed_source if step.fixed_known else f"unknown, taken as zero: {step.fixed_source}"
    rate = workload.batch_per_device / workload.step_s
    return (f"compute: {case.reference}:{case.input_series or case.series} at {case.input_devices} device(s), "
            f"{rate:.1f} img/s per device at batch {workload.batch_per_device} ({', '.join(fed)}); "
            f"t0 {1e3 * step.fixed_s:.2f} ms ({fixed}); network: {case.platform}; software: "
            f"{case.software}" + "".join(f"; {t}" for t in terms.texts))


# ----------------------------------------------------------------------------- the cases


def run_case(case: Case) -> tuple[list[Row], str]:
    net = case_network(case)
    terms = case_terms(case)
    series = case_reference(case).get(case.series)
    same = (case.input_series or case.series) == case.series
    rows, text = [], ""
    base_point = min(series.points, key=lambda p: p.get("devices", 0))
    for point in sorted(series.points, key=lambda p: p["devices"]):
        n = point["devices"]
        if same and n == case.input_devices:
            continue
        own = point_id(case.reference, case.series, n)
        workload, fed, fixed_fed = case_workload(case, terms, predicted=own, program=point.get("program"))
        text = text or _inputs_text(case, workload, fed, terms)
        fed_by = tuple([("compute", pid) for pid in fed] + [("fixed part", pid) for pid in fixed_fed] + terms.fed_by)
        batch = int(point.get("batch_per_device") or series.meta.get("batch_per_device") or workload.batch_per_device)
        strategy, here = point_setting(case, point, net)
        predicted = predict_point(n, workload, strategy, here, terms.ceilings, batch=batch)
        if series.kind == "efficiency":
            single = workload.batch_per_device / workload.compute_s(workload.batch_per_device)
            rows.append(Row(case, n, "efficiency", point["efficiency"], predicted.img_per_s_per_device / single,
                            predicted.limit, point.get("bound", ""), fed_by))
        elif series.value(point, "img_per_s") is not None:
            rows.append(Row(case, n, "img/s", series.value(point, "img_per_s"), predicted.img_per_s_total,
                            predicted.limit, fed_by=fed_by, point=predicted, published_point=point))
        elif "speedup" in point and n != base_point["devices"]:
            base = predict_point(base_point["devices"], workload, case.strategy, net, terms.ceilings, batch=batch)
            rows.append(Row(case, n, "speedup", point["speedup"], predicted.img_per_s_total / base.img_per_s_total,
                            predicted.limit, fed_by=fed_by))
    return rows, text + _programs_text(series)


def _programs_text(series: RefSeries) -> str:
    """The step program of each point where the series names them (MLPerf's configuration files)."""
    named = [p for p in series.points if p.get("program")]
    if not named:
        return ""
    listed = ", ".join(f"{p['devices']}: {p['program']} ({p.get('config', 'its configuration')})" for p in named)
    return (f"; programs: {listed}; a point's compute is fitted over the series' smallest point and its other "
            "points of the same program only")


def validate_references(cases: Sequence[Case] = CASES) -> tuple[list[Row], dict[str, str]]:
    rows, inputs = [], {}
    for case in cases:
        case_rows, text = run_case(case)
        rows += case_rows
        inputs[f"{case.reference}:{case.series}"] = text
    return rows, inputs
