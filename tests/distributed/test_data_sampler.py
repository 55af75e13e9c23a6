import pytest
from multiproc import run_ranks

from dlscale.data import ExactShardSampler, ShardedTrainSampler, all_reduce_eval_sums

pytestmark = pytest.mark.distributed


def _shards(size, world_size, epoch, seed=0):
    shards = []
    for rank in range(world_size):
        sampler = ShardedTrainSampler(size, rank=rank, world_size=world_size, seed=seed)
        sampler.set_epoch(epoch)
        keys = list(sampler)
        assert len(keys) == len(sampler) and all(e == epoch for e, _ in keys)
        shards.append([index for _, index in keys])
    return shards


# --- the samplers' arithmetic, in one process --------------------------------------------------


def test_train_shards_disjoint_equal_and_cover_the_epoch():
    shards = _shards(101, 2, epoch=0)
    assert len(shards[0]) == len(shards[1]) == 50
    assert not set(shards[0]) & set(shards[1])
    covered = set(shards[0]) | set(shards[1])
    assert len(covered) == 100 and covered <= set(range(101))  # one sample left for the tail


def test_train_order_changes_by_epoch_and_repeats_by_seed():
    assert _shards(64, 2, epoch=0) != _shards(64, 2, epoch=1)
    assert _shards(64, 2, epoch=1) == _shards(64, 2, epoch=1)
    assert _shards(64, 2, epoch=1, seed=1) != _shards(64, 2, epoch=1, seed=2)
    assert _shards(64, 2, epoch=1)[0] != sorted(_shards(64, 2, epoch=1)[0])  # shuffled


def test_train_start_index_continues_the_same_order():
    full = _shards(50, 2, epoch=4)
    for rank in range(2):
        sampler = ShardedTrainSampler(50, rank=rank, world_size=2)
        sampler.set_epoch(4, start_index=2 * 7)  # each rank took 7 samples before the stop
        assert [index for _, index in sampler] == full[rank][7:]
        assert len(sampler) == 25 - 7


def test_train_state_dict_round_trip_and_new_epoch_starts_at_zero():
    sampler = ShardedTrainSampler(40, rank=1, world_size=2, seed=3)
    sampler.set_epoch(2)
    state = sampler.state_dict(consumed=6)
    assert state == {"epoch": 2, "start_index": 12, "seed": 3, "dataset_size": 40}
    resumed = ShardedTrainSampler(40, rank=1, world_size=2, seed=3)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # a loop's usual call keeps the restored position
    assert list(resumed) == list(sampler)[6:]
    resumed.set_epoch(3)
    assert len(resumed) == 20
    with pytest.raises(Exception, match="resume with the same data and seed"):
        ShardedTrainSampler(40, rank=0, world_size=2, seed=4).load_state_dict(state)


def test_train_resume_on_a_different_world_size_shares_the_rest():
    two = _shards(60, 2, epoch=0)
    consumed = set(two[0][:5]) | set(two[1][:5])
    rest = []
    for rank in range(3):
        sampler = ShardedTrainSampler(60, rank=rank, world_size=3)
        sampler.set_epoch(0, start_index=10)
        rest.append([index for _, index in sampler])
    assert [len(r) for r in rest] == [16, 16, 16]
    remaining = set().union(*rest)
    assert len(remaining) == 48 and consumed.isdisjoint(remaining)


def test_exact_sampler_counts_every_sample_once():
    for size, world_size in ((5, 2), (23, 3), (2, 4)):
        shards = [list(ExactShardSampler(size, rank=r, world_size=world_size)) for r in range(world_size)]
        assert sorted(sum(shards, [])) == list(range(size))
        assert [len(ExactShardSampler(size, rank=r, world_size=world_size)) for r in range(world_size)] == \
            [len(s) for s in shards]
    assert list(ExactShardSampler(5, rank=1, world_size=2)) == [1, 3]


def test_eval_sums_without_distributed():
    totals = all_reduce_eval_sums(3, 4, 2.5, 5)
    assert totals == (3.0, 4.0, 2.5, 5.0)
    assert totals.top1 == 60.0 and totals.top5 == 80.0 and totals.loss == 0.5


# --- on two gloo ranks -------------------------------------------------------------------------


def _evaluate_rank(rank, world_size, size, batch_size):
    """Count a validation pass the way a trainer does: per-rank sums, one all-reduce at the end."""
    import torch

    from dlscale.config import DataConfig
    from dlscale.data import all_reduce_eval_sums, build_loaders

    cfg = DataConfig(name="synthetic", synthetic_size=16, synthetic_val_size=size, image_size=8,
                     synthetic_classes=3, num_workers=0)
    _, val_loader, _ = build_loaders(cfg, rank=rank, world_size=world_size, batch_size=2,
                                     val_batch_size=batch_size)
    count = torch.zeros((), dtype=torch.float64)
    label_sum = torch.zeros((), dtype=torch.float64)
    correct = torch.zeros((), dtype=torch.float64)
    for _, labels, _ in val_loader:
        count += len(labels)
        label_sum += labels.sum()
        correct += (labels == 0).sum()  # a "model" that always answers class 0
    totals = all_reduce_eval_sums(correct, correct, label_sum, count)
    return {"totals": list(totals), "batches": len(val_loader)}


def _train_rank(rank, world_size, size, batch_size, epochs):
    from dlscale.config import DataConfig
    from dlscale.data import build_loaders

    cfg = DataConfig(name="synthetic", synthetic_size=size, image_size=8, num_workers=0)
    train_loader, _, _ = build_loaders(cfg, rank=rank, world_size=world_size, batch_size=batch_size, seed=7)
    order = []
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        order.append(list(train_loader.sampler))
    return {"batches": len(train_loader), "order": order}


@pytest.mark.parametrize(("size", "batch_size"), [(5, 2), (23, 4)])
def test_exact_validation_on_two_ranks_counts_each_sample_once(size, batch_size):
    from dlscale.data.synthetic import SyntheticSource

    results = run_ranks(_evaluate_rank, 2, size, batch_size)
    labels = [SyntheticSource(size, 3, 4, seed=0, split="val").load(i)[1] for i in range(size)]
    for result in results:
        correct, _, label_sum, count = result["totals"]
        assert count == size  # not padded to 6 / 24, no tail dropped
        assert label_sum == sum(labels) and correct == labels.count(0)
    assert [r["batches"] for r in results] == [-(-len(range(r, size, 2)) // batch_size) for r in range(2)]


def test_train_shards_on_two_ranks_with_uneven_size():
    ranks = run_ranks(_train_rank, 2, 37, 4, 2)
    assert ranks[0]["batches"] == ranks[1]["batches"] == 4  # 18 samples each, 4 full batches
    for epoch in range(2):
        first = [index for _, index in ranks[0]["order"][epoch]]
        second = [index for _, index in ranks[1]["order"][epoch]]
        assert len(first) == len(second) == 18 and not set(first) & set(second)
    assert ranks[0]["order"][0] != ranks[0]["order"][1]
    assert ranks == run_ranks(_train_rank, 2, 37, 4, 2)  # the same seed, the same shards
