"""Speed options as one object: memory format, cuDNN autotuning, fused optimizer, torch.compile,
and (dlscale bench only) the train step captured in a CUDA graph.

These are the SC20 tutorial's optimisation steps after AMP (NHWC, then the "extra opts":
fused SGD, zero_grad(set_to_none=True), cudnn.benchmark) plus torch.compile. set_to_none is
always on: it skips a memset per gradient and makes the next backward write instead of add.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import nn

from dlscale.errors import ConfigError, DeviceError

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""torch.compile's modes: reduce-overhead and max-autotune replay CUDA graphs (fewer kernel launches);
the max-autotune modes also time kernel choices (long compiles)."""


@dataclass(frozen=True, kw_only=True)
class SpeedOptions:
    channels_last: bool = False
    """Keep activations in NHWC, the layout tensor-core convolutions use (no transposes)."""
    cudnn_benchmark: bool = False
    """Let cuDNN time its algorithms for each new input shape and keep the fastest."""
    fused_optimizer: bool | None = None
    """torch's fused SGD (one kernel for all parameters). None: fused on GPUs, where it is also the
    only SGD that GradScaler steps without reading the overflow flag on the host every step (fp16);
    torch's default elsewhere. False: torch's default (foreach on GPUs, a loop on the CPU)."""
    compile: bool = False
    """torch.compile the model (after DDP wrapping, so the DDP optimizer splits graphs at buckets)."""
    compile_mode: str = "default"
    """torch.compile's mode, one of COMPILE_MODES (with compile)."""
    cuda_graphs: bool = False
    """`dlscale bench` only: capture the whole eager train step (forward, loss, backward, optimizer step) in
    one torch.cuda.CUDAGraph after warm-up and replay it every step (dlscale.bench.graphs). One CUDA rank,
    not with compile (whose reduce-overhead mode records CUDA graphs of its own)."""

    def __post_init__(self) -> None:
        if self.compile_mode not in COMPILE_MODES:
            raise ConfigError(f"speed.compile_mode={self.compile_mode!r}: use one of {', '.join(COMPILE_MODES)}")
        if self.cuda_graphs and self.compile:
            raise ConfigError("--cuda-graphs and --compile do not combine: use one, --cuda-graphs (eager capture) "
                              "or --compile-mode reduce-overhead (torch.compile's CUDA graphs)")

    @property
    def memory_format(self) -> torch.memory_format:
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def resolved(self, device: torch.device) -> SpeedOptions:
        """These options with every automatic choice made for `device` (what a run records)."""
        fused = self.fused_optimizer if self.fused_optimizer is not None else device.type == "cuda"
        return replace(self, fused_optimizer=fused)

    def apply_globals(self, device: torch.device) -> None:
        if self.cudnn_benchmark and device.type != "cuda":
            raise DeviceError("--cudnn-benchmark (speed.cudnn_benchmark in presets) needs a CUDA device; drop it on "
                              "the CPU, e.g. --set speed.cudnn_benchmark=false")
        if self.cuda_graphs and device.type != "cuda":
            raise DeviceError(f"--cuda-graphs needs a CUDA device, this run is on the {device.type.upper()}; "
                              "drop --cuda-graphs")
        torch.backends.cudnn.benchmark = self.cudnn_benchmark

    def place_model(self, model: nn.Module, device: torch.device) -> nn.Module:
        return model.to(device=device, memory_format=self.memory_format)

    def place_batch(self, images: torch.Tensor) -> torch.Tensor:
        return images.contiguous(memory_format=self.memory_format)

    def maybe_compile(self, model: nn.Module) -> nn.Module:
        if not self.compile:
            return model
        return torch.compile(model, mode=None if self.compile_mode == "default" else self.compile_mode)

    def optimizer_kwargs(self) -> dict:
        """Keyword arguments for torch.optim.SGD: fused where asked, torch's choice otherwise."""
        return {"fused": True} if self.fused_optimizer else {}
