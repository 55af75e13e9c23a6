"""Flags that several commands share, and re-parsing another command's flags.

`add_config_arguments` / `resolve_config`: the training configuration (train, config, profile
train). `add_strategy_arguments` / `strategy_from_args`: the strategy flags of bench and train,
named as in BlueFog's benchmark. `parse_command_flags`: the flags of a command that `dlscale scale`
sweeps or `dlscale slurm` submits, checked by that command's own parser before anything starts.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from dataclasses import replace

from dlscale.cli import COMMAND_MODULES, OneLineErrorParser, numbers, paths
from dlscale.config import StrategyConfig, TrainConfig, load_config
from dlscale.config.sections import DIST_OPTIMIZERS, DYNAMIC_SCHEDULES, TOPOLOGY_NAMES
from dlscale.errors import ConfigError


def add_config_arguments(p: argparse.ArgumentParser, *, positional: bool = False) -> None:
    names = ["config"] if positional else ["--config"]
    p.add_argument(*names, **({} if positional else {"required": True}), type=paths.TEXT, metavar="FILE_OR_NAME:PRESET",
                   help="a shipped preset file (cifar100, imagenet, cpu) or a YAML path, and a preset, "
                        "e.g. cifar100:bs256-amp or cpu:digits")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override one setting, e.g. --set optim.lr=0.2 (repeatable)")
    p.add_argument("--data", type=paths.TEXT, default=None, metavar="PATH", help="data set folder (sets data.path)")
    p.add_argument("--download", action="store_true",
                   help="cifar10/cifar100: download the data set into data.path first if it is not there, its MD5 "
                        "checked (sets data.download)")
    p.add_argument("--on-bad-sample", choices=("skip", "error"), default=None,
                   help="an image that fails to decode: skip it (counted) or stop at once")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None, help="sets device")
    p.add_argument("--pg-timeout", type=numbers.PG_TIMEOUT, default=None, metavar="SECONDS",
                   help="seconds before a collective that a peer never joins fails (sets pg_timeout_s)")
    add_strategy_arguments(p)


def resolve_config(args: argparse.Namespace) -> tuple[TrainConfig, str]:
    overrides = list(args.overrides)
    if args.data is not None:
        overrides.append(f"data.path={args.data}")
    if getattr(args, "download", False):
        overrides.append("data.download=true")
    if args.on_bad_sample is not None:
        overrides.append(f"data.on_bad_sample={args.on_bad_sample}")
    if args.device is not None:
        overrides.append(f"device={args.device}")
    if args.pg_timeout is not None:
        overrides.append(f"pg_timeout_s={args.pg_timeout}")
    cfg, name = load_config(args.config, overrides)
    return replace(cfg, strategy=strategy_from_args(args, cfg.strategy)), name


def add_strategy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dist-optimizer", choices=sorted(DIST_OPTIMIZERS), default=None,
                   help="allreduce (DDP, default), gradient_allreduce, neighbor_allreduce, "
                        "hierarchical_neighbor_allreduce")
    p.add_argument("--topology", choices=sorted(TOPOLOGY_NAMES), default=None,
                   help="graph of the neighbor strategies (exp2: exponential-2, BlueFog's default)")
    p.add_argument("--atc-style", action="store_true", default=None,
                   help="adapt-then-combine: step, then mix with neighbours (default: adapt-with-combine)")
    p.add_argument("--disable-dynamic-topology", action="store_true", default=None,
                   help="exchange with every neighbour each time instead of one rotating peer")
    p.add_argument("--num-steps-per-communication", type=numbers.EVERY, default=None, metavar="N",
                   help="neighbour exchanges on every N-th step only (1)")
    p.add_argument("--dynamic-schedule", choices=DYNAMIC_SCHEDULES, default=None,
                   help="peers of the dynamic neighbor_allreduce (auto: BlueFog's inner-outer exp2 on several "
                        "nodes, one rotating peer otherwise)")
    p.add_argument("--global-average-every", type=numbers.EVERY_OR_NEVER, default=None, metavar="N",
                   help="average parameters over all ranks every N steps (0: never)")


def strategy_from_args(args: argparse.Namespace, base: StrategyConfig) -> StrategyConfig:
    """base with whatever strategy flags were given on the command line."""
    given = {
        "dist_optimizer": args.dist_optimizer,
        "topology": args.topology,
        "atc_style": args.atc_style,
        "dynamic_topology": None if args.disable_dynamic_topology is None else not args.disable_dynamic_topology,
        "num_steps_per_communication": args.num_steps_per_communication,
        "dynamic_schedule": args.dynamic_schedule,
        "global_average_every": args.global_average_every,
    }
    return replace(base, **{k: v for k, v in given.items() if v is not None})


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
        return parser.parse_args([command, *args])
    except _ArgumentError as error:
        raise ConfigError(f"{where} are not valid for dlscale {command}: {error}") from None
