"""The interface every image decoder of the device path answers (one file per decoder, a line in
DECODERS beside this)."""

from __future__ import annotations

from typing import Protocol

import torch


class ImageDecoder(Protocol):
    """Decodes a batch of encoded files into RGB images on one device.

    decode() takes each file as a 1-D uint8 CPU tensor and returns, per file, a uint8 (3, H, W)
    tensor on the device, in the current stream's order (work queued on it afterwards may read
    the images), or None for a file it cannot decode, which the CPU path then takes. It never
    raises for a bad file. A decoder whose `regions` is true also takes each file's region,
    (left, top, width, height), as decode(files, regions), and returns that part of the image only.
    """

    name: str
    """What `dlscale loader` and the run records call it (e.g. "nvjpeg")."""
    device: torch.device
    regions: bool = False
    """Whether decode() takes the region of each file to decode (the training crop)."""

    def decode(self, files: list[torch.Tensor]) -> list[torch.Tensor | None]: ...
