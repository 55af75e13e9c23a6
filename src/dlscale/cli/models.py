"""`dlscale models`: the registered models with their parameters, GMACs and GFLOPs."""

from __future__ import annotations

import argparse

import torch

from dlscale.errors import ConfigError
from dlscale.models import build_model, count_parameters, model_names
from dlscale.models.flops import count_macs, forward_flops

HEADER = ("name", "parameters", "GMACs", "GFLOPs")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the `models` subcommand."""
    parser = subparsers.add_parser(
        "models",
        help="list the models with parameter counts and forward-pass cost",
        description="One row per registered model: parameters, and the GMACs and GFLOPs "
        "(2 FLOPs per MAC) of one forward pass of one image, counting Conv2d and Linear.",
    )
    parser.add_argument(
        "--num-classes", type=int, default=1000, help="classes of the final layer (1000)"
    )
    parser.add_argument(
        "--image-size", type=int, default=224, help="square input image side in pixels (224)"
    )
    parser.set_defaults(run=run)


def model_rows(num_classes: int, image_size: int) -> list[tuple[str, str, str, str]]:
    """One formatted row per model. Models are built on the meta device: no weight memory
    and no init (resnet152's Kaiming init alone takes about 1 s on a CPU)."""
    rows = []
    for name in model_names():
        with torch.device("meta"):
            model = build_model(name, num_classes=num_classes)
        macs = count_macs(model, image_size=image_size)
        rows.append(
            (
                name,
                f"{count_parameters(model):,}",
                f"{macs / 1e9:.2f}",
                f"{forward_flops(macs) / 1e9:.2f}",
            )
        )
    return rows


def format_table(rows: list[tuple[str, ...]]) -> str:
    """Left-aligned first column, right-aligned numbers, columns sized to fit."""
    table = [HEADER, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = []
    for row in table:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the model table; bad sizes raise ConfigError before any model is built."""
    if args.image_size < 1:
        raise ConfigError(f"--image-size {args.image_size} must be a positive number of pixels")
    if args.num_classes < 1:
        raise ConfigError(f"--num-classes {args.num_classes} must be a positive integer")
    print(f"forward pass of one {args.image_size}x{args.image_size} image")
    print(format_table(model_rows(args.num_classes, args.image_size)))
    return 0
