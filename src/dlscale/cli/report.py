"""`dlscale report RUN_OR_SWEEP_DIRS... [-o DIR] [--reference hal,ngc]`: tables, CSV and plots."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.report import DEFAULT_TOLERANCE_PTS, build_report


def add_parser(subparsers) -> None:

    p = subparsers.add_parser(
        "report", help="report.md, CSV files and PNG plots from run and sweep directories",
        description="Read run directories (dlscale bench/train) and sweep directories (dlscale scale) and write "
        "report.md, CSV tables and PNG plots; --reference overlays published figures.",
    )
    p.add_argument("paths", nargs="+", metavar="RUN_OR_SWEEP_DIR",
                   help="run directories, sweep directories, or folders holding them (e.g. runs/)")
    p.add_argument("-o", "--output-dir", type=Path, default=Path("report"), help="where the report is written (report)")
    p.add_argument("--reference", action="append", default=[], metavar="NAME[,NAME]",
                   help="published figures to set beside ours: hal, ngc, sc20, bluefog, horovod, dlperf, "
                        "marconi100, mlperf, all, or a .json file in the same format (repeatable)")
    p.add_argument("--top1-tolerance", type=float, default=DEFAULT_TOLERANCE_PTS, metavar="POINTS",
                   help="flag a train run whose final top-1 is more than this many percentage points below the "
                        f"smallest-batch run of the same model and data ({DEFAULT_TOLERANCE_PTS:g})")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.top1_tolerance < 0:
        raise ConfigError(f"--top1-tolerance must be >= 0 percentage points, got {args.top1_tolerance:g}")
    words = ["dlscale", "report", *args.paths, "-o", str(args.output_dir),
             *[w for r in args.reference for w in ("--reference", r)], "--top1-tolerance", f"{args.top1_tolerance:g}"]
    report = build_report(args.paths, args.output_dir, args.reference, args.top1_tolerance,
                          command=" ".join(shlex.quote(w) for w in words))
    for line in report.flagged:
        print(f"FLAG: {line}")
    drawn = [p.name for p in report.files if p.suffix == ".png"]
    print(f"Wrote {args.output_dir / 'report.md'}, {len(drawn)} plots, "
          f"{len([p for p in report.files if p.suffix == '.csv'])} CSV files")
    for name, reason in report.not_drawn.items():
        print(f"  not drawn: {name} ({reason})")
    return 0
