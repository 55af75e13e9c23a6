"""The CPU decoder: Pillow (libjpeg) decodes each file at full size into a uint8 tensor. The device
path's crop, resize and flip then run on the CPU exactly as they run on a GPU: the CPU tests of that
path use it."""

from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image


class PillowDecoder:
    name = "pillow"

    def __init__(self, device: torch.device | str = "cpu"):
        self.device = torch.device(device)

    @staticmethod
    def unavailable(device: torch.device | None) -> str | None:
        return "the batches stay on the host" if device is None else None

    def decode(self, files: list[torch.Tensor]) -> list[torch.Tensor | None]:
        return [self._one(file) for file in files]

    def _one(self, file: torch.Tensor) -> torch.Tensor | None:
        try:
            with Image.open(io.BytesIO(file.numpy().tobytes())) as image:
                image.load()
                if image.mode != "RGB":  # what nvJPEG is asked for: YCbCr JPEGs, decoded to RGB
                    return None
                array = np.array(image, dtype=np.uint8)
        except Exception:  # a decode error: the CPU path takes the file and says what it is
            return None
        return torch.from_numpy(array).permute(2, 0, 1).to(self.device)
