import gc
import io
import re

import numpy as np
import pytest
import torch
from PIL import Image

from dlscale.config import DataConfig
from dlscale.data import BadSampleError, Batch, build_loaders
from dlscale.data.device import DeviceNormalizer, DevicePrefetcher, normalize
from dlscale.errors import ConfigError, DataError


def _epoch_error(loader) -> DataError:
    """The DataError that iterating `loader` raises. The failed iterator sits in a reference
    cycle with the traceback: drop and collect it now, or loaders forked later inherit it and
    wait on its workers at exit."""
    try:
        list(loader)
    except DataError as err:
        error = err
    else:
        pytest.fail("the epoch raised no DataError")
    error.__traceback__ = None
    gc.collect()
    return error


def _epoch(loader, epoch=0):
    loader.sampler.set_epoch(epoch)
    return list(loader)


# --- build_loaders -----------------------------------------------------------------------------


def test_synthetic_loaders_batch_structure():
    cfg = DataConfig(name="synthetic", synthetic_size=100, synthetic_val_size=30, image_size=8, num_workers=0)
    train_loader, val_loader, info = build_loaders(cfg, rank=0, world_size=1, batch_size=16, val_batch_size=7)
    assert (info.train_size, info.val_size, info.num_classes, info.image_size) == (100, 30, 10, 8)
    batches = _epoch(train_loader)
    assert len(batches) == len(train_loader) == 6  # 100 // 16, the partial batch dropped
    batch = batches[0]
    assert isinstance(batch, Batch)
    assert batch.images.dtype == torch.uint8 and batch.images.shape == (16, 3, 8, 8)
    assert batch.labels.dtype == torch.int64 and batch.labels.shape == (16,) and batch.skipped == ()
    val_sizes = [len(b.labels) for b in val_loader]
    assert val_sizes == [7, 7, 7, 7, 2]  # no sample dropped in validation


def test_per_rank_shards_and_exact_validation():
    cfg = DataConfig(name="synthetic", synthetic_size=50, synthetic_val_size=11, image_size=8, num_workers=0)
    seen, val_labels = [], []
    for rank in range(3):
        train_loader, val_loader, _ = build_loaders(cfg, rank=rank, world_size=3, batch_size=4)
        train = _epoch(train_loader)
        assert len(train) == 4  # 50 // 3 = 16 per rank, 4 batches of 4
        seen.append(torch.cat([b.images.flatten(1) for b in train]))
        val_labels += [b.labels for b in val_loader]
    all_train = torch.cat(seen)
    assert len(all_train) == 48 and len(torch.unique(all_train, dim=0)) == 48  # disjoint ranks
    assert sum(len(v) for v in val_labels) == 11


@pytest.mark.slow
def test_same_seed_same_batches_any_worker_count():
    cfg = DataConfig(name="digits", num_workers=0)
    first, _, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=128, seed=5)
    second, _, _ = build_loaders(DataConfig(name="digits", num_workers=2), rank=0, world_size=1,
                                 batch_size=128, seed=5)
    other_seed, _, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=128, seed=6)
    a, b = _epoch(first, 1), _epoch(second, 1)
    assert all(torch.equal(x.images, y.images) and torch.equal(x.labels, y.labels) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0].labels, _epoch(other_seed, 1)[0].labels)
    assert not torch.equal(a[0].images, _epoch(first, 2)[0].images)  # a new epoch, a new order


def test_resume_mid_epoch_gives_the_same_batches():
    cfg = DataConfig(name="digits", num_workers=0)
    loader, _, _ = build_loaders(cfg, rank=0, world_size=2, batch_size=64, seed=1)
    uninterrupted = _epoch(loader, 3)
    interrupted, _, _ = build_loaders(cfg, rank=0, world_size=2, batch_size=64, seed=1)
    interrupted.sampler.set_epoch(3)
    iterator = iter(interrupted)
    for _ in range(4):
        next(iterator)
    state = interrupted.sampler.state_dict(consumed=4 * 64)
    assert state["start_index"] == 4 * 64 * 2 and state["epoch"] == 3
    resumed, _, _ = build_loaders(cfg, rank=0, world_size=2, batch_size=64, seed=1)
    resumed.sampler.load_state_dict(state)
    resumed.sampler.set_epoch(3)  # a training loop's usual call keeps the restored position
    rest = list(resumed)
    assert len(rest) == len(uninterrupted) - 4
    for got, want in zip(rest, uninterrupted[4:], strict=True):
        assert torch.equal(got.images, want.images) and torch.equal(got.labels, want.labels)


def test_without_drop_last_the_order_is_padded_like_distributed_sampler():
    from torch.utils.data import DistributedSampler

    from dlscale.data.sampler import ShardedTrainSampler

    size, world = 10, 4  # ceil(10 / 4) = 3 per rank: the order padded by its first 2 indices
    for rank in range(world):
        ours = ShardedTrainSampler(size, rank=rank, world_size=world, seed=3, drop_last=False)
        ours.set_epoch(2)
        permutation = ours.permutation(2).tolist()
        # torch's own padding and sharding, applied to positions in our permutation
        positions = list(DistributedSampler(range(size), num_replicas=world, rank=rank, shuffle=False))
        assert ours.indices() == [permutation[p] for p in positions]
        assert len(ours) == 3 and ours.total_size == 12
    last_row = [ShardedTrainSampler(size, rank=r, world_size=world, seed=3, drop_last=False) for r in range(world)]
    assert [s.indices()[-1] for s in last_row][2:] == last_row[0].permutation(0).tolist()[:2]


def test_without_drop_last_the_last_partial_batch_is_kept():
    cfg = DataConfig(name="synthetic", synthetic_size=100, image_size=8, num_workers=0, drop_last=False)
    sizes = []
    for rank in range(3):  # ceil(100 / 3) = 34 per rank: 16 + 16 + 2
        loader, _, _ = build_loaders(cfg, rank=rank, world_size=3, batch_size=16)
        sizes.append([len(b.labels) for b in _epoch(loader)])
    assert sizes == [[16, 16, 2]] * 3
    loader, _, _ = build_loaders(cfg, rank=0, world_size=3, batch_size=16)
    state = loader.sampler.state_dict(consumed=3 * 16)  # the partial batch counted whole
    assert state["start_index"] == 102  # clamped to the padded length, 3 x 34
    loader.sampler.load_state_dict(state)
    assert _epoch(loader, state["epoch"]) == []  # the epoch is over


def test_config_errors():
    with pytest.raises(ConfigError, match="data.name='mnist' is unknown"):
        DataConfig(name="mnist")
    with pytest.raises(ConfigError, match="on_bad_sample"):
        DataConfig(on_bad_sample="ignore")
    with pytest.raises(ConfigError, match="lower the per-rank batch size"):
        build_loaders(DataConfig(synthetic_size=10, num_workers=0), rank=0, world_size=2, batch_size=8)
    with pytest.raises(ConfigError, match="CIFAR images are 32x32"):
        build_loaders(DataConfig(name="cifar10", image_size=64), rank=0, world_size=1, batch_size=8)


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "imagefolder"])
def test_missing_data_path_names_layout(tmp_path, name):
    with pytest.raises(DataError, match=r"cifar-10-batches-py|cifar-100-python|train/<class>/\*\.JPEG, val/"):
        build_loaders(DataConfig(name=name, path=str(tmp_path / "nowhere")), rank=0, world_size=1, batch_size=2)
    with pytest.raises(DataError, match="needs data.path"):
        build_loaders(DataConfig(name=name), rank=0, world_size=1, batch_size=2)


def test_empty_imagefolder_names_layout(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    with pytest.raises(DataError, match=r"has no class folders; expected train/<class>/\*\.JPEG, val/<class>/\*\.JPEG"):
        build_loaders(DataConfig(name="imagefolder", path=str(tmp_path)), rank=0, world_size=1, batch_size=2)


# --- image folders with unreadable files, through worker processes -----------------------------


def _jpeg(seed) -> bytes:
    """Noise, so that a file cut in half has whole headers and truncated pixel data."""
    pixels = np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _tree_with_bad_files(root, *, adjacent_bad=False):
    """Two classes of 6 JPEGs each; in class `b` a truncated and a garbage file (sorted 1st, 4th)."""
    files = {"a": [f"img{i}.JPEG" for i in range(6)],
             "b": ["img0.JPEG", "img1_trunc.JPEG", "img2.jpg", "img3.png", "img4_bad.JPEG", "img5.JPEG"]}
    if adjacent_bad:
        files["b"] = ["img0.JPEG", "img1_bad.JPEG", "img2_bad.JPEG", "img3_trunc.JPEG", "img4.JPEG"]
    for split in ("train", "val"):
        for class_name, names in files.items():
            folder = root / split / class_name
            folder.mkdir(parents=True)
            for index, name in enumerate(names):
                data = _jpeg(index + 10 * (class_name == "b"))
                if "trunc" in name:
                    data = data[: len(data) // 2]
                elif "bad" in name:
                    data = b"\x00garbage" * 64
                (folder / name).write_bytes(data)
    return root


def _imagefolder_cfg(root, **overrides):
    options = {"name": "imagefolder", "path": str(root), "image_size": 16, "num_workers": 2,
               "persistent_workers": False} | overrides
    return DataConfig(**options)


def test_unreadable_images_are_skipped_and_reported_through_workers(tmp_path):
    root = _tree_with_bad_files(tmp_path)
    train_loader, val_loader, info = build_loaders(_imagefolder_cfg(root), rank=0, world_size=1, batch_size=4)
    assert info.num_classes == 2 and info.train_size == 12
    batches = _epoch(train_loader)
    assert [len(b.labels) for b in batches] == [4, 4, 4]  # nothing dropped from a batch
    skipped = sorted(path for b in batches for path in b.skipped)
    assert len(skipped) == 2
    assert skipped[0].endswith("train/b/img1_trunc.JPEG") and skipped[1].endswith("train/b/img4_bad.JPEG")
    assert all(b.images.shape == (4, 3, 16, 16) and b.images.dtype == torch.uint8 for b in batches)
    val_batches = list(val_loader)
    assert sum(len(b.labels) for b in val_batches) == 12 and sum(len(b.skipped) for b in val_batches) == 2
    # Substitution is by the next index, the same file on every run: identical second epoch order.
    again, _, _ = build_loaders(_imagefolder_cfg(root), rank=0, world_size=1, batch_size=4)
    assert all(torch.equal(x.images, y.images) for x, y in zip(batches, _epoch(again), strict=True))


def test_on_bad_sample_error_fails_at_once_naming_the_file(tmp_path):
    root = _tree_with_bad_files(tmp_path)
    _, val_loader, _ = build_loaders(_imagefolder_cfg(root, on_bad_sample="error"), rank=0, world_size=1,
                                     batch_size=4)
    error = _epoch_error(val_loader)  # in order: batch 0 is class a, batch 1 holds b/img1_trunc.JPEG
    message = str(error)
    assert isinstance(error, BadSampleError) and "\n" not in message
    assert message.startswith(str(root / "val/b/img1_trunc.JPEG") + ": cannot decode")


def test_consecutive_unreadable_images_raise_through_workers(tmp_path):
    root = _tree_with_bad_files(tmp_path, adjacent_bad=True)
    _, val_loader, _ = build_loaders(_imagefolder_cfg(root, max_consecutive_bad=3), rank=0, world_size=1,
                                     batch_size=4)
    message = str(_epoch_error(val_loader))
    assert re.match(r"3 unreadable images in a row from .*val/b/img1_bad\.JPEG; ", message)
    _, tolerant, _ = build_loaders(_imagefolder_cfg(root, max_consecutive_bad=4), rank=0, world_size=1,
                                   batch_size=4)
    assert sum(len(b.skipped) for b in tolerant) == 3


# --- device side -------------------------------------------------------------------------------


def test_device_normalizer_values_and_channels_last():
    images = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 3, 1, 1).expand(2, 3, 2, 2).contiguous()
    mean, std = (0.0, 0.2, 0.5), (1.0, 0.1, 0.5)
    out = DeviceNormalizer(mean, std)(images)
    assert out.dtype == torch.float32 and out.shape == (2, 3, 2, 2)
    expected = torch.tensor([0.0, 0.0, 1.0])  # (0 - 0) / 255, (51 - 51) / 25.5, (255 - 127.5) / 127.5
    assert torch.allclose(out[0, :, 0, 0], expected, atol=1e-6)
    last = DeviceNormalizer(mean, std, channels_last=True)(images)
    assert last.is_contiguous(memory_format=torch.channels_last) and torch.equal(last, out)
    assert torch.equal(normalize(images, mean, std), out)


def test_prefetcher_on_cpu_moves_and_normalizes():
    cfg = DataConfig(name="synthetic", synthetic_size=40, image_size=8, num_workers=0)
    loader, _, info = build_loaders(cfg, rank=0, world_size=1, batch_size=8)
    normalizer = DeviceNormalizer(info.mean, info.std, "cpu")
    plain = _epoch(loader)
    loader.sampler.set_epoch(0)
    fetched = list(DevicePrefetcher(loader, "cpu", normalizer))
    assert len(fetched) == len(plain) == 5
    for got, want in zip(fetched, plain, strict=True):
        assert torch.equal(got.images, normalizer(want.images)) and torch.equal(got.labels, want.labels)


def test_every_data_set_name_has_a_builder():
    """DataConfig checks names against DATASET_NAMES; build_loaders dispatches on _BUILDERS: one list."""
    from dlscale.config.data import DATASET_NAMES
    from dlscale.data import loader

    assert set(loader._BUILDERS) == set(DATASET_NAMES)
