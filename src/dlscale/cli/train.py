"""`dlscale train --config FILE_OR_NAME:PRESET [--set key=value ...] [--data PATH]`."""

from __future__ import annotations

import argparse
from pathlib import Path

from dlscale.cli import paths
from dlscale.cli.common import (
    TRAIN_FLAGS,
    add_config_arguments,
    add_setting_flags,
    resolve_config,
    say_if_not_the_models_speed,
)
from dlscale.cli.tracking import add_tracking_arguments, tracking_from_args
from dlscale.metrics.ranks import describe


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="train a preset on real or synthetic data (resumable, time to accuracy)",
        description="Train a configuration. Several ranks: torchrun --standalone --nproc_per_node N "
        "-m dlscale train --config cpu:digits",
    )
    add_config_arguments(p)
    p.add_argument("--resume", type=paths.TEXT, default="auto",
                   help="auto: continue from the run directory's latest checkpoint if there is one; "
                        "none: start fresh (refused if checkpoints exist); or a checkpoint file")
    add_setting_flags(p, TRAIN_FLAGS)
    p.add_argument("--output-dir", type=paths.TEXT, default="runs", help="root of run directories")
    p.add_argument("--raport-file", type=paths.TEXT, default=None,
                   help="also write NVIDIA DeepLearningExamples' JSON-lines log (DLLL records) here")
    add_tracking_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from dlscale.distributed import DistEnv, shutdown  # torch: loaded when the command runs, not for --help
    from dlscale.train.loop import fit

    env = DistEnv.from_env()
    cfg, preset = resolve_config(args)
    tracking = tracking_from_args(args, args.output_dir)
    try:
        summary = fit(cfg, env, run_name=preset, output_dir=args.output_dir, resume=args.resume,
                      raport_file=args.raport_file, tracking=tracking)
    finally:
        shutdown()
    if env.is_main:
        if summary.get("already_finished"):
            print(summary["already_finished"], flush=True)
        else:
            _print_summary(summary)
            if not summary["preempted"]:
                say_if_not_the_models_speed(Path(args.output_dir) / (cfg.name or preset), "this run's img/s are")
    return 0


def _print_summary(s: dict) -> None:
    if s["preempted"]:
        print(f"stopped by {s['signal']} at epoch {s['epochs_completed']} step {s['steps']}; "
              "run the same command to resume", flush=True)
        return
    ranks = describe(s["stragglers"], "log windows") if s.get("stragglers") else None
    if ranks:
        print(ranks, flush=True)
    if s["best_top1_pct"] is not None:
        print(f"best top-1 {s['best_top1_pct']:.2f}% (epoch {s['best_epoch']}), top-5 {s['best_top5_pct']:.2f}%; "
              f"{s['epochs_completed']} epochs in {s['train_time_s']:.1f} s", flush=True)
    if s.get("energy_j") is not None:
        print(f"energy: {s['avg_power_w']:.1f} W per GPU, {s['joules_per_image']:.3f} J/img, "
              f"{s['energy_j'] / 3.6e6:.3f} kWh ({s['energy_method']}, NVML)", flush=True)
    if s.get("cost_per_run") is not None:
        print(f"cost: {s['cost_per_epoch']:.2f} per epoch, {s['cost_per_run']:.2f} for the run "
              f"({s['world_size']} devices at {s['price_per_device_hour']:g} per device-hour)", flush=True)
    if s["target_top1_pct"] is not None:
        if s["time_to_target_s"] is not None:
            print(f"### Time to {s['target_top1_pct']:.2f}% top-1: {s['time_to_target']} | "
                  f"{s['time_to_target_s']:.2f} secs", flush=True)
        else:
            print(f"target top-1 {s['target_top1_pct']:.2f}% not reached", flush=True)
