"""Gradient allreduce through DistributedDataParallel: buckets overlap with backward."""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from dlscale.config.sections import StrategyConfig
from dlscale.distributed.env import DistEnv
from dlscale.strategies.base import Strategy
from dlscale.strategies.comm import ring_allreduce_wire_bytes


class AllreduceStrategy(Strategy):
    """DDP: each bucket of gradients is averaged across ranks as soon as backward fills it.

    Parameters start identical because DDP broadcasts rank 0's state at construction.
    With one process there is nothing to synchronise and the model is not wrapped, so a
    single-process run measures the model and not the wrapper; `wrap_single_rank` wraps it anyway
    (in the one-rank group that init_process_group makes for it), to measure the wrapper: its hooks,
    its buckets, and under torch.compile the DDP optimizer's graph splits. Every synchronised step reduces
    every gradient once, so the bytes handed to allreduce are the gradients' bytes (counted once
    from the parameters: no Python runs per bucket); the time is not separable, since it
    overlaps backward.
    """

    name = "allreduce"

    def __init__(self, cfg: StrategyConfig, env: DistEnv) -> None:
        self.world_size = env.world_size
        self.wrap_single_rank = cfg.wrap_single_rank
        self.grad_bytes = 0
        """Bytes of the gradients one synchronised step reduces."""
        self.steps = 0
        self.ddp: DistributedDataParallel | None = None

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        if self.world_size == 1 and not self.wrap_single_rank:
            return model
        device_ids = [device.index] if device.type == "cuda" else None
        self.ddp = DistributedDataParallel(model, device_ids=device_ids, gradient_as_bucket_view=True)
        self.grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        return self.ddp

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        # The DDP object itself, also when the step runs a torch.compile wrapper of it.
        return self.ddp.no_sync() if self.ddp is not None else contextlib.nullcontext()

    def after_backward(self, model: nn.Module) -> None:
        pass

    def after_step(self, model: nn.Module) -> None:
        self.steps += 1

    def comm_stats(self) -> dict:
        wire = ring_allreduce_wire_bytes(self.grad_bytes, self.world_size) if self.steps else 0
        return {"comm_time_ms_per_step": None, "comm_bytes_per_step": wire,
                "comm_bytes_basis": "ring model", "comm_steps": self.steps}

    def reset_stats(self) -> None:
        self.steps = 0
