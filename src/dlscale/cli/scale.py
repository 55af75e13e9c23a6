"""`dlscale scale --nproc 1,2,4 [--mode weak|strong] -- bench|train ARGS`: a scaling sweep."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.sweep import (
    LAUNCHERS,
    MODES,
    SweepSpec,
    parse_ints,
    parse_names,
    run_sweep,
    split_command,
)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "scale", help="sweep world sizes (and strategies, precisions) through torchrun; print the scaling table",
        description="Run the same benchmark or training at each world size through torchrun on this host, "
        "collect the run directories in one sweep directory and print speedup and scaling efficiency. "
        "Example: dlscale scale --nproc 1,2,4 -- bench --model resnet50 --batch-size 32",
    )
    p.add_argument("--nproc", required=True, metavar="N,N,...", help="processes per node to sweep, e.g. 1,2,4")
    p.add_argument("--nnodes", default="1", metavar="N,N,...",
                   help="nodes to sweep (1); above 1, one torchrun agent per node on this host (c10d rendezvous on "
                        "127.0.0.1) emulates a multi-node job")
    p.add_argument("--mode", choices=MODES, default="weak",
                   help="weak (default): the batch per rank stays; strong: the global batch of the smallest world "
                        "size is split over the ranks")
    p.add_argument("--dist-optimizer", default=None, metavar="NAME,NAME",
                   help="strategies to sweep, e.g. allreduce,neighbor_allreduce")
    p.add_argument("--precision", default=None, metavar="NAME,NAME", help="precisions to sweep, e.g. fp32,amp_bf16")
    p.add_argument("--launcher", choices=sorted(LAUNCHERS), default="torchrun", help="how points start (torchrun)")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                   help="how long one point may run before it is stopped and recorded as a timeout (3600)")
    p.add_argument("--output-dir", type=Path, default=Path("runs"), help="where the sweep directory goes (runs)")
    p.add_argument("--name", default=None, help="sweep directory name (sweep-<date>-<time>)")
    p.add_argument("rest", nargs=argparse.REMAINDER, metavar="-- bench|train ARGS",
                   help="the command to sweep and its flags (bench if only flags are given)")
    p.set_defaults(run=run)


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    command, rest = split_command(args.rest)
    if args.timeout <= 0:
        raise ConfigError(f"--timeout must be positive seconds, got {args.timeout:g}")
    return SweepSpec(
        command=command, args=rest, nproc=parse_ints(args.nproc, "--nproc"),
        nnodes=parse_ints(args.nnodes, "--nnodes"), mode=args.mode,
        dist_optimizers=parse_names(args.dist_optimizer), precisions=parse_names(args.precision),
        launcher=args.launcher, timeout_s=args.timeout,
    )


def run(args: argparse.Namespace) -> int:
    from dlscale.report.load import load
    from dlscale.report.scaling import build_series
    from dlscale.report.tables import SCALING_HEADERS, markdown, scaling_table

    spec = spec_from_args(args)
    sweep_dir = args.output_dir / (args.name or time.strftime("sweep-%Y%m%d-%H%M%S"))
    points = run_sweep(spec, sweep_dir, out=lambda line: print(line, flush=True))
    shown, _ = scaling_table(build_series(load([sweep_dir])))
    print()
    print(markdown(SCALING_HEADERS, shown))
    failed = [p for p in points if p.status != "ok"]
    print(f"\n{len(points) - len(failed)} of {len(points)} points ok; logs in {sweep_dir / 'logs'}")
    print(f"Report with plots: dlscale report {sweep_dir} -o {sweep_dir / 'report'}")
    return 1 if failed else 0
