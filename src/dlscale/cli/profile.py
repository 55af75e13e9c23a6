"""`dlscale profile bench|train ...`: where a training step's time goes.

    dlscale profile bench --model resnet50 --batch-size 64 [--steps 10 --warmup 5 --out DIR]
    dlscale profile train --config cpu:digits [--set ...] [--steps 10 --warmup 5 --out DIR]
    torchrun --standalone --nproc_per_node 2 -m dlscale profile bench --model resnet18

`bench` takes `dlscale bench`'s model, precision and speed flags (synthetic batches on the
device); `train` takes `dlscale train`'s configuration flags (real batches through the loaders).
Both run warm-up steps, then the timed window inside the NVTX range PROFILE, then a short
torch.profiler trace, and write a run directory; docs/profiling.md explains every output.

torch and the training code are imported by the functions that run a profile, not at the top:
`dlscale profile --help` builds its parser without them.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from dlscale.cli import bench as bench_cli
from dlscale.cli import numbers, paths
from dlscale.cli.common import add_config_arguments, resolve_config
from dlscale.errors import ConfigError
from dlscale.launch.local import nsys_command, without_option
from dlscale.metrics.hardware import available_cores
from dlscale.metrics.input_bound import input_bound_warning
from dlscale.rundir import RunDir, check_output_dir, default_run_name, run_path

if TYPE_CHECKING:
    import torch

    from dlscale.distributed import DistEnv

BENCH_ONLY = {"num_warmup_batches": "--warmup", "num_batches_per_iter": "--steps", "num_iters": "--steps",
              "json": "--out"}
"""`dlscale bench` flags that `profile bench` refuses, and the profile flag to use instead."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "profile", help="where the step time goes: NVTX ranges, torch.profiler trace, breakdown, nsys line",
        description="Profile training steps: `dlscale profile bench [bench flags]` (synthetic data) or "
        "`dlscale profile train --config FILE:PRESET` (real data). Several ranks: torchrun ... -m dlscale "
        "profile ...",
    )
    modes = p.add_subparsers(dest="mode", metavar="MODE", required=True, parser_class=type(p))
    bench_cli.add_parser(modes)  # the same model, precision and speed flags as `dlscale bench`
    bench = modes.choices["bench"]
    bench.description = "Profile synthetic-data steps with `dlscale bench`'s flags (its timing flags excepted)."
    for action in bench._actions:  # accepted only to say what to use instead (run_bench)
        if action.dest in BENCH_ONLY or action.dest == "cuda_graphs":
            action.help = argparse.SUPPRESS
    _add_profile_flags(bench)
    bench.set_defaults(run=run_bench)
    train = modes.add_parser("train", help="profile steps of a training configuration on its data",
                             description="Profile steps of a training configuration, batches through its loaders.")
    add_config_arguments(train)
    _add_profile_flags(train)
    train.set_defaults(run=run_train)


def _add_profile_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("profile")
    g.add_argument("--warmup", type=numbers.UNTIMED_STEPS, default=5,
                   help="untimed steps first (allocator, autotuning, workers)")
    g.add_argument("--steps", type=numbers.STEPS, default=10, help="timed steps inside the NVTX range PROFILE")
    g.add_argument("--trace-steps", type=numbers.TRACE_STEPS, default=3,
                   help="steps recorded by torch.profiler after the timed window (0: no trace)")
    g.add_argument("--no-sync", action="store_true",
                   help="do not synchronise the device at region ends (ranges then show launch time only)")
    g.add_argument("--out", type=paths.PATH, default=None, metavar="DIR",
                   help="run directory (default: runs/profile-<mode>-<model>-<time>; in bench mode "
                        "--output-dir and --name set it as for `dlscale bench`)")


# -------------------------------------------------------------------------------- batches


class PoolBatches:
    """Synthetic batches cycled from a pool on the device, as `dlscale bench` feeds them."""

    epoch = 0

    def __init__(self, pool: list[tuple[torch.Tensor, torch.Tensor]]):
        self.pool, self.index = pool, 0

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.index += 1
        return self.pool[(self.index - 1) % len(self.pool)]


class LoaderBatches:
    """Training batches through the run's DeviceFeed, epoch after epoch (set_epoch before each)."""

    def __init__(self, loader, feed):
        self.loader = loader
        self.feed = feed
        self.epoch, self._batches, self._left = 0, None, 0

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._batches is None:
            self.loader.sampler.set_epoch(self.epoch)
            self._batches, self._left = self.feed.batches(self.loader), len(self.loader)
        batch = next(self._batches)
        self._left -= 1
        if self._left == 0:  # the next batch belongs to the next epoch
            self._batches, self.epoch = None, self.epoch + 1
        return batch.images, batch.labels


# --------------------------------------------------------------------------------- modes


def run_bench(args: argparse.Namespace) -> int:
    import torch

    from dlscale.distributed import DistEnv, init_process_group, select_device, shutdown

    for name, instead in BENCH_ONLY.items():
        if getattr(args, name) is not None:
            raise ConfigError(f"--{name.replace('_', '-')} is a `dlscale bench` flag; profile takes {instead}")
    if args.cuda_graphs:
        raise ConfigError("--cuda-graphs is a `dlscale bench` flag: profile times each part of the eager step, "
                          "which a graph replay runs as one; profile without it")
    env = DistEnv.from_env()
    cfg, note = bench_cli.config_from_args(args, has_gpu=args.device != "cpu" and torch.cuda.is_available(),
                                           eager=not (args.compile or args.compile_mode), world_size=env.world_size)
    if note and env.is_main:
        print(f"No --model given: profiling {cfg.model}, batch {cfg.batch_size}, {cfg.image_size} px, "
              f"{cfg.precision}, chosen for this machine as `dlscale bench` chooses.", flush=True)
    device = select_device(env, cfg.device)
    try:
        init_process_group(env, device, cfg.pg_timeout_s, one_rank_group=cfg.strategy.wrap_single_rank)
        with _claim(args, env, cfg.model) as run:  # before anything is built: a refused run leaves no folder
            _profile_bench(args, cfg, env, device, run)  # its objects are freed on return, before shutdown()
    finally:
        shutdown()
    return 0


def _profile_bench(args, cfg, env: DistEnv, device: torch.device, run: RunDir) -> None:
    from dlscale.bench.synthetic import build_bench

    setup = build_bench(cfg, env, device)
    described = {"model": cfg.model, "batch_size": cfg.batch_size, "image_size": cfg.image_size,
                 "precision": cfg.precision, "dist_optimizer": cfg.strategy.dist_optimizer,
                 **asdict(cfg.speed.resolved(device))}
    _profile_into(run, args, env, device, setup.parts, PoolBatches(setup.pool), described, loader=None)


def run_train(args: argparse.Namespace) -> int:
    from dlscale.distributed import DistEnv, init_process_group, select_device, shutdown

    env = DistEnv.from_env()
    cfg, preset = resolve_config(args)
    device = select_device(env, cfg.device)
    try:
        init_process_group(env, device, cfg.pg_timeout_s, one_rank_group=cfg.strategy.wrap_single_rank)
        with _claim(args, env, cfg.model.name) as out:  # before anything is built: a refused run leaves no folder
            _profile_train(args, cfg, preset, env, device, out)  # its objects are freed on return, before shutdown()
    finally:
        shutdown()
    return 0


def _profile_train(args, cfg, preset: str, env: DistEnv, device: torch.device, out: RunDir) -> None:
    from dlscale.train.loop import build_run

    run = build_run(cfg, env, device, out)
    plan, info = run.plan, run.info
    batches = LoaderBatches(run.train_loader, run.feed)
    described = {"preset": preset, "model": cfg.model.name, "data": cfg.data.name,
                 "batch_size": plan.per_rank_batch, "image_size": info.image_size,
                 "precision": cfg.precision, "dist_optimizer": cfg.strategy.dist_optimizer,
                 "num_workers": cfg.data.num_workers, "decode": info.decode, **asdict(cfg.speed.resolved(device))}
    loader = {"workers": cfg.data.num_workers, "decode": info.decode or "not JPEG", "device_type": device.type}
    _profile_into(out, args, env, device, run.parts, batches, described, loader=loader,
                  accumulation_steps=plan.accumulation_steps)


# ------------------------------------------------------------------------ window and output


def _claim(args, env: DistEnv, model: str) -> RunDir:
    """The run directory: --out, or a fresh name chosen by rank 0 and shared, so that every rank writes its trace
    there. Rank 0 claims it (a new or empty folder) and holds its lock; every rank raises its error, if any."""
    from dlscale.distributed import broadcast_from_main, on_main

    root, name = getattr(args, "output_dir", Path("runs")), getattr(args, "name", None)
    path = Path(broadcast_from_main(str(args.out or run_path(root, name or default_run_name("profile", args.mode,
                                                                                               model)))))
    flag = "--out" if args.out or not name else "--name"
    return on_main(env.is_main, lambda: RunDir(path).claim("profile", "--out", name_flag=flag)) or RunDir(path)


def _profile_into(run: RunDir, args, env: DistEnv, device: torch.device, parts, batches, described: dict, *,
                  loader: dict | None, accumulation_steps: int = 1) -> None:
    from dlscale import profiling

    out = run.path
    if args.trace_steps:  # every rank writes its trace there: checked before the steps
        check_output_dir(out / "trace", "--out", "the trace folder")
    if device.type == "cpu":
        # torch.profiler's library (kineto) prints "USDT: ... profiler_start/stop" probe lines at each trace, for
        # tracers a CPU run has none of; its log level above its last (USDT, 5) silences them before its first use.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    result = profiling.profile_window(
        parts,
        batches,
        device,
        warmup=args.warmup,
        steps=args.steps,
        trace_steps=args.trace_steps,
        trace_path=out / "trace" / f"rank{env.rank}.pt.trace.json",
        sync=not args.no_sync,
        accumulation_steps=accumulation_steps,
    )
    rows = profiling.gather_breakdowns(result["breakdown"], device)
    if not env.is_main:
        return
    timing = ("host time only: regions do not wait for the GPU" if args.no_sync else
              "regions end with a device sync") if device.type == "cuda" else "on the CPU, timed as they run"
    table = profiling.format_breakdown(rows, warmup=args.warmup, steps=args.steps, timing=timing)
    warning = None
    if loader is not None:
        worst = max(rows, key=lambda row: row["data_ms"] / row["step_ms"])
        cores = max(available_cores() // env.local_world_size, 1)
        warning = input_bound_warning(
            worst["data_ms"] / 1000, worst["step_ms"] / 1000, cores=cores, batch_size=described["batch_size"], **loader
        )
    nsys = nsys_command(  # Nsight Systems traces CUDA and NVTX: nothing of a CPU run
        _rerun_argv(out),
        out_dir=out,
        world_size=env.world_size,
        local_world_size=env.local_world_size,
        num_nodes=env.num_nodes,
        rendezvous=f"{env.master_addr}:{env.master_port}",
    ) if device.type == "cuda" else None
    _write(run, args, env, device, described, rows, result, table, warning, nsys)
    print(table, flush=True)
    if warning:
        print(f"WARNING: {warning}", flush=True)
    if result["trace"] is not None:
        print(f"Trace ({args.trace_steps} steps, torch.profiler): {result['trace']} (Perfetto or chrome://tracing; "
              f"TensorBoard with torch-tb-profiler: tensorboard --logdir {out})", flush=True)
    if nsys:
        print(f"Nsight Systems, the same run capturing only PROFILE:\n  {nsys}", flush=True)
    print(f"Run directory: {out}", flush=True)


def _cli_argv() -> list[str]:
    """This process's dlscale arguments from `profile` on."""
    argv = sys.argv[1:]
    return argv[argv.index("profile") :] if "profile" in argv else ["profile", "<your profile arguments>"]


def _rerun_argv(out: Path) -> list[str]:
    """What the nsys line reruns: these arguments, into a run directory of its own in this one's nsys folder (a run
    directory holds one run)."""
    return [*without_option(_cli_argv(), "--out", "--output-dir", "--name"), "--out", str(out / "nsys" / "run")]


def _write(run: RunDir, args, env: DistEnv, device, described, rows, result, table, warning, nsys) -> None:
    from dlscale import profiling
    from dlscale.metrics.run import environment_info

    window = {"warmup": args.warmup, "steps": args.steps, "trace_steps": args.trace_steps, "sync": not args.no_sync}
    run.write_setup(
        {
            "kind": "profile",
            "mode": args.mode,
            **described,
            **window,
            "world_size": env.world_size,
            "argv": _cli_argv(),
        },
        environment_info(env.world_size, device, env.launcher),
    )
    run.write_text("breakdown.txt", table + "\n")
    for record in result["steps"]:  # rank 0's steps, in ms
        run.append({(k[:-2] + "_ms" if k.endswith("_s") else k):
                    (v * 1000 if k.endswith("_s") and v is not None else v) for k, v in record.items()})
    top = profiling.slowest(rows)
    run.finish({
        "kind": "profile", "mode": args.mode, **described, **window, "world_size": env.world_size,
        "device": device.type, "breakdown": rows, "slowest_rank": top["rank"], "step_ms": top["step_ms"],
        "input_bound": warning, "trace": str(result["trace"].relative_to(run.path)) if result["trace"] else None,
        "nsys_command": nsys, "grad_ready": result["grad_ready"],
    })
