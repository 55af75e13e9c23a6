"""`dlscale bench --cuda-graphs`: the whole eager train step captured once in a CUDA graph and replayed.

PyTorch's "whole-network capture" (https://pytorch.org/docs/stable/notes/cuda.html#whole-network-capture):
a few eager steps on a side stream first, so that everything created lazily (cuDNN's autotuning and
workspaces, cuBLAS handles, the loss scaler's scale tensor, foreach SGD's momentum buffers) exists before
capture; the gradients set to None, so that backward allocates them from the graph's private pool and every
replay writes them afresh (no zero_grad between replays); then one `train_step` captured on static input
and label tensors. Each step after that copies its batch into those tensors and replays the graph: one
launch instead of a few hundred kernel launches from Python.

What the graph holds: everything `train_step` runs on the device, i.e. forward and loss under autocast,
backward (scaled for amp_fp16), the strategy's hooks (they communicate nothing on one rank) and the
optimizer step with GradScaler's step and update. That last part is capture-safe because nothing reads the
device from the host: a disabled scaler (fp32, tf32, amp_bf16) just calls `optimizer.step()`; an enabled one
(amp_fp16) steps torch's fused SGD (`_step_supports_amp_scaling`) by handing it the scale and the overflow
flag as tensors, the fused kernel skips an overflowed step on the device, and `update()` changes the scale
in place (`torch._amp_update_scale_`), so the captured `scale(loss)` reads the current scale at every
replay. Any other SGD under amp_fp16 reads the overflow flag with `.item()`, so BenchConfig refuses that
combination rather than running the optimizer step eagerly after each replay: one design, the whole step
in the graph. The learning rate is a Python float baked into the captured kernels; bench keeps it
constant, so the graph stays right (training, whose schedule changes it every step, refuses
speed.cuda_graphs).

Not in the graph: the forward timer (its hooks are Python, which a replay does not run: bench records no
forward time under graphs), and anything across ranks (DDP's or gloo's collectives are not captured here:
one rank only). Across ranks, torch.compile's reduce-overhead mode records CUDA graphs of each compiled graph
and runs under DDP, but whether it replays them there, and at what speed, no GPU run of this project has
measured yet: PyTorch's tracker reports BatchNorm + DDP + reduce-overhead running many times slower than
eager (pytorch/pytorch#139207). `dlscale bench --wrap-single-rank` measures it on one GPU and says whether
the graphs replayed (docs/benchmarks.md, "DDP and torch.compile on one GPU").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from dlscale.errors import ConfigError
from dlscale.train.step import StepParts, train_step

WARMUP_STEPS = 3
"""Eager steps on a side stream before capture: the recipe's 3 (PyTorch's CUDA semantics notes). They
train the model, as any warm-up step does."""


def check_ranks(world_size: int) -> None:
    """Refuse a job of several ranks: their collectives are not part of this capture."""
    if world_size > 1:
        raise ConfigError(f"--cuda-graphs captures one rank's step, this job has {world_size} ranks; across ranks "
                          "torch.compile records CUDA graphs with --compile-mode reduce-overhead (not yet measured "
                          "under DDP: docs/benchmarks.md)")


class GraphedStep:
    """The captured train step: `step(images, labels)` copies the batch into the static inputs and replays.

    Returns the graph's loss tensor, which the next replay overwrites: clone it to keep it."""

    def __init__(self, graph: torch.cuda.CUDAGraph, images: torch.Tensor, labels: torch.Tensor,
                 loss: torch.Tensor) -> None:
        self.graph, self.images, self.labels, self.loss = graph, images, labels, loss

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.images.copy_(images)  # on the device, in stream order before the replay: no host sync
        self.labels.copy_(labels)
        self.graph.replay()
        return self.loss


def capture_train_step(parts: StepParts, images: torch.Tensor, labels: torch.Tensor, *,
                       warmup_steps: int = WARMUP_STEPS) -> GraphedStep:
    """Run `warmup_steps` eager steps on (images, labels) on a side stream, then capture one `train_step`.

    The static inputs are copies of the batch in its memory format (clone keeps channels_last)."""
    static_images, static_labels = images.clone(), labels.clone()
    side = torch.cuda.Stream(device=images.device)
    side.wait_stream(torch.cuda.current_stream(images.device))
    with torch.cuda.stream(side):
        for _ in range(warmup_steps):
            train_step(parts, [(static_images, static_labels)])
    torch.cuda.current_stream(images.device).wait_stream(side)
    parts.optimizer.zero_grad(set_to_none=True)  # backward allocates the gradients from the graph's pool
    graph = torch.cuda.CUDAGraph()
    with autocast_cache_disabled(), torch.cuda.graph(graph):
        # train_step ends with zero_grad(set_to_none=True): on the host only (no kernel), so the gradients
        # become the graph's temporaries, written by each replay's backward and read by its optimizer step.
        loss = train_step(parts, [(static_images, static_labels)])
    return GraphedStep(graph, static_images, static_labels, loss)


@contextlib.contextmanager
def autocast_cache_disabled() -> Iterator[None]:
    """Autocast without its cache of lower-precision weight copies, as capture requires (PyTorch's CUDA
    graphs notes: `autocast(..., cache_enabled=False)`). Precision.autocast() leaves cache_enabled unset,
    which makes torch.autocast take this process-wide setting when it is created."""
    before = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    try:
        yield
    finally:
        torch.set_autocast_cache_enabled(before)
