"""The `dlscale` command: one module per subcommand, each with add_parser() and run()."""

from __future__ import annotations

import argparse
import importlib
import sys

from dlscale import __version__
from dlscale.errors import DlscaleError

# Subcommand name -> module under dlscale.cli. Adding a command is one module and one line.
COMMANDS = {
    "bench": "dlscale.cli.bench",
    "models": "dlscale.cli.models",
    "train": "dlscale.cli.train",
    "config": "dlscale.cli.config",
    "profile": "dlscale.cli.profile",
    "loader": "dlscale.cli.loader",
    "scale": "dlscale.cli.scale",
    "report": "dlscale.cli.report",
    "slurm": "dlscale.cli.slurm",
}


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags get one line on stderr naming the problem, not the whole usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="dlscale",
        description="Distributed ResNet training and benchmarking on torch.distributed.",
    )
    parser.add_argument("--version", action="version", version=f"dlscale {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=OneLineErrorParser
    )
    for module_name in COMMANDS.values():
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except DlscaleError as error:
        print(f"dlscale {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dlscale {args.command}: interrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    # record() makes torchrun's failure summary carry the worker's traceback (torch docs,
    # torch.distributed.elastic.multiprocessing.errors); it changes nothing outside torchrun.
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(_run)(argv)
