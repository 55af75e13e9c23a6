"""The one map-style data set behind every loader: a source of images, a transform, bad-sample rules.

A source (synthetic, digits, cifar, imagefolder) answers `len(source)` and
`source.load(index) -> (image, label)`, where image is a PIL image or a uint8 CHW tensor. A source
whose files can be unreadable raises BadSample from load(); ImageDataset then substitutes the
next index (timm's rule: deterministic, the same on every rank, the batch keeps its size) and
the sample carries the skipped path to the main process inside the batch.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from dlscale.data.encoded import DevicePlan, Encoded
from dlscale.data.source import BadSample, Source
from dlscale.data.transforms import Compose, to_uint8_chw
from dlscale.errors import DataError


class BadSampleError(DataError):
    """Unreadable images: on_bad_sample="error", or too many in a row.

    A DataLoader worker's exception reaches the main process as
    `type(err)("Caught ... Original Traceback ...")`; keep only the last line, our message,
    so the CLI can still print one line.
    """

    def __init__(self, message: str):
        if message.startswith("Caught "):
            message = message.rstrip().splitlines()[-1].split(": ", 1)[-1]
        super().__init__(message)


class Sample(NamedTuple):
    image: torch.Tensor | Encoded
    """uint8, (3, H, W); or, on the device decode path, the file and its crop (data.encoded)."""
    label: int
    skipped: str | None
    """Path of the unreadable file this sample replaced, or None."""
    key: tuple[int, int, int] | None = None
    """(epoch, index, attempt): the sample asked for, and how many files after it this one is
    (ImageDataset.sample_from picks the sample up there when the device cannot decode its file)."""


class Batch(NamedTuple):
    """What a loader yields: `images, labels, skipped = batch`."""

    images: torch.Tensor
    """uint8, (N, 3, H, W); normalise on the device (DeviceNormalizer)."""
    labels: torch.Tensor
    """int64, (N,)."""
    skipped: tuple[str, ...]
    """Paths of unreadable files replaced by their successors in this batch (usually empty).
    len(skipped) is the number of skipped samples."""

    def pin_memory(self) -> Batch:
        return Batch(self.images.pin_memory(), self.labels.pin_memory(), self.skipped)


def collate_samples(samples: list[Sample]) -> Batch:
    """Stack samples into a uint8 NCHW batch and gather the paths they skipped (the device decode
    path collates with data.encoded.collate_encoded)."""
    images = torch.stack([sample.image for sample in samples])
    labels = torch.tensor([sample.label for sample in samples], dtype=torch.int64)
    skipped = tuple(sample.skipped for sample in samples if sample.skipped is not None)
    return Batch(images, labels, skipped)


def seeded_generator(*words: int) -> torch.Generator:
    """A torch.Generator seeded from a tuple of ints, mixed by numpy's SeedSequence so that
    neighbouring tuples give unrelated streams. ImageDataset uses (seed, epoch, index): a
    sample's augmentation is then the same whatever the number of workers, and after a resume."""
    entropy = [word & 0xFFFF_FFFF_FFFF_FFFF for word in words]
    high, low = np.random.SeedSequence(entropy).generate_state(2)
    generator = torch.Generator()
    generator.manual_seed((int(high) << 32) | int(low))
    return generator


EXCLUDED_LABEL = -1
"""The label of a placeholder that stands for an unreadable validation file: evaluation leaves it out."""


class ImageDataset(Dataset):
    """Samples of a source, transformed, with unreadable files skipped or reported.

    Keys are an index, or (epoch, index) as the training sampler yields them so that the
    augmentation changes with the epoch. For training an unreadable file is replaced by the next
    readable one (the batch keeps its size); for validation (`placeholder_size` set) it becomes a
    placeholder labelled EXCLUDED_LABEL, so every readable image is evaluated exactly once and the
    unreadable ones are counted, not replaced by images that would then count twice.
    """

    def __init__(
        self,
        source: Source,
        transform: Compose | None = None,
        *,
        seed: int = 0,
        on_bad_sample: str = "skip",
        max_consecutive_bad: int = 50,
        placeholder_size: int | None = None,
        device_plan: DevicePlan | None = None,
    ):
        self.source = source
        self.transform = transform
        self.seed = seed
        self.on_bad_sample = on_bad_sample
        self.max_consecutive_bad = max_consecutive_bad
        self.placeholder_size = placeholder_size
        self.device_plan = device_plan
        """Set where the transform leaves files for the device to decode: what it does with them."""

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key: int | tuple[int, int]) -> Sample:
        """The sample at index, or on a bad file the next readable index after it (wrapping)."""
        epoch, index = key if isinstance(key, tuple) else (0, key)
        return self.sample_from(epoch, index)

    def sample_from(self, epoch: int, index: int, first_attempt: int = 0, first_bad: str | None = None, *,
                    out: torch.Tensor | None = None) -> Sample:
        """The sample at index, trying the files from index + first_attempt on (__getitem__ starts at 0; the
        device decode path picks a sample up here, on the CPU, at a file its decoder refused). out: a uint8
        (3, H, W) tensor (a batch's row) that a Compose transform writes the image into, and that the sample
        then holds; other transforms leave it alone."""
        size = len(self.source)
        tries = min(self.max_consecutive_bad, size)
        for attempt in range(first_attempt, tries):
            try:
                image, label = self._transformed((index + attempt) % size, epoch, index, out)
                return Sample(image, label, first_bad, (epoch, index, attempt))
            except BadSample as bad:
                if self.on_bad_sample == "error":
                    raise BadSampleError(
                        f"{bad.path}: cannot decode ({bad.reason}); replace or remove the file, "
                        "or set data.on_bad_sample=skip"
                    ) from None
                if self.placeholder_size is not None:
                    return self._placeholder(index, epoch, bad.path)
                first_bad = first_bad or bad.path
        raise _in_a_row(tries, first_bad)

    def _placeholder(self, index: int, epoch: int, path: str) -> Sample:
        """An unreadable validation file: a placeholder sample, unless the files after it are
        unreadable too (max_consecutive_bad in a row is a broken copy or mount, not a few bad files)."""
        size = len(self.source)
        for ahead in range(1, min(self.max_consecutive_bad, size)):
            try:
                self._transformed((index + ahead) % size, epoch, index + ahead)
                break
            except BadSample:
                continue
        else:
            raise _in_a_row(min(self.max_consecutive_bad, size), path)
        side = self.placeholder_size
        return Sample(torch.zeros(3, side, side, dtype=torch.uint8), EXCLUDED_LABEL, path)

    def _transformed(self, position: int, epoch: int, index: int,
                     out: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
        """Load and transform one sample. The augmentation is seeded by the requested index, so a
        substitute is cropped the way the bad sample would have been."""
        image, label = self.source.load(position)
        if self.transform is None:
            return (to_uint8_chw(image, out) if isinstance(image, Image.Image) else image), label
        # The fast JPEG path hands the transform an undecoded image: a file corrupt inside its scan
        # data fails only there, raising BadSample, and is skipped like any other unreadable file.
        generator = seeded_generator(self.seed, epoch, index)
        if out is not None and isinstance(self.transform, Compose):
            return self.transform(image, generator, out=out), label
        return self.transform(image, generator), label


def _in_a_row(count: int, first: str | None) -> BadSampleError:
    return BadSampleError(f"{count} unreadable images in a row from {first}; check the data set (truncated copy? "
                          "unmounted disk?) or raise data.max_consecutive_bad")
