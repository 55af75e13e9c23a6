"""`dlscale explain RUN_OR_SWEEP_DIR [--reference NAME[:SERIES]|none] [--against RUN2] [--comm-run DIR]
[--platform NAME]`."""

from __future__ import annotations

import argparse

from dlscale.cli import paths
from dlscale.cli.output import write_json_file
from dlscale.errors import ConfigError
from dlscale.explain import against, text
from dlscale.explain.build import explain
from dlscale.predict import inputs
from dlscale.predict.network import Network
from dlscale.predict.platforms import Platform, platform
from dlscale.rundir import check_output_file, read_comm_run, read_run


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "explain", help="why a run is below the published reference, ranked, and what to change",
        description="Compare a bench, train or scale run with the published reference of its model, precision and "
        "device (or the one named) and list the causes found, largest estimated effect first: the recipe, the "
        "device, the input pipeline, communication, stragglers, software and the measurement itself, each with "
        "the run's evidence, where the estimate comes from and what to change. --against compares two runs' "
        "records. See docs/explain.md.",
    )
    p.add_argument("path", type=paths.PATH, metavar="RUN_OR_SWEEP_DIR", help="a run directory or a dlscale scale sweep")
    p.add_argument("--reference", type=paths.TEXT, default=None, metavar="NAME[:SERIES]",
                   help="the published figure to compare with (e.g. ngc:v100_32gb_amp); none: only what the run "
                        "shows by itself; default: the reference of the same model, precision and device (none "
                        "matching: none, with a note saying so)")
    p.add_argument("--against", type=paths.PATH, default=None, metavar="RUN2",
                   help="instead: what differs between this run's record and RUN2's (settings, environment, packages)")
    p.add_argument("--baseline", type=paths.PATH, default=None, metavar="RUN",
                   help="a 1-rank run of the same settings, for the scaling loss (a sweep's own 1-rank run otherwise)")
    p.add_argument("--comm-run", type=paths.PATH, default=None, metavar="DIR",
                   help="a dlscale comm run of this machine: its all_reduce busbw at the largest size against the "
                        "platform's, and dlscale predict's expected communication")
    p.add_argument("--platform", default=None,
                   help="a shipped machine (dlscale predict --list-platforms): the network dlscale predict expects "
                        "(the comm run's busbw is compared with it; default: the one platform of the run's device)")
    p.add_argument("--json", type=paths.PATH, default=None, help="also write the explanations as JSON to this file")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.json:  # checked before the work: one line now, not a traceback after it
        check_output_file(args.json, "--json")
    if args.against is not None:
        if args.reference is not None:
            raise ConfigError("--against compares two runs' records; drop --reference")
        print("\n".join(against.lines(read_run(args.path), read_run(args.against))))
        return 0
    named = platform(args.platform) if args.platform is not None else None
    explanations = explain(args.path, args.reference, baseline=args.baseline, network=_network(args, named),
                           comm_run=args.comm_run, platform=named)
    for number, explanation in enumerate(explanations):
        if number:
            print()
        print("\n".join(text.lines(explanation)))
    if args.json:
        write_json_file(args.json, [e.as_dict() for e in explanations])
    return 0


def _network(args: argparse.Namespace, named: Platform | None) -> Network | None:
    """dlscale predict's network for the scaling loss: the comm run's measured one, else the platform's."""
    if args.comm_run is not None:
        read_comm_run(args.comm_run)  # a one-line error for a directory that is not a comm run
        return inputs.network_from_comm_run(args.comm_run)
    return named.network() if named is not None else None
