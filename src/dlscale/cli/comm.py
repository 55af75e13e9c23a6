"""`dlscale comm`: collective benchmark with nccl-tests' table, under torchrun, srun or mpirun."""

from __future__ import annotations

import argparse
from pathlib import Path

from dlscale.bench.comm_table import MODES, OPS, CommConfig
from dlscale.cli import DefaultsHelpFormatter, numbers, paths
from dlscale.cli.output import claim_outputs, write_summary_file
from dlscale.config.sections import TOPOLOGY_NAMES
from dlscale.errors import DlscaleError


def parse_ops(values: list[str]) -> tuple[str, ...]:
    ops: list[str] = []
    for value in values:
        for part in (p.strip() for p in value.split(",") if p.strip()):
            chosen = OPS if part == "all" else (part,)
            ops += [op for op in chosen if op not in ops]
    return tuple(ops) or ("all_reduce",)


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "comm", help="collective benchmark (nccl-tests' table and bus bandwidth) and a latency-bandwidth fit",
        description="all_reduce, all_gather, reduce_scatter, broadcast and the neighbour exchange over a range of "
        "message sizes, on NCCL (GPUs) or gloo (CPUs). Run it under a launcher: "
        "torchrun --nproc_per_node 2 -m dlscale comm. Writes summary.json (kind: comm) with a latency-bandwidth "
        "fit per collective for dlscale predict --comm-run.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--op", action="append", default=[], metavar="NAME[,NAME]",
                   help=f"collectives: {', '.join(OPS)}, or all (repeatable; default all_reduce)")
    p.add_argument("-b", "--min-bytes", type=numbers.MESSAGE_BYTES, default=8,
                   help="smallest message (8, 64K, 256M, 1G)")
    p.add_argument("-e", "--max-bytes", type=numbers.MESSAGE_BYTES, default=256 * 1024 ** 2,
                   help="largest message")
    p.add_argument("-f", "--step-factor", type=numbers.STEP_FACTOR, default=2,
                   help="each size is the last one times this")
    p.add_argument("-w", "--warmup-iters", type=numbers.COMM_WARMUP, default=1, help="untimed calls per size")
    p.add_argument("-n", "--iters", type=numbers.COMM_ITERS, default=20, help="timed calls per size")
    p.add_argument("--mode", choices=MODES, default="both", help="out-of-place, in-place or both columns")
    p.add_argument("--topology", choices=sorted(TOPOLOGY_NAMES), default="exp2",

                                                          help="graph of the neighbour exchange (neighbor_allreduce)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: this rank's GPU when CUDA is visible, else the CPU")
    p.add_argument("--pg-timeout", type=numbers.PG_TIMEOUT, default=600.0,
                   help="seconds before a stuck collective fails")
    p.add_argument("--json", type=paths.PATH, default=None, help="also write the summary object to this file")
    p.add_argument("--output-dir", type=paths.PATH, default=Path("runs"), help="root of run directories")
    p.add_argument("--name", type=paths.TEXT, default=None,
                   help="run directory name (default: from the collectives and time)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from dlscale.bench.comm import run_comm, run_name, write_run  # torch: loaded when the command runs
    from dlscale.distributed import DistEnv, shutdown

    cfg = CommConfig(ops=parse_ops(args.op), min_bytes=args.min_bytes, max_bytes=args.max_bytes,
                     step_factor=args.step_factor, warmup_iters=args.warmup_iters, iters=args.iters,
                     mode=args.mode, topology=args.topology, device=args.device, pg_timeout_s=args.pg_timeout)
    env = DistEnv.from_env()
    run_dir = claim_outputs(args.output_dir, args.name or run_name(cfg, env), args.json, "comm", is_main=env.is_main)
    try:
        summary = run_comm(cfg, env, out=lambda line: print(line, flush=True))
        if env.is_main:
            write_run(run_dir, cfg, env, summary)
            print(f"Run directory: {run_dir.path}", flush=True)
            if args.json:
                write_summary_file(args.json, summary)
    finally:
        shutdown()
        if run_dir is not None:
            run_dir.release()
    if summary["wrong"]:
        raise DlscaleError(f"{summary['wrong']} wrong elements: a collective returned a wrong result (see #wrong)")
    return 0
