"""How replicas stay in step: the Strategy protocol that the train step calls."""

from __future__ import annotations

import contextlib
from typing import Protocol

import torch
from torch import nn


class Strategy(Protocol):
    """One way of synchronising data-parallel replicas; each owns its synchronisation.

    The train step calls, in order: forward/backward on `wrap(model)` (inside `no_sync(model)`
    for every micro-batch but the last of an accumulated step), `after_backward(model)`, the
    optimizer step, `after_step(model)`. A strategy that synchronises inside backward (DDP's
    hooks) does nothing in the two calls; decentralized strategies mix parameters with their
    neighbours there (after_backward: adapt-with-combine, after_step: adapt-then-combine).
    Strategies subclass this protocol to inherit the defaults of no_sync and metrics.
    """

    name: str
    topology: str | None = None
    """The graph a decentralized strategy mixes over (--topology); None for allreduce strategies."""

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module: ...

    def after_backward(self, model: nn.Module) -> None: ...

    def after_step(self, model: nn.Module) -> None: ...

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """Forward and backward inside it do not synchronise (micro-batches before the last one)."""
        return contextlib.nullcontext()

    def metrics(self, model: nn.Module) -> dict:
        """Figures of the replicas' state for a log step (may be collective: every rank calls it,
        on log steps only). Neighbour strategies: the consensus distance."""
        return {}

    def comm_stats(self) -> dict:
        """Communication per step since the last reset: comm_time_ms_per_step (None where it
        overlaps backward and cannot be separated), comm_bytes_per_step this rank sent, and
        comm_bytes_basis (measured, or the ring-allreduce model 2(p-1)/p x payload)."""
        ...

    def reset_stats(self) -> None: ...
