"""`dlscale comm`: collective benchmark on torch.distributed with nccl-tests' protocol and table.

For each collective and message size (min_bytes .. max_bytes by step_factor, float32): one check
run on fresh data whose exact result is known, counting wrong elements (#wrong, summed over
ranks); then `warmup_iters` untimed and `iters` timed calls, ending with a device
synchronisation, each rank's mean time averaged over ranks (nccl-tests' default `-a 1`).
algbw = S / t and busbw = algbw x the collective's factor (nccl-tests' doc/PERFORMANCE.md,
docs/references.md#nccl-tests-busbw); S is the whole array for all_gather and reduce_scatter,
as nccl-tests counts it. Out-of-place leaves the input untouched; torch.distributed's all_reduce
and broadcast only work in place, so their out-of-place column copies the input to the output
first (the copy is in the time). The neighbour exchange (decentralized.ops.neighbor_allreduce on
a --topology graph, uniform weights) returns a new tensor, so it has no in-place column; its
busbw factor is the out-degree (bytes one rank sends per second).

A latency-bandwidth fit per collective (predict.network.fit_latency_bandwidth) goes into
summary.json for `dlscale predict --comm-run`. When the job spans nodes, all_reduce is also
measured inside each node (one group per node) and between nodes (one group per local rank),
all groups at once, and fitted per level.

The text is nccl-tests' (bench/comm_table.py): its header with `# Using devices` (every rank's host, pid
and device), then each row printed as soon as its size is measured, not when the collective ends.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from dlscale.bench.comm_table import CommConfig, format_row, header_lines, table_foot, table_head
from dlscale.decentralized import ops as nbr
from dlscale.decentralized import topology
from dlscale.distributed import DistEnv, init_process_group, select_device
from dlscale.errors import ConfigError
from dlscale.metrics.progress import ProgressDisplay, format_eta, remaining_s
from dlscale.metrics.run import device_name, environment_info
from dlscale.metrics.timing import device_synchronizer
from dlscale.predict.network import BUSBW_FACTORS, fit_latency_bandwidth
from dlscale.rundir import RunDir, default_run_name
from dlscale.strategies import TOPOLOGIES

# torch 2.13 renamed the tensor forms (the old names warn); torch >= 2.4 (pyproject) may lack the new ones.
_all_gather_op = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_op = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
ELEMENT = 4  # float32


def _pattern(count: int, device: torch.device, scale: float, offset: int = 0) -> torch.Tensor:
    """scale x (i % 13 + 1) for element i + offset: small integers, exact in float32 sums."""
    period = (torch.arange(13, device=device, dtype=torch.float32) + 1).roll(-(offset % 13)) * scale
    return period.repeat(count // 13 + 1)[:count]


@dataclass
class Case:
    """One collective at one size on this rank: its buffers, its call and its known result."""

    count: int
    """Elements per rank, as nccl-tests' count column."""
    size: int
    """Bytes of the whole array."""
    run: Callable[[bool], None]
    """run(in_place) calls the collective once."""
    output: Callable[[bool], torch.Tensor]
    """The buffer holding the result."""
    reset: Callable[[], None]
    """Refill the inputs with the known data."""
    expected: torch.Tensor


def _case(op: str, size: int, group, device: torch.device, graph) -> Case | None:
    """The buffers, call and known result of `op` on a message of `size` bytes (None: too small to split)."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    count = size // ELEMENT
    if op in ("all_gather", "reduce_scatter"):
        count //= n  # per rank: the size is the whole array
    if count < 1:
        return None
    return _BUILDERS[op](count, n, r, group, device, graph)


def _in_place_op(call: Callable[[torch.Tensor], None], count: int, r: int, device: torch.device,
                 expected: torch.Tensor) -> Case:
    """all_reduce and broadcast: torch has only the in-place form; out-of-place copies the input first."""
    inp, out = torch.empty(count, device=device), torch.empty(count, device=device)

    def run(in_place: bool) -> None:
        if not in_place:
            out.copy_(inp)
        call(inp if in_place else out)

    def reset() -> None:
        inp.copy_(_pattern(count, device, r + 1))

    return Case(count, count * ELEMENT, run, lambda in_place: inp if in_place else out, reset, expected)


def _all_reduce(count, n, r, group, device, graph) -> Case:
    return _in_place_op(lambda t: dist.all_reduce(t, group=group), count, r, device,
                        _pattern(count, device, n * (n + 1) / 2))


def _broadcast(count, n, r, group, device, graph) -> Case:
    root = dist.get_global_rank(group, 0) if group is not None else 0
    return _in_place_op(lambda t: dist.broadcast(t, src=root, group=group), count, r, device,
                        _pattern(count, device, 1))


def _all_gather(count, n, r, group, device, graph) -> Case:
    whole, inp = torch.empty(n * count, device=device), torch.empty(count, device=device)
    mine = whole[r * count:(r + 1) * count]  # in place: this rank's slice of the output is the input

    def reset() -> None:
        inp.copy_(_pattern(count, device, r + 1))
        mine.copy_(inp)

    expected = torch.cat([_pattern(count, device, s + 1) for s in range(n)])
    return Case(count, n * count * ELEMENT, lambda in_place: _all_gather_op(whole, mine if in_place else inp,
                                                                             group=group),
                lambda in_place: whole, reset, expected)


def _reduce_scatter(count, n, r, group, device, graph) -> Case:
    whole, out = torch.empty(n * count, device=device), torch.empty(count, device=device)
    mine = whole[r * count:(r + 1) * count]  # in place: the output is this rank's slice of the input

    def reset() -> None:
        whole.copy_(_pattern(n * count, device, r + 1))

    return Case(count, n * count * ELEMENT,
                lambda in_place: _reduce_scatter_op(mine if in_place else out, whole, group=group),
                lambda in_place: mine if in_place else out, reset,
                _pattern(count, device, n * (n + 1) / 2, offset=r * count))


def _neighbor_allreduce(count, n, r, group, device, graph) -> Case:
    """Uniform weights over self and in-neighbours; a new tensor each call (no in-place form)."""
    inp = torch.empty(count, device=device)
    result: dict[str, torch.Tensor] = {}

    def run(in_place: bool) -> None:
        result["out"] = nbr.neighbor_allreduce(inp)

    def reset() -> None:
        inp.copy_(_pattern(count, device, r + 1))

    sources = topology.in_neighbors(graph, r)
    scale = ((r + 1) + sum(s + 1 for s in sources)) / (1 + len(sources))
    return Case(count, count * ELEMENT, run, lambda in_place: result["out"], reset, _pattern(count, device, scale))


_BUILDERS = {"all_reduce": _all_reduce, "all_gather": _all_gather, "reduce_scatter": _reduce_scatter,
             "broadcast": _broadcast, "neighbor_allreduce": _neighbor_allreduce}


def count_wrong(output: torch.Tensor, expected: torch.Tensor) -> int:
    """Elements that differ from the known result (relative tolerance 1e-5 for the weighted averages)."""
    tolerance = 1e-5 * expected.abs().clamp(min=1.0)
    return int(((output - expected).abs() > tolerance).sum().item())


def _reduce(values: list[float], group, device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, group=group)
    return t.tolist()


def _measure(case: Case, in_place: bool, cfg: CommConfig, group, device, sync) -> tuple[float, int]:
    """(this rank's mean seconds per call, this rank's wrong elements) for one column."""
    case.reset()
    sync()
    case.run(in_place)
    sync()
    wrong = count_wrong(case.output(in_place), case.expected)
    for _ in range(cfg.warmup_iters):
        case.run(in_place)
    sync()
    dist.barrier(group=group)
    start = time.perf_counter()
    for _ in range(cfg.iters):
        case.run(in_place)
    sync()
    return (time.perf_counter() - start) / cfg.iters, wrong


def sweep(op: str, cfg: CommConfig, group, device: torch.device,
          on_size: Callable[[dict], None] = lambda row: None) -> list[dict]:
    """Every size of one collective on `group`: rows with time (us), algbw, busbw (GB/s), #wrong.
    on_size(row) after each size, outside its timed calls."""
    n = dist.get_world_size(group)
    sync = device_synchronizer(device)
    graph = None
    if op == "neighbor_allreduce":
        graph = TOPOLOGIES[cfg.topology](n)
        nbr.set_topology(graph)
    factor = _factor(op, n, graph)
    modes = [m for m in ("out-of-place", "in-place") if cfg.mode in ("both", m)]
    rows = []
    for size in cfg.sizes():
        case = _case(op, size, group, device, graph)
        if case is None:
            continue
        row = {"size": case.size, "count": case.count, "type": "float", "redop": _redop(op),
               "root": 0 if op == "broadcast" else -1}
        for mode in modes:
            if mode == "in-place" and op == "neighbor_allreduce":
                row[mode] = None
                continue
            seconds, wrong = _measure(case, mode == "in-place", cfg, group, device, sync)
            total_s, total_wrong = _reduce([seconds, float(wrong)], group, device)
            t = total_s / n
            algbw = case.size / t / 1e9
            row[mode] = {"time_us": t * 1e6, "algbw_gbs": algbw, "busbw_gbs": algbw * factor, "wrong": int(total_wrong)}
        rows.append(row)
        on_size(row)
        del case
    return rows


class _TimeLeft:
    """The time left of a sweep by bytes measured, not sizes: the largest messages take the longest."""

    def __init__(self, total_bytes: int) -> None:
        self.total, self.done, self.start = total_bytes, 0, time.perf_counter()

    def __call__(self, size: int) -> str:
        self.done += size
        rate = self.done / max(time.perf_counter() - self.start, 1e-9)
        return f"{format_eta(remaining_s(self.done, self.total, rate))} left"


def _busbw(row: dict) -> float:
    """The row's bus bandwidth: out-of-place where measured, else in-place."""
    return (row.get("out-of-place") or row.get("in-place") or {}).get("busbw_gbs", 0.0)


def _redop(op: str) -> str:
    return "sum" if op in ("all_reduce", "reduce_scatter") else ("avg" if op == "neighbor_allreduce" else "none")


def _factor(op: str, n: int, graph) -> float:
    if op == "neighbor_allreduce":
        return float(max(len(topology.out_neighbors(graph, r)) for r in range(n)))
    return BUSBW_FACTORS[op](n)


def fits(op: str, rows: list[dict], n: int, graph_degree: float | None = None) -> dict:
    """The latency-bandwidth fit of each measured column."""
    factor = graph_degree if op == "neighbor_allreduce" else BUSBW_FACTORS[op](n)
    out = {}
    for mode in ("out-of-place", "in-place"):
        points = [(r["size"], r[mode]["time_us"] * 1e-6) for r in rows if r.get(mode)]
        if len(points) >= 2 and factor > 0:
            try:
                out[mode] = asdict(fit_latency_bandwidth([s for s, _ in points], [t for _, t in points], factor))
            except ConfigError as error:
                out[mode] = {"error": str(error)}
    return out


def level_groups(env: DistEnv):
    """(intra-node group, inter-node group) of this rank; collective: every rank builds every group."""
    k, world = env.local_world_size, env.world_size
    intra, _ = dist.new_subgroups(group_size=k)
    inter, _ = dist.new_subgroups_by_enumeration([[r for r in range(world) if r % k == local] for local in range(k)])
    return intra, inter


def rank_devices(device: torch.device) -> list[dict]:
    """Every rank's host, pid and device, in rank order (nccl-tests' `# Using devices` lines); collective."""
    mine = {"rank": dist.get_rank(), "pid": os.getpid(), "host": socket.gethostname(), "device": None,
            "bus_id": None, "name": device_name(device)}
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        mine.update(device=index, bus_id=getattr(torch.cuda.get_device_properties(index), "pci_bus_id", None))
    ranks: list = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine)
    return ranks


def run_comm(cfg: CommConfig, env: DistEnv, out: Callable[[str], None] = print) -> dict:
    """Run the benchmark on this rank; every rank returns the same summary. Rank 0 says nccl-tests' header,
    then each row as soon as its size is measured (out is called once per line)."""
    if env.world_size < 2:
        raise ConfigError("dlscale comm measures communication between ranks: start it with "
                          "torchrun --nproc_per_node 2 -m dlscale comm (or srun, mpirun)")
    device = select_device(env, cfg.device)
    init_process_group(env, device, cfg.pg_timeout_s)
    say = out if env.is_main else (lambda line: None)
    ranks = rank_devices(device)
    for line in header_lines(cfg, ranks, dist.get_backend()):
        say(line)
    levels = [("world", None)]
    if env.num_nodes > 1 and env.local_world_size > 1:
        intra, inter = level_groups(env)
        levels += [("intra", intra), ("inter", inter)]
    results: dict = {}
    sweeps = sum(len(cfg.ops if level == "world" else ("all_reduce",)) for level, _ in levels)
    # Rank 0's bar (or plain line) between sizes, never redrawn more than twice a second: a warm-up
    # call of the next size absorbs the moment it takes. Rows printed meanwhile appear above the bar.
    with ProgressDisplay(enabled=env.is_main) as bar:
        bar.start("comm", sweeps * len(cfg.sizes()), unit="sizes")
        left = _TimeLeft(sweeps * sum(cfg.sizes()))

        def measured(row: dict, op: str) -> None:
            say(format_row(row))
            bar.update(advance=1, status=f"{op} {row['size']} B: {_busbw(row):.2f} GB/s busbw", left=left(row["size"]))

        for level, group in levels:
            for op in cfg.ops if level == "world" else ("all_reduce",):
                n = dist.get_world_size(group)
                for line in table_head(op, cfg, n, level, env.num_nodes, dist.get_backend(), device.type):
                    say(line)
                rows = sweep(op, cfg, group, device, on_size=lambda row, op=op: measured(row, op))
                degree = _factor(op, n, TOPOLOGIES[cfg.topology](n)) if op == "neighbor_allreduce" else None
                fitted = fits(op, rows, n, degree)
                results.setdefault(level, {})[op] = {"ranks": n, "rows": rows, "fit": fitted}
                for line in table_foot(rows, fitted):
                    say(line)
    wrong = sum(col["wrong"] for lv in results.values() for r in lv.values() for row in r["rows"]
                for col in (row.get("out-of-place"), row.get("in-place")) if col)
    return {"kind": "comm", "world_size": env.world_size, "num_nodes": env.num_nodes,
            "local_world_size": env.local_world_size, "launcher": env.launcher, "backend": dist.get_backend(),
            "device": device.type, "device_name": device_name(device), "ranks": ranks, "ops": list(cfg.ops),
            "topology": cfg.topology, "sizes": cfg.sizes(), "warmup_iters": cfg.warmup_iters, "iters": cfg.iters,
            "mode": cfg.mode, "wrong": wrong, "results": results}


def run_name(cfg: CommConfig, env: DistEnv) -> str:
    """The run directory's default name: the collectives, world size and time."""
    return default_run_name("comm", "-".join(cfg.ops), f"w{env.world_size}")


def write_run(run: RunDir, cfg: CommConfig, env: DistEnv, summary: dict) -> None:
    """Rank 0's run directory, claimed before the measurement: config.json, env.json, summary.json."""
    device = torch.device(summary["device"], env.local_rank if summary["device"] == "cuda" else None)
    run.write_setup({"kind": "comm", **asdict(cfg), "world_size": env.world_size},
                    environment_info(env.world_size, device, env.launcher))
    run.finish(summary)
