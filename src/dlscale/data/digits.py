"""scikit-learn's bundled handwritten digits: real data that is always on disk.

1797 grey 8x8 images with values 0..16 (UCI optdigits test set), 10 classes. They are scaled to
0..255, upsampled (bilinear) to image_size x image_size and repeated on 3 channels, so a ResNet
sees a small RGB image.

Split (fixed for every run, so validation accuracies compare): a permutation of the 1797
indices from numpy's default_rng(0); its first 1797 // 5 = 359 indices are val, the other
1438 train, each kept in ascending order.
"""

from __future__ import annotations

import numpy as np
import torch

from dlscale.data.source import ArraySource
from dlscale.errors import DataError

DIGITS_SIZE = 1797
DIGITS_VAL_SIZE = DIGITS_SIZE // 5
DIGITS_SPLIT_SEED = 0
DIGITS_CLASSES = 10


def digits_split() -> tuple[np.ndarray, np.ndarray]:
    """(train_indices, val_indices) into load_digits(), the same on every call."""
    order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(DIGITS_SIZE)
    return np.sort(order[DIGITS_VAL_SIZE:]), np.sort(order[:DIGITS_VAL_SIZE])


def _load_upsampled(image_size: int) -> tuple[np.ndarray, np.ndarray]:
    """All digits as uint8 (N, image_size, image_size) and labels as int64 (N,)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise DataError("data.name=digits needs scikit-learn; pip install scikit-learn") from err
    digits = load_digits()
    pixels = torch.from_numpy(digits.images.astype(np.float32) * (255.0 / 16.0))
    upsampled = torch.nn.functional.interpolate(
        pixels[:, None], size=(image_size, image_size), mode="bilinear", align_corners=False
    )
    images = upsampled[:, 0].round().clamp(0, 255).to(torch.uint8).numpy()
    return images, digits.target.astype(np.int64)


def digits_sources(image_size: int = 32) -> tuple[ArraySource, ArraySource, tuple[float, float, float],
                                                  tuple[float, float, float]]:
    """(train, val, mean, std); mean and std (0..1 units, equal on the three channels) are
    measured on the training split at this image size."""
    images, labels = _load_upsampled(image_size)
    train_indices, val_indices = digits_split()
    train_pixels = images[train_indices].astype(np.float64) / 255.0
    mean, std = float(train_pixels.mean()), float(train_pixels.std())
    train = ArraySource(images[train_indices], labels[train_indices])
    val = ArraySource(images[val_indices], labels[val_indices])
    return train, val, (mean,) * 3, (std,) * 3
