"""The device decode path's crops computed one image at a time with torch's own resize: the references that the
batched weights (dlscale.data.device_decode.resample_weights) are tested against. Test code only."""

import torch
from torch.nn import functional as F

from dlscale.data.transforms import center_crop_geometry


def _resize(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """A uint8 (3, h, w) image (a view is fine) as float (3, height, width), bilinear and antialiased
    (torch's filter for Pillow's BILINEAR)."""
    batch = image.unsqueeze(0).float()
    if tuple(image.shape[1:]) == (height, width):
        return batch[0]
    return F.interpolate(batch, size=(height, width), mode="bilinear", antialias=True, align_corners=False)[0]


def _to_uint8(image: torch.Tensor) -> torch.Tensor:
    return image.round_().clamp_(0, 255).to(torch.uint8)


def crop_resize(image: torch.Tensor, box: list[int], size: int, flip: bool) -> torch.Tensor:
    """The training crop of one image: box (left, top, width, height) of a uint8 (3, H, W) image, resized to
    size x size and mirrored if flip, as uint8."""
    left, top, width, height = box
    out = _resize(image[:, top:top + height, left:left + width], size, size)
    return _to_uint8(out.flip(-1) if flip else out)


def resize_center_crop(image: torch.Tensor, resize: int, size: int) -> torch.Tensor:
    """The validation view of one image: the shorter side resized to `resize`, then the central size x size
    (transforms.center_crop_geometry; zeros where the crop is larger than the image, as Pillow pads), as uint8."""
    height, width = image.shape[1:]
    new_width, new_height, left, top = center_crop_geometry(width, height, resize=resize, size=size)
    resized = _resize(image, new_height, new_width)
    out = resized.new_zeros((3, size, size))
    # The part of the crop box inside the resized image, in crop and in image coordinates.
    x0, y0 = max(left, 0), max(top, 0)
    x1, y1 = min(left + size, new_width), min(top + size, new_height)
    if x1 > x0 and y1 > y0:
        out[:, y0 - top:y1 - top, x0 - left:x1 - left] = resized[:, y0:y1, x0:x1]
    return _to_uint8(out)
