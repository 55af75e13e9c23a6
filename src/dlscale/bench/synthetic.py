"""Synthetic-data training benchmark with the protocol of Horovod's and BlueFog's
`pytorch_synthetic_benchmark.py`, measured honestly.

Protocol: `num_warmup_batches` untimed steps; then `num_iters` timed iterations of
`num_batches_per_iter` steps, each ending with a device synchronisation; a rate per rank per
iteration. The total is measured, not extrapolated: each iteration's rates are gathered from
every rank and summed (BlueFog's way; Horovod prints rank 0's rate x world size).
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields

import torch
from torch import nn

from dlscale.bench.cuda_graphs import WARMUP_STEPS, capture_train_step, check_ranks
from dlscale.config.sections import BenchConfig, OptimConfig
from dlscale.distributed import (
    DistEnv,
    gather_over_ranks,
    init_process_group,
    max_over_ranks,
    over_ranks,
    select_device,
)
from dlscale.errors import DeviceError
from dlscale.metrics.compile import CompileWatch, counting_replays, not_replayed_line, timed_first_step
from dlscale.metrics.compile import describe as describe_compile
from dlscale.metrics.cost import imagenet_epoch_cost
from dlscale.metrics.energy import device_energy_meter, energy_summary
from dlscale.metrics.hardware import mfu, peak_flops
from dlscale.metrics.host_load import HostLoad
from dlscale.metrics.progress import ProgressDisplay
from dlscale.metrics.ranks import describe, lead_times, stragglers
from dlscale.metrics.run import device_name, environment_info
from dlscale.metrics.timing import DeviceTimer, device_synchronizer, mean_ci95, time_forward
from dlscale.models import build_model
from dlscale.models.flops import count_macs, train_flops_per_image
from dlscale.models.memory import check_fits, footprint
from dlscale.precision import build_precision, precision_note
from dlscale.rundir import RunDir, default_run_name
from dlscale.train.replica import build_replica
from dlscale.train.step import StepParts, no_regions, train_step

Clock = Callable[[], float]


@dataclass(frozen=True)
class IterRate:
    total_ips: float
    """Images per second of this rank over the iteration, data wait included."""
    compute_ips: float
    """The same with the time spent fetching batches excluded."""
    step_ms: float = 0.0
    """This rank's time per step in the iteration."""
    data_ms: float = 0.0
    """Its wait for the next batch per step."""
    forward_ms: float = 0.0
    """Its forward pass per step (forward_timer): with data_ms what the allreduce does not even out."""


def measure(
    step: Callable[[torch.Tensor, torch.Tensor], object],
    next_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    *,
    batch_size: int,
    num_warmup_batches: int,
    num_batches_per_iter: int,
    num_iters: int,
    clock: Clock = time.perf_counter,
    sync: Callable[[], None] = lambda: None,
    on_warmup_step: Callable[[], None] = lambda: None,
    on_warmup_done: Callable[[], None] = lambda: None,
    on_iter: Callable[[int, IterRate], None] = lambda i, rate: None,
    forward_timer: DeviceTimer | None = None,
) -> list[IterRate]:
    """Run warm-up steps untimed, then timed iterations; return this rank's rate per iteration.

    The callbacks run outside the timed windows: on_warmup_step after each warm-up step, on_iter
    after an iteration's clock was read. forward_timer: the timer that `step` runs its forward
    passes under, read after each iteration."""
    for _ in range(num_warmup_batches):
        step(*next_batch())
        on_warmup_step()
    sync()
    on_warmup_done()
    if forward_timer is not None:
        forward_timer.total_s(), forward_timer.reset()
    rates = []
    images = batch_size * num_batches_per_iter
    for i in range(num_iters):
        data_s = 0.0
        start = clock()
        for _ in range(num_batches_per_iter):
            fetch = clock()
            batch = next_batch()
            data_s += clock() - fetch
            step(*batch)
        sync()
        elapsed = clock() - start
        forward_s = forward_timer.total_s() if forward_timer is not None else 0.0
        if forward_timer is not None:
            forward_timer.reset()
        per_step = 1000.0 / num_batches_per_iter
        rate = IterRate(images / elapsed, images / max(elapsed - data_s, 1e-12), per_step * elapsed,
                        per_step * data_s, per_step * forward_s)
        rates.append(rate)
        on_iter(i, rate)
    return rates


def summarize(per_rank: Sequence[Sequence[IterRate]]) -> dict:
    """Statistics over ranks (outer) and iterations (inner) of measured rates.

    Totals are the per-iteration sums over ranks; per-rank figures pool every rank's rates.
    """
    num_iters = len(per_rank[0])
    if any(len(rates) != num_iters for rates in per_rank):
        raise ValueError("every rank must report the same number of iterations")
    totals = [sum(rates[i].total_ips for rates in per_rank) for i in range(num_iters)]
    compute = [sum(rates[i].compute_ips for rates in per_rank) for i in range(num_iters)]
    pooled = [rate.total_ips for rates in per_rank for rate in rates]
    total_mean, total_ci = mean_ci95(totals)
    rank_mean, rank_ci = mean_ci95(pooled)
    return {
        "img_per_sec_total_mean": total_mean,
        "img_per_sec_total_ci95": total_ci,
        "img_per_sec_per_rank_mean": rank_mean,
        "img_per_sec_per_rank_ci95": rank_ci,
        "total_ips": total_mean,
        "compute_ips": mean_ci95(compute)[0],
        "iterations": totals,
        "iterations_per_rank": [[rate.total_ips for rate in rates] for rates in per_rank],
        **_rank_times(per_rank),
    }


def _rank_times(per_rank: Sequence[Sequence[IterRate]]) -> dict:
    """Every rank's step, data wait and forward time per step in each timed iteration ([rank][iteration]),
    and the straggler verdict over the iterations (dlscale.metrics.ranks)."""
    table = {key: [[getattr(rate, key) for rate in rates] for rates in per_rank]
             for key in ("step_ms", "data_ms", "forward_ms")}
    by_iteration = [list(column) for column in zip(*table["data_ms"], strict=True)]
    forward = [list(column) for column in zip(*table["forward_ms"], strict=True)]
    return {f"rank_{key}": value for key, value in table.items()} | {
        "stragglers": stragglers(lead_times(by_iteration, forward))}


def gather_rates(rates: list[IterRate], device: torch.device) -> list[list[IterRate]]:
    """Every rank's per-iteration rates, on every rank (one all_gather)."""
    names = [f.name for f in fields(IterRate)]
    ranks = gather_over_ranks({name: [getattr(rate, name) for rate in rates] for name in names}, device)
    return [[IterRate(*(ranks[name][rank][i] for name in names)) for i in range(len(rates))]
            for rank in range(len(ranks[names[0]]))]


def run_bench(
    cfg: BenchConfig,
    env: DistEnv,
    *,
    out: Callable[[str], None] = print,
    clock: Clock = time.perf_counter,
) -> dict:
    """Run the benchmark on this rank; every rank returns the same summary dict (but for host_load: its own)."""
    graphed = cfg.speed.cuda_graphs
    if graphed:
        check_ranks(env.world_size)
    device = select_device(env, cfg.device)
    init_process_group(env, device, cfg.pg_timeout_s, one_rank_group=cfg.strategy.wrap_single_rank)
    say = out if env.is_main else (lambda line: None)
    host = HostLoad.start(env.local_world_size, torch.get_num_threads())  # before the work: the others' load
    setup = build_bench(cfg, env, device)
    parts, pool = setup.parts, setup.pool
    strategy = parts.strategy
    cursor = iter(range(1 << 62))

    def next_batch():
        return pool[next(cursor) % len(pool)]

    # A graph replay runs no Python, so no forward hook fires: no forward time under CUDA graphs.
    forward = None if graphed else DeviceTimer(device)
    if forward is not None and not cfg.speed.compile:
        time_forward(setup.model, forward)  # inside DDP's wrapper, after its buffer broadcast

    compiling = CompileWatch.for_run(cfg.speed.compile, cfg.speed.compile_mode, device)  # None: eager
    sync = device_synchronizer(device)

    def step(images, labels):
        with timed_first_step(compiling, sync, clock):  # the first step only: it compiles
            return train_step(parts, [(images, labels)], regions=lambda name: forward if cfg.speed.compile and
                              name == "forward" else no_regions(name))

    word = "GPU" if device.type == "cuda" else "CPU"
    notes = [precision_note(cfg.precision, device.type),
             f"CUDA graphs: {WARMUP_STEPS} eager steps, then the whole step captured once; warm-up and timed "
             "steps replay it" if graphed else None,
             "DDP wraps the model on this one rank (--wrap-single-rank; a one-rank "
             f"{'NCCL' if device.type == 'cuda' else 'gloo'} group)" if cfg.strategy.wrap_single_rank and
             env.world_size == 1 else None]
    # The host's warning first: Horovod's lines stay together after it.
    for line in (*filter(None, [host.warning()]), f"Model: {cfg.model}", f"Batch size: {cfg.batch_size}",
                 f"Number of {word}s: {env.world_size}", *filter(None, notes), "Running warmup..."):
        say(line)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    meter = device_energy_meter(device)  # NVML, sampled off this thread over the timed iterations
    timed_steps = cfg.num_iters * cfg.num_batches_per_iter

    def warmup_done() -> None:
        strategy.reset_stats()
        host.timed()
        if meter:
            meter.start()
        if compiling:
            compiling.warmup_done(clock() - started)  # replays are counted from here
        say("Running benchmark...")
        bar.start("benchmark", timed_steps)

    def iteration_done(i: int, rate: IterRate) -> None:
        unreplayed = compiling is not None and compiling.not_replayed()
        say(f"Iter #{i}: " + ("no rate: no CUDA graph has replayed yet" if unreplayed else
                              f"{rate.total_ips:.1f} img/sec per {word}"))
        status = "no CUDA graph replayed yet" if unreplayed else f"{rate.total_ips:.1f} img/s per {word}"
        bar.update(advance=cfg.num_batches_per_iter, status=status, redraw=True)

    # The bar (rank 0, on a terminal) is redrawn between steps only, never inside a timed iteration.
    try:
        with ProgressDisplay(enabled=env.is_main) as bar, _out_of_memory_hint(cfg, device), counting_replays(compiling):
            if graphed:
                step = capture_train_step(parts, *next_batch())
            bar.start("warm-up", cfg.num_warmup_batches)
            started = clock()
            rates = measure(
                step, next_batch, batch_size=cfg.batch_size, num_warmup_batches=cfg.num_warmup_batches,
                num_batches_per_iter=cfg.num_batches_per_iter, num_iters=cfg.num_iters, clock=clock,
                sync=sync, on_warmup_step=lambda: bar.update(advance=1),
                on_warmup_done=warmup_done, on_iter=iteration_done, forward_timer=forward,
            )
    finally:  # the meter's sampling thread ends also where the steps raised (out of memory)
        measured = meter.stop() if meter else None
    host_load = host.finish()  # rank 0's: the load at the end, its CPU time over the timed iterations
    summary = summarize(gather_rates(rates, device))
    summary["host_load"] = host_load
    if forward is None:
        summary["rank_forward_ms"] = None  # not measured (CUDA graphs), rather than zeros
    timed_images = cfg.batch_size * cfg.num_batches_per_iter * cfg.num_iters * env.world_size
    summary.update(energy_summary(measured, timed_images, device), price_per_device_hour=cfg.price_per_device_hour,
                   cost_per_imagenet_epoch=imagenet_epoch_cost(summary["total_ips"], env.world_size,
                                                               cfg.price_per_device_hour))
    summary.update(_describe(cfg, env, device, setup, summary))
    summary.update(_peak_memory(device))
    summary.update(_comm_stats(strategy, device))
    own_step_ms = summary["rank_step_ms"][env.rank]
    summary["compile_facts"] = compiling.facts(
        device, steady_step_s=sum(own_step_ms) / len(own_step_ms) / 1000, steps=timed_steps,
        warmup_steps=cfg.num_warmup_batches) if compiling else None
    for line in _rate_lines(summary, env.world_size, word):
        say(line)
    ranks = describe(summary["stragglers"], "iterations")
    if ranks:
        say(ranks[0].upper() + ranks[1:])
    return summary


def _rate_lines(summary: dict, world_size: int, word: str) -> list[str]:
    """The rates, after what compiling did; one line instead of them when CUDA graphs never replayed."""
    facts = summary["compile_facts"]
    lines = describe_compile(facts) if facts else []
    instead = not_replayed_line(facts) if facts else None
    if instead:
        return [*lines, instead]
    return [*lines,
            f"Img/sec per {word}: {summary['img_per_sec_per_rank_mean']:.1f} "
            f"+-{summary['img_per_sec_per_rank_ci95']:.1f}",
            f"Total img/sec on {world_size} {word}(s): "
            f"{summary['img_per_sec_total_mean']:.1f} +-{summary['img_per_sec_total_ci95']:.1f}"]


@dataclass
class BenchSetup:
    """What the benchmark runs, built once (also by `dlscale profile bench`)."""

    parts: StepParts
    """The train step's model (DDP-wrapped and/or compiled), optimizer, precision, strategy, loss."""
    pool: list[tuple[torch.Tensor, torch.Tensor]]
    """Synthetic batches on the device, cycled through."""
    macs: int
    """Multiply-accumulates of one forward pass of one image."""
    model: nn.Module | None = None
    """The unwrapped model (inside the strategy's wrapper and torch.compile)."""


def build_bench(cfg: BenchConfig, env: DistEnv, device: torch.device) -> BenchSetup:
    check_memory(cfg, env, device)  # before anything is allocated: one line for what cannot fit or train
    cfg.speed.apply_globals(device, flags=True)  # bench's options are its flags
    torch.manual_seed(cfg.seed)
    precision = build_precision(cfg.precision, device)
    model = build_model(cfg.model, num_classes=cfg.num_classes, width=cfg.width)
    macs = count_macs(model, image_size=cfg.image_size)
    # The reference benchmarks' optimizer: plain SGD, momentum 0.9, no weight decay, no LR scaling.
    optim = OptimConfig(lr=cfg.lr, momentum=0.9, weight_decay=0.0)
    replica = build_replica(model, env=env, device=device, speed=cfg.speed, strategy=cfg.strategy, optim=optim,
                            global_batch=cfg.batch_size * env.world_size, precision=precision,
                            loss_fn=nn.CrossEntropyLoss())
    return BenchSetup(replica.parts, synthetic_pool(cfg, device, seed=cfg.seed + env.rank), macs, replica.model)


def check_memory(cfg: BenchConfig, env: DistEnv, device: torch.device) -> None:
    """The model, its batch and the pool of synthetic batches against the device's memory (models.memory),
    and the step's shapes against what torch trains on; one line naming the flags otherwise."""
    settings = (f"--model {cfg.model} --width {cfg.width} --batch-size {cfg.batch_size} --image-size "
                f"{cfg.image_size} --num-classes {cfg.num_classes}")
    need = footprint(cfg.model, num_classes=cfg.num_classes, width=cfg.width, batch=cfg.batch_size,
                     image_size=cfg.image_size, settings=settings)
    pool = cfg.pool_batches * cfg.batch_size * 3 * cfg.image_size**2 * 4  # float32 images (synthetic_pool)
    check_fits(need, device, settings=settings, amp=cfg.precision.startswith("amp"), extra_bytes=pool,
               extra=f"{cfg.pool_batches} synthetic batches (--pool-batches)",
               ranks_on_host=env.local_world_size if device.type == "cpu" else 1)


def synthetic_pool(cfg: BenchConfig, device: torch.device, *, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Distinct random batches generated on the device, each with its own random labels."""
    generator = torch.Generator(device=device).manual_seed(seed)
    shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
    pool = []
    for _ in range(cfg.pool_batches):
        images = torch.randn(shape, generator=generator, device=device)
        labels = torch.randint(0, cfg.num_classes, (cfg.batch_size,), generator=generator, device=device)
        pool.append((cfg.speed.place_batch(images), labels))
    return pool


def _describe(cfg: BenchConfig, env: DistEnv, device: torch.device, setup: BenchSetup, summary: dict) -> dict:
    flops_dtype, macs, strategy = setup.parts.precision.flops_dtype, setup.macs, setup.parts.strategy
    name = device_name(device)
    per_image = train_flops_per_image(macs)
    per_device_ips = summary["img_per_sec_total_mean"] / env.world_size
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else None
    peak = peak_flops(name, flops_dtype, sms) if device.type == "cuda" else None
    return {
        "kind": "bench",
        "model": cfg.model,
        "precision": cfg.precision,
        "batch_size": cfg.batch_size,
        "global_batch_size": cfg.batch_size * env.world_size,
        "image_size": cfg.image_size,
        "num_classes": cfg.num_classes,
        "width": cfg.width,
        "world_size": env.world_size,
        "num_nodes": env.num_nodes,
        "launcher": env.launcher,
        "device": device.type,
        "device_name": name,
        "dist_optimizer": cfg.strategy.dist_optimizer,
        "wrap_single_rank": cfg.strategy.wrap_single_rank,
        "topology": strategy.topology,
        **asdict(cfg.speed.resolved(device)),
        "forward_timed": not cfg.speed.cuda_graphs,
        "num_warmup_batches": cfg.num_warmup_batches,
        "num_batches_per_iter": cfg.num_batches_per_iter,
        "num_iters": cfg.num_iters,
        "step_time_ms": 1000.0 * cfg.batch_size * env.world_size / summary["img_per_sec_total_mean"],
        "gmacs_per_image": macs / 1e9,
        "train_gflops_per_image": per_image / 1e9,
        "peak_tflops": peak / 1e12 if peak else None,
        "mfu": mfu(per_device_ips, per_image, name, flops_dtype, sms) if peak else None,
    }


def _comm_stats(strategy, device: torch.device) -> dict:
    """The strategy's communication per step: the slowest rank's time, the mean rank's bytes."""
    stats = strategy.comm_stats()
    time_ms = stats["comm_time_ms_per_step"]  # None: not timed by this strategy (the same on every rank)
    ranks = over_ranks(device, max={"time_ms": math.nan if time_ms is None else time_ms},
                       sum={"bytes": stats["comm_bytes_per_step"], "ranks": 1})
    slowest = ranks.max["time_ms"]
    return {"comm_time_ms_per_step": None if math.isnan(slowest) else slowest,
            "comm_bytes_per_step": ranks.sum["bytes"] / ranks.sum["ranks"],
            "comm_bytes_basis": stats["comm_bytes_basis"]}


def _peak_memory(device: torch.device) -> dict:
    """Peak device memory allocated by torch on GPUs; peak resident set size of the process on CPUs.

    The maximum over ranks, so the record tells whether the largest rank fits.
    """
    if device.type == "cuda":
        value, kind = torch.cuda.max_memory_allocated(device), "cuda_max_allocated"
    else:
        value, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "host_max_rss"  # KiB on Linux
    value = max_over_ranks({"bytes": value}, device)["bytes"]  # float64: exact below 2**53 bytes (8 PiB)
    return {"peak_memory_bytes": int(value), "peak_memory_kind": kind}


class _out_of_memory_hint:
    """Turn an allocation failure into one line that says what to change."""

    def __init__(self, cfg: BenchConfig, device: torch.device) -> None:
        self.cfg, self.device = cfg, device

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        oom = exc_type is not None and (
            issubclass(exc_type, torch.OutOfMemoryError) or "can't allocate memory" in str(exc)
        )
        if oom:
            smaller = max(self.cfg.batch_size // 2, 1)
            raise DeviceError(
                f"batch size {self.cfg.batch_size} of {self.cfg.model} at {self.cfg.image_size} px "
                f"({self.cfg.precision}) does not fit in the memory of {device_name(self.device)}; "
                f"try --batch-size {smaller}"
            ) from None
        return False


def run_name(cfg: BenchConfig, env: DistEnv) -> str:
    """The run directory's default name: model, precision, world size and time."""
    return default_run_name("bench", cfg.model, cfg.precision, f"w{env.world_size}")


def write_run(run: RunDir, cfg: BenchConfig, env: DistEnv, summary: dict) -> dict:
    """Rank 0's run directory, claimed before the benchmark: config.json, env.json, summary.json. Returns
    config.json's object as written."""
    device = torch.device(summary["device"], env.local_rank if summary["device"] == "cuda" else None)
    config = run.write_setup({"kind": "bench", **asdict(cfg), "world_size": env.world_size},
                             {**environment_info(env.world_size, device, env.launcher),
                              "host_load": HostLoad.start_part(summary.get("host_load"))})
    run.finish(summary)
    return config
