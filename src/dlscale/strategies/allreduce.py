"""Gradient allreduce through DistributedDataParallel: buckets overlap with backward."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel


class AllreduceStrategy:
    """DDP: each bucket of gradients is averaged across ranks as soon as backward fills it.

    Parameters start identical because DDP broadcasts rank 0's state at construction.
    With one process there is nothing to synchronise and the model is not wrapped, so a
    single-process run measures the model and not the wrapper.
    """

    name = "allreduce"

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        if self.world_size == 1:
            return model
        device_ids = [device.index] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids, gradient_as_bucket_view=True)

    def after_backward(self, model: nn.Module) -> None:
        pass

    def after_step(self, model: nn.Module) -> None:
        pass

    def comm_stats(self) -> dict:
        return {}
