"""The data section of a run's configuration."""

from __future__ import annotations

from dataclasses import dataclass

from dlscale.errors import ConfigError

DATASET_NAMES = ("synthetic", "digits", "cifar10", "cifar100", "imagefolder")
ON_BAD_SAMPLE = ("skip", "error")
DECODE_MODES = ("fast", "plain")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Which data set to read and how to feed it. Batch sizes live with the training config."""

    name: str = "synthetic"
    """One of synthetic, digits, cifar10, cifar100, imagefolder."""

    path: str | None = None
    """Data root. cifar10: a folder holding `cifar-10-batches-py/` (or that folder itself);
    cifar100: `cifar-100-python/` likewise; imagefolder: a folder with `train/<class>/*.JPEG`
    and `val/<class>/*.JPEG`. Unused by synthetic and digits."""

    image_size: int | None = None
    """Side in pixels of the square training image; None takes the data set's own:
    224 for imagefolder, 32 for cifar, digits and synthetic. CIFAR accepts only 32."""

    val_image_size: int | None = None
    """Side of the square validation crop; None means image_size."""

    val_resize: int | None = None
    """Validation images (imagefolder) are resized so the shorter side is this many pixels,
    then center-cropped to val_image_size. None means round(val_image_size * 256 / 224),
    the ratio of the ImageNet recipe (resize 256, crop 224)."""

    decode: str = "fast"
    """How training JPEGs become crops (imagefolder). "fast": a JPEG whose shorter side is at
    least 2 x image_size is decoded at 1/2, 1/4 or 1/8 scale when the random crop is that many
    times image_size (Pillow's draft mode), and crops are resized as uint8 tensors by torch's
    antialiased bilinear kernel. "plain": every file decoded at full size, resized by Pillow.
    Both draw the same crop boxes and flips from the same seeds (docs/profiling.md has the
    measured speeds)."""

    num_workers: int = 2
    """DataLoader worker processes per rank; 0 loads in the training process.
    Two suits a small CPU machine; on a GPU node use about cores / GPUs."""

    pin_memory: bool = True
    """Page-lock host batches so host-to-device copies can be asynchronous. Takes effect
    only when CUDA is available; ignored on the CPU."""

    persistent_workers: bool = True
    """Keep the worker processes alive between epochs (only with num_workers > 0)."""

    prefetch_factor: int = 2
    """Batches each worker loads ahead (only with num_workers > 0)."""

    on_bad_sample: str = "skip"
    """What to do with an image that cannot be decoded (imagefolder): "skip" substitutes the
    next index and reports the path in the batch; "error" stops at once with a DataError."""

    max_consecutive_bad: int = 50
    """With on_bad_sample="skip": this many unreadable files in a row raise a DataError
    (a broken mount rather than a few bad files). 50 is timm's limit."""

    synthetic_size: int = 2048
    """Training samples of the synthetic data set."""

    synthetic_val_size: int = 512
    """Validation samples of the synthetic data set."""

    synthetic_classes: int = 10
    """Classes of the synthetic data set (labels 0 .. synthetic_classes - 1)."""

    seed: int = 0
    """Seed of the synthetic images and labels. Shuffling and augmentation take the run's
    seed (the `seed` argument of build_loaders), so the data stay fixed while it varies."""

    def __post_init__(self) -> None:
        if self.name not in DATASET_NAMES:
            raise ConfigError(f"data.name={self.name!r} is unknown; use one of {', '.join(DATASET_NAMES)}")
        if self.decode not in DECODE_MODES:
            raise ConfigError(f"data.decode={self.decode!r}; use one of {', '.join(DECODE_MODES)}")
        if self.on_bad_sample not in ON_BAD_SAMPLE:
            raise ConfigError(f"data.on_bad_sample={self.on_bad_sample!r}; use 'skip' or 'error'")
        for field in ("image_size", "val_image_size", "val_resize"):
            value = getattr(self, field)
            if value is not None and value < 1:
                raise ConfigError(f"data.{field}={value}; use a positive number of pixels or leave it unset")
        for field in ("prefetch_factor", "max_consecutive_bad", "synthetic_size",
                      "synthetic_val_size", "synthetic_classes"):
            if getattr(self, field) < 1:
                raise ConfigError(f"data.{field}={getattr(self, field)}; use a number >= 1")
        if self.num_workers < 0:
            raise ConfigError(f"data.num_workers={self.num_workers}; use 0 or more")
