"""One optimisation step: short, no precision branches, no host synchronisation."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn

from dlscale.precision import Precision
from dlscale.strategies.base import Strategy


def train_step(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    precision: Precision,
    strategy: Strategy,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    with precision.autocast():
        loss = loss_fn(model(images), labels)
    precision.backward(loss)
    strategy.after_backward(model)  # DDP: nothing (its hooks fired); neighbor: mix with peers
    precision.step(optimizer)
    strategy.after_step(model)
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()  # read with .item() only on log steps


def accumulation_step(
    model: nn.Module,
    micro_batches: list[tuple[torch.Tensor, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
    precision: Precision,
    strategy: Strategy,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """One optimizer step over several micro-batches (gradient accumulation).

    Each micro-batch's loss is divided by their number, so the summed gradient is the mean over
    all their images, as one batch of the combined size gives (NVIDIA's --optimizer-batch-size).
    DDP synchronises only on the last micro-batch (no_sync on the others).
    """
    count = len(micro_batches)
    total = torch.zeros((), device=micro_batches[0][0].device)
    for i, (images, labels) in enumerate(micro_batches):
        sync = i == count - 1 or not hasattr(model, "no_sync")
        with contextlib.nullcontext() if sync else model.no_sync():  # forward and backward inside
            with precision.autocast():
                loss = loss_fn(model(images), labels) / count
            precision.backward(loss)
        total += loss.detach().float()
    strategy.after_backward(model)
    precision.step(optimizer)
    strategy.after_step(model)
    optimizer.zero_grad(set_to_none=True)
    return total
