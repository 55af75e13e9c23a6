"""Decentralized strategies (BlueFog's optimizers on torch.distributed) and gradient allreduce.

Adapt-with-combine (AWC, the DGD form; BlueFog's default), references.md section 2.5:
    w_{t+1} = NeighborAverage(w_t) - lr * grad(w_t)
the neighbour average of the parameters replaces them after backward, then the optimizer
applies the gradient computed at the old parameters. Adapt-then-combine (ATC):
    w_{t+1} = NeighborAverage(w_t - lr * grad(w_t))
mixes after the optimizer step. Parameters (not buffers) are mixed, flattened into one message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn

from dlscale.decentralized import ops, topology
from dlscale.errors import ConfigError
from dlscale.metrics.timing import device_synchronizer

TOPOLOGIES: dict[str, Callable[[int], torch.Tensor]] = {
    "exp2": topology.exponential_two_graph,
    "ring": topology.ring_graph,
    "mesh": topology.mesh_grid_2d_graph,
    "star": topology.star_graph,
    "full": topology.fully_connected_graph,
}


def ring_allreduce_wire_bytes(payload_bytes: int, world_size: int) -> int:
    """Bytes each rank sends in a ring allreduce of payload_bytes: 2(p-1)/p of it (nccl-tests)."""
    return 2 * (world_size - 1) * payload_bytes // max(world_size, 1)


class CommMeter:
    """Seconds and bytes of blocking communication per optimizer step, on this rank."""

    def __init__(self, device_sync: Callable[[], None] = lambda: None) -> None:
        self.sync = device_sync
        self.reset()

    def reset(self) -> None:
        self.seconds = 0.0
        self.payload_bytes = 0
        self.steps = 0
        ops.reset_comm_stats()

    def timed(self, fn: Callable[[], None]) -> None:
        # Synchronising the device before and after makes the time the communication's own.
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        self.seconds += time.perf_counter() - start


def _flat_parameters(model: nn.Module) -> tuple[list[torch.Tensor], torch.Tensor]:
    params = [p for p in model.parameters()]
    return params, torch.cat([p.detach().reshape(-1) for p in params])


def _write_back(params: list[torch.Tensor], flat: torch.Tensor) -> None:
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
    _, flat = _flat_parameters(model)
    flat = flat.double()
    mean = flat.clone()
    dist.all_reduce(mean)
    mean /= dist.get_world_size()
    squared = ((flat - mean) ** 2).sum().reshape(1)
    dist.all_reduce(squared)
    return float((squared / dist.get_world_size()).sqrt().item())


class GradientAllreduceStrategy:
    """Average gradients after backward in one blocking allreduce (Horovod's form, no overlap)."""

    name = "gradient_allreduce"

    def __init__(self, world_size: int, **_) -> None:
        self.world_size = world_size
        self.meter = CommMeter()

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        self.meter = CommMeter(device_synchronizer(device))
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
        _write_back(grads, flat)

    def after_step(self, model: nn.Module) -> None:
        pass

    def comm_stats(self) -> dict:
        payload = self.meter.payload_bytes
        return _stats(self.meter, payload, ring_allreduce_wire_bytes(payload, self.world_size), "ring model")

    def reset_stats(self) -> None:
        self.meter.reset()


class NeighborAllreduceStrategy:
    """Mix parameters with graph neighbours (BlueFog's neighbor_allreduce optimizers)."""

    def __init__(self, world_size: int, *, hierarchical: bool = False, topology: str = "exp2",
                 atc_style: bool = False, dynamic_topology: bool = True, num_steps_per_communication: int = 1,
                 global_average_every: int = 0, local_world_size: int = 1, **_) -> None:
        if topology not in TOPOLOGIES:
            raise ConfigError(f"unknown --topology {topology!r}; choose one of {', '.join(TOPOLOGIES)}")
        if num_steps_per_communication < 1 or global_average_every < 0:
            raise ConfigError("--num-steps-per-communication must be >= 1 and the global average interval >= 0")
        if hierarchical and world_size > 1 and (local_world_size < 2 or world_size % local_world_size):
            raise ConfigError(f"hierarchical_neighbor_allreduce needs several ranks per node on equal nodes "
                              f"({world_size} ranks, {local_world_size} per node); use neighbor_allreduce")
        self.name = "hierarchical_neighbor_allreduce" if hierarchical else "neighbor_allreduce"
        self.world_size, self.hierarchical, self.topology = world_size, hierarchical, topology
        self.atc_style, self.dynamic = atc_style, dynamic_topology
        self.every, self.global_every = num_steps_per_communication, global_average_every
        self.local_world_size = local_world_size
        self.steps = 0
        self.schedule: Iterator | None = None
        self.meter = CommMeter()

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        self.meter = CommMeter(device_synchronizer(device))
        if self.world_size == 1:
            return model
        if self.hierarchical:
            machines = self.world_size // self.local_world_size
            ops.set_machine_topology(TOPOLOGIES[self.topology](machines), local_size=self.local_world_size)
            machine = dist.get_rank() // self.local_world_size
            self.schedule = topology.dynamic_machine_one_peer_schedule(machines, machine) if self.dynamic else None
        else:
            graph = TOPOLOGIES[self.topology](self.world_size)
            ops.set_topology(graph)  # collective: every rank must set the same graph
            self.schedule = topology.dynamic_one_peer_schedule(graph, dist.get_rank()) if self.dynamic else None
        ops.broadcast_parameters(model, root=0)  # identical start on every rank
        self.meter.reset()  # the start-up broadcast is not step traffic
        return model

    def after_backward(self, model: nn.Module) -> None:
        if not self.atc_style:
            self._maybe_mix(model)

    def after_step(self, model: nn.Module) -> None:
        if self.atc_style:
            self._maybe_mix(model)
        self.steps += 1
        self.meter.steps += 1
        if self.world_size > 1 and self.global_every and self.steps % self.global_every == 0:
            params, flat = _flat_parameters(model)
            self.meter.timed(lambda: dist.all_reduce(flat))
            self.meter.payload_bytes += flat.numel() * flat.element_size()
            _write_back(params, flat.div_(self.world_size))

    def _maybe_mix(self, model: nn.Module) -> None:
        if self.world_size == 1 or self.steps % self.every:
            return
        params, flat = _flat_parameters(model)
        kwargs = self._weights()
        op = ops.hierarchical_neighbor_allreduce if self.hierarchical else ops.neighbor_allreduce
        mixed = {}
        self.meter.timed(lambda: mixed.setdefault("flat", op(flat, **kwargs)))
        _write_back(params, mixed["flat"])

    def _weights(self) -> dict:
        """Static graph: the op's defaults. Dynamic: this step's one peer, uniform weights."""
        if self.schedule is None:
            return {}
        send, recv = next(self.schedule)
        weight = 1.0 / (len(recv) + 1)
        src = {r: weight for r in recv}
        if self.hierarchical:
            return {"self_weight": weight, "src_machine_weights": src, "dst_machine_weights": send}
        return {"self_weight": weight, "src_weights": src, "dst_weights": send, "enable_topo_check": False}

    def comm_stats(self) -> dict:
        sent = ops.comm_stats()
        wire = sent.get("p2p_bytes_sent", 0) + ring_allreduce_wire_bytes(
            sent.get("collective_payload_bytes", 0), self.world_size)
        return _stats(self.meter, self.meter.payload_bytes, wire, "measured p2p + ring model for allreduce")

    def reset_stats(self) -> None:
        self.meter.reset()


def _stats(meter: CommMeter, payload: int, wire: int, basis: str) -> dict:
    steps = max(meter.steps, 1)
    return {"comm_time_ms_per_step": 1000 * meter.seconds / steps, "comm_bytes_per_step": wire / steps,
            "comm_bytes_basis": basis, "comm_steps": meter.steps}
