"""The parameters of dlscale's ResNets in registration order, with the work of the layer that owns each.

Pure Python (no torch), so that `dlscale predict` knows what DDP buckets and when backward
produces each gradient without building a model. The table follows models/resnet.py: ResNet
v1.5, torchvision's names and order (conv1, bn1, layer1..layer4, fc; in a block conv1, bn1,
conv2, bn2, [conv3, bn3,] downsample.0, downsample.1), the "imagenet" stem (7x7 stride 2 and a
3x3 max-pool) or the "cifar" stem (7x7 stride 1, no pool); the wide and ResNeXt variants widen
the bottleneck's inner convs and group its 3x3 conv. A test checks it against the torch models
parameter by parameter, and its MACs against models/flops.count_macs, for every registered model
(so `dlscale models` prints its table without building one).

MACs are those of models/flops.py: Conv2d and Linear only, per image; normalisation layers
carry 0 (their cost is not counted there either).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlscale.errors import ConfigError

BLOCKS: dict[int, tuple[str, tuple[int, int, int, int]]] = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
"""Depth -> (block, blocks per stage): table 1 of He et al. 2016 (docs/references.md#he-2016-resnet)."""

STAGE_STRIDES = (1, 2, 2, 2)

VARIANTS: dict[str, tuple[int, int, int]] = {
    "wide_resnet50_2": (50, 1, 128),
    "wide_resnet101_2": (101, 1, 128),
    "resnext50_32x4d": (50, 32, 4),
    "resnext101_32x8d": (101, 32, 8),
    "resnext101_64x4d": (101, 64, 4),
}
"""torchvision's wide and ResNeXt models -> (depth, groups, width_per_group), as models/resnet.py VARIANTS
(a test checks that the two agree)."""


@dataclass(frozen=True)
class Parameter:
    name: str
    """torchvision's name, e.g. layer1.0.conv1.weight."""
    numel: int
    """Elements of the parameter (and of its gradient)."""
    macs: int
    """Forward multiply-accumulates per image of the layer that owns it (0 for normalisation)."""
    norm: bool = False
    """True for normalisation-layer weights and biases (apex O2 keeps them in fp32)."""


def model_names() -> list[str]:
    """Every model this table knows, in the order of models.MODELS: depth, then stem, then the variants."""
    return [f"resnet{d}{suffix}" for d in BLOCKS for suffix in ("", "_cifar")] + list(VARIANTS)


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


class _Builder:
    def __init__(self) -> None:
        self.params: list[Parameter] = []

    def conv(self, name: str, c_in: int, c_out: int, kernel: int, stride: int, size: int, groups: int = 1) -> int:
        """A bias-free conv (each output channel sees c_in / groups inputs); returns its output size."""
        out = _conv_out(size, kernel, stride, kernel // 2)
        weights = c_out * c_in // groups * kernel * kernel
        self.params.append(Parameter(f"{name}.weight", weights, out * out * weights))
        return out

    def norm(self, name: str, channels: int) -> None:
        self.params += [Parameter(f"{name}.weight", channels, 0, True), Parameter(f"{name}.bias", channels, 0, True)]


def model_parameters(model: str, *, num_classes: int = 1000, width: int = 64, image_size: int = 224,
                     in_channels: int = 3) -> list[Parameter]:
    """Every parameter of `model` (resnet18 ... resnet152, optionally `_cifar`, or one of VARIANTS) in
    registration order."""
    depth, groups, width_per_group = VARIANTS.get(model, (0, 1, 64))
    match = re.fullmatch(r"resnet(\d+)(_cifar)?", f"resnet{depth}" if depth else model)
    if not match or int(match.group(1)) not in BLOCKS:
        raise ConfigError(f"dlscale knows the layers of {', '.join(model_names())}; not {model!r}")
    for name, value in (("num_classes", num_classes), ("width", width), ("image_size", image_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name}={value!r} must be a positive integer")
    kind, counts = BLOCKS[int(match.group(1))]
    build = _Builder()
    size = build.conv("conv1", in_channels, width, 7, 1 if match.group(2) else 2, image_size)
    build.norm("bn1", width)
    if not match.group(2):
        size = _conv_out(size, 3, 2, 1)  # max-pool
    channels = width
    for index, (count, stride) in enumerate(zip(counts, STAGE_STRIDES, strict=True), start=1):
        planes = width * 2 ** (index - 1)
        for block in range(count):
            s = stride if block == 0 else 1
            name = f"layer{index}.{block}"
            size, channels = _block(build, name, kind, channels, planes, s, size, groups, width_per_group)
    build.params.append(Parameter("fc.weight", num_classes * channels, num_classes * channels))
    build.params.append(Parameter("fc.bias", num_classes, 0))
    return build.params


def _block(build: _Builder, name: str, kind: str, c_in: int, planes: int, stride: int, size: int,
           groups: int = 1, width_per_group: int = 64) -> tuple[int, int]:
    c_out = planes * (4 if kind == "bottleneck" else 1)
    if kind == "bottleneck":
        inner = int(planes * (width_per_group / 64.0)) * groups  # torchvision's Bottleneck width
        if inner < groups:
            raise ConfigError(f"width {planes} leaves less than 1 channel per group in {name}; use a larger width")
        build.conv(f"{name}.conv1", c_in, inner, 1, 1, size)
        build.norm(f"{name}.bn1", inner)
        out = build.conv(f"{name}.conv2", inner, inner, 3, stride, size, groups)  # v1.5: the stride is here
        build.norm(f"{name}.bn2", inner)
        build.conv(f"{name}.conv3", inner, c_out, 1, 1, out)
        build.norm(f"{name}.bn3", c_out)
    else:
        out = build.conv(f"{name}.conv1", c_in, planes, 3, stride, size)
        build.norm(f"{name}.bn1", planes)
        build.conv(f"{name}.conv2", planes, planes, 3, 1, out)
        build.norm(f"{name}.bn2", planes)
    if stride != 1 or c_in != c_out:
        build.conv(f"{name}.downsample.0", c_in, c_out, 1, stride, size)
        build.norm(f"{name}.downsample.1", c_out)
    return out, c_out


def forward_macs(params: list[Parameter]) -> int:
    """MACs of one forward pass of one image: the sum over layers (each layer's MACs once)."""
    return sum(p.macs for p in params)
