"""Gradient allreduce after backward, in one blocking allreduce (Horovod's form, no overlap)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from dlscale.config.sections import StrategyConfig
from dlscale.decentralized import ops
from dlscale.distributed.env import DistEnv
from dlscale.strategies.base import Strategy
from dlscale.strategies.comm import CommMeter, ring_allreduce_wire_bytes, write_back


class GradientAllreduceStrategy(Strategy):
    """Average gradients after backward in one blocking allreduce of all of them, flattened."""

    name = "gradient_allreduce"

    def __init__(self, cfg: StrategyConfig, env: DistEnv) -> None:
        self.world_size = env.world_size
        self.meter = CommMeter()

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        self.meter = CommMeter(device)
        if self.world_size > 1:
            ops.broadcast_parameters(model, root=0)
        self.meter.reset()  # the start-up broadcast is not step traffic
        return model

    def after_backward(self, model: nn.Module) -> None:
        self.meter.steps += 1
        if self.world_size == 1:
            return
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])

        def reduce():
            dist.all_reduce(flat)
            flat.div_(self.world_size)

        self.meter.timed(reduce)
        self.meter.payload_bytes += flat.numel() * flat.element_size()
        write_back(grads, flat)

    def after_step(self, model: nn.Module) -> None:
        pass

    def comm_stats(self) -> dict:
        payload = self.meter.payload_bytes
        return self.meter.stats(ring_allreduce_wire_bytes(payload, self.world_size), "ring model")

    def reset_stats(self) -> None:
        self.meter.reset()
