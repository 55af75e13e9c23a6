import pytest
from multiproc import run_ranks

pytestmark = pytest.mark.distributed


def _allreduce_rank(rank, world_size):
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return t.item()


def _skip_collective(rank, world_size):
    import torch
    import torch.distributed as dist

    if rank == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins: must time out, not hang
    return rank


def test_allreduce_sums_ranks():
    assert run_ranks(_allreduce_rank, 3) == [3.0, 3.0, 3.0]


def test_mismatched_collective_fails_within_timeout():
    with pytest.raises(AssertionError, match="rank 0"):
        run_ranks(_skip_collective, 2, pg_timeout_s=3, timeout_s=60)
