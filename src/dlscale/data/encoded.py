"""The device decode path's samples and batches: files still encoded, with the crop each one gets.

With data.decode=gpu a loader worker does not decode a JPEG the device can take: the source hands
the file over as a JpegFile (its bytes and the size from its header), the transform draws the crop
box and the flip from the sample's generator exactly as the CPU path does and returns an Encoded
sample, and collate_encoded packs a batch of them as an EncodedBatch: the files end to end in one
uint8 tensor (one shared-memory block per batch, not one per file), beside the samples the workers
decoded on the CPU (files the device cannot take). The device feed decodes the batch on its device
(data.device.stage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch


class JpegFile(NamedTuple):
    """A JPEG the device decoder can take, not decoded: what ImageFolderSource.load returns for it."""

    data: bytes
    width: int
    height: int
    path: str


class Encoded(NamedTuple):
    """A sample for the device: its file, and the crop it gets there."""

    data: bytes
    width: int
    height: int
    box: tuple[int, int, int, int]
    """(left, top, width, height) of the training crop; the whole image for validation."""
    flip: bool
    """Mirror left-right after the crop."""


@dataclass(frozen=True)
class DevicePlan:
    """What the device does with a split's encoded rows once it has decoded them."""

    size: int
    """Side of the square output images."""
    resize: int | None
    """None: training, the row's crop box resized to size x size. A number: validation, the shorter
    side resized to this, then the central size x size (the CPU path's ResizeShorter + CenterCrop)."""
    chunk: int
    """Images per decoder call (data.decode_chunk): bounds the device memory of full-size decodes."""
    fallback: Any
    """The CPU path's ImageDataset of the same files, seed and bad-sample rules: it takes over a row
    whose file the device decoder refuses (ImageDataset.sample_from)."""
    decoder: str = "auto"
    """The decoder to decode with (data.decoder)."""


class EncodedBatch(NamedTuple):
    """What a data.decode=gpu loader yields; the device feed turns it into a Batch on the device.

    Row i of the batch is either encoded (lengths[i] > 0: its bytes are the next lengths[i] bytes of
    data) or decoded by a worker already (lengths[i] == 0: the next image of images).
    """

    data: torch.Tensor
    """uint8 (total bytes,): the encoded samples' files, end to end, in row order."""
    lengths: torch.Tensor
    """int64 (N,): bytes of each row's file in data; 0 for a row decoded by a worker."""
    sizes: torch.Tensor
    """int64 (N, 2): width and height of each encoded row's image, from its header."""
    boxes: torch.Tensor
    """int64 (N, 4): left, top, width, height of each encoded row's crop."""
    flips: torch.Tensor
    """bool (N,): mirror each encoded row after the crop."""
    images: torch.Tensor
    """uint8 (M, 3, S, S): the rows decoded by a worker, in row order (shape (0,) when none)."""
    labels: torch.Tensor
    """int64 (N,)."""
    keys: torch.Tensor
    """int64 (N, 3): epoch, index and substitution attempt of each row: where the CPU path picks the
    sample up when the device cannot decode its file (ImageDataset.sample_from)."""
    first_bad: tuple[str | None, ...]
    """Per row: the unreadable file the row replaced, or None."""

    @property
    def skipped(self) -> tuple[str, ...]:
        """Paths of unreadable files replaced in this batch, as Batch.skipped."""
        return tuple(path for path in self.first_bad if path is not None)

    def pin_memory(self) -> EncodedBatch:
        # The files stay pageable: nvJPEG copies them through its own pinned buffers.
        return self._replace(images=self.images.pin_memory() if self.images.numel() else self.images)


def collate_encoded(samples) -> EncodedBatch:
    """Pack ImageDataset samples, Encoded or decoded (uint8 CHW tensors), as an EncodedBatch."""
    files, lengths, sizes, boxes, flips, images = [], [], [], [], [], []
    for sample in samples:
        image = sample.image
        if isinstance(image, Encoded):
            files.append(image.data)
            lengths.append(len(image.data))
            sizes.append((image.width, image.height))
            boxes.append(image.box)
            flips.append(image.flip)
        else:
            images.append(image)
            lengths.append(0)
            sizes.append((0, 0))
            boxes.append((0, 0, 0, 0))
            flips.append(False)
    return EncodedBatch(
        data=_concatenate(files), lengths=torch.tensor(lengths, dtype=torch.int64),
        sizes=torch.tensor(sizes, dtype=torch.int64).reshape(-1, 2),
        boxes=torch.tensor(boxes, dtype=torch.int64).reshape(-1, 4), flips=torch.tensor(flips, dtype=torch.bool),
        images=torch.stack(images) if images else torch.empty(0, dtype=torch.uint8),
        labels=torch.tensor([sample.label for sample in samples], dtype=torch.int64),
        keys=torch.tensor([sample.key or (0, 0, 0) for sample in samples], dtype=torch.int64).reshape(-1, 3),
        first_bad=tuple(sample.skipped for sample in samples),
    )


def _concatenate(files: list[bytes]) -> torch.Tensor:
    """The files end to end in one uint8 tensor (one copy of each)."""
    data = torch.empty(sum(map(len, files)), dtype=torch.uint8)
    view, offset = data.numpy(), 0
    for file in files:
        view[offset:offset + len(file)] = np.frombuffer(file, dtype=np.uint8)
        offset += len(file)
    return data
