"""`dlscale config FILE_OR_NAME:PRESET [--world-size N]`: what a run will do, before paying for it.
`dlscale config --list`: the shipped presets, one line each."""

from __future__ import annotations

import argparse

import yaml

from dlscale.cli import numbers
from dlscale.cli.common import add_config_arguments, resolve_config
from dlscale.config import TrainConfig
from dlscale.config.presets import shipped_presets
from dlscale.errors import DataError
from dlscale.rundir import to_jsonable

# Training-set sizes used when the data is not at hand (ImageNet-1k: 1,281,167 images;
# CIFAR-10/100: 50,000), so that steps and warm-up can be shown without the data.
NOMINAL_TRAIN_SIZE = {"imagefolder": 1_281_167, "cifar10": 50_000, "cifar100": 50_000}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("config", help="print a preset's resolved configuration and derived values")
    add_config_arguments(p, positional=True)
    p.add_argument("--world-size", type=numbers.WORLD, default=1, help="number of ranks the run would use")
    p.add_argument("--list", action="store_true", help="list the shipped presets, one line each, and exit")
    p.set_defaults(run=run)


def preset_line(settings: dict) -> str:
    """What a resolved preset trains, in a few words: model, data, batch, precision, epochs and schedule."""
    model, data = settings.get("model", {}), settings.get("data", {})
    schedule = settings.get("schedule", {})
    batch = (f"global batch {settings['global_batch_size']}" if settings.get("global_batch_size")
             else f"batch {settings.get('batch_size', '?')} per rank")
    width = f" width {model['width']}" if model.get("width") else ""
    options = "".join(f" +{key}" for key, on in settings.get("speed", {}).items() if on is True)
    warmup = f", {schedule['warmup_epochs']:g} warm-up epochs" if schedule.get("warmup_epochs") else ""
    return (f"{model.get('name', 'resnet50')}{width} on {data.get('name', 'synthetic')}, {batch}, "
            f"{settings.get('precision', 'fp32')}{options}, {schedule.get('epochs', 90)} epochs "
            f"{schedule.get('name', 'step')} LR{warmup}")


def list_presets() -> int:
    rows = [(name, preset_line(settings)) for name, settings in shipped_presets()]
    width = max(len(name) for name, _ in rows)
    for name, line in rows:
        print(f"{name.ljust(width)}  {line}")
    print("Use one: dlscale train --config NAME (dlscale config NAME prints what it resolves to); a YAML file of "
          "your own works as FILE.yaml:PRESET")
    return 0


def train_size(cfg: TrainConfig) -> tuple[int, str]:
    """Training-set size and where it came from (counted, or the nominal size of the data set)."""
    from dlscale.data import build_loaders  # torch: loaded when the command runs, not for --help

    try:
        _, _, info = build_loaders(cfg.data, rank=0, world_size=1, batch_size=1, seed=cfg.seed)
        return info.train_size, "counted"
    except DataError:
        if cfg.data.name in NOMINAL_TRAIN_SIZE:
            return NOMINAL_TRAIN_SIZE[cfg.data.name], "nominal; pass --data to count"
        raise


def run(args: argparse.Namespace) -> int:
    if args.list:
        return list_presets()
    from dlscale.train.plan import make_plan  # torch: loaded when the command runs, not for --help

    cfg, preset = resolve_config(args)
    size, source = train_size(cfg)
    plan = make_plan(cfg, args.world_size, size)
    print(f"# {preset} on {args.world_size} rank(s)")
    print(yaml.safe_dump(to_jsonable(cfg), sort_keys=False).rstrip())
    print("derived:")
    rows = [
        ("world size", plan.world_size),
        ("global batch", f"{plan.global_batch} images per optimizer step"),
        ("per-rank batch", f"{plan.per_rank_batch} (x {plan.accumulation_steps} accumulation steps)"),
        ("training images", f"{size:,} ({source})"),
        ("steps per epoch", plan.steps_per_epoch),
        ("epochs", plan.epochs),
        ("total steps", plan.total_steps),
        ("peak LR", f"{plan.peak_lr:.6g} ({cfg.optim.lr} per {cfg.optim.reference_batch}, "
                    f"{cfg.optim.lr_scaling} scaling)"),
        ("warm-up", f"{plan.warmup_steps} steps ({cfg.schedule.warmup_epochs} epochs, per {cfg.schedule.warmup_per})"),
        ("schedule", cfg.schedule.name),
    ]
    for key, value in rows:
        print(f"  {key}: {value}")
    return 0
