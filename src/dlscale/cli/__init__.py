"""The `dlscale` command: one module per subcommand, each with add_parser() and run()."""

from __future__ import annotations

import argparse
import importlib
import sys

from dlscale import __version__
from dlscale.distributed.process_group import peer_failed, record_error_for_launcher
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
    "torchrun": "dlscale.cli.torchrun",
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
        return _one_line_error(f"dlscale {args.command}: error: {error}", 2)
    except RuntimeError as error:
        if not peer_failed(error):
            raise
        return _one_line_error(f"dlscale {args.command}: error: another rank of the job stopped, so this one did "
                               f"({' '.join(str(error).split())[:120]}); the other rank's error says why", 1)
    except KeyboardInterrupt:
        print(f"dlscale {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line_error(line: str, code: int) -> int:
    print(line, file=sys.stderr, flush=True)
    record_error_for_launcher(line)  # torchrun's summary then names this line as the cause
    return code


def main(argv: list[str] | None = None) -> int:
    # record() makes torchrun's failure summary carry the worker's traceback (torch docs,
    # torch.distributed.elastic.multiprocessing.errors); it changes nothing outside torchrun.
    from torch.distributed.elastic.multiprocessing.errors import record

    return record(_run)(argv)
