"""The parameters of dlscale's ResNets in registration order, with the work of the layer that owns each.

Pure Python (no torch), so that `dlscale predict` knows what DDP buckets and when backward
produces each gradient without building a model. The table follows models/resnet.py: ResNet
v1.5, torchvision's names and order (conv1, bn1, layer1..layer4, fc; in a block conv1, bn1,
conv2, bn2, [conv3, bn3,] downsample.0, downsample.1), the "imagenet" stem (7x7 stride 2 and a
3x3 max-pool) or the "cifar" stem (7x7 stride 1, no pool). A test checks it against the torch
models parameter by parameter, and its MACs against models/flops.count_macs.

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
    return [f"resnet{d}{suffix}" for d in BLOCKS for suffix in ("", "_cifar")]


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


class _Builder:
    def __init__(self) -> None:
        self.params: list[Parameter] = []

    def conv(self, name: str, c_in: int, c_out: int, kernel: int, stride: int, size: int) -> int:
        """A bias-free conv; returns its output size."""
        out = _conv_out(size, kernel, stride, kernel // 2)
        self.params.append(Parameter(f"{name}.weight", c_out * c_in * kernel * kernel,
                                     out * out * c_out * c_in * kernel * kernel))
        return out

    def norm(self, name: str, channels: int) -> None:
        self.params += [Parameter(f"{name}.weight", channels, 0, True), Parameter(f"{name}.bias", channels, 0, True)]


def model_parameters(model: str, *, num_classes: int = 1000, width: int = 64, image_size: int = 224,
                     in_channels: int = 3) -> list[Parameter]:
    """Every parameter of `model` (resnet18 ... resnet152, optionally `_cifar`) in registration order."""
    match = re.fullmatch(r"resnet(\d+)(_cifar)?", model)
    if not match or int(match.group(1)) not in BLOCKS:
        raise ConfigError(f"dlscale predict knows the layers of {', '.join(model_names())}; not {model!r}")
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
            size, channels = _block(build, name, kind, channels, planes, s, size)
    build.params.append(Parameter("fc.weight", num_classes * channels, num_classes * channels))
    build.params.append(Parameter("fc.bias", num_classes, 0))
    return build.params


def _block(build: _Builder, name: str, kind: str, c_in: int, planes: int, stride: int, size: int) -> tuple[int, int]:
    c_out = planes * (4 if kind == "bottleneck" else 1)
    if kind == "bottleneck":
        build.conv(f"{name}.conv1", c_in, planes, 1, 1, size)
        build.norm(f"{name}.bn1", planes)
        out = build.conv(f"{name}.conv2", planes, planes, 3, stride, size)  # v1.5: the stride is here
        build.norm(f"{name}.bn2", planes)
        build.conv(f"{name}.conv3", planes, c_out, 1, 1, out)
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
