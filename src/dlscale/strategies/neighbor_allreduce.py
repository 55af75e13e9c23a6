"""Decentralized strategies: BlueFog's neighbor_allreduce optimizers on torch.distributed.

Adapt-with-combine (AWC, the DGD form; BlueFog's default; docs/references.md#bluefog-awc-atc):
    w_{t+1} = NeighborAverage(w_t) - lr * grad(w_t)
the neighbour average of the parameters replaces them after backward, then the optimizer
applies the gradient computed at the old parameters. Adapt-then-combine (ATC):
    w_{t+1} = NeighborAverage(w_t - lr * grad(w_t))
mixes after the optimizer step. Parameters (not buffers) are mixed, flattened into one message.
The hierarchical form averages inside each machine first and exchanges between machines.

With num_steps_per_communication = k the mix happens on the k-th call only (steps k-1, 2k-1, ...),
as BlueFog's optimizers count their forward (AWC) or backward (ATC) passes down to zero, and the
dynamic peer schedule advances on every step, as BlueFog's benchmark calls its
`dynamic_topology_update` before every step (docs/references.md#bluefog-benchmark).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn

from dlscale.config.sections import StrategyConfig
from dlscale.decentralized import ops, topology
from dlscale.distributed.env import DistEnv
from dlscale.errors import ConfigError, shown
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

INNER_OUTER: dict[str, Callable[[int, int, int], Iterator]] = {
    "inner_outer_exp2": topology.inner_outer_exp2_schedule,
    "inner_outer_ring": topology.inner_outer_ring_schedule,
}
"""strategy.dynamic_schedule -> BlueFog's multi-machine generator (docs/references.md#bluefog-dynamic-schedules)."""


def choose_dynamic_schedule(cfg: StrategyConfig, world_size: int, local_size: int) -> str:
    """The dynamic schedule neighbor_allreduce runs. "auto" is BlueFog's examples' choice
    (pytorch_benchmark.py, pytorch_resnet.py): GetInnerOuterExpo2DynamicSendRecvRanks when
    `bf.is_homogeneous() and bf.size() > bf.local_size()`, else GetDynamicOnePeerSendRecvRanks on the
    topology. Two differences, both dlscale's own: with 2 or fewer ranks per node, where BlueFog's
    generator stops on an assertion, "auto" keeps one_peer; and a --topology other than exp2 (the
    graph BlueFog's examples run) keeps one_peer on that graph."""
    several_nodes = world_size > local_size and world_size % local_size == 0
    inner_outer_fits = several_nodes and local_size > 2
    if cfg.dynamic_schedule == "auto":
        return "inner_outer_exp2" if inner_outer_fits and cfg.topology == "exp2" else "one_peer"
    if cfg.dynamic_schedule in INNER_OUTER and world_size > 1 and not inner_outer_fits:
        raise ConfigError(f"strategy.dynamic_schedule={cfg.dynamic_schedule} needs several nodes of more than 2 "
                          f"ranks each ({world_size} ranks, {local_size} per node); use one_peer or auto")
    return cfg.dynamic_schedule


class NeighborAllreduceStrategy(Strategy):
    """Mix parameters with graph neighbours (BlueFog's neighbor_allreduce optimizers)."""

    name = "neighbor_allreduce"

    def __init__(self, cfg: StrategyConfig, env: DistEnv) -> None:
        if cfg.topology not in TOPOLOGIES:
            raise ConfigError(f"unknown --topology {shown(cfg.topology)}; choose one of {', '.join(TOPOLOGIES)}")
        self.world_size, self.local_world_size = env.world_size, env.local_world_size
        self.topology, self.atc_style, self.dynamic = cfg.topology, cfg.atc_style, cfg.dynamic_topology
        self.every, self.global_every = cfg.num_steps_per_communication, cfg.global_average_every
        self.schedule_name = self._choose_schedule(cfg, env)
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

    def _choose_schedule(self, cfg: StrategyConfig, env: DistEnv) -> str:
        return choose_dynamic_schedule(cfg, env.world_size, env.local_world_size)

    def _set_topology(self) -> Iterator | None:
        """Set the graph (collective: every rank sets the same); this rank's dynamic schedule."""
        graph = TOPOLOGIES[self.topology](self.world_size)
        ops.set_topology(graph)
        if not self.dynamic:
            return None
        if self.schedule_name in INNER_OUTER:
            return INNER_OUTER[self.schedule_name](self.world_size, self.local_world_size, dist.get_rank())
        return topology.dynamic_one_peer_schedule(graph, dist.get_rank())

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
        if self.world_size == 1:
            return
        kwargs = self._weights()  # the peer schedule advances on every step
        if (self.steps + 1) % self.every:  # BlueFog mixes on the k-th call: steps k-1, 2k-1, ...
            return
        params, flat = flat_parameters(model)
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
        if env.world_size > 1 and (env.local_world_size < 2 or env.world_size % env.local_world_size
                                   or env.world_size == env.local_world_size):
            raise ConfigError(f"hierarchical_neighbor_allreduce needs two or more equal nodes of several ranks "
                              f"({env.world_size} ranks, {env.local_world_size} per node); use neighbor_allreduce")
        if env.world_size > 1 and self.dynamic:
            self._check_machine_schedule(env.world_size // env.local_world_size)

    def _choose_schedule(self, cfg: StrategyConfig, env: DistEnv) -> str:
        if cfg.dynamic_schedule in INNER_OUTER:
            raise ConfigError(f"strategy.dynamic_schedule={cfg.dynamic_schedule} is for neighbor_allreduce; "
                              "hierarchical_neighbor_allreduce runs BlueFog's exp2 machine schedule (use auto)")
        return "exp2_machines"

    def _check_machine_schedule(self, machines: int) -> None:
        """BlueFog refuses dynamic machine weights outside the machine topology: check every
        machine's sends and receives over one period of the schedule now, on every rank alike."""
        graph = TOPOLOGIES[self.topology](machines)
        for machine in range(machines):
            schedule = topology.dynamic_machine_one_peer_schedule(machines, machine)
            for _ in range((machines - 1).bit_length()):
                send, recv = next(schedule)
                weights = dict.fromkeys(recv, 0.5)
                try:
                    topology.plan_machine_exchange(graph, machine, self_weight=0.5, src_machine_weights=weights,
                                                   dst_machine_weights=send)
                except ValueError as error:
                    raise ConfigError(f"--topology {self.topology} between {machines} nodes lacks edges of BlueFog's "
                                      f"dynamic machine schedule ({error}); use --topology exp2 or "
                                      "--disable-dynamic-topology") from error

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
