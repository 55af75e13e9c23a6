"""Where a training step's time goes: NVTX ranges, a torch.profiler trace, a step breakdown.

Range names are those of the NERSC SC20 tutorial's train.py, so its Nsight Systems recipe
(`nsys profile --capture-range=nvtx --nvtx-capture=PROFILE ...`) applies unchanged:

    epoch N > iteration N > ...             warm-up steps, outside PROFILE
    PROFILE                                 the profiled window
      epoch N
        iteration N
          data                              waiting for the next batch (and its copy to the device)
          forward/loss/backward             (once per micro-batch with gradient accumulation)
            forward                         autocast forward + loss        (dlscale's sub-ranges)
            backward                        precision.backward + strategy.after_backward
          optimizer.step                    precision.step + strategy.after_step
          zero_grad

A profiled step is dlscale.train.step.train_step itself, given a RegionTimer as its regions:
every micro-batch of an accumulated step, and zero_grad(set_to_none=True) last, as in training.
With a device sync, each region ends with a synchronisation so that it (and its NVTX range)
measures the device work it launched, not only the launch, as SC20's nvtx_range_push/pop do.
Without backends, a range costs one attribute test and nothing else.

After the timed window, measure_overlap() estimates how much of DDP's gradient allreduce runs
hidden under backward, measure_grad_ready() records when backward produces each gradient, and a
few more steps run under torch.profiler for a trace; none of them is part of the timed steps.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from dlscale.distributed import gather_over_ranks
from dlscale.errors import StorageError
from dlscale.metrics.timing import device_synchronizer, mean_ci95
from dlscale.rundir import check_output_dir, storing, write_text
from dlscale.rundir.files import is_file
from dlscale.train.step import Batch, StepParts, train_step

Clock = Callable[[], float]

# ------------------------------------------------------------------------------------ ranges


class RangeBackend(Protocol):
    def push(self, name: str) -> None: ...

    def pop(self) -> None: ...


class NvtxBackend:
    """torch.cuda.nvtx: ranges that Nsight Systems draws on its timeline (CUDA builds only)."""

    def push(self, name: str) -> None:
        torch.cuda.nvtx.range_push(name)

    def pop(self) -> None:
        torch.cuda.nvtx.range_pop()


class RecordFunctionBackend:
    """torch.profiler.record_function: the same ranges as user annotations in a profiler trace."""

    def __init__(self) -> None:
        self._open: list[torch.profiler.record_function] = []

    def push(self, name: str) -> None:
        scope = torch.profiler.record_function(name)
        scope.__enter__()
        self._open.append(scope)

    def pop(self) -> None:
        self._open.pop().__exit__(None, None, None)


_NO_RANGE = contextlib.nullcontext()


class Ranges:
    """Nested named ranges sent to every backend. `with ranges(name):` or push()/pop().

    sync, if given, runs before every push and pop (a device synchronisation makes a range
    cover the device work launched inside it). With no backends, ranges(name) returns one
    shared nullcontext: no sync, no backend call.
    """

    def __init__(self, backends: Iterable[RangeBackend] = (), *, sync: Callable[[], None] | None = None):
        self.backends = tuple(backends)
        self.sync = sync
        self.enabled = bool(self.backends)

    def push(self, name: str) -> None:
        if self.enabled:
            if self.sync is not None:
                self.sync()
            for backend in self.backends:
                backend.push(name)

    def pop(self) -> None:
        if self.enabled:
            if self.sync is not None:
                self.sync()
            for backend in reversed(self.backends):
                backend.pop()

    def __call__(self, name: str) -> contextlib.AbstractContextManager:
        return _Range(self, name) if self.enabled else _NO_RANGE


class _Range:
    __slots__ = ("ranges", "name")

    def __init__(self, ranges: Ranges, name: str):
        self.ranges, self.name = ranges, name

    def __enter__(self) -> None:
        self.ranges.push(self.name)

    def __exit__(self, *exc) -> None:
        self.ranges.pop()


def device_backends(device: torch.device) -> list[RangeBackend]:
    """NVTX on CUDA devices; none elsewhere (the CPU build of torch has no NVTX)."""
    return [NvtxBackend()] if device.type == "cuda" else []


# -------------------------------------------------------------------------- the timed step


TIMED_REGIONS = frozenset({"data", "forward", "backward", "optimizer.step", "zero_grad"})
"""The parts of a step that the breakdown times; other regions the step names (the group
forward/loss/backward) are ranges only."""


class RegionTimer:
    """Times the named regions of TIMED_REGIONS with one clock; each is also a range of the same
    name, and any other region only a range. sync runs at the end of each timed region, before
    the clock is read. A region entered several times (once per micro-batch) adds up; reset()
    starts a step's sums afresh."""

    def __init__(self, ranges: Ranges, *, clock: Clock = time.perf_counter, sync: Callable[[], None] | None = None):
        self.ranges, self.clock, self.sync = ranges, clock, sync
        self.seconds: dict[str, float] = {}

    def reset(self) -> None:
        self.seconds = {}

    def __call__(self, name: str) -> contextlib.AbstractContextManager:
        return _Region(self, name) if name in TIMED_REGIONS else self.ranges(name)


class _Region:
    __slots__ = ("timer", "name", "start")

    def __init__(self, timer: RegionTimer, name: str):
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.timer.ranges.push(self.name)
        self.start = self.timer.clock()

    def __exit__(self, *exc) -> None:
        if self.timer.sync is not None:
            self.timer.sync()
        seconds = self.timer.seconds
        seconds[self.name] = seconds.get(self.name, 0.0) + self.timer.clock() - self.start
        self.timer.ranges.pop()


class BatchSource(Protocol):
    epoch: int
    """The epoch that the next batch belongs to."""

    def __call__(self) -> Batch: ...


def run_steps(parts: StepParts, batches: BatchSource, *, first: int, count: int, ranges: Ranges,
              timer: RegionTimer, after_step: Callable[[], None] = lambda: None,
              accumulation_steps: int = 1) -> list[dict]:
    """Steps first .. first+count-1 inside `epoch N` / `iteration N` ranges; one record per step.
    Each step is train_step over accumulation_steps micro-batches, as training runs it."""
    records, epoch = [], None
    try:
        for index in range(first, first + count):
            if batches.epoch != epoch:
                if epoch is not None:
                    ranges.pop()
                epoch = batches.epoch
                ranges.push(f"epoch {epoch}")
            with ranges(f"iteration {index}"):
                timer.reset()
                start = timer.clock()
                with timer("data"):
                    micro_batches = [batches() for _ in range(accumulation_steps)]
                train_step(parts, micro_batches, regions=timer)
                total = timer.clock() - start
            records.append(_step_record(index, total, timer))
            after_step()
    finally:
        if epoch is not None:
            ranges.pop()
    return records


def _step_record(index: int, total: float, timer: RegionTimer) -> dict:
    seconds = timer.seconds
    optimizer = seconds["zero_grad"] + seconds["optimizer.step"]
    parts = seconds["data"] + seconds["forward"] + seconds["backward"] + optimizer
    return {"step": index, "step_s": total, "data_s": seconds["data"], "forward_s": seconds["forward"],
            "backward_s": seconds["backward"], "optimizer_s": optimizer, "other_s": total - parts,
            "zero_grad_s": seconds["zero_grad"]}


# ---------------------------------------------------------------- communication in backward


def measure_overlap(parts: StepParts, batches: BatchSource, *, steps: int, sync: Callable[[], None] | None,
                    clock: Clock = time.perf_counter) -> dict | None:
    """How much of DDP's gradient allreduce backward hides, measured by difference.

    exposed_comm: mean time of backward with DDP's allreduces minus without them (no_sync),
    i.e. the communication backward waits for, waiting for a slower rank included (so it can
    exceed comm). comm: one allreduce of all gradients (one flat tensor) on its own. The part
    of comm not exposed ran under backward's computation. Both are timed with
    a device sync around them, so this works with NCCL on GPUs as with gloo on CPUs, whatever
    comm hook the strategy registered. None for models without DDP (one rank, decentralized
    strategies, whose communication is the strategy.after_backward part of backward).
    """
    ddp = getattr(parts.model, "_orig_mod", parts.model)  # under torch.compile
    if not isinstance(ddp, DistributedDataParallel) or steps < 1:
        return None
    sync = sync or (lambda: None)
    backward: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(steps):
        images, labels = batches()
        for local in (False, True):
            parts.optimizer.zero_grad(set_to_none=True)
            with ddp.no_sync() if local else contextlib.nullcontext():
                with parts.precision.autocast():
                    loss = parts.loss_fn(parts.model(images), labels)
                sync()
                start = clock()
                parts.precision.backward(loss)
                sync()
                backward[local].append(clock() - start)
    flat = torch.cat([p.grad.reshape(-1) for p in ddp.module.parameters() if p.grad is not None])
    parts.optimizer.zero_grad(set_to_none=True)
    allreduce = []
    for _ in range(steps):
        sync()
        start = clock()
        dist.all_reduce(flat, group=ddp.process_group)
        sync()
        allreduce.append(clock() - start)
    comm = sum(allreduce) / steps
    exposed = (sum(backward[False]) - sum(backward[True])) / steps
    return {"comm_ms": 1000 * comm, "exposed_comm_ms": 1000 * max(exposed, 0.0)}


class _LastBatch:
    """A batch source that remembers the last batch it served, to run it again (`again`) without
    drawing more data than the timed steps did."""

    def __init__(self, batches: BatchSource) -> None:
        self.batches, self.last = batches, None

    @property
    def epoch(self) -> int:
        return self.batches.epoch

    def __call__(self) -> Batch:
        self.last = self.batches()
        return self.last

    def again(self) -> Batch:
        return self.last if self.last is not None else self()


def measure_grad_ready(parts: StepParts, batches: Callable[[], Batch], *, steps: int,
                       sync: Callable[[], None] | None, clock: Clock = time.perf_counter) -> list[dict]:
    """When backward produces each parameter's gradient: ms after backward starts, mean of `steps`
    backward passes without communication (DDP's no_sync). With a device sync in each hook, a GPU's
    time is the gradient's, not its launch's. What `dlscale predict --from-run` lays DDP's buckets on."""
    if steps < 1:
        return []
    module = getattr(parts.model, "_orig_mod", parts.model)
    ddp = module if isinstance(module, DistributedDataParallel) else None
    named = [(n, p) for n, p in (ddp.module if ddp else module).named_parameters() if p.requires_grad]
    sync = sync or (lambda: None)
    times: dict[str, list[float]] = {n: [] for n, _ in named}
    start = [0.0]

    def hook(name: str) -> Callable[[torch.Tensor], None]:
        def record(_: torch.Tensor) -> None:
            sync()
            times[name].append(clock() - start[0])
        return record

    handles = [p.register_post_accumulate_grad_hook(hook(n)) for n, p in named]
    try:
        for _ in range(steps):
            images, labels = batches()
            parts.optimizer.zero_grad(set_to_none=True)
            with ddp.no_sync() if ddp else contextlib.nullcontext():
                with parts.precision.autocast():
                    loss = parts.loss_fn(parts.model(images), labels)
                sync()
                start[0] = clock()
                parts.precision.backward(loss)
                sync()
    finally:
        for handle in handles:
            handle.remove()
        parts.optimizer.zero_grad(set_to_none=True)
    return [{"name": n, "numel": p.numel(), "ready_ms": 1000 * sum(times[n]) / len(times[n])}
            for n, p in named if times[n]]


# ------------------------------------------------------------------------ the whole window


def profile_window(parts: StepParts, batches: BatchSource, device: torch.device, *, warmup: int, steps: int,
                   trace_steps: int = 0, trace_path: Path | None = None, sync: bool = True,
                   backends: Sequence[RangeBackend] | None = None, clock: Clock = time.perf_counter,
                   accumulation_steps: int = 1) -> dict:
    """Warm-up steps; `steps` timed steps inside the PROFILE range; the allreduce overlap probe
    (DDP only, measure_overlap); then `trace_steps` steps under torch.profiler, kept apart so
    that neither the probe nor the profiler's overhead is in the timed steps.

    Returns {"steps": this rank's per-step records, "breakdown": their means, "trace": path,
    "grad_ready": measure_grad_ready's per-parameter times}.
    """
    batches = _LastBatch(batches)
    device_sync = device_synchronizer(device) if sync and device.type == "cuda" else None
    ranges = Ranges(device_backends(device) if backends is None else backends)
    timer = RegionTimer(ranges, clock=clock, sync=device_sync)
    micro = {"accumulation_steps": accumulation_steps}
    run_steps(parts, batches, first=0, count=warmup, ranges=ranges, timer=timer, **micro)
    with ranges("PROFILE"):
        records = run_steps(parts, batches, first=warmup, count=steps, ranges=ranges, timer=timer, **micro)
    breakdown = summarize(records)
    overlap = measure_overlap(parts, batches, steps=min(steps, 5), sync=device_synchronizer(device), clock=clock)
    breakdown.update(overlap or {"comm_ms": None, "exposed_comm_ms": None})
    ready = measure_grad_ready(parts, batches.again, steps=min(steps, 3), sync=device_synchronizer(device),
                               clock=clock)
    traced = None
    if trace_steps > 0 and trace_path is not None:
        traced_ranges = Ranges([*ranges.backends, RecordFunctionBackend()])
        traced_timer = RegionTimer(traced_ranges, clock=clock)

        def run(step: Callable[[], None]) -> None:  # one more step: the profiler's own warm-up
            run_steps(parts, batches, first=warmup + steps, count=trace_steps + 1, ranges=traced_ranges,
                      timer=traced_timer, after_step=step, **micro)

        traced = record_trace(run, trace_steps, trace_path, device)
    return {"steps": records, "breakdown": breakdown, "trace": traced, "grad_ready": ready}


def record_trace(run: Callable[[Callable[[], None]], None], steps: int, path: Path, device: torch.device) -> Path:
    """Run `run(step)`, which calls step() after each of steps + 1 training steps, under
    torch.profiler (CPU, and CUDA on GPUs); the first step warms the profiler up and is dropped.
    Writes a Chrome trace JSON to path (Perfetto, chrome://tracing, and TensorBoard's profiler
    plugin, which reads *.pt.trace.json files and splits them at its ProfilerStep#N marks) and
    the top operators by self time next to it (<name>.ops.txt)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    check_output_dir(path.parent, "--out", "the trace folder")
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=steps, repeat=1)
    with storing(path, "--out"), torch.profiler.profile(  # the trace is written as its last step ends
            activities=activities, schedule=schedule,
            on_trace_ready=lambda done: done.export_chrome_trace(str(path))) as profiler:
        run(profiler.step)
    if not is_file(path):  # torch's exporter reports a failed write in its log alone
        raise StorageError(f"cannot write {path} (the profiler wrote no trace there); choose another --out")
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    table = profiler.key_averages().table(sort_by=sort_by, row_limit=25)
    write_text(path.with_name(path.name.replace(".pt.trace.json", "") + ".ops.txt"), table + "\n", flag="--out")
    return path


# ------------------------------------------------------------------------------ breakdown

BREAKDOWN_KEYS = ("step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms",
                  "zero_grad_ms", "comm_ms", "exposed_comm_ms", "step_ms_ci95")
"""Per-rank means over the window in ms; data + forward + backward + optimizer + other = step.
optimizer includes zero_grad; comm_ms (all gradients allreduced alone) and exposed_comm_ms (the
part of it backward waits for) come from measure_overlap and are None without DDP."""


def summarize(records: list[dict]) -> dict:
    def mean_ms(key: str) -> float:
        return 1000 * sum(r[key] for r in records) / len(records)

    out = {f"{key}_ms": mean_ms(f"{key}_s") for key in
           ("step", "data", "forward", "backward", "optimizer", "other", "zero_grad")}
    out["step_ms_ci95"] = 1000 * mean_ci95([r["step_s"] for r in records])[1]
    return out


def gather_breakdowns(local: dict, device: torch.device) -> list[dict]:
    """Every rank's breakdown, on every rank (one all_gather of a small tensor), with overlap_pct."""
    ranks = gather_over_ranks({key: math.nan if local[key] is None else local[key] for key in BREAKDOWN_KEYS},
                              device)  # None travels as NaN
    rows = []
    for rank in range(len(ranks[BREAKDOWN_KEYS[0]])):
        entry = {"rank": rank, **{key: None if math.isnan(ranks[key][rank]) else ranks[key][rank]
                                  for key in BREAKDOWN_KEYS}}
        comm, exposed = entry["comm_ms"], entry["exposed_comm_ms"]
        # min: with nothing exposed, 100 x comm / comm can round to 100.00000000000001
        entry["overlap_pct"] = min(100 * max(comm - exposed, 0.0) / comm, 100.0) if comm else None
        rows.append(entry)
    return rows


def slowest(rows: list[dict]) -> dict:
    return max(rows, key=lambda row: row["step_ms"])


def format_breakdown(rows: list[dict], *, warmup: int, steps: int, timing: str) -> str:
    """The breakdown table: one row per rank, then the slowest rank, then its shares.
    timing: how the regions were timed (printed in the title)."""
    lines = [f"Step-time breakdown, ms per step: mean of {steps} steps after {warmup} warm-up ({timing})",
             f"{'rank':<10}{'step':>10}{'data':>9}{'forward':>9}{'backward':>10}{'optimizer':>11}{'other':>8}"
             f"  allreduce alone, exposed in backward (hidden)"]
    top = slowest(rows)
    for label, row in [*((str(r["rank"]), r) for r in rows), (f"slowest={top['rank']}", top)]:
        comm = "-" if row["comm_ms"] is None else f"{row['comm_ms']:.2f}, {row['exposed_comm_ms']:.2f}"
        if row["overlap_pct"] is not None:
            comm += f" ({row['overlap_pct']:.0f}%)"
        lines.append(f"{label:<10}{row['step_ms']:>10.2f}{row['data_ms']:>9.2f}{row['forward_ms']:>9.2f}"
                     f"{row['backward_ms']:>10.2f}{row['optimizer_ms']:>11.2f}{row['other_ms']:>8.2f}  {comm}")
    shares = ", ".join(f"{part} {100 * top[f'{part}_ms'] / top['step_ms']:.1f}%"
                       for part in ("data", "forward", "backward", "optimizer", "other"))
    lines.append(f"slowest rank {top['rank']}: {shares} (+-{top['step_ms_ci95']:.2f} ms step, 95%)")
    if top["comm_ms"] is None:
        lines.append("allreduce: none with one rank" if len(rows) == 1 else
                     "allreduce: measured for DDP only; a decentralized strategy's exchange is in backward")
    return "\n".join(lines)
