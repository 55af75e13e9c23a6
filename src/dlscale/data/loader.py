"""build_loaders: a DataConfig in, this rank's train and val DataLoaders out."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader

from dlscale.config.data import DataConfig
from dlscale.data import transforms as T
from dlscale.data.cifar import (
    CIFAR10,
    CIFAR10_MEAN,
    CIFAR10_STD,
    CIFAR100,
    CIFAR100_MEAN,
    CIFAR100_STD,
    cifar_sources,
)
from dlscale.data.dataset import ImageDataset, collate_samples
from dlscale.data.digits import DIGITS_CLASSES, digits_sources
from dlscale.data.download import ensure_cifar
from dlscale.data.encoded import DevicePlan, collate_encoded
from dlscale.data.imagefolder import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    imagefolder_sources,
    quiet_exif_warnings,
)
from dlscale.data.sampler import ExactShardSampler, ShardedTrainSampler
from dlscale.data.source import Source
from dlscale.data.synthetic import SYNTHETIC_MEAN, SYNTHETIC_STD, SyntheticSource
from dlscale.data.threads import ThreadLoader
from dlscale.errors import ConfigError, DataError


@dataclass(frozen=True, kw_only=True)
class DatasetInfo:
    """What the model and the metrics need to know about the data set."""

    name: str
    num_classes: int
    mean: tuple[float, float, float]
    """Per-channel mean of the training images in 0..1 units (DeviceNormalizer scales by 255)."""
    std: tuple[float, float, float]
    """Per-channel standard deviation in 0..1 units."""
    train_size: int
    """Samples in the whole training split (all ranks)."""
    val_size: int
    """Samples in the whole validation split (all ranks)."""
    image_size: int
    """Side of the square training images."""
    val_image_size: int
    """Side of the square validation images."""
    class_names: tuple[str, ...] = ()
    decode: str | None = None
    """The decode path the loaders were built for (imagefolder): fast, plain or gpu (data.decode
    resolved for the device); None for the data sets held as arrays."""
    cpu_decoder: str | None = None
    """Who decodes the training JPEGs the CPU decodes at full scale (imagefolder on the fast or device path):
    "simplejpeg" or "pillow" (data.cpu_decoder resolved); None where nothing is decoded that way."""


@dataclass(frozen=True)
class _Built:
    train: Source
    val: Source
    train_transform: Callable | None
    val_transform: Callable | None
    info: DatasetInfo
    on_cpu: _Built | None = None
    """The device decode path: the same files and recipe on the CPU path, which takes the files the
    device decoder refuses."""


def _build_synthetic(cfg: DataConfig) -> _Built:
    size = cfg.image_size or 32
    val_size = cfg.val_image_size or size
    train = SyntheticSource(cfg.synthetic_size, cfg.synthetic_classes, size, seed=cfg.seed, split="train")
    val = SyntheticSource(cfg.synthetic_val_size, cfg.synthetic_classes, val_size, seed=cfg.seed, split="val")
    info = DatasetInfo(name=cfg.name, num_classes=cfg.synthetic_classes, mean=SYNTHETIC_MEAN, std=SYNTHETIC_STD,
                       train_size=len(train), val_size=len(val), image_size=size, val_image_size=val_size)
    return _Built(train, val, None, None, info)  # random bytes: augmentation would only cost time


def _build_digits(cfg: DataConfig) -> _Built:
    size = cfg.image_size or 32
    if cfg.val_image_size not in (None, size):
        raise ConfigError(f"data.val_image_size={cfg.val_image_size}: digits use image_size for both splits")
    train, val, mean, std = digits_sources(size)
    info = DatasetInfo(name=cfg.name, num_classes=DIGITS_CLASSES, mean=mean, std=std, train_size=len(train),
                       val_size=len(val), image_size=size, val_image_size=size,
                       class_names=tuple(str(d) for d in range(10)))
    # Shifts only: a mirrored or rotated digit can be another digit.
    return _Built(train, val, T.Compose([T.RandomCrop(size, padding=max(1, size // 8))]), None, info)


def _build_cifar(cfg: DataConfig) -> _Built:
    if cfg.image_size not in (None, 32) or cfg.val_image_size not in (None, 32):
        raise ConfigError("CIFAR images are 32x32; leave data.image_size and data.val_image_size unset")
    if cfg.path is None:
        raise DataError(f"data.name={cfg.name} needs data.path, the folder holding cifar-10-batches-py/ "
                        "or cifar-100-python/ (the python version of the data set)")
    layout, mean, std = {"cifar10": (CIFAR10, CIFAR10_MEAN, CIFAR10_STD),
                         "cifar100": (CIFAR100, CIFAR100_MEAN, CIFAR100_STD)}[cfg.name]
    if cfg.download:
        ensure_cifar(cfg.path, layout, out=lambda line: print(line, flush=True), flag="data.path")
    train, val, class_names = cifar_sources(cfg.path, layout)
    info = DatasetInfo(name=cfg.name, num_classes=layout.num_classes, mean=mean, std=std, train_size=len(train),
                       val_size=len(val), image_size=32, val_image_size=32, class_names=class_names)
    return _Built(train, val, T.cifar_train_transform(), T.cifar_val_transform(), info)


def _build_imagefolder(cfg: DataConfig) -> _Built:
    size = cfg.image_size or 224
    val_size = cfg.val_image_size or size
    train, val, class_names = imagefolder_sources(cfg.path, decode=cfg.decode, image_size=size,
                                                   device_share=cfg.device_decode_share, cpu_decoder=cfg.cpu_decoder)
    info = DatasetInfo(name=cfg.name, num_classes=len(class_names), mean=IMAGENET_MEAN, std=IMAGENET_STD,
                       train_size=len(train), val_size=len(val), image_size=size, val_image_size=val_size,
                       class_names=class_names, decode=cfg.decode,
                       cpu_decoder=train.cpu_decoder)
    val_transform = T.imagenet_val_transform(val_size, cfg.val_resize)
    if cfg.decode != "gpu":
        return _Built(train, val, T.imagenet_train_transform(size, cfg.decode), val_transform, info)
    on_cpu = _Built(train.on_cpu(), val.on_cpu(), T.imagenet_train_transform(size, "fast"), val_transform, info)
    return _Built(train, val, T.imagenet_train_transform(size, "gpu"),
                  T.DeviceCenterCrop(val_size, T.val_resize(val_size, cfg.val_resize)), info, on_cpu)


_BUILDERS: dict[str, Callable[[DataConfig], _Built]] = {
    "synthetic": _build_synthetic,
    "digits": _build_digits,
    "cifar10": _build_cifar,
    "cifar100": _build_cifar,
    "imagefolder": _build_imagefolder,
}


def seed_worker(worker_id: int) -> None:
    """worker_init_fn: seed python's and numpy's RNGs from the worker's torch seed (which the
    DataLoader derives from its generator), and quiet Pillow's EXIF warnings in the worker."""
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)
    quiet_exif_warnings()


def _loader(dataset, sampler, batch_size: int, cfg: DataConfig, *, drop_last: bool, seed: int, side: int,
            to_process: bool = False) -> DataLoader | ThreadLoader:
    """The loader of a split: loader threads or DataLoader worker processes (data.workers_kind), or neither."""
    workers = cfg.num_workers
    # files for a decode process (data.device_feed=process) go there through shared memory, not to the device
    pin = cfg.pin_memory and torch.cuda.is_available() and not (to_process and dataset.device_plan)
    if workers > 0 and cfg.worker_threads:
        return ThreadLoader(dataset, sampler, batch_size, threads=workers, image_shape=(3, side, side),
                            drop_last=drop_last, depth=cfg.prefetch_factor, pin=pin)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        num_workers=workers,
        collate_fn=collate_samples if dataset.device_plan is None else collate_encoded,  # files for the device
        pin_memory=pin,
        drop_last=drop_last,
        persistent_workers=cfg.persistent_workers and workers > 0,
        prefetch_factor=cfg.prefetch_factor if workers > 0 else None,
        worker_init_fn=seed_worker if workers > 0 else None,
        generator=torch.Generator().manual_seed(seed),
    )


def _device_plan(built: _Built, cfg: DataConfig, split: str, options: dict) -> DevicePlan | None:
    """What the device does with a split's files on the device decode path (None on the others)."""
    if built.on_cpu is None:
        return None
    info, cpu = built.info, built.on_cpu
    fallback = ImageDataset(getattr(cpu, split), getattr(cpu, f"{split}_transform"), **options)
    if split == "train":
        return DevicePlan(size=info.image_size, resize=None, chunk=cfg.decode_chunk, fallback=fallback,
                          decoder=cfg.decoder)
    return DevicePlan(size=info.val_image_size, resize=T.val_resize(info.val_image_size, cfg.val_resize),
                      chunk=cfg.decode_chunk, fallback=fallback, decoder=cfg.decoder)


def build_loaders(
    cfg: DataConfig,
    *,
    rank: int,
    world_size: int,
    batch_size: int,
    val_batch_size: int | None = None,
    seed: int = 0,
) -> tuple[DataLoader | ThreadLoader, DataLoader | ThreadLoader, DatasetInfo]:
    """This rank's (train_loader, val_loader, info).

    batch_size and val_batch_size are per rank (global batch = batch_size x world_size). Both
    loaders yield Batch(images uint8 NCHW, labels int64, skipped paths). The train loader's
    sampler is a ShardedTrainSampler (call train_loader.sampler.set_epoch(epoch) before each
    epoch; it drops the last partial batch, or with data.drop_last=False pads the order like
    torch's DistributedSampler and keeps it); the val loader's an ExactShardSampler (every
    sample once over all ranks). seed: shuffling and augmentation.
    """
    if batch_size < 1 or (val_batch_size is not None and val_batch_size < 1):
        raise ConfigError(f"batch_size={batch_size}, val_batch_size={val_batch_size}; use 1 or more")
    if cfg.name == "imagefolder" and cfg.decode == "auto":  # resolved for a device by data.device.for_device
        cfg = cfg.on_path("fast")
    built = _BUILDERS[cfg.name](cfg)
    train_sampler = ShardedTrainSampler(len(built.train), rank=rank, world_size=world_size, seed=seed,
                                        drop_last=cfg.drop_last)
    if len(train_sampler) < batch_size:
        raise ConfigError(
            f"{len(built.train)} training samples give {len(train_sampler)} per rank on {world_size} ranks, "
            f"fewer than batch_size={batch_size}; lower the per-rank batch size"
        )
    dataset_options = {"seed": seed, "on_bad_sample": cfg.on_bad_sample,
                       "max_consecutive_bad": cfg.max_consecutive_bad}
    val_options = {**dataset_options, "placeholder_size": built.info.val_image_size}
    train_set = ImageDataset(built.train, built.train_transform, **dataset_options,
                             device_plan=_device_plan(built, cfg, "train", dataset_options))
    val_set = ImageDataset(built.val, built.val_transform, **val_options,
                           device_plan=_device_plan(built, cfg, "val", val_options))
    val_sampler = ExactShardSampler(len(built.val), rank=rank, world_size=world_size)
    info = built.info
    train_loader = _loader(train_set, train_sampler, batch_size, cfg, drop_last=cfg.drop_last, seed=seed,
                           side=info.image_size, to_process=cfg.device_feed == "process")
    val_loader = _loader(val_set, val_sampler, val_batch_size or batch_size, cfg, drop_last=False, seed=seed,
                         side=info.val_image_size)
    return train_loader, val_loader, built.info
