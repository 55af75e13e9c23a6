"""Multi-rank checks on gloo: measured totals, and DDP's gradients against an independent mean."""

import pytest
from multiproc import run_ranks

pytestmark = pytest.mark.distributed


def _rates_with_unequal_ranks(rank, world_size):
    import torch

    from dlscale.bench.synthetic import gather_rates, measure, summarize

    now = [0.0]

    def step(images, labels):
        now[0] += 0.1 * (rank + 1)  # rank 1 is half as fast as rank 0

    rates = measure(step, lambda: (None, None), batch_size=10, num_warmup_batches=2, num_batches_per_iter=3,
                    num_iters=4, clock=lambda: now[0])
    return summarize(gather_rates(rates, torch.device("cpu")))


def test_total_is_the_measured_sum_over_ranks():
    summaries = run_ranks(_rates_with_unequal_ranks, 2)
    assert summaries[0] == summaries[1]  # every rank returns the same summary
    expected_total = 10 / 0.1 + 10 / 0.2  # 150, not 2 x rank 0's 100
    assert summaries[0]["iterations"] == pytest.approx([expected_total] * 4)
    assert summaries[0]["img_per_sec_total_ci95"] == pytest.approx(0.0)


def _ddp_gradients(rank, world_size):
    import torch
    import torch.distributed as dist
    from torch import nn

    from dlscale.config import StrategyConfig
    from dlscale.distributed import DistEnv
    from dlscale.strategies import build_strategy

    torch.manual_seed(1)  # identical initial weights (DDP would broadcast anyway)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    reference = [p.detach().clone() for p in model.parameters()]
    torch.manual_seed(100 + rank)  # different data on every rank
    x, y = torch.randn(5, 3, 8, 8), torch.randint(0, 3, (5,))

    # Independent value: each rank's own gradient, all-gathered and averaged by hand.
    plain = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    with torch.no_grad():
        for p, r in zip(plain.parameters(), reference, strict=True):
            p.copy_(r)
    nn.functional.cross_entropy(plain(x), y).backward()
    mean_grads = []
    for p in plain.parameters():
        parts = [torch.empty_like(p.grad) for _ in range(world_size)]
        dist.all_gather(parts, p.grad)
        mean_grads.append(torch.stack(parts).mean(0))

    ddp = build_strategy(StrategyConfig(), DistEnv(rank=rank, world_size=world_size)).wrap(model, torch.device("cpu"))
    nn.functional.cross_entropy(ddp(x), y).backward()
    return max((p.grad - g).abs().max().item() for p, g in zip(model.parameters(), mean_grads, strict=True))


def test_ddp_gradients_equal_the_mean_of_rank_gradients():
    for max_diff in run_ranks(_ddp_gradients, 2):
        assert max_diff < 1e-6
