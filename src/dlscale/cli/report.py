"""`dlscale report RUN_OR_SWEEP_DIRS... [-o DIR] [--reference hal,ngc]`: tables, CSV and plots."""

from __future__ import annotations

import argparse
import functools
import shlex
from pathlib import Path

from dlscale.cli import numbers, paths
from dlscale.errors import ConfigError, DlscaleError
from dlscale.explain import text
from dlscale.explain.build import explain_run
from dlscale.metrics.cost import check_price
from dlscale.report import DEFAULT_TOLERANCE_PTS
from dlscale.report.references import named_series
from dlscale.rundir import check_output_dir, read_run, refuse_a_run


def add_parser(subparsers) -> None:

    p = subparsers.add_parser(
        "report", help="report.md, CSV files and PNG plots from run and sweep directories",
        description="Read run directories (dlscale bench/train) and sweep directories (dlscale scale) and write "
        "report.md, CSV tables and PNG plots; --reference overlays published figures.",
    )
    p.add_argument("paths", nargs="+", type=paths.TEXT, metavar="RUN_OR_SWEEP_DIR",
                   help="run directories, sweep directories, or folders holding them (e.g. runs/)")
    p.add_argument("-o", "--output-dir", type=paths.PATH, default=Path("report"),
                   help="where the report is written (report)")
    p.add_argument("--reference", action="append", type=paths.TEXT, default=[], metavar="NAME[,NAME]",
                   help="published figures to set beside ours: hal, ngc, sc20, bluefog, horovod, dlperf, "
                        "marconi100, mlperf, all, or a .json file in the same format (repeatable)")
    p.add_argument("--top1-tolerance", type=numbers.POINTS, default=DEFAULT_TOLERANCE_PTS, metavar="POINTS",
                   help="flag a train run whose final top-1 is more than this many percentage points below the "
                        f"smallest-batch run of the same model and data ({DEFAULT_TOLERANCE_PTS:g})")
    p.add_argument("--price-per-device-hour", type=numbers.PRICE, default=None, metavar="PRICE",
                   help="what one device costs for one hour, for runs that recorded no price: the runs table "
                        "shows the cost per epoch")
    p.add_argument("--io-epochs", default=None, metavar="FIRST:LAST",
                   help="average the train runs' read GB/s and read operations/s over these epochs (HAL: 10:60); "
                        "default: all")
    p.add_argument("--no-explain", action="store_true", help="leave out dlscale explain's findings per run")
    p.add_argument("--explain-reference", type=paths.TEXT, default=None, metavar="NAME[:SERIES]",
                   help="the published figure dlscale explain compares every run with (e.g. ngc:v100_16gb_amp); "
                        "default: each run's matching reference, else none")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from dlscale.report import build_report  # matplotlib: loaded when a report is drawn, not for --help
    from dlscale.report.io_rates import parse_epochs

    check_price(args.price_per_device_hour)
    if args.explain_reference and args.explain_reference.strip().lower() != "none" and not args.no_explain:
        try:  # a name that does not resolve is one line now, not a note inside report.md and exit 0
            named_series(args.explain_reference)
        except ConfigError as error:
            raise ConfigError(f"--explain-reference: {error}") from None
    refuse_a_run(args.output_dir, "--output-dir", "a report")  # its files would mix with a run's
    check_output_dir(args.output_dir, "--output-dir", "the report folder")  # before anything is read or drawn
    words = ["dlscale", "report", *args.paths, "-o", str(args.output_dir),
             *[w for r in args.reference for w in ("--reference", r)], "--top1-tolerance", f"{args.top1_tolerance:g}"]
    if args.price_per_device_hour is not None:
        words += ["--price-per-device-hour", f"{args.price_per_device_hour:g}"]
    if args.explain_reference:
        words += ["--explain-reference", args.explain_reference]
    io_epochs = parse_epochs(args.io_epochs)
    if args.io_epochs:
        words += ["--io-epochs", args.io_epochs]
    explain = None if args.no_explain else functools.partial(_explained, reference=args.explain_reference)
    report = build_report(args.paths, args.output_dir, args.reference, args.top1_tolerance,
                          command=" ".join(shlex.quote(w) for w in words),
                          price_per_device_hour=args.price_per_device_hour, io_epochs=io_epochs, explain=explain)
    for line in report.flagged:
        print(f"FLAG: {line}")
    drawn = [p.name for p in report.files if p.suffix == ".png"]
    print(f"Wrote {args.output_dir / 'report.md'}, {len(drawn)} plots, "
          f"{len([p for p in report.files if p.suffix == '.csv'])} CSV files")
    for name, reason in report.not_drawn.items():
        print(f"  not drawn: {name} ({reason})")
    return 0


def _explained(path: Path, reference: str | None = None) -> list[str]:
    """dlscale explain's findings for a run, every one ranked: against the reference named by
    --explain-reference, else its matching one, else what the run shows by itself."""
    try:
        run = read_run(path)
        try:
            explanation = explain_run(run, reference)
        except ConfigError:
            if reference:
                raise
            explanation = explain_run(run, "none")  # no published reference matches: what the run shows by itself
        return text.markdown(explanation)
    except DlscaleError as error:
        return [f"not explained ({error})"]
