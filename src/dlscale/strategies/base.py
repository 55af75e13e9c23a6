"""How replicas stay in step: the Strategy protocol that the train step calls."""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn


class Strategy(Protocol):
    """One way of synchronising data-parallel replicas.

    The train step calls, in order: forward/backward on `wrap(model)`, `after_backward(model)`,
    the optimizer step, `after_step(model)`. A strategy that synchronises inside backward (DDP's
    hooks) does nothing in the two calls; decentralized strategies mix parameters with their
    neighbours there (after_backward: adapt-with-combine, after_step: adapt-then-combine).
    """

    name: str

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module: ...

    def after_backward(self, model: nn.Module) -> None: ...

    def after_step(self, model: nn.Module) -> None: ...

    def comm_stats(self) -> dict:
        """Communication per step so far: seconds and bytes this rank sent, where measurable."""
        ...
