"""Data sets, transforms, samplers and loaders; images stay uint8 until the device (data/device/, above this).

    train_loader, val_loader, info = build_loaders(cfg, rank=r, world_size=w, batch_size=b, seed=s)
    feed = DeviceFeed(device, DeviceNormalizer(info.mean, info.std, device, channels_last=True))  # data.device
    for epoch in range(epochs):
        train_loader.sampler.set_epoch(epoch)
        for images, labels, skipped in feed.batches(train_loader):
            ...  # len(skipped): samples replaced because their file could not be decoded
"""

from dlscale.data.dataset import (
    BadSampleError,
    Batch,
    ImageDataset,
    Sample,
    collate_samples,
    seeded_generator,
)
from dlscale.data.loader import DatasetInfo, build_loaders, seed_worker
from dlscale.data.sampler import (
    EvalTotals,
    ExactShardSampler,
    ShardedTrainSampler,
    all_reduce_eval_sums,
)

__all__ = [
    "BadSampleError",
    "Batch",
    "DatasetInfo",
    "EvalTotals",
    "ExactShardSampler",
    "ImageDataset",
    "Sample",
    "ShardedTrainSampler",
    "all_reduce_eval_sums",
    "build_loaders",
    "collate_samples",
    "seed_worker",
    "seeded_generator",
]
