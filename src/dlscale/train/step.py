"""The one train step: training, `dlscale bench` and `dlscale profile` all run this function.

Short, no precision branches, no host synchronisation. An optimizer step over one or more
micro-batches (gradient accumulation: each micro-batch's loss is divided by their number, so the
summed gradient is the mean over all their images, as one batch of the combined size gives;
NVIDIA's --optimizer-batch-size). The strategy synchronises only on the last micro-batch.

`regions(name)` wraps each part in a context: a no-op by default; `dlscale profile` passes its
region timer, which times the parts and opens an NVTX range for each, so the profiled step is the
trained step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from dlscale.precision import Precision
from dlscale.strategies.base import Strategy

Batch = tuple[torch.Tensor, torch.Tensor]
Regions = Callable[[str], contextlib.AbstractContextManager]

_NO_REGION = contextlib.nullcontext()


def no_regions(name: str) -> contextlib.AbstractContextManager:
    return _NO_REGION


@dataclass
class StepParts:
    """What one training step calls."""

    model: nn.Module
    """What the step runs: DDP-wrapped and/or compiled as the strategy and speed options say."""
    optimizer: torch.optim.Optimizer
    precision: Precision
    strategy: Strategy
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def train_step(parts: StepParts, micro_batches: Sequence[Batch], regions: Regions = no_regions) -> torch.Tensor:
    """One optimizer step over micro_batches (one (images, labels) pair without accumulation);
    returns the mean loss, on the device (read it with .item() on log steps only)."""
    count = len(micro_batches)
    total = None
    for i, (images, labels) in enumerate(micro_batches):
        last = i == count - 1
        sync = contextlib.nullcontext() if last else parts.strategy.no_sync(parts.model)
        with sync, regions("forward/loss/backward"):
            with regions("forward"), parts.precision.autocast():
                loss = parts.loss_fn(parts.model(images), labels)
                if count > 1:
                    loss = loss / count
            with regions("backward"):
                parts.precision.backward(loss)
                if last:  # DDP: nothing (its hooks fired); neighbor: mix with peers
                    parts.strategy.after_backward(parts.model)
        total = loss.detach() if total is None else total + loss.detach()
    with regions("optimizer.step"):
        parts.precision.step(parts.optimizer)
        parts.strategy.after_step(parts.model)
    with regions("zero_grad"):
        parts.optimizer.zero_grad(set_to_none=True)
    return total
