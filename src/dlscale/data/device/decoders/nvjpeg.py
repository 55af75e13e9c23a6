"""nvJPEG on a CUDA device, through torchvision.io.decode_jpeg (batched on a list of files since
torchvision 0.19; it uses the GPU's hardware JPEG decoder where there is one, A100 and H100, and
nvJPEG's CUDA decoder elsewhere). torchvision is optional: `pip install 'dlscale[gpu]'`.

decode_jpeg returns nothing for a whole list when one file fails, so a failed call is retried file
by file, and the files that still fail come back as None (the CPU path takes them).

Streams: torchvision decodes on its own stream and waits for it before returning; its outputs are
allocated on the stream current at the call. They are allocated here on a stream of this decoder's
own and handed to the caller's stream with record_stream, so that the allocator does not give their
memory to the next call's outputs (which nvJPEG writes on its stream) before the caller's crops have
read it.
"""

from __future__ import annotations

import importlib
import io

import numpy as np
import torch
from PIL import Image

from dlscale.errors import one_line

INSTALL = "pip install 'dlscale[gpu]' (torchvision, built for this torch and its CUDA)"


def _torchvision_io():
    return importlib.import_module("torchvision.io")


class NvjpegDecoder:
    name = "nvjpeg"

    def __init__(self, device: torch.device | str = "cuda"):
        self.device = torch.device(device)
        self.io = _torchvision_io()
        self.stream = torch.cuda.Stream(self.device)

    @staticmethod
    def unavailable(device: torch.device | None) -> str | None:
        """Why this decoder cannot run on device (None when it can): probed with one small JPEG."""
        try:
            io_module = _torchvision_io()
        except ModuleNotFoundError:
            return f"torchvision is not installed: {INSTALL}"
        except Exception as error:  # a torchvision built for another torch fails while loading its operators
            return f"torchvision cannot be imported ({one_line(error, 200)}): {INSTALL}"
        if device is None or device.type != "cuda":
            where = "the batches stay on the host" if device is None else f"this run's device is {device.type}"
            return f"nvJPEG decodes on a CUDA device, and {where}"
        try:
            buffer = io.BytesIO()
            Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(buffer, "JPEG")
            probe = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
            io_module.decode_jpeg([probe], mode=io_module.ImageReadMode.RGB, device=device)
        except (RuntimeError, TypeError) as error:  # no nvJPEG in this build, a torchvision before 0.19
            return f"torchvision cannot decode a list of JPEGs on {device} ({one_line(error, 200)}): {INSTALL}"
        return None

    def decode(self, files: list[torch.Tensor]) -> list[torch.Tensor | None]:
        consumer = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream):
            try:
                images: list[torch.Tensor | None] = list(self._decode(files))
            except RuntimeError:  # one bad file fails the whole list: find it
                images = [self._decode_or_none(file) for file in files]
        consumer.wait_stream(self.stream)
        for image in images:
            if image is not None:
                image.record_stream(consumer)
        return images

    def _decode(self, files: list[torch.Tensor]) -> list[torch.Tensor]:
        return self.io.decode_jpeg(files, mode=self.io.ImageReadMode.RGB, device=self.device)

    def _decode_or_none(self, file: torch.Tensor) -> torch.Tensor | None:
        try:
            return self._decode([file])[0]
        except RuntimeError:
            return None

