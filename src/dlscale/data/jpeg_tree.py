"""A synthetic ImageNet-shaped ImageFolder tree of JPEGs, for trying the input pipeline (`dlscale data make-jpegs`).

The images are photo-like (noise summed over seven octaves, amplitude falling 0.6x per octave, 1/f-like,
plus fine grain) and saved at quality 90: a 500x375 one is about 100 KiB, ImageNet's mean file (1.28 M
files in about 140 GB) at its commonest size, so decoding one costs what decoding an ImageNet file costs.
The labels carry no signal (classes get files in turn): the tree measures speed, not accuracy.

`unique` distinct training images are generated (in parallel); the training split repeats their bytes
under new names up to `train` files, since decoding a copy costs the same and copying takes seconds
where generating takes minutes. Every validation file is distinct. benchmarks/loader.py and the GPU
campaign (benchmarks/gpu_campaign/jpeg_tree.py) write their trees with this module.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from multiprocessing import Pool
from pathlib import Path

import numpy as np
from PIL import Image

from dlscale.errors import ConfigError

QUALITY = 90
VAL_SEED_OFFSET = 10**6
"""Validation image i is generated from seed + VAL_SEED_OFFSET + i, so no validation image repeats a training one."""


def photo_like(width: int, height: int, seed: int, grain: float = 20.0) -> Image.Image:
    """Noise over seven octaves with amplitude falling 0.6x per octave, plus fine grain
    (normal, std `grain` levels): the grain sets the bits per pixel, hence the entropy-decoding
    work that no reduced-scale decode avoids."""
    rng = np.random.default_rng(seed)
    image = np.zeros((height, width, 3), np.float32)
    amplitude, total = 1.0, 0.0
    for octave in range(7):
        shape = (max(2, height >> (6 - octave)), max(2, width >> (6 - octave)))
        for channel in range(3):
            small = Image.fromarray(rng.random(shape, dtype=np.float32), mode="F")
            image[..., channel] += amplitude * np.asarray(small.resize((width, height), Image.Resampling.BICUBIC))
        total += amplitude
        amplitude *= 0.6
    image = (image / total - image.mean() / total) / (image.std() / total + 1e-6) * 55 + 118
    image += rng.normal(0.0, grain, image.shape)
    return Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))


@dataclass(frozen=True)
class TreeWritten:
    train_files: int
    val_files: int
    unique: int
    """Distinct training images (the rest of the training split repeats their bytes)."""
    classes: int
    train_bytes: int
    val_bytes: int
    seconds: float

    @property
    def mean_kib(self) -> float:
        return (self.train_bytes + self.val_bytes) / (self.train_files + self.val_files) / 1024


def _encode(job: tuple[Path, int, int, int, float]) -> int:
    path, width, height, seed, grain = job
    photo_like(width, height, seed, grain).save(path, quality=QUALITY)
    return path.stat().st_size


def check_shape(*, train: int, val: int, classes: int, unique: int | None, size: tuple[int, int]) -> int:
    """The distinct training images (unique, or every one); ConfigError for a tree that cannot be made."""
    unique = train if unique is None else unique
    if classes < 1 or train < classes or val < classes:
        raise ConfigError(f"{train} training and {val} validation images in {classes} classes: give every class at "
                          "least one image of each split (--train and --val >= --classes >= 1)")
    if not 1 <= unique <= train:
        raise ConfigError(f"--unique {unique}: give 1 to --train ({train}) distinct training images")
    if min(size) < 8:
        raise ConfigError(f"--size {size[0]}x{size[1]}: give a size of at least 8x8 pixels")
    return unique


def write_tree(root: Path, *, train: int, val: int, classes: int = 4, unique: int | None = None,
               size: tuple[int, int] = (500, 375), grain: float = 20.0, seed: int = 0,
               processes: int = 1) -> TreeWritten:
    """root/{train,val}/class<k>/<n>.JPEG: `unique` distinct training JPEGs (default: all `train`) repeated up to
    `train` files, `val` distinct validation JPEGs, classes in turn; generated on `processes` processes."""
    unique = check_shape(train=train, val=val, classes=classes, unique=unique, size=size)
    started = time.perf_counter()
    jobs = []
    for split, count, offset in (("train", unique, 0), ("val", val, VAL_SEED_OFFSET)):
        for index in range(count):
            folder = root / split / f"class{index % classes}"
            folder.mkdir(parents=True, exist_ok=True)
            jobs.append((folder / f"{index:07d}.JPEG", *size, seed + offset + index, grain))
    if processes > 1:
        with Pool(processes) as pool:
            sizes = pool.map(_encode, jobs, chunksize=4)
    else:
        sizes = [_encode(job) for job in jobs]
    sources = [job[0] for job in jobs[:unique]]
    for index in range(unique, train):
        folder = root / "train" / f"class{index % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{index:07d}.JPEG").write_bytes(sources[index % unique].read_bytes())
    train_bytes = sum(sizes[index % unique] for index in range(train))
    return TreeWritten(train_files=train, val_files=val, unique=unique, classes=classes, train_bytes=train_bytes,
                       val_bytes=sum(sizes[unique:]), seconds=time.perf_counter() - started)
