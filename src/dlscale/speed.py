"""Speed options as one object: memory format, cuDNN autotuning, fused optimizer, torch.compile,
and (dlscale bench only) the train step captured in a CUDA graph.

These are the SC20 tutorial's optimisation steps after AMP (NHWC, then the "extra opts":
fused SGD, zero_grad(set_to_none=True), cudnn.benchmark) plus torch.compile. set_to_none is
always on: it skips a memset per gradient and makes the next backward write instead of add.

The options are plain data that config/ holds, so this module imports torch only in the methods
that act on it: the configuration, and with it every command's --help, loads without torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dlscale.errors import ConfigError, DeviceError, shown

if TYPE_CHECKING:
    import torch
    from torch import nn

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
    coordinate_descent_tuning: bool = False
    """With compile: inductor's coordinate-descent tuning, which times neighbouring block sizes of every
    generated Triton kernel (the batch norm reductions and fused pointwise kernels) while compiling; part
    of max-autotune, here without its Triton convolution templates (which took over 395 s to compile
    ResNet-50 on an H100)."""
    cudnn_benchmark_limit: int | None = None
    """With cudnn_benchmark: how many cuDNN algorithms to time per convolution shape (torch's default,
    None, leaves torch's 10; 0 times every algorithm cuDNN offers)."""
    stem_channels: int = 0
    """Run the stem convolution on this many input channels, the image's and zero ones with zero weights
    (MLPerf's ResNet-50 pads 3 to 4): the same mathematics, possibly a faster kernel. 0: the image's
    channels. The weights stay 3-channel, so checkpoints load into an unpadded model."""
    step_stream: bool = False
    """`dlscale train` only: run the training (steps, evaluation, checkpoints) on a CUDA stream of its own
    instead of torch's default stream, the legacy stream that a library's synchronous copies and blocking
    streams wait for and make wait: with nvJPEG decoding beside the step (data.decode=gpu) that can
    serialise the two (docs/profiling.md)."""
    cuda_graphs: bool = False
    """`dlscale bench` only: capture the whole eager train step (forward, loss, backward, optimizer step) in
    one torch.cuda.CUDAGraph after warm-up and replay it every step (dlscale.bench.cuda_graphs). One CUDA rank,
    not with compile (whose reduce-overhead mode records CUDA graphs of its own)."""

    def __post_init__(self) -> None:
        if self.compile_mode not in COMPILE_MODES:
            raise ConfigError(f"speed.compile_mode={shown(self.compile_mode)}: use one of {', '.join(COMPILE_MODES)}")
        if self.coordinate_descent_tuning and not self.compile:
            raise ConfigError("coordinate-descent tuning is a torch.compile option: add --compile (or "
                              "speed.compile=true) or drop --coordinate-descent-tuning")
        if self.cudnn_benchmark_limit is not None and (isinstance(self.cudnn_benchmark_limit, bool)
                                                       or not 0 <= self.cudnn_benchmark_limit <= 10_000):
            raise ConfigError(f"speed.cudnn_benchmark_limit={shown(self.cudnn_benchmark_limit)}: use 0 (every "
                              "algorithm) or a count up to 10,000 (cuDNN offers fewer)")
        if self.cudnn_benchmark_limit is not None and not self.cudnn_benchmark:
            raise ConfigError("speed.cudnn_benchmark_limit needs cuDNN autotuning: add --cudnn-benchmark "
                              "(speed.cudnn_benchmark=true)")
        if self.stem_channels != 0 and not 4 <= self.stem_channels <= 64:
            raise ConfigError(f"speed.stem_channels={self.stem_channels}: use 0 (no padding) or 4 to 64 "
                              "(MLPerf pads the 3 image channels to 4)")
        if self.cuda_graphs and self.compile:
            raise ConfigError("--cuda-graphs and --compile do not combine: use one, --cuda-graphs (eager capture) "
                              "or --compile-mode reduce-overhead (torch.compile's CUDA graphs)")

    @property
    def memory_format(self) -> torch.memory_format:
        import torch

        return torch.channels_last if self.channels_last else torch.contiguous_format

    def resolved(self, device: torch.device) -> SpeedOptions:
        """These options with every automatic choice made for `device` (what a run records)."""
        fused = self.fused_optimizer if self.fused_optimizer is not None else device.type == "cuda"
        return replace(self, fused_optimizer=fused)

    def apply_globals(self, device: torch.device, *, flags: bool = False) -> None:
        """torch's global switches for these options on `device`; an option the device cannot run is one line
        saying how to drop it: the flag where the options came from flags (`dlscale bench`), else the setting."""
        if self.cudnn_benchmark and device.type != "cuda":
            drop = "drop --cudnn-benchmark" if flags else "set speed.cudnn_benchmark=false (--set)"
            raise DeviceError(f"cuDNN autotuning (--cudnn-benchmark, speed.cudnn_benchmark) needs a CUDA device, this "
                              f"run is on the {device.type.upper()}: {drop}")
        if self.step_stream and device.type != "cuda":
            raise DeviceError(f"speed.step_stream runs the training on a CUDA stream, this run is on the "
                              f"{device.type.upper()}; drop it, e.g. --set speed.step_stream=false")
        if self.cuda_graphs and device.type != "cuda":
            raise DeviceError(f"--cuda-graphs needs a CUDA device, this run is on the {device.type.upper()}; "
                              "drop --cuda-graphs")
        import torch

        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        if self.cudnn_benchmark_limit is not None:
            torch.backends.cudnn.benchmark_limit = self.cudnn_benchmark_limit

    def training_stream(self, device: torch.device) -> contextlib.AbstractContextManager:
        """Where `dlscale train` runs its epochs: a CUDA stream of its own with step_stream (ordered after
        the default stream's work so far, and the default stream after it at the end), else as it is."""
        return _own_stream(device) if self.step_stream else contextlib.nullcontext()

    def place_model(self, model: nn.Module, device: torch.device) -> nn.Module:
        return model.to(device=device, memory_format=self.memory_format)

    def place_batch(self, images: torch.Tensor) -> torch.Tensor:
        return images.contiguous(memory_format=self.memory_format)

    def maybe_compile(self, model: nn.Module) -> nn.Module:
        if not self.compile:
            return model
        import torch

        options = self.inductor_options()
        if options is None:
            return torch.compile(model, mode=None if self.compile_mode == "default" else self.compile_mode)
        return torch.compile(model, options=options)

    def inductor_options(self) -> dict | None:
        """Inductor's settings for the compile mode plus the extra ones asked for, or None where the
        mode alone says it (torch.compile takes a mode or options, not both; a mode is its list of
        options, torch._inductor.list_mode_options)."""
        if not self.coordinate_descent_tuning:
            return None
        from torch._inductor import list_mode_options

        return {**list_mode_options(self.compile_mode), "coordinate_descent_tuning": True}

    def optimizer_kwargs(self) -> dict:
        """Keyword arguments for torch.optim.SGD: fused where asked, torch's choice otherwise."""
        return {"fused": True} if self.fused_optimizer else {}


@contextlib.contextmanager
def _own_stream(device: torch.device) -> Iterator[None]:
    import torch

    default = torch.cuda.current_stream(device)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(default)  # the model, the optimizer and a resumed checkpoint were placed on the default
    try:
        with torch.cuda.stream(stream):
            yield
    finally:
        default.wait_stream(stream)
