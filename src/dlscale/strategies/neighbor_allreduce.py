"""Decentralized strategies: BlueFog's neighbor_allreduce optimizers on torch.distributed.

Adapt-with-combine (AWC, the DGD form; BlueFog's default; docs/references.md#bluefog-awc-atc):
    w_{t+1} = NeighborAverage(w_t) - lr * grad(w_t)
the neighbour average of the parameters replaces them after backward, then the optimizer
applies the gradient computed at the old parameters. Adapt-then-combine (ATC):
    w_{t+1} = NeighborAverage(w_t - lr * grad(w_t))
mixes after the optimizer step. Parameters (not buffers) are mixed, flattened into one message.
The hierarchical form averages inside each machine first and exchanges between machines.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn

from dlscale.config.sections import StrategyConfig
from dlscale.decentralized import ops, topology
from dlscale.distributed.env import DistEnv
from dlscale.errors import ConfigError
from dlscale.strategies.base import Strategy
from dlscale.strategies.comm import (
    CommMeter,
    consensus_distance,
    flat_parameters,
    ring_allreduce_wire_bytes,
    write_back,
)

TOPOLOGIES: dict[str, Callable[[int], torch.Tensor]] = {
    "exp2": topology.exponential_two_graph,
    "ring": topology.ring_graph,
    "mesh": topology.mesh_grid_2d_graph,
    "star": topology.star_graph,
    "full": topology.fully_connected_graph,
}
"""--topology -> BlueFog's graph of that many nodes (docs/references.md#bluefog-topologies)."""


class NeighborAllreduceStrategy(Strategy):
    """Mix parameters with graph neighbours (BlueFog's neighbor_allreduce optimizers)."""

    name = "neighbor_allreduce"

    def __init__(self, cfg: StrategyConfig, env: DistEnv) -> None:
        if cfg.topology not in TOPOLOGIES:
            raise ConfigError(f"unknown --topology {cfg.topology!r}; choose one of {', '.join(TOPOLOGIES)}")
        self.world_size, self.local_world_size = env.world_size, env.local_world_size
        self.topology, self.atc_style, self.dynamic = cfg.topology, cfg.atc_style, cfg.dynamic_topology
        self.every, self.global_every = cfg.num_steps_per_communication, cfg.global_average_every
        self.steps = 0
        self.schedule: Iterator | None = None
        self.meter = CommMeter()

    def wrap(self, model: nn.Module, device: torch.device) -> nn.Module:
        self.meter = CommMeter(device)
        if self.world_size == 1:
            return model
        self.schedule = self._set_topology()
        ops.broadcast_parameters(model, root=0)  # identical start on every rank
        self.meter.reset()  # the start-up broadcast is not step traffic
        return model

    def _set_topology(self) -> Iterator | None:
        """Set the graph (collective: every rank sets the same); this rank's dynamic schedule."""
        graph = TOPOLOGIES[self.topology](self.world_size)
        ops.set_topology(graph)
        return topology.dynamic_one_peer_schedule(graph, dist.get_rank()) if self.dynamic else None

    def after_backward(self, model: nn.Module) -> None:
        if not self.atc_style:
            self._maybe_mix(model)

    def after_step(self, model: nn.Module) -> None:
        if self.atc_style:
            self._maybe_mix(model)
        self.steps += 1
        self.meter.steps += 1
        if self.world_size > 1 and self.global_every and self.steps % self.global_every == 0:
            params, flat = flat_parameters(model)
            self.meter.timed(lambda: dist.all_reduce(flat))
            self.meter.payload_bytes += flat.numel() * flat.element_size()
            write_back(params, flat.div_(self.world_size))

    def metrics(self, model: nn.Module) -> dict:
        return {"consensus_distance": consensus_distance(model)}

    def _maybe_mix(self, model: nn.Module) -> None:
        if self.world_size == 1 or self.steps % self.every:
            return
        params, flat = flat_parameters(model)
        kwargs = self._weights()
        mixed = {}
        self.meter.timed(lambda: mixed.setdefault("flat", self._exchange(flat, **kwargs)))
        write_back(params, mixed["flat"])

    def _exchange(self, flat: torch.Tensor, **kwargs) -> torch.Tensor:
        return ops.neighbor_allreduce(flat, **kwargs)

    def _weights(self) -> dict:
        """Static graph: the op's defaults. Dynamic: this step's one peer, uniform weights."""
        if self.schedule is None:
            return {}
        send, recv = next(self.schedule)
        weight = 1.0 / (len(recv) + 1)
        return {"self_weight": weight, "src_weights": {r: weight for r in recv}, "dst_weights": send,
                "enable_topo_check": False}

    def comm_stats(self) -> dict:
        sent = ops.comm_stats()
        wire = sent.get("p2p_bytes_sent", 0) + ring_allreduce_wire_bytes(
            sent.get("collective_payload_bytes", 0), self.world_size)
        return self.meter.stats(wire, "measured p2p + ring model for allreduce")

    def reset_stats(self) -> None:
        self.meter.reset()


class HierarchicalNeighborAllreduceStrategy(NeighborAllreduceStrategy):
    """Average inside each machine, mix machine averages with neighbouring machines."""

    name = "hierarchical_neighbor_allreduce"

    def __init__(self, cfg: StrategyConfig, env: DistEnv) -> None:
        super().__init__(cfg, env)
        if env.world_size > 1 and (env.local_world_size < 2 or env.world_size % env.local_world_size):
            raise ConfigError(f"hierarchical_neighbor_allreduce needs several ranks per node on equal nodes "
                              f"({env.world_size} ranks, {env.local_world_size} per node); use neighbor_allreduce")

    def _set_topology(self) -> Iterator | None:
        machines = self.world_size // self.local_world_size
        ops.set_machine_topology(TOPOLOGIES[self.topology](machines), local_size=self.local_world_size)
        machine = dist.get_rank() // self.local_world_size
        return topology.dynamic_machine_one_peer_schedule(machines, machine) if self.dynamic else None

    def _exchange(self, flat: torch.Tensor, **kwargs) -> torch.Tensor:
        return ops.hierarchical_neighbor_allreduce(flat, **kwargs)

    def _weights(self) -> dict:
        if self.schedule is None:
            return {}
        send, recv = next(self.schedule)
        weight = 1.0 / (len(recv) + 1)
        return {"self_weight": weight, "src_machine_weights": {r: weight for r in recv}, "dst_machine_weights": send}
