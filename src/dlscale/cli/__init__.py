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
    "comm": "dlscale.cli.comm",
    "predict": "dlscale.cli.predict",
}


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags get one line on stderr naming the problem, not the whole usage block."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(commands: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every command, or with only `commands` (their modules alone are imported)."""
    parser = OneLineErrorParser(
        prog="dlscale",
        description="Distributed ResNet training and benchmarking on torch.distributed.",
    )
    parser.add_argument("--version", action="version", version=f"dlscale {__version__}")
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", required=True, parser_class=OneLineErrorParser
    )
    for name in commands or COMMANDS:
        importlib.import_module(COMMANDS[name]).add_parser(subparsers)
    return parser


def command_of(argv: list[str]) -> str | None:
    """The command the arguments name (the first word that is not an option), if it is one."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def _run(argv: list[str], command: str | None) -> int:
    parser = build_parser([command] if command else None)
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
    argv = list(sys.argv[1:] if argv is None else argv)
    command = command_of(argv)
    # Only the named command's module is imported: `dlscale predict` and `dlscale report` never
    # load torch (its import alone takes about two seconds on a small machine).
    build_parser([command] if command else None)
    if "torch" not in sys.modules:
        return _run(argv, command)
    # record() makes torchrun's failure summary carry the worker's traceback (torch docs,
    # torch.distributed.elastic.multiprocessing.errors); it changes nothing outside torchrun.
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(_run)(argv, command)
