"""What strategies share: communication cost models and meters, and flat views of parameters."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from dlscale.decentralized import ops
from dlscale.metrics.timing import DeviceTimer


def ring_allreduce_wire_bytes(payload_bytes: int, world_size: int) -> int:
    """Bytes each rank sends in a ring allreduce of payload_bytes: 2(p-1)/p of it
    (docs/references.md#ring-allreduce-bytes)."""
    return 2 * (world_size - 1) * payload_bytes // max(world_size, 1)


class CommMeter:
    """Time and bytes of blocking communication per optimizer step, on this rank.

    The time is the device's (a DeviceTimer: CUDA events on the compute stream, read when the
    stats are read on a log step), so timing adds no host synchronisation to a step.
    """

    def __init__(self, device: torch.device | None = None, *, timer: DeviceTimer | None = None) -> None:
        self.timer = timer or DeviceTimer(device or torch.device("cpu"))
        self.reset()

    def reset(self) -> None:
        self.timer.reset()
        self.payload_bytes = 0
        self.steps = 0
        ops.reset_comm_stats()

    def timed(self, fn: Callable[[], None]) -> None:
        self.timer.start()
        fn()
        self.timer.stop()

    def stats(self, wire_bytes: int, basis: str) -> dict:
        """The Strategy.comm_stats record: time and bytes per step since the last reset."""
        steps = max(self.steps, 1)
        return {"comm_time_ms_per_step": 1000 * self.timer.total_s() / steps,
                "comm_bytes_per_step": wire_bytes / steps, "comm_bytes_basis": basis, "comm_steps": self.steps}


def flat_parameters(model: nn.Module) -> tuple[list[torch.Tensor], torch.Tensor]:
    params = list(model.parameters())
    return params, torch.cat([p.detach().reshape(-1) for p in params])


def write_back(params: list[torch.Tensor], flat: torch.Tensor) -> None:
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(flat[offset:offset + n].view_as(p))
            offset += n


def consensus_distance(model: nn.Module) -> float:
    """Root-mean-square over ranks of ||w_i - mean_j w_j||: how far replicas have drifted apart.

    Collective: every rank must call it. Zero when the replicas are identical (allreduce).
    """
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return 0.0
    _, flat = flat_parameters(model)
    flat = flat.double()
    mean = flat.clone()
    dist.all_reduce(mean)
    mean /= dist.get_world_size()
    squared = ((flat - mean) ** 2).sum().reshape(1)
    dist.all_reduce(squared)
    return float((squared / dist.get_world_size()).sqrt().item())
