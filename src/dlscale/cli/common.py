"""Flags that several commands share, and re-parsing another command's flags.

`add_config_arguments` / `resolve_config`: the training configuration (train, config, profile train).
Every flag that sets a configuration setting is one line of a table (SETTING_FLAGS, TRAIN_FLAGS,
STRATEGY_FLAGS: flag -> dotted key), turned into argparse options by the field's own type (the flag is the
field, as in torchtitan's config manager): a Literal field gets its choices, a bool a flag without a value,
a string the text as given. The value goes into the configuration once, already typed, through the
coercion every preset value passes (config/presets.py), in command-line order with `--set`, whose text
alone is read as YAML: `--data 2024` is the folder "2024", `--set data.path=2024` the number (refused).
`add_strategy_arguments` / `strategy_from_args`: the strategy flags of bench and train, named as in
BlueFog's benchmark. `parse_command_flags`: the flags of a command that `dlscale scale` sweeps or
`dlscale slurm` submits, checked by that command's own parser before anything starts.
"""

from __future__ import annotations

import argparse
import importlib
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dlscale.cli import COMMAND_MODULES, OneLineErrorParser, leaf_parser, numbers, paths, unrecognized
from dlscale.config import StrategyConfig, TrainConfig, load_config
from dlscale.config.data import ON_BAD_SAMPLE
from dlscale.config.presets import Override, setting_type, shipped_presets
from dlscale.config.sections import DIST_OPTIMIZERS, DYNAMIC_SCHEDULES, TOPOLOGY_NAMES
from dlscale.errors import ConfigError
from dlscale.metrics.host_load import marked, run_disturbance
from dlscale.rundir import read_run


@dataclass(frozen=True)
class SettingFlag:
    """A command-line flag that sets one setting of the configuration (its dotted key)."""

    key: str
    flags: tuple[str, ...]
    help: str
    type: Callable[[str], Any] | None = None
    """The value's type: one of cli/numbers.py for a number, else taken from the field (text, choices)."""
    choices: tuple[str, ...] | None = None
    """For a text field whose names the dataclass checks itself (a Literal field has its own)."""
    value: Any = None
    """A flag of a bool field takes no value and sets this (None: True)."""
    metavar: str | None = None
    clears: tuple[str, ...] = ()
    """Settings the flag unsets with it: `-b` sets the batch per rank, so a preset's global batch gives way."""


SETTING_FLAGS = (
    SettingFlag("data.path", ("--data",), "data set folder", metavar="PATH"),
    SettingFlag("data.download", ("--download",), "cifar10/cifar100: download the data set into data.path first "
                "if it is not there, its MD5 checked"),
    SettingFlag("data.on_bad_sample", ("--on-bad-sample",), "an image that fails to decode: skip it (counted) or "
                "stop at once", choices=ON_BAD_SAMPLE),
    SettingFlag("device", ("--device",), "auto: this rank's GPU when CUDA is visible, else the CPU"),
    SettingFlag("pg_timeout_s", ("--pg-timeout",), "seconds before a collective that a peer never joins fails",
                type=numbers.PG_TIMEOUT, metavar="SECONDS"),
    SettingFlag("schedule.epochs", ("--epochs",), "epochs to train", type=numbers.EPOCHS, metavar="N"),
    SettingFlag("batch_size", ("-b", "--batch-size"), "images per rank per step; a preset's global batch gives way "
                "(global_batch_size=null)", type=numbers.BATCH, metavar="N", clears=("global_batch_size",)),
    SettingFlag("optim.lr", ("--lr",), "learning rate for optim.reference_batch images per step, scaled to the "
                "global batch by optim.lr_scaling", type=numbers.LR),
    SettingFlag("precision", ("--precision",), "numeric precision"),
    SettingFlag("data.num_workers", ("-j", "--workers"), "loader workers per rank (0: load in the training "
                "process), threads or processes by data.workers_kind: auto takes threads for a JPEG tree on a CUDA "
                "device, else processes", type=numbers.LOADER_WORKERS, metavar="N"),
)
"""The flags of the training configuration that train, config and profile train share."""

TRAIN_FLAGS = (
    SettingFlag("target_accuracy", ("--target-accuracy",), "stop when validation top-1 reaches this fraction "
                "(0.76) and record the time", type=numbers.FRACTION),
    SettingFlag("name", ("--name",), "run directory name (default: <file>-<preset>)"),
    SettingFlag("price_per_device_hour", ("--price-per-device-hour",), "what one device costs for one hour: the "
                "summary states the cost per epoch and per run", type=numbers.PRICE, metavar="PRICE"),
)
"""`dlscale train`'s own flags of the configuration."""

STRATEGY_FLAGS = (
    SettingFlag("strategy.dist_optimizer", ("--dist-optimizer",), "allreduce (DDP, default), gradient_allreduce, "
                "neighbor_allreduce, hierarchical_neighbor_allreduce", choices=tuple(sorted(DIST_OPTIMIZERS))),
    SettingFlag("strategy.topology", ("--topology",), "graph of the neighbor strategies (exp2: exponential-2, "
                "BlueFog's default)", choices=tuple(sorted(TOPOLOGY_NAMES))),
    SettingFlag("strategy.atc_style", ("--atc-style",), "adapt-then-combine: step, then mix with neighbours "
                "(default: adapt-with-combine)"),
    SettingFlag("strategy.dynamic_topology", ("--disable-dynamic-topology",), "exchange with every neighbour each "
                "time instead of one rotating peer", value=False),
    SettingFlag("strategy.num_steps_per_communication", ("--num-steps-per-communication",), "neighbour exchanges on "
                "every N-th step only (1)", type=numbers.EVERY, metavar="N"),
    SettingFlag("strategy.dynamic_schedule", ("--dynamic-schedule",), "peers of the dynamic neighbor_allreduce "
                "(auto: BlueFog's inner-outer exp2 on several nodes, one rotating peer otherwise)",
                choices=DYNAMIC_SCHEDULES),
    SettingFlag("strategy.global_average_every", ("--global-average-every",), "average parameters over all ranks "
                "every N steps (0: never)", type=numbers.EVERY_OR_NEVER, metavar="N"),
)
"""The strategy flags of bench and train (BlueFog's benchmark's names)."""


class _Setting(argparse.Action):
    """Stores a setting flag's typed value under its own dest, and appends (key, value) to `settings`, the
    command line's overrides in the order given (with --set's texts: _SetText)."""

    def __init__(self, option_strings, dest, *, key: str, clears: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.key, self.clears = key, clears

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        value = self.const if self.nargs == 0 else values
        setattr(namespace, self.dest, value)
        given = (*getattr(namespace, "settings", ()), (self.key, value), *((key, None) for key in self.clears))
        namespace.settings = given


class _SetText(argparse._AppendAction):
    """--set KEY=VALUE: kept in `overrides` as given, and in `settings` in order with the setting flags."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        super().__call__(parser, namespace, values, option_string)
        namespace.settings = (*getattr(namespace, "settings", ()), values)


def add_setting_flags(p: argparse.ArgumentParser, table: Sequence[SettingFlag]) -> None:
    """One option per row of `table`, its value's type from the row or from the configuration field's."""
    for row in table:
        hint = _plain(setting_type(row.key))
        kwargs: dict[str, Any] = {"default": None, "help": f"{row.help} (sets {row.key})", "key": row.key,
                                  "clears": row.clears}
        if hint is bool:
            value = True if row.value is None else row.value
            kwargs.update(nargs=0, const=value, help=f"{row.help} (sets {row.key}={str(value).lower()})")
        else:
            choices = row.choices or (typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else None)
            kind = row.type or (paths.TEXT if hint is str and not choices else None)
            if hint in (int, float) and not getattr(kind, "numeric", False):
                raise TypeError(f"{row.flags[-1]} sets the number {row.key}: give it a cli/numbers.py type")
            kwargs.update(type=kind, choices=choices, metavar=row.metavar)
        p.add_argument(*row.flags, action=_Setting, **kwargs)
    p.set_defaults(settings=())


def _plain(hint: Any) -> Any:
    """A field's type without its `| None`."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


def typed_settings(args: argparse.Namespace) -> Iterator[tuple[str, Any]]:
    """The setting flags' (key, value) pairs as given, in order (--set's texts left out)."""
    return (entry for entry in getattr(args, "settings", ()) if isinstance(entry, tuple))


def preset_names() -> str:
    """Every shipped preset as FILE:PRESET, for a help text."""
    return ", ".join(name for name, _ in shipped_presets())


def add_config_arguments(p: argparse.ArgumentParser, *, positional: bool = False) -> None:
    names = ["config"] if positional else ["--config"]
    where = {"nargs": "?"} if positional else {"required": True}
    p.add_argument(*names, **where, type=paths.TEXT, metavar="FILE_OR_NAME:PRESET",
                   help="a shipped preset file (cifar100, imagenet, cpu) or a YAML path, and a preset, e.g. "
                        "cifar100:bs256-amp or cpu:digits (`dlscale config --list` describes them)")
    p.add_argument("--set", action=_SetText, default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override one setting, e.g. --set optim.lr=0.2 (repeatable; the value is read as YAML; "
                        "later settings win)")
    add_setting_flags(p, SETTING_FLAGS)
    add_strategy_arguments(p)
    p.epilog = f"Presets: {preset_names()}."


def resolve_config(args: argparse.Namespace, also: Sequence[Override] = ()) -> tuple[TrainConfig, str]:
    """The checked configuration the flags describe, and its preset's name; `also`: more overrides after the
    command line's (a sweep's value of a swept setting)."""
    if not args.config:
        raise ConfigError("give a preset, FILE_OR_NAME:PRESET (`dlscale config --list` lists the shipped ones)")
    return load_config(args.config, [*getattr(args, "settings", ()), *also])


def add_strategy_arguments(p: argparse.ArgumentParser) -> None:
    add_setting_flags(p, STRATEGY_FLAGS)


def strategy_from_args(args: argparse.Namespace, base: StrategyConfig) -> StrategyConfig:
    """base with whatever strategy flags were given on the command line."""
    given = {key.removeprefix("strategy."): value for key, value in typed_settings(args)
             if key.startswith("strategy.")}
    return replace(base, **given)


class _ArgumentError(Exception):
    pass


class _RaisingParser(OneLineErrorParser):
    def error(self, message: str):
        raise _ArgumentError(message)


def parse_command_flags(command: str, args: Sequence[str], *, where: str) -> argparse.Namespace:
    """`dlscale COMMAND ARGS` parsed by that command's own parser; a bad flag is a ConfigError
    naming `where` the arguments came from ("the arguments after --")."""
    parser = _RaisingParser(prog="dlscale")
    sub = parser.add_subparsers(dest="command", parser_class=_RaisingParser)
    importlib.import_module(COMMAND_MODULES[command]).add_parser(sub)
    try:
        parsed, extra = parser.parse_known_args([command, *args])
        if extra:
            raise _ArgumentError(unrecognized(leaf_parser(parser, [command, *args]), extra))
        return parsed
    except _ArgumentError as error:
        raise ConfigError(f"{where} are not valid for dlscale {command}: {error}") from None


def say_if_not_the_models_speed(path, figures: str) -> None:
    """The line that marks a finished run's rates when its own record shows they are not the model's speed
    (metrics/host_load.py: the same verdict as report's marks and explain's host cause). A record the reader
    refuses is left to report and explain to name: the run itself has ended well."""
    try:
        reason = run_disturbance(read_run(path))
    except ConfigError:
        return
    if reason:
        print(marked(figures, reason), flush=True)
