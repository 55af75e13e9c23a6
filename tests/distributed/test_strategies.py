"""Strategies on 4 gloo ranks against independent values: DDP, hand-computed distances, model sizes.

All cases run in one spawn of 4 ranks (spawning costs seconds per process on 2 cores).
"""

import pytest
from multiproc import run_ranks

pytestmark = pytest.mark.distributed

STATIC_FULL = {"topology": "full", "dynamic_topology": False}
CASES = {
    "ddp": ("allreduce", {}, 3),
    "gradient": ("gradient_allreduce", {}, 3),
    "atc_full": ("neighbor_allreduce", {**STATIC_FULL, "atc_style": True}, 3),
    "hier_full": ("hierarchical_neighbor_allreduce", {**STATIC_FULL, "atc_style": True, "local_world_size": 2}, 3),
    "awc_ring": ("neighbor_allreduce", {"topology": "ring"}, 3),
    "awc_ring_global": ("neighbor_allreduce", {"topology": "ring", "global_average_every": 1}, 3),
    "one_peer": ("neighbor_allreduce", {}, 3),
    "static_exp2": ("neighbor_allreduce", {"dynamic_topology": False}, 3),
    "every_other": ("neighbor_allreduce", {"num_steps_per_communication": 2}, 4),
}


def _train(rank, world_size, name, options, steps):
    """A few SGD steps (momentum, weight decay) on rank-specific data; return flat parameters."""
    import torch
    from torch import nn

    from dlscale.config import StrategyConfig
    from dlscale.distributed import DistEnv
    from dlscale.precision import build_precision
    from dlscale.strategies import build_strategy
    from dlscale.train.step import StepParts, train_step

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 5))
    if rank:  # different starting points: the strategy must broadcast rank 0's
        with torch.no_grad():
            for p in model.parameters():
                p.add_(rank)
    options = dict(options)
    local_world_size = options.pop("local_world_size", 1)
    env = DistEnv(rank=rank, world_size=world_size, local_rank=rank % local_world_size,
                  local_world_size=local_world_size)
    strategy = build_strategy(StrategyConfig(dist_optimizer=name, **options), env)
    wrapped = strategy.wrap(model, torch.device("cpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    generator = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x, y = torch.randn(6, 3, 8, 8, generator=generator), torch.randint(0, 5, (6,), generator=generator)
        parts = StepParts(wrapped, opt, build_precision("fp32", torch.device("cpu")), strategy, nn.CrossEntropyLoss())
        train_step(parts, [(x, y)])
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return {"params": flat.tolist(), "stats": strategy.comm_stats(), "numel": flat.numel()}


def _distance(rank):
    import torch
    from torch import nn

    from dlscale.strategies.comm import consensus_distance

    model = nn.Linear(3, 2)  # 8 parameters, all equal to the rank
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float(rank))
    return consensus_distance(model)


def _all_cases(rank, world_size):
    results = {key: _train(rank, world_size, *case) for key, case in CASES.items()}
    results["distance"] = _distance(rank)
    return results


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(_all_cases, 4, timeout_s=240)


def _max_diff(a, b):
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_atc_on_the_full_graph_and_gradient_allreduce_equal_ddp(ranks):
    ddp = ranks[0]["ddp"]["params"]
    for r in ranks:
        assert _max_diff(r["atc_full"]["params"], ddp) < 1e-5
        assert _max_diff(r["gradient"]["params"], ddp) < 1e-5


def test_hierarchical_on_two_machines_of_two_equals_ddp(ranks):
    for r in ranks:
        assert _max_diff(r["hier_full"]["params"], ranks[0]["ddp"]["params"]) < 1e-5


def test_awc_replicas_drift_and_a_global_average_brings_them_together(ranks):
    assert _max_diff(ranks[0]["awc_ring"]["params"], ranks[1]["awc_ring"]["params"]) > 1e-4
    for r in ranks[1:]:
        assert _max_diff(r["awc_ring_global"]["params"], ranks[0]["awc_ring_global"]["params"]) < 1e-6


def test_bytes_per_step_follow_the_graph(ranks):
    stats = {key: ranks[0][key]["stats"] for key in CASES}
    model_bytes = 4 * ranks[0]["ddp"]["numel"]
    assert stats["one_peer"]["comm_bytes_per_step"] == model_bytes  # dynamic: one model to one peer
    assert stats["static_exp2"]["comm_bytes_per_step"] == 2 * model_bytes  # exp2, 4 ranks: log2(4) peers
    assert stats["every_other"]["comm_bytes_per_step"] == model_bytes / 2  # 2 exchanges in 4 steps
    assert stats["gradient"]["comm_bytes_per_step"] == 2 * 3 * model_bytes // 4  # ring: 2(p-1)/p
    assert stats["ddp"]["comm_bytes_per_step"] == 2 * 3 * model_bytes // 4  # counted in DDP's comm hook
    assert stats["ddp"]["comm_time_ms_per_step"] is None  # overlapped with backward
    assert stats["one_peer"]["comm_time_ms_per_step"] > 0 and stats["gradient"]["comm_time_ms_per_step"] > 0


def test_consensus_distance_by_hand(ranks):
    # ranks at 0, 1, 2, 3 (8 values each): mean 1.5; mean squared distance 8 * (2.25 + 0.25 + 0.25 + 2.25) / 4
    for r in ranks:
        assert r["distance"] == pytest.approx((8 * 1.25) ** 0.5)
