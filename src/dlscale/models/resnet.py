"""ResNet v1.5 (He et al. 2016, "Deep Residual Learning for Image Recognition"), and its wide
(Zagoruyko and Komodakis 2016) and ResNeXt (Xie et al. 2017) variants as torchvision builds them.

v1.5 puts the stride of a downsampling bottleneck on its 3x3 conv (conv2) instead of the
first 1x1 conv; it is what torchvision and NVIDIA's DeepLearningExamples train. Module
names follow torchvision's (conv1, bn1, layer1..layer4, fc; blocks conv1/bn1/...;
downsample = Sequential(1x1 conv, BN)), so a torchvision state_dict loads with strict=True.
Wide and ResNeXt models change only the bottleneck's inner width and the groups of its 3x3
conv (docs/references.md#torchvision-resnet-variants).
"""

from __future__ import annotations

import math
from numbers import Integral

import torch.nn.functional as F
from torch import Tensor, nn

from dlscale.errors import ConfigError, shown

STEMS = ("imagenet", "cifar")
"""Input stems: "imagenet" is 7x7 stride 2 + 3x3 max-pool (4x downsampling), "cifar" keeps
full resolution (7x7 stride 1, no max-pool), the SC20 tutorial's adjustment for 32 px images."""

NORMS = ("batch", "group")
"""Normalisation layers: BatchNorm (the standard model) or GroupNorm (Wu and He 2018), which
normalises each sample on its own, so a data-parallel step is independent of how the batch is
split over ranks (a 2-rank run equals a 1-rank run with the doubled batch)."""

CONV_INITS = ("fan_out", "fan_in")
"""Kaiming-normal modes of the convolutions (He et al. 2015): "fan_out" keeps the variance of the gradients
in backward (torchvision's ResNet); "fan_in" keeps that of the activations in forward (NVIDIA ConvNets'
default, `--conv_init fan_in`). They differ for every conv whose input and output channels differ."""

STAGE_STRIDES = (1, 2, 2, 2)
"""Stride of the first block of layer1..layer4; each later stage halves the resolution."""


def conv3x3(in_channels: int, out_channels: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    """3x3 convolution, padding 1, no bias (the following BN has one); `groups` for ResNeXt."""
    return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, groups=groups, bias=False)


def conv1x1(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution without bias."""
    return nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)


def norm_layer(kind: str, channels: int) -> nn.Module:
    """BatchNorm2d, or GroupNorm with 32 groups (Wu and He 2018) for the standard widths.

    Narrow test models get fewer groups, at least two channels each: a one-channel group over a
    tiny feature map can have a variance near zero, which turns rounding noise into large
    gradient differences.
    """
    if kind == "group":
        return nn.GroupNorm(math.gcd(32, max(channels // 2, 1)), channels)
    return nn.BatchNorm2d(channels)


class BasicBlock(nn.Module):
    """Two 3x3 convs with an identity (or 1x1 projection) shortcut; ResNet-18/34."""

    expansion = 1
    """Output channels = expansion * width of the block."""

    def __init__(
        self, in_channels: int, width: int, stride: int = 1, downsample: nn.Module | None = None,
        norm: str = "batch",
    ) -> None:
        super().__init__()
        self.conv1 = conv3x3(in_channels, width, stride)
        self.bn1 = norm_layer(norm, width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(width, width)
        self.bn2 = norm_layer(norm, width)
        self.downsample = downsample

    def last_bn(self) -> nn.Module:
        """The BN whose gamma `zero_init_residual` zeroes (it ends the residual branch)."""
        return self.bn2

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + shortcut)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carries the stride: v1.5), 1x1 expand by 4; ResNet-50/101/152.

    The 3x3 conv works on `inner_width(width, groups, width_per_group)` channels in `groups`
    groups: `width` for the plain ResNet, twice that for the wide and ResNeXt-50 models.
    """

    expansion = 4
    """Output channels = expansion * width of the block."""

    def __init__(
        self, in_channels: int, width: int, stride: int = 1, downsample: nn.Module | None = None,
        norm: str = "batch", groups: int = 1, width_per_group: int = 64,
    ) -> None:
        super().__init__()
        inner = inner_width(width, groups, width_per_group)
        self.conv1 = conv1x1(in_channels, inner)
        self.bn1 = norm_layer(norm, inner)
        self.conv2 = conv3x3(inner, inner, stride, groups)
        self.bn2 = norm_layer(norm, inner)
        self.conv3 = conv1x1(inner, width * self.expansion)
        self.bn3 = norm_layer(norm, width * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def last_bn(self) -> nn.Module:
        """The BN whose gamma `zero_init_residual` zeroes (it ends the residual branch)."""
        return self.bn3

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + shortcut)


def inner_width(width: int, groups: int, width_per_group: int) -> int:
    """Channels of a bottleneck's 3x3 conv: torchvision's `int(planes * (base_width / 64.)) * groups`
    (pytorch/vision torchvision/models/resnet.py, Bottleneck). 64 and 1 give `width`;
    wide_resnet50_2 (128, 1) and resnext50_32x4d (4, 32) give 2 x width."""
    per_group = int(width * (width_per_group / 64.0))
    if per_group < 1:
        raise ConfigError(f"width={width} leaves {width} * {width_per_group} / 64 < 1 channel per group; "
                          f"use a width of at least {math.ceil(64 / width_per_group)}")
    return per_group * groups


Block = type[BasicBlock] | type[Bottleneck]

DEPTHS: dict[int, tuple[Block, tuple[int, int, int, int]]] = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}
"""Depth -> (block, blocks per stage); table 1 of He et al. 2016."""


class ResNet(nn.Module):
    """A ResNet of `block`s; stage i has width * 2**i channels (times the block's expansion)."""

    def __init__(
        self,
        block: Block,
        blocks_per_stage: tuple[int, ...],
        *,
        num_classes: int = 1000,
        width: int = 64,
        stem: str = "imagenet",
        in_channels: int = 3,
        zero_init_residual: bool = False,
        norm: str = "batch",
        groups: int = 1,
        width_per_group: int = 64,
        conv_init: str = "fan_out",
    ) -> None:
        super().__init__()
        check_options(num_classes=num_classes, width=width, stem=stem, in_channels=in_channels)
        if conv_init not in CONV_INITS:
            raise ConfigError(f"conv_init={shown(conv_init)} is unknown; pick one of {', '.join(CONV_INITS)}")
        if norm not in NORMS:
            raise ConfigError(f"norm={shown(norm)} is unknown; pick one of {', '.join(NORMS)}")
        if block is BasicBlock and (groups, width_per_group) != (1, 64):
            raise ConfigError("groups and width_per_group need bottleneck blocks (depth 50, 101 or 152)")
        self.norm = norm
        self.block_options = {"groups": groups, "width_per_group": width_per_group} if block is Bottleneck else {}
        stem_stride = 2 if stem == "imagenet" else 1
        self.conv1 = nn.Conv2d(in_channels, width, 7, stride=stem_stride, padding=3, bias=False)
        self.bn1 = norm_layer(norm, width)
        self.relu = nn.ReLU(inplace=True)
        # Identity keeps the attribute, so both stems have the same state_dict names.
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1) if stem == "imagenet" else nn.Identity()
        self._channels = width
        stages = zip(blocks_per_stage, STAGE_STRIDES, strict=True)
        for index, (count, stride) in enumerate(stages, start=1):
            stage = self._make_stage(block, width * 2 ** (index - 1), count, stride)
            self.add_module(f"layer{index}", stage)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(self._channels, num_classes)
        initialize(self, zero_init_residual, conv_init)

    def _make_stage(self, block: Block, width: int, count: int, stride: int) -> nn.Sequential:
        """`count` blocks; the first changes stride/channels through a 1x1 projection."""
        out_channels = width * block.expansion
        downsample = None
        if stride != 1 or self._channels != out_channels:
            downsample = nn.Sequential(
                conv1x1(self._channels, out_channels, stride), norm_layer(self.norm, out_channels)
            )
        blocks = [block(self._channels, width, stride, downsample, self.norm, **self.block_options)]
        blocks += [block(out_channels, width, norm=self.norm, **self.block_options) for _ in range(count - 1)]
        self._channels = out_channels
        return nn.Sequential(*blocks)

    def forward(self, x: Tensor) -> Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


class PaddedStemConv(nn.Conv2d):
    """A convolution computed on `channels` input channels: the input's, then zero channels with zero
    weights. The output is the unpadded convolution's, and so are the gradients of the real weights.

    The parameter keeps the input's channel count (the padding is made at each forward and fused by
    torch.compile), so a state_dict moves between padded and unpadded models unchanged. MLPerf's
    ResNet-50 pads the stem's 3 image channels to 4: tensor-core convolution kernels want channel
    counts that are multiples of 4 or 8, and the 3-channel stem otherwise runs at a few per cent of
    the GPU's peak (docs/benchmarks.md measures what it gives here)."""

    def __init__(self, conv: nn.Conv2d, channels: int) -> None:
        if channels < conv.in_channels:
            raise ConfigError(f"stem_channels={channels} is fewer than the stem's {conv.in_channels} input channels")
        super().__init__(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                         padding=conv.padding, dilation=conv.dilation, groups=conv.groups,
                         bias=conv.bias is not None, device=conv.weight.device, dtype=conv.weight.dtype)
        self.weight = conv.weight
        self.bias = conv.bias
        self.padded_channels = channels

    def forward(self, x: Tensor) -> Tensor:
        extra = self.padded_channels - x.shape[1]
        weight = F.pad(self.weight, (0, 0, 0, 0, 0, self.padded_channels - self.in_channels))
        return self._conv_forward(F.pad(x, (0, 0, 0, 0, 0, extra)), weight, self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, computed on {self.padded_channels} channels"


def pad_stem(model: nn.Module, channels: int) -> nn.Module:
    """Replace a ResNet's stem convolution (conv1) by PaddedStemConv on `channels` input channels
    (0: leave it as it is); the same model object is returned."""
    if channels == 0:
        return model
    if not isinstance(getattr(model, "conv1", None), nn.Conv2d):
        raise ConfigError(f"stem padding needs a ResNet with a conv1 stem; {type(model).__name__} has none")
    if not isinstance(model.conv1, PaddedStemConv):
        model.conv1 = PaddedStemConv(model.conv1, channels)
    return model


def initialize(model: nn.Module, zero_init_residual: bool = False, conv_init: str = "fan_out") -> None:
    """Kaiming-normal convs (ReLU gain; He et al. 2015) in the `conv_init` mode of CONV_INITS, BN gamma 1 and beta 0.

    `zero_init_residual` zeroes the last BN gamma of every block, so each block starts as
    the identity; Goyal et al. 2017 ("Accurate, Large Minibatch SGD", section 5.1) report
    it helps large-batch training. nn.Linear keeps PyTorch's default init, as torchvision.
    """
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode=conv_init, nonlinearity="relu")
        elif isinstance(module, nn.BatchNorm2d | nn.GroupNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    if zero_init_residual:
        for module in model.modules():
            if isinstance(module, BasicBlock | Bottleneck):
                nn.init.zeros_(module.last_bn().weight)


def check_options(*, num_classes: int, width: int, stem: str, in_channels: int) -> None:
    """Raise ConfigError for values a user can get wrong, naming what to change."""
    for name, value in (
        ("num_classes", num_classes),
        ("width", width),
        ("in_channels", in_channels),
    ):
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            raise ConfigError(f"{name}={shown(value)} must be a positive integer")
    if stem not in STEMS:
        raise ConfigError(f"stem={shown(stem)} is unknown; pick one of {', '.join(STEMS)}")


VARIANTS: dict[str, tuple[int, int, int]] = {
    "wide_resnet50_2": (50, 1, 128),
    "wide_resnet101_2": (101, 1, 128),
    "resnext50_32x4d": (50, 32, 4),
    "resnext101_32x8d": (101, 32, 8),
    "resnext101_64x4d": (101, 64, 4),
}
"""torchvision's wide and ResNeXt builders -> (depth, groups, width_per_group): wide_resnet*_2 set
width_per_group = 64 * 2, resnext<depth>_<groups>x<width_per_group>d the two numbers of the name
(pytorch/vision torchvision/models/resnet.py; docs/references.md#torchvision-resnet-variants)."""


def resnet(depth: int, *, num_classes: int = 1000, **options) -> ResNet:
    """ResNet-`depth` (18, 34, 50, 101 or 152); `options` go to ResNet (width, stem, groups, ...)."""
    if depth not in DEPTHS:
        known = ", ".join(str(d) for d in DEPTHS)
        raise ConfigError(f"ResNet depth {depth} is unknown; pick one of {known}")
    block, blocks_per_stage = DEPTHS[depth]
    return ResNet(block, blocks_per_stage, num_classes=num_classes, **options)


def variant(name: str, *, num_classes: int = 1000, **options) -> ResNet:
    """One of VARIANTS (e.g. "resnext50_32x4d"); `options` go to ResNet as for `resnet`."""
    depth, groups, width_per_group = VARIANTS[name]
    return resnet(depth, num_classes=num_classes, groups=groups, width_per_group=width_per_group, **options)
