"""Random uint8 images and labels from a seed: the benchmark data set, no disk involved."""

from __future__ import annotations

import torch

from dlscale.data.dataset import seeded_generator

# Bytes uniform on 0..255: mean 127.5, std 255 / sqrt(12) = 73.6 (in 0..1 units: 0.5, 0.2887).
SYNTHETIC_MEAN = (0.5, 0.5, 0.5)
SYNTHETIC_STD = (0.2887, 0.2887, 0.2887)

_SPLITS = {"train": 0, "val": 1}


class SyntheticSource:
    """`size` images of 3 x image_size x image_size and labels in 0 .. num_classes - 1.

    Image i is drawn from a generator seeded with (seed, split, i): the same in every worker, on
    every rank and in every run with that seed; train and val differ. Only the labels are kept
    in memory. The labels are random, so a model cannot learn them: this set measures speed.
    """

    def __init__(self, size: int, num_classes: int, image_size: int, *, seed: int = 0,
                 split: str = "train"):
        self.size = size
        self.num_classes = num_classes
        self.image_size = image_size
        self.seed = seed
        self.split_id = _SPLITS[split]
        labels_generator = seeded_generator(seed, self.split_id)
        self.labels = torch.randint(num_classes, (size,), generator=labels_generator)

    def __len__(self) -> int:
        return self.size

    def load(self, index: int) -> tuple[torch.Tensor, int]:
        generator = seeded_generator(self.seed, self.split_id, index)
        shape = (3, self.image_size, self.image_size)
        image = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
        return image, int(self.labels[index])
