"""The neighbor strategies' schedule, without processes: which steps mix, with which peers, and
which dynamic schedule runs where (BlueFog's optimizers and examples,
docs/references.md#bluefog-benchmark, #bluefog-dynamic-schedules)."""

import pytest
import torch
from torch import nn

from dlscale.config import StrategyConfig
from dlscale.decentralized import topology
from dlscale.distributed import DistEnv
from dlscale.errors import ConfigError
from dlscale.strategies import build_strategy
from dlscale.strategies.neighbor_allreduce import choose_dynamic_schedule


def _recording(cfg, world_size=8):
    """Rank 0 of world_size with the exchange replaced by a recorder (no process group needed)."""
    strategy = build_strategy(cfg, DistEnv(rank=0, world_size=world_size))
    strategy.schedule = topology.dynamic_one_peer_schedule(topology.exponential_two_graph(world_size), 0)
    calls = []

    def exchange(flat, **kwargs):
        calls.append((strategy.steps, kwargs.get("dst_weights"), sorted(kwargs.get("src_weights", {}))))
        return flat

    strategy._exchange = exchange
    return strategy, calls


@pytest.mark.parametrize("atc_style", [False, True])
def test_every_kth_step_mixes_on_the_kth_call_with_the_schedule_advanced_every_step(atc_style):
    # BlueFog: _reduce_delay starts at k and counts down on every forward (AWC) or backward (ATC),
    # so the k-th call mixes: steps 1, 3, 5 for k = 2; the benchmark's dynamic_topology_update runs
    # before every step. exponential_two_graph(8), rank 0: out-neighbors clockwise [1, 2, 4]; at step t
    # it sends to entry t % 3 and receives from the rank whose entry t % 3 is 0:
    # t = 1: send 2, receive 6; t = 3: send 1, receive 7; t = 5: send 4, receive 4.
    strategy, calls = _recording(StrategyConfig(dist_optimizer="neighbor_allreduce",
                                                num_steps_per_communication=2, atc_style=atc_style))
    model = nn.Linear(2, 1)
    for _ in range(6):
        strategy.after_backward(model)
        strategy.after_step(model)
    assert calls == [(1, [2], [6]), (3, [1], [7]), (5, [4], [4])]


def test_every_step_mixes_when_k_is_one():
    strategy, calls = _recording(StrategyConfig(dist_optimizer="neighbor_allreduce"))
    model = nn.Linear(2, 1)
    for _ in range(3):
        strategy.after_backward(model)
        strategy.after_step(model)
    assert calls == [(0, [1], [7]), (1, [2], [6]), (2, [4], [4])]


@pytest.mark.parametrize(("topology_name", "world", "local", "want"), [
    ("exp2", 8, 4, "inner_outer_exp2"),  # BlueFog: is_homogeneous() and size() > local_size()
    ("exp2", 12, 3, "inner_outer_exp2"),
    ("exp2", 8, 8, "one_peer"),  # one machine
    ("exp2", 8, 2, "one_peer"),  # BlueFog's generator asserts local_size > 2
    ("exp2", 10, 4, "one_peer"),  # unequal machines
    ("ring", 8, 4, "one_peer"),  # another graph than BlueFog's default: one peer on it
])
def test_auto_picks_bluefogs_schedule(topology_name, world, local, want):
    cfg = StrategyConfig(dist_optimizer="neighbor_allreduce", topology=topology_name)
    assert choose_dynamic_schedule(cfg, world, local) == want


def test_explicit_inner_outer_schedules_need_machines_of_more_than_two():
    ring = StrategyConfig(dist_optimizer="neighbor_allreduce", dynamic_schedule="inner_outer_ring")
    assert choose_dynamic_schedule(ring, 9, 3) == "inner_outer_ring"
    with pytest.raises(ConfigError, match="more than 2"):
        build_strategy(ring, DistEnv(rank=0, world_size=8, local_rank=0, local_world_size=2))
    hier = StrategyConfig(dist_optimizer="hierarchical_neighbor_allreduce", dynamic_schedule="inner_outer_exp2")
    with pytest.raises(ConfigError, match="exp2 machine schedule"):
        build_strategy(hier, DistEnv(rank=0, world_size=8, local_rank=0, local_world_size=2))


def test_hierarchical_refuses_what_bluefog_would_raise_on():
    def hier(**options):
        cfg = StrategyConfig(dist_optimizer="hierarchical_neighbor_allreduce", **options)
        return build_strategy(cfg, DistEnv(rank=0, world_size=8, local_rank=0, local_world_size=2))

    hier()  # exp2 between 4 machines holds the machine schedule's distances 1 and 2
    hier(topology="full")
    hier(topology="ring", dynamic_topology=False)
    with pytest.raises(ConfigError, match="--topology ring between 4 nodes lacks edges"):
        hier(topology="ring")  # distance 2 is no edge of a ring of 4
    with pytest.raises(ConfigError, match="two or more equal nodes"):  # one machine: no machine to send to
        build_strategy(StrategyConfig(dist_optimizer="hierarchical_neighbor_allreduce"),
                       DistEnv(rank=0, world_size=4, local_rank=0, local_world_size=4))


def test_a_single_process_never_mixes():
    strategy = build_strategy(StrategyConfig(dist_optimizer="neighbor_allreduce", num_steps_per_communication=3),
                              DistEnv())
    model = nn.Linear(2, 1)
    before = [p.detach().clone() for p in model.parameters()]
    strategy.after_backward(model)
    strategy.after_step(model)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
