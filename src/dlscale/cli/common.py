"""Flags shared by the commands that take a training configuration."""

from __future__ import annotations

import argparse
from dataclasses import replace

from dlscale.config import TrainConfig, load_config
from dlscale.strategies.flags import add_strategy_arguments, strategy_from_args


def add_config_arguments(p: argparse.ArgumentParser, *, positional: bool = False) -> None:
    names = ["config"] if positional else ["--config"]
    p.add_argument(*names, **({} if positional else {"required": True}), metavar="FILE_OR_NAME:PRESET",
                   help="a shipped preset file (cifar100, imagenet, cpu) or a YAML path, and a preset, "
                        "e.g. cifar100:bs256-amp or cpu:digits")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override one setting, e.g. --set optim.lr=0.2 (repeatable)")
    p.add_argument("--data", default=None, metavar="PATH", help="data set folder (sets data.path)")
    p.add_argument("--on-bad-sample", choices=("skip", "error"), default=None,
                   help="an image that fails to decode: skip it (counted) or stop at once")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default=None, help="sets device")
    p.add_argument("--pg-timeout", type=float, default=None, metavar="SECONDS",
                   help="seconds before a collective that a peer never joins fails (sets pg_timeout_s)")
    add_strategy_arguments(p)


def resolve_config(args: argparse.Namespace) -> tuple[TrainConfig, str]:
    overrides = list(args.overrides)
    if args.data is not None:
        overrides.append(f"data.path={args.data}")
    if args.on_bad_sample is not None:
        overrides.append(f"data.on_bad_sample={args.on_bad_sample}")
    if args.device is not None:
        overrides.append(f"device={args.device}")
    if args.pg_timeout is not None:
        overrides.append(f"pg_timeout_s={args.pg_timeout}")
    cfg, name = load_config(args.config, overrides)
    return replace(cfg, strategy=strategy_from_args(args, cfg.strategy)), name
