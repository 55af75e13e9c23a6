"""One optimisation step: short, no precision branches, no host synchronisation."""

from __future__ import annotations

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
