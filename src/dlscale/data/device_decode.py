"""The device decode path's device side: an EncodedBatch in, a uint8 Batch on the device out.

DevicePrefetcher calls a DeviceDecodeStage on each EncodedBatch (on CUDA inside its side stream,
while the device still runs the step before). The stage decodes the encoded rows in chunks of
DevicePlan.chunk files (each decoded image holds 3 bytes per pixel until its crop is made; the
crop 12 more, as float, while it is resized), then, row by row, in plain torch on the device:

    training    the row's crop box, resized to size x size (bilinear, antialiased), mirrored if drawn
    validation  the shorter side resized to DevicePlan.resize (bilinear, antialiased), the central
                size x size (the CPU path's ResizeShorter + CenterCrop)

and rounds to uint8, so that DeviceNormalizer treats the batch as any other. Rows a worker decoded
on the CPU are copied in. A row whose file the decoder refuses is picked up by the CPU path in this
process (ImageDataset.sample_from of the plan's fallback data set) at that very file: decoded there
if libjpeg can, else skipped and counted as the CPU path would (the next file, the same crop draw).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from dlscale.data.dataset import Batch
from dlscale.data.decoders import ImageDecoder
from dlscale.data.encoded import DevicePlan, EncodedBatch


@dataclass
class DecodeCounts:
    """Where a stage's rows were decoded (`dlscale loader` reports them)."""

    device: int = 0
    """Rows decoded by the device decoder."""
    workers: int = 0
    """Rows the loader workers decoded on the CPU (files the device decoder does not take)."""
    refused: int = 0
    """Rows the device decoder refused, taken over by the CPU path in this process."""


class DeviceDecodeStage:
    def __init__(self, plan: DevicePlan, decoder: ImageDecoder):
        self.plan = plan
        self.decoder = decoder
        self.device = decoder.device
        self.counts = DecodeCounts()

    def __call__(self, batch: EncodedBatch) -> Batch:
        """The batch's uint8 (N, 3, size, size) images on the device; its labels and skipped paths
        (changed only where the CPU path replaced a refused file)."""
        size = self.plan.size
        images = torch.empty((len(batch.labels), 3, size, size), dtype=torch.uint8, device=self.device)
        labels, first_bad = batch.labels.clone(), list(batch.first_bad)
        on_cpu = (batch.lengths == 0).nonzero().flatten()
        if len(on_cpu):
            images.index_copy_(0, on_cpu.to(self.device), batch.images.to(self.device, non_blocking=True))
            self.counts.workers += len(on_cpu)
        refused = self._decode_rows(batch, images)
        for row in refused:
            epoch, index, attempt = batch.keys[row].tolist()
            sample = self.plan.fallback.sample_from(epoch, index, attempt, first_bad[row])
            images[row] = sample.image.to(self.device)
            labels[row], first_bad[row] = sample.label, sample.skipped
        self.counts.refused += len(refused)
        return Batch(images, labels, tuple(path for path in first_bad if path is not None))

    def _decode_rows(self, batch: EncodedBatch, images: torch.Tensor) -> list[int]:
        """Decode the encoded rows into images, chunk by chunk; the rows the decoder refused."""
        lengths, sizes = batch.lengths.tolist(), batch.sizes.tolist()
        boxes, flips = batch.boxes.tolist(), batch.flips.tolist()
        ends = torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist()
        rows = [row for row, length in enumerate(lengths) if length > 0]
        refused = []
        for start in range(0, len(rows), self.plan.chunk):
            chunk = rows[start:start + self.plan.chunk]
            files = [batch.data[ends[row] - lengths[row]:ends[row]] for row in chunk]  # views, no copies
            # The chunk's full-size images live until the loop moves to the next chunk.
            for row, decoded in zip(chunk, self.decoder.decode(files), strict=True):
                width, height = sizes[row]
                if decoded is None or tuple(decoded.shape) != (3, height, width):
                    refused.append(row)
                elif self.plan.resize is None:
                    images[row] = crop_resize(decoded, boxes[row], self.plan.size, flips[row])
                else:
                    images[row] = resize_center_crop(decoded, self.plan.resize, self.plan.size)
        self.counts.device += len(rows) - len(refused)
        return refused


def _resize(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """A uint8 (3, h, w) image (a view is fine) as float (3, height, width), bilinear and antialiased
    (torch's filter for Pillow's BILINEAR; CUDA has no uint8 kernel for it, so the float copy)."""
    batch = image.unsqueeze(0).float()
    if tuple(image.shape[1:]) == (height, width):
        return batch[0]
    return F.interpolate(batch, size=(height, width), mode="bilinear", antialias=True, align_corners=False)[0]


def _to_uint8(image: torch.Tensor) -> torch.Tensor:
    return image.round_().clamp_(0, 255).to(torch.uint8)


def crop_resize(image: torch.Tensor, box: list[int], size: int, flip: bool) -> torch.Tensor:
    """The training crop: box (left, top, width, height) of a uint8 (3, H, W) image, resized to
    size x size and mirrored if flip, as uint8."""
    left, top, width, height = box
    out = _resize(image[:, top:top + height, left:left + width], size, size)
    return _to_uint8(out.flip(-1) if flip else out)


def resize_center_crop(image: torch.Tensor, resize: int, size: int) -> torch.Tensor:
    """The validation view: the shorter side resized to `resize` (the longer one scaled and truncated
    as transforms.ResizeShorter does), then the central size x size (transforms.CenterCrop's offsets;
    zeros where the crop is larger than the image, as Pillow pads), as uint8."""
    height, width = image.shape[1:]
    if width <= height:
        new_width, new_height = resize, int(resize * height / width)
    else:
        new_width, new_height = int(resize * width / height), resize
    resized = _resize(image, new_height, new_width)
    left, top = int(round((new_width - size) / 2.0)), int(round((new_height - size) / 2.0))
    out = resized.new_zeros((3, size, size))
    # The part of the crop box inside the resized image, in crop and in image coordinates.
    x0, y0 = max(left, 0), max(top, 0)
    x1, y1 = min(left + size, new_width), min(top + size, new_height)
    if x1 > x0 and y1 > y0:
        out[:, y0 - top:y1 - top, x0 - left:x1 - left] = resized[:, y0:y1, x0:x1]
    return _to_uint8(out)
