"""`dlscale explain RUN_OR_SWEEP_DIR [--reference NAME[:SERIES]|none] [--against RUN2]`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.explain import against, text
from dlscale.explain.build import explain
from dlscale.explain.runs import read_run
from dlscale.predict import inputs
from dlscale.predict.network import Network
from dlscale.predict.platforms import platform


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "explain", help="why a run is below the published reference, ranked, and what to change",
        description="Compare a bench, train or scale run with the published reference of its model, precision and "
        "device (or the one named) and list the causes found, largest estimated effect first: the recipe, the "
        "device, the input pipeline, communication, stragglers, software and the measurement itself, each with "
        "the run's evidence, where the estimate comes from and what to change. --against compares two runs' "
        "records. See docs/explain.md.",
    )
    p.add_argument("path", type=Path, metavar="RUN_OR_SWEEP_DIR", help="a run directory or a dlscale scale sweep")
    p.add_argument("--reference", default=None, metavar="NAME[:SERIES]",
                   help="the published figure to compare with (e.g. ngc:v100_32gb_amp); none: only what the run "
                        "shows by itself; default: the reference of the same model, precision and device")
    p.add_argument("--against", type=Path, default=None, metavar="RUN2",
                   help="instead: what differs between this run's record and RUN2's (settings, environment, packages)")
    p.add_argument("--baseline", type=Path, default=None, metavar="RUN",
                   help="a 1-rank run of the same settings, for the scaling loss (a sweep's own 1-rank run otherwise)")
    network = p.add_mutually_exclusive_group()
    network.add_argument("--comm-run", type=Path, default=None, metavar="DIR",
                         help="a dlscale comm run of this machine: dlscale predict's expected communication")
    network.add_argument("--platform", default=None, help="a shipped machine (dlscale predict --list-platforms)")
    p.add_argument("--json", type=Path, default=None, help="also write the explanations as JSON to this file")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.against is not None:
        if args.reference is not None:
            raise ConfigError("--against compares two runs' records; drop --reference")
        print("\n".join(against.lines(read_run(args.path), read_run(args.against))))
        return 0
    explanations = explain(args.path, args.reference, baseline=args.baseline, network=_network(args))
    for number, explanation in enumerate(explanations):
        if number:
            print()
        print("\n".join(text.lines(explanation)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([e.as_dict() for e in explanations], indent=2) + "\n")
    return 0


def _network(args: argparse.Namespace) -> Network | None:
    if args.comm_run is not None:
        return inputs.network_from_comm_run(args.comm_run)
    if args.platform is not None:
        return platform(args.platform).network()
    return None
