"""`dlscale models`: the registered models with their parameters, GMACs and GFLOPs.

The figures come from predict's layer table (pure Python), which a test checks against every torch
model parameter by parameter and against models/flops.count_macs: the table prints without torch.
"""

from __future__ import annotations

import argparse

from dlscale.cli import numbers
from dlscale.predict.layers import forward_macs, model_names, model_parameters

FLOPS_PER_MAC = 2
"""A multiply-accumulate is two FLOPs (models/flops.forward_flops)."""

HEADER = ("name", "parameters", "GMACs", "GFLOPs")
CIFAR_SIDE, IMAGENET_SIDE = 32, 224
"""The input each stem is made for: the `_cifar` stem (stride 1, no max-pool) CIFAR's 32 px images, the
ImageNet stem 224 px crops."""


def own_image_size(model: str) -> int:
    """The image side a model is made for, at which `dlscale models` costs it unless --image-size says."""
    return CIFAR_SIDE if model.endswith("_cifar") else IMAGENET_SIDE


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the `models` subcommand."""
    parser = subparsers.add_parser(
        "models",
        help="list the models with parameter counts and forward-pass cost",
        description="One row per registered model: parameters, and the GMACs and GFLOPs "
        "(2 FLOPs per MAC) of one forward pass of one image at the model's own size (224 px; the _cifar models "
        "32 px), counting Conv2d and Linear.",
    )
    parser.add_argument(
        "--num-classes", type=numbers.CLASSES, default=1000, help="classes of the final layer (1000)"
    )
    parser.add_argument(
        "--image-size", type=numbers.PIXELS, default=None,
        help="square input image side in pixels for every model (default: each model's own: 224, _cifar 32)"
    )
    parser.set_defaults(run=run)


def model_rows(num_classes: int, image_size: int | None = None) -> list[tuple[str, str, str, str]]:
    """One formatted row per model, from the layer table (no model is built), at image_size (None: its own)."""
    rows = []
    for name in model_names():
        params = model_parameters(name, num_classes=num_classes, image_size=image_size or own_image_size(name))
        macs = forward_macs(params)
        rows.append((name, f"{sum(p.numel for p in params):,}", f"{macs / 1e9:.2f}",
                     f"{FLOPS_PER_MAC * macs / 1e9:.2f}"))
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
    """Print the model table (the sizes were checked when parsed: numbers.PIXELS, numbers.CLASSES)."""
    size = args.image_size
    print(f"forward pass of one {size}x{size} image" if size else
          f"forward pass of one image at each model's own size: {IMAGENET_SIDE}x{IMAGENET_SIDE}, _cifar models "
          f"{CIFAR_SIDE}x{CIFAR_SIDE} (--image-size sets one for all)")
    print(format_table(model_rows(args.num_classes, args.image_size)))
    return 0
