"""Model registry: `build_model("resnet50", num_classes=100, width=8)`.

Adding a model is one constructor and one line in MODELS. Every constructor takes
`num_classes` and the keyword options in OPTIONS.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from torch import nn

from dlscale.errors import ConfigError, shown
from dlscale.models.resnet import DEPTHS, STEMS, VARIANTS, PaddedStemConv, ResNet, pad_stem, resnet, variant

OPTIONS = {
    "width": "base channel count (64); every stage scales with it, 8 gives a tiny test model",
    "zero_init_residual": "zero the last BN gamma of every block (Goyal et al. 2017)",
    "in_channels": "image channels (3); 1 for grayscale data",
    "norm": "normalisation layer: batch (standard) or group (per-sample; independent of the split over ranks)",
    "conv_init": "Kaiming-normal mode of the convolutions: fan_out (torchvision's) or fan_in (NVIDIA ConvNets')",
}
"""Options build_model() accepts, with what each does."""


def _registry() -> dict[str, Callable[..., nn.Module]]:
    """resnet<depth> (ImageNet stem) and resnet<depth>_cifar for every depth, then torchvision's
    wide and ResNeXt models (ImageNet stem) under torchvision's names."""
    models: dict[str, Callable[..., nn.Module]] = {}
    for depth in DEPTHS:
        for stem in STEMS:
            name = f"resnet{depth}" if stem == "imagenet" else f"resnet{depth}_{stem}"
            models[name] = partial(resnet, depth, stem=stem)
    for name in VARIANTS:
        models[name] = partial(variant, name)
    return models


MODELS: dict[str, Callable[..., nn.Module]] = _registry()
"""Model name -> constructor(num_classes=..., **options)."""


def model_names() -> list[str]:
    """Registered model names in registry order (depth, then stem, then the wide and ResNeXt models)."""
    return list(MODELS)


def build_model(name: str, num_classes: int = 1000, **options) -> nn.Module:
    """Build the registered model `name`; see OPTIONS for the keyword options.

    Build under `with torch.device("meta"):` to get shapes and counts without memory.
    """
    if name not in MODELS:
        raise ConfigError(f"unknown model {shown(name)}; pick one of {', '.join(MODELS)}")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigError(
            f"unknown model option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}"
        )
    return MODELS[name](num_classes=num_classes, **options)


def count_parameters(model: nn.Module) -> int:
    """Number of parameters (trainable or not; buffers such as BN running stats excluded)."""
    return sum(parameter.numel() for parameter in model.parameters())


__all__ = ["MODELS", "OPTIONS", "PaddedStemConv", "ResNet", "build_model", "count_parameters", "model_names",
           "pad_stem"]
