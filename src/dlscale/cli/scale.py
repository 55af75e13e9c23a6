"""`dlscale scale --nproc 1,2,4 [--mode weak|strong] -- bench|train ARGS`: a scaling sweep.

`dlscale scale --launcher slurm --gpus 2,4,...,64 --gpus-per-node 4 [--no-wait] -- ARGS`: the same
sweep as one SLURM job per point.
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path

from dlscale.cli import numbers, paths
from dlscale.cli.bench import config_from_args as bench_config_from_args
from dlscale.cli.bench import single_batch_size
from dlscale.cli.common import SETTING_FLAGS, parse_command_flags, resolve_config, typed_settings
from dlscale.cli.slurm import add_job_arguments, job_options, loader_workers
from dlscale.cli.tracking import add_tracking_arguments, tracking_from_args
from dlscale.errors import ConfigError, shown
from dlscale.metrics.tracking import track_finished
from dlscale.rundir import read_json, run_path
from dlscale.sweep.plan import (
    MODES,
    SWEEPABLE_COMMANDS,
    SWEPT,
    CommandFacts,
    SweepSpec,
    check_spec,
    given,
    plan_points,
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "scale", help="sweep world sizes (and strategies, precisions) through torchrun; print the scaling table",
        description="Run the same benchmark or training at each world size through torchrun on this host, "
        "collect the run directories in one sweep directory and print speedup and scaling efficiency. "
        "Example: dlscale scale --nproc 1,2,4 -- bench --model resnet50 --batch-size 32. Through SLURM, one "
        "job per point: dlscale scale --launcher slurm --gpus 4,8,16 --gpus-per-node 4 --time 30 -- bench ...",
    )
    p.add_argument("--nproc", type=numbers.PROCS, default=None, metavar="N,N,...",
                   help="processes per node to sweep, e.g. 1,2,4")
    p.add_argument("--nnodes", type=numbers.NODE_LIST, default=None, metavar="N,N,...",
                   help="nodes to sweep (1); above 1, one torchrun agent per node on this host (c10d rendezvous on "
                        "127.0.0.1) emulates a multi-node job")
    p.add_argument("--mode", choices=MODES, default="weak",
                   help="weak (default): the batch per rank stays; strong: the global batch of the smallest world "
                        "size is split over the ranks")
    p.add_argument("--dist-optimizer", default=None, metavar="NAME,NAME",
                   help="strategies to sweep, e.g. allreduce,neighbor_allreduce")
    p.add_argument("--precision", default=None, metavar="NAME,NAME", help="precisions to sweep, e.g. fp32,amp_bf16")
    p.add_argument("--set-sweep", action="append", default=[], metavar="KEY=V,V,...",
                   help="a training setting to sweep, passed to each point as --set KEY=VALUE (repeatable), e.g. "
                        "--set-sweep data.num_workers=1,2,4,8,16 (Marconi100's epoch time against loader workers)")
    p.add_argument("--launcher", choices=sorted(LAUNCHER_SPECS), default="torchrun",
                   help="how points start: torchrun on this host (default), or slurm: one sbatch job per point")
    p.add_argument("--timeout", type=numbers.SECONDS, default=3600.0, metavar="SECONDS",
                   help="how long one point may run before it is stopped and recorded as a timeout (3600); "
                        "slurm: how long to wait for all jobs before cancelling the rest")
    p.add_argument("--output-dir", type=paths.PATH, default=Path("runs"), help="where the sweep directory goes (runs)")
    p.add_argument("--name", type=paths.TEXT, default=None, help="sweep directory name (sweep-<date>-<time>)")
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="-- bench|train ARGS",
                   help="the command to sweep and its flags (bench if only flags are given)")
    slurm = p.add_argument_group("--launcher slurm", "one job per point; the sbatch scripts go to SWEEP/jobs")
    slurm.add_argument("--gpus", type=numbers.DEVICES, default=None, metavar="N,N,...",
                       help="world sizes (GPUs) to sweep, e.g. 2,4,8,16,32,64; nodes fill up first")
    slurm.add_argument("--gpus-per-node", type=numbers.PER_NODE, default=None, metavar="G",
                       help="GPUs per node (with --cpu-only: CPU ranks per node)")
    slurm.add_argument("--no-wait", action="store_true",
                       help="return once the jobs are submitted; `dlscale report SWEEP` reads them when done")
    slurm.add_argument("--poll", type=numbers.POLL_S, default=10.0, metavar="SECONDS",
                       help="seconds between job state queries while waiting (10)")
    add_job_arguments(slurm)
    add_tracking_arguments(p)
    p.set_defaults(run=run)


SLURM_ONLY = ("--gpus", "--gpus-per-node", "--no-wait", "--poll", "--partition", "--time", "--account",
              "--cpus-per-task", "--cpus-per-node", "--mem", "--mem-per-gpu", "--cpu-only", "--signal-seconds",
              "--max-restarts", "--sbatch-option", "--python")


def distinct(values: tuple[int, ...]) -> tuple[int, ...]:
    """A parsed list of counts (numbers.PROCS, NODE_LIST, DEVICES) with each value once, in order."""
    return tuple(dict.fromkeys(values))


def parse_names(text: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v.strip() for v in (text or "").split(",") if v.strip()))


def parse_set_sweeps(values: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`--set-sweep data.num_workers=0,2,4` (repeatable) -> (("data.num_workers", ("0", "2", "4")),)."""
    out = {}
    for text in values:
        key, sep, listed = text.partition("=")
        names = parse_names(listed)
        if not sep or not key.strip() or not names:
            raise ConfigError(f"--set-sweep {shown(text)}: give KEY=V,V,... e.g. --set-sweep data.num_workers=0,2,4")
        if key.strip() in out:
            raise ConfigError(f"--set-sweep {key.strip()} is given twice; list all its values in one")
        out[key.strip()] = names
    return tuple(out.items())


def split_command(rest: list[str]) -> tuple[str, tuple[str, ...]]:
    """`bench --model resnet18 ...` -> ('bench', (...)); flags alone mean bench."""
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest or rest[0].startswith("-"):
        return "bench", tuple(rest)
    if rest[0] not in SWEEPABLE_COMMANDS:
        raise ConfigError(f"`dlscale scale -- {rest[0]} ...`: the command to sweep must be bench or train")
    return rest[0], tuple(rest[1:])


def command_facts(command: str, args: tuple[str, ...], sets: tuple = ()) -> CommandFacts:
    """What the swept command's flags resolve to, checked by its own parser (and for train, by
    resolving its configuration) before anything starts."""
    ns = parse_command_flags(command, args, where="the arguments after --")
    keys = {o.partition("=")[0].strip() for o in getattr(ns, "overrides", [])}
    flags = {setting: flag for setting, flag in SWEPT.values()}
    set_keys = {"dist_optimizer": "strategy.dist_optimizer", "precision": "precision"}
    fixed = frozenset(s for s, flag in flags.items() if given(args, flag) or set_keys[s] in keys)
    if command == "bench":
        bench, _ = bench_config_from_args(ns, has_gpu=False)  # its values are checked here, not at every point
        return CommandFacts(batch_size=single_batch_size(ns.batch_size), fixed=fixed,
                            dist_optimizer=bench.strategy.dist_optimizer)
    cfg, _ = resolve_config(ns)
    for key, _ in sets:  # a flag of the swept setting would be overridden at every point: refused, as --set is
        flags = ["/".join(row.flags) for row in SETTING_FLAGS if row.key == key and key in dict(typed_settings(ns))]
        if flags:
            raise ConfigError(f"{key} is swept by --set-sweep; remove {flags[0]} after --")
    for key, values in sets:  # every swept value checked by the config's own rules, before any point starts
        for value in values:
            resolve_config(ns, also=[f"{key}={value}"])
    return CommandFacts(batch_size=cfg.batch_size, global_batch_size=cfg.global_batch_size,
                        accumulation_steps=cfg.optim.accumulation_steps, fixed=fixed,
                        dist_optimizer=cfg.strategy.dist_optimizer)


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    command, rest = split_command(args.rest)
    common = dict(command=command, args=rest, mode=args.mode, dist_optimizers=parse_names(args.dist_optimizer),
                  precisions=parse_names(args.precision), sets=parse_set_sweeps(args.set_sweep),
                  launcher=args.launcher, timeout_s=args.timeout)
    return LAUNCHER_SPECS[args.launcher](args, common)


def _torchrun_spec(args: argparse.Namespace, common: dict) -> SweepSpec:
    given_flags = [flag for flag in SLURM_ONLY if _differs(args, flag)]
    if given_flags:
        raise ConfigError(f"{given_flags[0]} is for --launcher slurm; add --launcher slurm or remove {given_flags[0]}")
    if args.nproc is None:
        raise ConfigError("give --nproc N,N,... (processes per node to sweep), or --launcher slurm --gpus N,N,...")
    return SweepSpec(nproc=distinct(args.nproc), nnodes=distinct(args.nnodes or (1,)),
                     **common)


def _slurm_spec(args: argparse.Namespace, common: dict) -> SweepSpec:
    # the CPUs a job asks for follow the most loader workers any point runs (a --set-sweep of them included)
    most = [("--set", f"data.num_workers={max(values, key=_number)}") for key, values in common["sets"]
            if key == "data.num_workers"]
    workers = loader_workers(common["command"], [*common["args"], *(w for pair in most for w in pair)],
                             where="the arguments after --")
    return SweepSpec(nproc=_slurm_worlds(args), **common, launcher_options={
        "gpus_per_node": args.gpus_per_node, "wait": not args.no_wait, "poll_s": args.poll,
        "job": {**job_options(args), "loader_workers": workers}})


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


LAUNCHER_SPECS = {"torchrun": _torchrun_spec, "slurm": _slurm_spec}
"""--launcher -> how its flags become a SweepSpec (one line per launcher in dlscale.sweep.run.SWEEP_LAUNCHERS)."""


def _differs(args: argparse.Namespace, flag: str) -> bool:
    """The flag was given: its value is not the parser's default."""
    defaults = argparse.ArgumentParser(add_help=False)
    add_job_arguments(defaults)
    default = {**vars(defaults.parse_args([])), "gpus": None, "gpus_per_node": None, "no_wait": False, "poll": 10.0}
    name = flag.lstrip("-").replace("-", "_")
    return getattr(args, name) != default[name]


def _slurm_worlds(args: argparse.Namespace) -> tuple[int, ...]:
    """--gpus: the world sizes; the nodes come from --gpus-per-node, not --nproc/--nnodes."""
    for flag, value in (("--nproc", args.nproc), ("--nnodes", args.nnodes)):
        if value is not None:
            raise ConfigError(f"{flag} is for --launcher torchrun; with --launcher slurm give world sizes as "
                              "--gpus N,N,... and --gpus-per-node G")
    if args.gpus is None or args.gpus_per_node is None:
        raise ConfigError("--launcher slurm needs --gpus N,N,... (world sizes) and --gpus-per-node G")
    return distinct(args.gpus)


def run(args: argparse.Namespace) -> int:
    # torch and matplotlib (the report's tables): loaded when the sweep runs, not for --help
    from dlscale.report.load import load
    from dlscale.report.scaling import build_series, scaling_metrics
    from dlscale.report.tables import SCALING_HEADERS, markdown, scaling_table
    from dlscale.sweep.run import run_sweep

    spec = spec_from_args(args)
    check_spec(spec)  # the sweep's own flags first, then the swept command's
    tracking = tracking_from_args(args, args.output_dir)
    points = plan_points(spec, command_facts(spec.command, spec.args, spec.sets))
    sweep_dir = run_path(args.output_dir, args.name or time.strftime("sweep-%Y%m%d-%H%M%S"))
    points = run_sweep(spec, points, sweep_dir, out=lambda line: print(line, flush=True))
    submitted = [p for p in points if p.status == "submitted"]
    if submitted:  # the jobs run on without the sweep
        ids = ",".join(p.job_id for p in submitted)
        print(f"\nSubmitted {len(points)} jobs; follow them with: squeue -j {ids}")
        print(f"When they have ended: dlscale report {shlex.quote(str(sweep_dir))} -o "
              f"{shlex.quote(str(sweep_dir / 'report'))}")
        return 0
    series = build_series(load([sweep_dir]))
    shown, _ = scaling_table(series)
    print()
    print(markdown(SCALING_HEADERS, shown))
    failed = [p for p in points if p.status != "ok"]
    print(f"\n{len(points) - len(failed)} of {len(points)} points ok; logs in {sweep_dir / 'logs'}")
    print(f"Report with plots: dlscale report {sweep_dir} -o {sweep_dir / 'report'}", flush=True)
    # The sweep as one MLflow run: its settings, each series' figures at each world size (the step).
    header = {key: value for key, value in read_json(sweep_dir / "sweep.json").items() if key != "points"}
    track_finished(tracking, sweep_dir, kind="scale", settings=header, steps=scaling_metrics(series),
                   summary={"points": len(points), "points_ok": len(points) - len(failed)})
    return 1 if failed else 0
