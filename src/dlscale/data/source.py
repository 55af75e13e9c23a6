"""Where images come from: the Source protocol, the in-memory ArraySource, and BadSample.

A source (synthetic, digits, cifar, imagefolder) answers `len(source)` and
`source.load(index) -> (image, label)`, where image is a PIL image or a uint8 CHW tensor. A source
whose files can be unreadable raises BadSample from load() (or its transform does, for the fast
JPEG path, which decodes inside the transform). A source of files may also answer
`source.load_sized(index) -> (image, label, bytes read)`, which CountingSource counts instead of a
stat of the file.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from PIL import Image


class BadSample(Exception):
    """Raised by a source's load() for a file that cannot be decoded."""

    def __init__(self, path: str, reason: str):
        reason = " ".join(reason.split())  # one line, whatever the decoder said
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class Source(Protocol):
    def __len__(self) -> int: ...

    def load(self, index: int) -> tuple[Image.Image | torch.Tensor, int]: ...


class ArraySource:
    """A split held in memory as uint8 arrays, (N, H, W, 3) or grayscale (N, H, W), served as RGB
    PIL images (CIFAR, digits)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return len(self.labels)

    def load(self, index: int) -> tuple[Image.Image, int]:
        image = Image.fromarray(self.images[index])
        return (image if image.mode == "RGB" else image.convert("RGB")), int(self.labels[index])
