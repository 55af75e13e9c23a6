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


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register the `models` subcommand."""
    parser = subparsers.add_parser(
        "models",
        help="list the models with parameter counts and forward-pass cost",
        description="One row per registered model: parameters, and the GMACs and GFLOPs "
        "(2 FLOPs per MAC) of one forward pass of one image, counting Conv2d and Linear.",
    )
    parser.add_argument(
        "--num-classes", type=numbers.CLASSES, default=1000, help="classes of the final layer (1000)"
    )
    parser.add_argument(
        "--image-size", type=numbers.PIXELS, default=224, help="square input image side in pixels (224)"
    )
    parser.set_defaults(run=run)


def model_rows(num_classes: int, image_size: int) -> list[tuple[str, str, str, str]]:
    """One formatted row per model, from the layer table (no model is built)."""
    rows = []
    for name in model_names():
        params = model_parameters(name, num_classes=num_classes, image_size=image_size)
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
    print(f"forward pass of one {args.image_size}x{args.image_size} image")
    print(format_table(model_rows(args.num_classes, args.image_size)))
    return 0
