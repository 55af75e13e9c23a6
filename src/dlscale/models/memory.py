"""What a model needs in memory to train at a batch and image size, found before the model is built.

One forward pass on the meta device (shapes only: nothing is allocated, about 0.1 s for ResNet-50) counts the
parameters and the convolutions' outputs; check_fits compares their lower bound with the device's memory and
refuses in one line, naming the settings, what cannot fit, rather than let the allocator try for terabytes.
The same pass finds set-ups that torch rejects in the first step, deep inside a layer (BatchNorm over one value
per channel, an image smaller than a kernel), and says which setting to change.

    need = footprint("resnet50", num_classes=1000, batch=256, image_size=224)
    check_fits(need, device, settings="--batch-size 256 --image-size 224", amp=True)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dlscale.errors import ConfigError, DeviceError, one_line
from dlscale.metrics.hardware import host_memory_bytes
from dlscale.models import build_model

GIB = 2**30
BYTES_PER_PARAMETER = 12
"""fp32 weight, gradient and SGD momentum: what training holds per parameter at least (AMP keeps fp32 weights)."""


@dataclass(frozen=True)
class Footprint:
    parameters: int
    """Elements of the weights."""
    conv_outputs: int
    """Elements the convolutions produce in one forward pass of the batch: backward needs them kept (BatchNorm's
    input). A lower bound of the activations: BatchNorm's and ReLU's outputs and the residual sums add to it."""

    def training_bytes(self, *, amp: bool) -> int:
        """A lower bound of one training step's memory: weights, gradients and momentum, and the convolutions'
        outputs (2 bytes each under autocast, 4 in fp32)."""
        return BYTES_PER_PARAMETER * self.parameters + (2 if amp else 4) * self.conv_outputs


def footprint(name: str, *, num_classes: int, batch: int, image_size: int, train: bool = True,
              settings: str = "", **options) -> Footprint:
    """The footprint of model `name` (with build_model's options) training on `batch` images of `image_size`
    pixels, from a forward pass on the meta device in training mode (`train`; False: evaluation mode, where
    BatchNorm uses its running statistics, as SyncBatchNorm over several ranks may). ConfigError, naming
    `settings`, when torch refuses that forward pass."""
    with torch.device("meta"):
        try:
            model = build_model(name, num_classes=num_classes, **options)
        except (ValueError, RuntimeError) as error:
            raise ConfigError(f"{settings or name}: the model cannot be built ({one_line(error, 200)})") from None
    produced = 0

    def count(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        nonlocal produced
        produced += output.numel()

    hooks = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, nn.Conv2d)]
    model.train(train)
    images = torch.empty(batch, options.get("in_channels", 3), image_size, image_size, device="meta")
    try:
        model(images)
    except (ValueError, RuntimeError) as error:
        raise ConfigError(f"{settings or name} cannot train: torch refuses its first step ({one_line(error, 200)}); "
                          + _advice(error)) from None
    finally:
        for hook in hooks:
            hook.remove()
    return Footprint(parameters=sum(p.numel() for p in model.parameters()), conv_outputs=produced)


def _advice(error: BaseException) -> str:
    if "value per channel" in str(error):
        return "BatchNorm needs more than one value per channel: raise the batch or the image size"
    return "raise the image size (a ResNet halves it five times) or the batch"


def memory_bytes(device: torch.device, ranks_on_host: int = 1) -> tuple[int | None, str]:
    """(bytes one rank may use, what they are): a GPU's whole memory, or this host's shared by its ranks."""
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        return total, f"{torch.cuda.get_device_name(device)} has {total / GIB:.1f} GiB"
    host = host_memory_bytes()
    if host is None:
        return None, "this host's memory is unknown"
    shared = f", {ranks_on_host} ranks sharing it" if ranks_on_host > 1 else ""
    return host // max(ranks_on_host, 1), f"this host has {host / GIB:.1f} GiB{shared}"


def check_fits(need: Footprint, device: torch.device, *, settings: str, amp: bool = False, extra_bytes: int = 0,
               extra: str = "", ranks_on_host: int = 1) -> None:
    """DeviceError naming `settings` when the footprint's lower bound (and `extra_bytes`, said as `extra`) is more
    than the device holds; nothing when it may fit (or the memory is unknown)."""
    have, where = memory_bytes(device, ranks_on_host)
    step = need.training_bytes(amp=amp)
    if have is None or step + extra_bytes <= have:
        return
    parts = [f"{BYTES_PER_PARAMETER * need.parameters / GIB:.1f} GiB of weights, gradients and momentum",
             f"{(step - BYTES_PER_PARAMETER * need.parameters) / GIB:.1f} GiB of activations"]
    if extra_bytes:
        parts.append(f"{extra_bytes / GIB:.1f} GiB of {extra}")
    raise DeviceError(f"{settings} needs at least {(step + extra_bytes) / GIB:.1f} GiB to train ({', '.join(parts)}); "
                      f"{where}: lower the batch, the image size or the width")
