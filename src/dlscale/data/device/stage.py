"""The device decode path's device side: an EncodedBatch in, a uint8 Batch on the device out.

The device feed (loop.py) calls a DeviceDecodeStage on each EncodedBatch (on CUDA on its feed's stream,
while the device still runs the step before). The stage decodes the encoded rows in chunks of
DevicePlan.chunk files, then makes each chunk's images in plain torch on the device:

    training    the row's crop box, resized to size x size (bilinear, antialiased), mirrored if drawn
    validation  the shorter side resized to DevicePlan.resize (bilinear, antialiased), the central
                size x size (the CPU path's ResizeShorter + CenterCrop)

and rounds them to uint8, so that DeviceNormalizer treats the batch as any other. A crop, a resize and
a mirror are each linear in the pixels, one axis at a time: a chunk's rows become two batched matrix
products, (size x H) @ image @ (W x size), with the filter's weights (Pillow's antialiased bilinear
triangle, as torch's interpolate(antialias=True)) placed at each row's box and mirrored where drawn
(resample_weights). A few kernels per chunk, where a resize per image takes about eight small ones
(docs/profiling.md has what each cost on a GPU). Device memory per chunk: the chunk's images padded to its
largest (1 byte per pixel and channel, 4 as float) and the weights (4 x size x (H + W) bytes per image;
while one axis's are made, 8 x size x H or W more, made on the device from a few numbers per row: made on
the host in float64 they cost more than the decode). Rows a worker decoded
on the CPU are copied in. A row whose file the decoder refuses is picked up by the CPU path in this
process (ImageDataset.sample_from of the plan's fallback data set) at that very file: decoded there
if libjpeg can, else skipped and counted as the CPU path would (the next file, the same crop draw).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlscale.data.dataset import Batch
from dlscale.data.device.decoders import ImageDecoder
from dlscale.data.encoded import DevicePlan, EncodedBatch
from dlscale.data.transforms import center_crop_geometry


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

    def __call__(self, batch: EncodedBatch, out: torch.Tensor | None = None) -> Batch:
        """The batch's uint8 (N, 3, size, size) images on the device; its labels and skipped paths
        (changed only where the CPU path replaced a refused file). out: a uint8 (M, 3, size, size) buffer on
        the device, M >= N, whose first N images the batch's become (a decode process's shared slots)."""
        size, rows = self.plan.size, len(batch.labels)
        images = torch.empty((rows, 3, size, size), dtype=torch.uint8, device=self.device) if out is None \
            else out[:rows]
        labels, first_bad = batch.labels.clone(), list(batch.first_bad)
        on_cpu = (batch.lengths == 0).nonzero().flatten()
        if len(on_cpu):
            images.index_copy_(0, self._to_device(on_cpu), batch.images.to(self.device, non_blocking=True))
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
        """Decode the encoded rows into images, chunk by chunk; the rows the decoder refused. A decoder that
        decodes regions (decoder.regions) is given each training row's crop box and decodes only that."""
        lengths = batch.lengths.tolist()
        ends = torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist()
        cropped = getattr(self.decoder, "regions", False) and self.plan.resize is None
        boxes = batch.boxes.tolist()
        # what each row decodes to, (width, height): its crop box, or the whole image (its header's size)
        sizes = [box[2:] for box in boxes] if cropped else batch.sizes.tolist()
        # Rows of one shape share a chunk (sorted by height, then width), so that a chunk pads its images to
        # little more than each one: ImageNet mixes 500 x 375 and 375 x 500 images, which padded together to
        # 500 x 500 waste a third.
        rows = sorted((row for row, length in enumerate(lengths) if length > 0),
                      key=lambda row: (sizes[row][1], sizes[row][0]))
        refused = []
        for start in range(0, len(rows), self.plan.chunk):
            chunk = rows[start:start + self.plan.chunk]
            files = [batch.data[ends[row] - lengths[row]:ends[row]] for row in chunk]  # views, no copies
            found = self.decoder.decode(files, [boxes[row] for row in chunk]) if cropped else \
                self.decoder.decode(files)
            decoded = {}
            # The chunk's decoded images live until the loop moves to the next chunk.
            for row, image in zip(chunk, found, strict=True):
                width, height = sizes[row]
                if image is None or tuple(image.shape) != (3, height, width):
                    refused.append(row)
                else:
                    decoded[row] = image
            if decoded:
                self._make(list(decoded.values()), batch, list(decoded), images, cropped=cropped)
        self.counts.device += len(rows) - len(refused)
        return sorted(refused)  # in row order, as the CPU path meets them

    def _make(self, decoded: list[torch.Tensor], batch: EncodedBatch, rows: list[int], images: torch.Tensor, *,
              cropped: bool = False) -> None:
        """Put the rows' output images, uint8 (3, size, size), made from their decoded uint8 (3, h, w) images,
        into `images` at `rows`. cropped: the decoded images are the rows' crop boxes already."""
        heights = [image.shape[1] for image in decoded]
        widths = [image.shape[2] for image in decoded]
        if len(set(heights)) == 1 and len(set(widths)) == 1:  # a chunk of one shape (rows are sorted): one copy
            padded = torch.stack(decoded)
        else:  # a kernel per image
            padded = torch.zeros((len(decoded), 3, max(heights), max(widths)), dtype=torch.uint8, device=self.device)
            for k, image in enumerate(decoded):
                padded[k, :, :image.shape[1], :image.shape[2]] = image
        # The weights are made on the device from a few numbers per row, sent in one copy: made on the host (in
        # float64, in the training process) they cost more than the decode (docs/profiling.md).
        index = torch.tensor(rows)
        if self.plan.resize is None:  # row, box (left, top, width, height), flip
            columns = [index, *batch.boxes[index].unbind(1), batch.flips[index]]
        else:  # row, height, width, the centre crop's top and left, the resized height and width
            geometry = torch.tensor([center_crop_geometry(w, h, resize=self.plan.resize, size=self.plan.size)
                                     for w, h in zip(widths, heights, strict=True)], dtype=torch.float64)
            new_w, new_h, left, top = geometry.reshape(-1, 4).unbind(1)
            columns = [index, torch.tensor(heights), torch.tensor(widths), top, left, new_h, new_w]
        numbers = self._to_device(torch.stack([c.double() for c in columns], 1))
        if self.plan.resize is None:
            left, top, width, height, flip = numbers[:, 1:].unbind(1)
            if cropped:  # the box starts at the decoded image's corner
                left, top = torch.zeros_like(left), torch.zeros_like(top)
            rows_w = resample_weights(self.plan.size, start=top, length=height, extent=padded.shape[2])
            cols_w = resample_weights(self.plan.size, start=left, length=width, extent=padded.shape[3],
                                      mirror=flip != 0)
        else:
            height, width, top, left, new_h, new_w = numbers[:, 1:].unbind(1)
            zero = torch.zeros_like(height)
            rows_w = resample_weights(self.plan.size, start=zero, length=height, extent=padded.shape[2], offset=top,
                                      resized=new_h)
            cols_w = resample_weights(self.plan.size, start=zero, length=width, extent=padded.shape[3], offset=left,
                                      resized=new_w)
        images.index_copy_(0, numbers[:, 0].long(), apply_weights(padded, rows_w, cols_w))

    def _to_device(self, numbers: torch.Tensor) -> torch.Tensor:
        """A small host tensor on the device without waiting for the stream: pinned first on CUDA."""
        if self.device.type == "cuda":
            numbers = numbers.pin_memory()
        return numbers.to(self.device, non_blocking=True)


def resample_weights(size: int, *, start: torch.Tensor, length: torch.Tensor, extent: int,
                     offset: torch.Tensor | None = None, resized: torch.Tensor | None = None,
                     mirror: torch.Tensor | None = None) -> torch.Tensor:
    """float32 (n, size, extent): output pixel i of row k along one axis as weights of the input pixels.

    Row k resamples its input pixels [start, start + length) to `resized` pixels (default: size), of which
    the output keeps offset .. offset + size - 1 (default offset 0; pixels outside the resized range are
    zero, as Pillow pads a centre crop larger than its image), mirrored where `mirror`. The filter is Pillow's
    antialiased bilinear (torch's interpolate(mode="bilinear", antialias=True)): a triangle of half-width
    max(scale, 1) input pixels around the output pixel's centre, normalised over the input pixels it covers,
    scale = length / resized. Made on start's device (every tensor argument on it)."""
    n, device = len(start), start.device
    resized = torch.full((n,), float(size), dtype=torch.float64, device=device) if resized is None else resized.double()
    offset = torch.zeros(n, dtype=torch.float64, device=device) if offset is None else offset.double()
    position = offset[:, None] + torch.arange(size, dtype=torch.float64, device=device)  # (n, size), resized image
    if mirror is not None:  # a mirrored row's output pixel i is output pixel size - 1 - i of the unmirrored
        position = torch.where(mirror[:, None], position.flip(1), position)
    scale = length.double() / resized
    support = scale.clamp(min=1.0)
    center = start.double()[:, None] + (position + 0.5) * scale[:, None]
    pixel = torch.arange(extent, dtype=torch.float64, device=device)
    # In place on one float64 (n, size, extent) array: 1 - |pixel centre - centre| / support, at least 0.
    taps = (pixel + 0.5)[None, None] - center[:, :, None]
    taps.abs_().div_(support[:, None, None]).neg_().add_(1.0).clamp_(min=0.0)
    inside = (pixel[None] >= start.double()[:, None]) & (pixel[None] < (start.double() + length.double())[:, None])
    taps.mul_(inside[:, None, :])
    total = taps.sum(-1, keepdim=True)
    kept = (position >= 0) & (position < resized[:, None])
    weights = taps.div_(total.clamp(min=1e-300)).mul_(kept[:, :, None] & (total > 0))
    return weights.float()


def apply_weights(images: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """uint8 (n, 3, size, size): rows (n, size, H) @ images (n, 3, H, W) @ cols (n, size, W)^T, rounded."""
    out = rows[:, None] @ images.float() @ cols.transpose(1, 2)[:, None]
    return _to_uint8(out)


def _to_uint8(image: torch.Tensor) -> torch.Tensor:
    return image.round_().clamp_(0, 255).to(torch.uint8)
