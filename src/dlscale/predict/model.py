"""One training step of one device among N, term by term: compute, communication, stragglers, input.

    step(N) = compute t(b) + exposed communication + stragglers + loader start-up per step
    img/s per device = min(batch / step(N), input ceiling)

compute: the single-device step at this batch, t(b) (compute.py: measured points interpolated, a
fixed part t0 plus a per-image part t1 beyond them), split into forward and backward by FLOPs
(backward = 2 x forward: docs/references.md#training-flops-3x) unless a profile measured the split.

communication, by strategy:
- allreduce (DDP): gradient buckets in backward order, each allreduce started when its bucket is
  ready and the previous one is done (timeline.py); exposed = what runs past the end of backward.
  `overlap="none"` runs the buckets after backward instead (apex's delay_allreduce).
- gradient_allreduce: all gradients allreduced after backward (dlscale's, Horovod's form).
- neighbor_allreduce: the parameters sent to the graph's neighbours (graphs.py) after backward
  (dlscale's), or under forward and backward (`overlap="step"`, BlueFog's adapt-with-combine).
- hierarchical_neighbor_allreduce: allreduce inside the node, exchange between nodes through one
  device's NIC, broadcast inside the node.

stragglers: with per-step times of spread sigma on every device, a step waits for the slowest of the
devices it synchronises with: E[max of K] = mean + sigma x E[max of K standard normals]
(docs/references.md#order-statistics); K = N for an allreduce, the device and its in-neighbours for a
neighbour exchange (one peer: K = 2).

input: the loader's images/s per device (per-core rate x cores per device, or a node's measured rate
shared by its devices), a ceiling; and a loader start-up per epoch that a timed window includes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace

from dlscale.errors import ConfigError
from dlscale.predict import graphs, timeline
from dlscale.predict.ceilings import Ceilings
from dlscale.predict.compute import StepTime, from_one_point
from dlscale.predict.layers import model_parameters
from dlscale.predict.network import Network, allreduce_time, check_size, collective_time, exchange_time
from dlscale.predict.workload import GradSpec, Workload

STRATEGIES = ("allreduce", "gradient_allreduce", "neighbor_allreduce", "hierarchical_neighbor_allreduce")
OVERLAPS = ("backward", "none", "step")
LIMIT_THRESHOLD = 0.05
"""A point is called compute-bound while the other terms cost it less than 5% of its rate."""
NO_CEILINGS = Ceilings()
"""No input ceiling, no spread of step times, no loader start-up."""


def workload_for_model(model: str, *, batch_per_device: int, step_s: float | None = None,
                       step_time: StepTime | None = None, grad_bytes_per_element: int = 4, image_size: int = 224,
                       num_classes: int = 1000, width: int = 64, **extra) -> Workload:
    """A Workload whose gradients come from the layer table: ready when backward has done the work
    of every later layer (work = MACs; docs/prediction.md). `step_s`: one figure at the batch, its
    fixed part unknown (taken as zero); `step_time`: a curve or a figure with its fixed part."""
    if step_time is None:
        if step_s is None or step_s <= 0 or batch_per_device < 1:
            raise ConfigError(f"a step time must be > 0 and a batch >= 1 (got {step_s} s at batch {batch_per_device})")
        step_time = from_one_point(batch_per_device, step_s, source=extra.get("source", ""))
    params = model_parameters(model, num_classes=num_classes, width=width, image_size=image_size)
    total = sum(p.macs for p in params) or 1
    done, grads = 0, []
    for p in reversed(params):
        done += p.macs
        grads.append(GradSpec(p.numel, done / total))
    return Workload(model, batch_per_device, step_time, tuple(grads), grad_bytes_per_element, **extra)


@dataclass(frozen=True)
class Strategy:
    name: str = "allreduce"
    algorithm: str = "auto"
    """ring, tree, hierarchical or auto (network.py)."""
    overlap: str = "backward"
    """backward: DDP's buckets under backward; none: after backward; step: under forward and backward."""
    bucket_cap_bytes: int = timeline.DDP_BUCKET_CAP_BYTES
    first_bucket_bytes: int = timeline.DDP_FIRST_BUCKET_BYTES
    fusion_cycle_s: float | None = None
    """Horovod's tensor fusion (buckets by cycle time) instead of DDP's size buckets."""
    topology: str = "exp2"
    schedule: str = "one_peer"
    """static, one_peer or inner_outer (graphs.py)."""
    norm_group: int = 1
    """Devices whose BatchNorm statistics are reduced together (MXNet's BN_GROUP, a SyncBatchNorm group inside a
    node); 1: each device's own."""

    def __post_init__(self) -> None:
        if self.name not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.name!r}; choose one of {', '.join(STRATEGIES)}")
        if self.overlap not in OVERLAPS:
            raise ConfigError(f"unknown overlap {self.overlap!r}; choose one of {', '.join(OVERLAPS)}")
        if isinstance(self.norm_group, bool) or not isinstance(self.norm_group, int) or self.norm_group < 1:
            raise ConfigError(f"a BatchNorm group is a whole number of devices >= 1, got {self.norm_group!r}")

    def describe(self) -> str:
        if self.name in ("allreduce", "gradient_allreduce"):
            where = {"backward": "buckets overlapped with backward", "none": "after backward", "step": "overlapped"}
            where = where if self.name == "allreduce" else dict.fromkeys(where, "after backward")
            cap = f"{self.bucket_cap_bytes / (1 << 20):g} MiB"
            buckets = f"fused every {1e3 * self.fusion_cycle_s:g} ms up to {cap}" if self.fusion_cycle_s else \
                f"{cap} buckets"
            grouped = f", BatchNorm over groups of {self.norm_group}" if self.norm_group > 1 else ""
            return f"{self.name}, {self.algorithm} algorithm, {buckets}, {where[self.overlap]}{grouped}"
        return f"{self.name} on {self.topology}, {self.schedule} exchange, overlap {self.overlap}"

    def communicates_as(self, other: Strategy) -> bool:
        """Alike in every field the model's communication reads for this strategy (gradient_allreduce runs
        after backward whatever its overlap; the allreduce kinds have no graph; the exchanges no buckets)."""
        unread = {"allreduce": ("topology", "schedule"),
                  "gradient_allreduce": ("topology", "schedule", "overlap", "first_bucket_bytes", "fusion_cycle_s"),
                  }.get(self.name, ("bucket_cap_bytes", "first_bucket_bytes", "fusion_cycle_s"))
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(self) if f.name not in unread)


@dataclass(frozen=True)
class Point:
    devices: int
    nodes: int
    batch_per_device: int
    compute_ms: float
    comm_ms: float
    """Time the communication itself takes per step (hidden or not)."""
    exposed_ms: float
    stragglers_ms: float
    step_ms: float
    img_per_s_per_device: float
    input_ceiling: float | None
    limit: str
    efficiency: float | None = None
    fixed_share: float = 0.0
    """The fixed part of the device's step (t0) as a share of its compute at this batch."""
    input_wait_ms: float = 0.0
    """The loader's start-up per epoch, per step (EpochStart)."""

    @property
    def img_per_s_total(self) -> float:
        return self.img_per_s_per_device * self.devices

    @property
    def busy_ms(self) -> float:
        """The step's own time, before any input ceiling: compute, exposed communication, stragglers, input
        waits."""
        return self.compute_ms + self.exposed_ms + self.stragglers_ms + self.input_wait_ms

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["img_per_s_total"] = self.img_per_s_total
        return out


@functools.lru_cache(maxsize=4096)
def expected_max_standard_normal(n: int) -> float:
    """E[max of n independent N(0, 1)] = integral of x n phi(x) Phi(x)^(n-1) dx (Simpson's rule)."""
    if n <= 1:
        return 0.0
    lo, hi, steps = -8.0, 9.0, 3400
    h = (hi - lo) / steps
    total = 0.0
    for i in range(steps + 1):
        x = lo + i * h
        phi = math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        weight = 1 if i in (0, steps) else (4 if i % 2 else 2)
        total += weight * x * n * phi * cdf ** (n - 1)
    return total * h / 3


def _comm(n: int, workload: Workload, strategy: Strategy, net: Network, fwd_s: float,
          bwd_s: float) -> tuple[float, float]:
    """(communication time, exposed communication time) of one step."""
    if n == 1:
        return 0.0, 0.0
    if strategy.name in ("allreduce", "gradient_allreduce"):
        return _gradient_comm(n, workload, strategy, net, bwd_s)
    total = _exchange_comm(n, workload.param_bytes, strategy, net)
    hidden = fwd_s + bwd_s if strategy.overlap == "step" else 0.0
    return total, max(0.0, total - hidden)


def _gradient_comm(n: int, workload: Workload, strategy: Strategy, net: Network, bwd_s: float) -> tuple[float, float]:
    def comm(size: int) -> float:
        return allreduce_time(net, size, n, strategy.algorithm)

    grads = [timeline.Gradient(g.numel * workload.grad_bytes_per_element, g.ready_fraction * bwd_s)
             for g in workload.grads]
    cap = strategy.bucket_cap_bytes
    if strategy.name == "gradient_allreduce":
        line = timeline.after_backward(timeline.ddp_buckets(grads, cap, first_cap_bytes=cap), comm, bwd_s)
    else:
        if strategy.fusion_cycle_s:
            buckets = timeline.fusion_buckets(grads, strategy.fusion_cycle_s, cap)
        else:
            buckets = timeline.ddp_buckets(grads, cap, strategy.first_bucket_bytes)
        line = (timeline.after_backward if strategy.overlap == "none" else timeline.overlap)(buckets, comm, bwd_s)
    return line.comm_s, line.exposed_s


def _exchange_comm(n: int, size: int, strategy: Strategy, net: Network) -> float:
    """One neighbour exchange of the parameters (size bytes)."""
    k = net.per_node(n)
    if strategy.name == "neighbor_allreduce":
        t = graphs.traffic(strategy.topology, strategy.schedule, n, k)
        return exchange_time(net, size, messages=math.ceil(t.messages), intra_bytes=t.intra * size,
                             inter_bytes=t.inter * size, crosses_nodes=t.inter > 0)
    # hierarchical: allreduce inside the node, exchange between nodes through one device's NIC, broadcast
    total = allreduce_time(net, size, k, strategy.algorithm) + collective_time(net, "broadcast", size, k)
    machines = net.nodes(n)
    if machines > 1:
        schedule = "one_peer" if strategy.schedule == "inner_outer" else strategy.schedule
        t = graphs.traffic(strategy.topology, schedule, machines, 1)
        one_nic = replace(net, inter=replace(net.inter, bandwidth_gbs=net.inter.bandwidth_gbs / net.nics_per_node))
        total += exchange_time(one_nic, size, messages=math.ceil(t.messages), intra_bytes=0.0,
                               inter_bytes=t.inter * size, crosses_nodes=True)
    return total


def norm_group_time(workload: Workload, strategy: Strategy, net: Network, n: int) -> float:
    """BatchNorm over groups of devices: each normalisation layer reduces its statistics (a sum and a sum of
    squares per channel, fp32) across its group before it can go on, forward and backward: an allreduce inside
    the node per layer and pass, on the step's critical path (the group's devices share a node)."""
    group = min(strategy.norm_group, net.per_node(n))
    if group < 2:
        return 0.0
    channels = _norm_channels(workload.model)
    return sum(2 * allreduce_time(net, 2 * 4 * c, group) for c in channels)


@functools.lru_cache(maxsize=64)
def _norm_channels(model: str) -> tuple[int, ...]:
    return tuple(p.numel for p in model_parameters(model) if p.norm and p.name.endswith(".weight"))


def waited_on(n: int, strategy: Strategy, net: Network) -> int:
    """How many devices' steps one step waits for: all of them for an allreduce; itself and its
    in-neighbours for a neighbour exchange (as many as it sends to, in these graphs); for the hierarchical
    form, its node and its peer machines' nodes."""
    if n == 1 or strategy.name in ("allreduce", "gradient_allreduce"):
        return n
    k = net.per_node(n)
    if strategy.name == "neighbor_allreduce":
        return min(n, 1 + math.ceil(graphs.traffic(strategy.topology, strategy.schedule, n, k).messages))
    machines = net.nodes(n)
    schedule = "one_peer" if strategy.schedule == "inner_outer" else strategy.schedule
    peers = math.ceil(graphs.traffic(strategy.topology, schedule, machines, 1).messages) if machines > 1 else 0
    return min(n, k * (1 + peers))


def predict_point(n: int, workload: Workload, strategy: Strategy, net: Network, ceilings: Ceilings = NO_CEILINGS,
                  batch: int | None = None) -> Point:
    """The step of one device among n."""
    check_size(n)
    batch = workload.batch_per_device if batch is None else batch
    slowdown, free_core = workload.core_share(net.per_node(n))
    compute = workload.compute_s(batch) * slowdown
    fwd, bwd = compute * workload.forward_fraction, compute * workload.backward_fraction
    if not free_core:  # every core computes: communication cannot hide under backward
        strategy = replace(strategy, overlap="none")
    comm, exposed = _comm(n, workload, strategy, net, fwd, bwd)
    grouped = norm_group_time(workload, strategy, net, n)
    comm, exposed = comm + grouped, exposed + grouped
    stragglers = (ceilings.step_cv or 0.0) * compute * expected_max_standard_normal(waited_on(n, strategy, net))
    waiting = ceilings.epoch_start.per_step_s(n, batch) if ceilings.epoch_start else 0.0
    step = compute + exposed + stragglers + waiting
    rate = batch / step
    ceiling = ceilings.input_ceiling(net.per_node(n))
    if ceiling is not None:
        rate = min(rate, ceiling)
    # The reference batch's time per image: what a smaller batch per device loses against.
    reference = workload.compute_s(workload.batch_per_device) * slowdown / workload.batch_per_device
    losses = {"small batch per device": max(0.0, compute - batch * reference), "exposed communication": exposed,
              "stragglers": stragglers, "input": waiting}
    limit = _limit(batch / min(batch * reference, compute), rate, ceiling, losses)
    if limit == "compute" and slowdown > 1 + LIMIT_THRESHOLD:
        limit = "shared CPU cores"
    if not workload.step_time.fixed_known and batch < workload.batch_per_device:
        limit += " (t0 unknown)"  # a smaller batch than the figure's would lose what t0 holds: the header's range
    return Point(n, net.nodes(n), batch, 1e3 * compute, 1e3 * comm, 1e3 * exposed, 1e3 * stragglers,
                 1e3 * batch / rate, rate, ceiling, limit, fixed_share=workload.step_time.fixed_share(batch),
                 input_wait_ms=1e3 * waiting)


def _limit(ideal_rate: float, rate: float, ceiling: float | None, losses: dict[str, float]) -> str:
    """compute while the other terms cost less than LIMIT_THRESHOLD of the ideal rate (the reference
    batch's compute); else the input ceiling if it binds, else the term that costs the most time."""
    if rate >= ideal_rate * (1 - LIMIT_THRESHOLD):
        return "compute"
    if ceiling is not None and rate >= ceiling:
        return "input"
    return max(losses, key=losses.get)


def predict(devices: Sequence[int], workload: Workload, strategy: Strategy, net: Network,
            ceilings: Ceilings = NO_CEILINGS, *, batch: int | None = None,
            global_batch: int | None = None) -> list[Point]:
    """Every device count, smallest first; efficiency = per-device rate over the smallest count's.
    global_batch: strong scaling (batch per device = global_batch / N); else weak scaling at `batch`
    per device (default: the workload's)."""
    if batch is not None and batch < 1:
        raise ConfigError(f"a batch must be >= 1 image per device, got {batch}")
    points = []
    for n in sorted(set(devices)):
        check_size(n)
        if global_batch is not None:
            if global_batch % n:
                raise ConfigError(f"global batch {global_batch} does not split over {n} devices; "
                                  "pick device counts that divide it")
            batch = global_batch // n
        points.append(predict_point(n, workload, strategy, net, ceilings, batch))
    base = points[0].img_per_s_per_device if points else 0.0
    return [replace(p, efficiency=p.img_per_s_per_device / base if base else None) for p in points]


def compute_for_step(step_s: float, at: Callable[[float], Point]) -> tuple[float, Point] | None:
    """The compute step (seconds at the point's batch) whose predicted step, `at(compute_s)` without an input
    ceiling, is `step_s`: a published step with the model's own communication, stragglers and waits taken out
    (a bisection: the predicted step grows with the compute). None where the model's additions alone exceed it."""
    low, high = step_s * 1e-6, step_s
    if at(low).busy_ms / 1e3 > step_s:
        return None
    if at(high).busy_ms / 1e3 <= step_s * (1 + 1e-12):
        return high, at(high)
    for _ in range(60):
        middle = (low + high) / 2
        if at(middle).busy_ms / 1e3 > step_s:
            high = middle
        else:
            low = middle
    return low, at(low)
