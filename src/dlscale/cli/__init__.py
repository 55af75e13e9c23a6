"""The `dlscale` command: one module per subcommand, each with add_parser() and run().

A command module imports at its top only what its parser needs (no torch, no matplotlib); what the
command runs, it imports in run(). So every `--help` and `dlscale models` start in a fraction of a
second (tests/unit/test_cli_startup.py holds every command's parser to that).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import os
import sys

from dlscale import __version__
from dlscale.errors import DlscaleError, one_line
from dlscale.launch.errors import peer_failed, record_error_for_launcher

# Subcommand name -> module under dlscale.cli. Adding a command is one module and one line.
COMMAND_MODULES = {
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
    "comm": "dlscale.cli.comm",
    "predict": "dlscale.cli.predict",
    "explain": "dlscale.cli.explain",
    "data": "dlscale.cli.data",
}


class OneLineErrorParser(argparse.ArgumentParser):
    """Bad flags get one line on stderr naming the problem, not the whole usage block."""

    def error(self, message: str):
        line = f"{self.prog}: error: {message} (see `{self.prog} --help`)"
        record_error_for_launcher(line)  # a worker of torchrun: its summary names this line
        self.exit(2, line + "\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]):
        # argparse (Python 3.11) drops a value written "--" (`--width=--`) and stores [] where one value belongs,
        # past the option's type: refused here, as any other value its type cannot read.
        if action.option_strings and action.nargs in (None, "?") and arg_strings == ["--"]:
            self.error(f"argument {'/'.join(action.option_strings)}: expected one value, not '--'")
        return super()._get_values(action, arg_strings)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Adds "(default: X)" to a flag's help where the default is a value and the help does not already say it:
    never "(default: None)" or "(default: False)" after a text that states what happens without the flag."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        unset = default is None or default is False or default is argparse.SUPPRESS or default in ([], ())
        if unset or not action.option_strings or "default" in text or f"({default})" in text:
            return text
        return f"{text} (default: %(default)s)"


def leaf_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)command's own parser that the words of argv lead to (`profile train` -> its parser)."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            parser = subs[0].choices[word]
    return parser


def unrecognized(parser: argparse.ArgumentParser, extra: list[str]) -> str:
    """The error for arguments `parser` does not take: the closest option it has, and its own --help."""
    flags = [o for a in parser._actions for o in a.option_strings]
    first = next((word.partition("=")[0] for word in extra if word.startswith("-")), None)
    close = difflib.get_close_matches(first, flags, n=1, cutoff=0.6) if first else []
    guess = f"; did you mean {close[0]}?" if close else ""
    return f"unrecognized arguments: {' '.join(extra)}{guess}"  # argparse's words


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
    for name in commands or COMMAND_MODULES:
        importlib.import_module(COMMAND_MODULES[name]).add_parser(subparsers)
    return parser


def command_of(argv: list[str]) -> str | None:
    """The command the arguments name (the first word that is not an option), if it is one."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMAND_MODULES else None
    return None


def _run(argv: list[str], command: str | None) -> int:
    parser = build_parser([command] if command else None)
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # named by the (sub)command that was given, with its own --help
            leaf_parser(parser, argv).error(unrecognized(leaf_parser(parser, argv), extra))
    except SystemExit as done:  # --help, --version, or a bad flag, whose one line argparse has printed
        return done.code if isinstance(done.code, int) else 2
    try:
        return int(args.run(args) or 0)
    except DlscaleError as error:
        return _one_line_error(f"dlscale {args.command}: error: {error}", 2)
    except RuntimeError as error:
        if not peer_failed(error):
            raise
        return _one_line_error(f"dlscale {args.command}: error: another rank of the job stopped, so this one did "
                               f"({one_line(error, 120)}); the other rank's error says why", 1)
    except KeyboardInterrupt:
        print(f"dlscale {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line_error(line: str, code: int) -> int:
    print(line, file=sys.stderr, flush=True)
    record_error_for_launcher(line)  # torchrun's summary then names this line as the cause
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = command_of(argv)
    try:
        # Only the named command's module is imported, and its parser needs no torch (whose import alone
        # takes about two seconds on a small machine): commands that never run torch never load it.
        if not os.environ.get("TORCHELASTIC_ERROR_FILE"):  # not a worker of torchrun
            code = _run(argv, command)
        else:
            # record() makes torchrun's failure summary carry the worker's traceback (torch docs,
            # torch.distributed.elastic.multiprocessing.errors); it changes nothing outside torchrun.
            from torch.distributed.elastic.multiprocessing.errors import record

            code = record(_run)(argv, command)
        sys.stdout.flush()  # here, not at exit: a reader gone is then this one's to handle
        return code
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """The reader of the output went away (`dlscale config --list | head -1`): stop quietly, as a program killed by
    SIGPIPE does (exit status 128 + 13), with what is left to flush sent nowhere (Python's docs, "Note on
    SIGPIPE")."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 141
