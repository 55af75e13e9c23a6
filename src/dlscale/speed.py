"""Speed options as one object: memory format, cuDNN autotuning, fused optimizer, torch.compile.

These are the SC20 tutorial's optimisation steps after AMP (NHWC, then the "extra opts":
fused SGD, zero_grad(set_to_none=True), cudnn.benchmark) plus torch.compile. set_to_none is
always on: it skips a memset per gradient and makes the next backward write instead of add.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dlscale.errors import DeviceError


@dataclass(frozen=True, kw_only=True)
class SpeedOptions:
    channels_last: bool = False
    """Keep activations in NHWC, the layout tensor-core convolutions use (no transposes)."""
    cudnn_benchmark: bool = False
    """Let cuDNN time its algorithms for each new input shape and keep the fastest."""
    fused_optimizer: bool = False
    """torch's fused SGD (one kernel for all parameters); off: torch's default implementation."""
    compile: bool = False
    """torch.compile the model (after DDP wrapping, so the DDP optimizer splits graphs at buckets)."""

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def apply_globals(self, device: torch.device) -> None:
        if self.cudnn_benchmark and device.type != "cuda":
            raise DeviceError("--cudnn-benchmark (speed.cudnn_benchmark in presets) needs a CUDA device; drop it on "
                              "the CPU, e.g. --set speed.cudnn_benchmark=false")
        torch.backends.cudnn.benchmark = self.cudnn_benchmark

    def place_model(self, model: nn.Module, device: torch.device) -> nn.Module:
        return model.to(device=device, memory_format=self.memory_format)

    def place_batch(self, images: torch.Tensor) -> torch.Tensor:
        return images.contiguous(memory_format=self.memory_format)

    def maybe_compile(self, model: nn.Module) -> nn.Module:
        return torch.compile(model) if self.compile else model

    def optimizer_kwargs(self) -> dict:
        """Keyword arguments for torch.optim.SGD: fused where asked, torch's choice otherwise."""
        return {"fused": True} if self.fused_optimizer else {}
