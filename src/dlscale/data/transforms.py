"""Image transforms on uint8: a PIL image in, a uint8 CHW tensor out; no float until the device.

Each random transform is called as `transform(img, generator)` and draws only from that
torch.Generator, so a sample's augmentation is a pure function of its seed. The data set
seeds one generator per sample from (run seed, epoch, index); see dataset.seeded_generator.

Recipes, as the references use them:
- ImageNet train: RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) + horizontal flip;
  val: resize the shorter side to size * 256 / 224, center crop (HAL, pytorch/examples).
- CIFAR train: random crop 32 from the image padded by 4 zeros, horizontal flip, rotation by
  up to 15 degrees (NERSC SC20 tutorial); val: nothing.

The ImageNet train recipe has two decode paths (DataConfig.decode) that draw the same crop boxes
and flips from the same generator: "plain" resizes a fully decoded image with Pillow; "fast"
(FastRandomResizedCrop) decodes a JPEG at 1/2, 1/4 or 1/8 scale when the box allows it and
resizes a uint8 tensor with torch's antialiased bilinear kernel. See docs/profiling.md. "gpu"
(DeviceRandomResizedCrop, DeviceCenterCrop) draws the same boxes and flips, and leaves the decoding,
cropping and resizing to the device (data.device.stage).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import PIL
import torch
from PIL import Image
from torch.nn import functional as F

from dlscale.config.data import DECODE_PATHS
from dlscale.data.encoded import Encoded, JpegFile
from dlscale.data.source import BadSample
from dlscale.errors import ConfigError

Transform = Callable[[Image.Image, torch.Generator], Image.Image]

DRAFT_REDUCTIONS = (8, 4, 2)
"""The reduced scales, 1/r, that Pillow's JPEG draft() asks libjpeg's scaled DCT for."""


def to_uint8_chw(img: Image.Image | torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """An RGB PIL image (or a uint8 CHW tensor, passed through) as a contiguous uint8 (3, H, W); with out (a
    batch's row), copied into it (one copy of the pixels) and out returned."""
    if isinstance(img, torch.Tensor):
        return img.contiguous() if out is None else out.copy_(img)
    if img.mode != "RGB":
        img = img.convert("RGB")
    if out is not None:
        return out.copy_(_shared_hwc(img).permute(2, 0, 1))
    array = np.array(img, dtype=np.uint8)  # a writable copy that torch may share
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


# torch warns that an array sharing Pillow's read-only bytes is not writable; they are only read here. One filter
# set at import for this module's calls: warnings.catch_warnings() around each call is not safe in threads.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning,
                        module=__name__)


def _shared_hwc(img: Image.Image) -> torch.Tensor:
    """An RGB image's pixels as a uint8 (H, W, 3) tensor sharing the bytes Pillow hands numpy (no other copy)."""
    return torch.from_numpy(np.asarray(img))


def _uniform(low: float, high: float, generator: torch.Generator) -> float:
    return low + (high - low) * float(torch.rand((), generator=generator))


def _randint(low: int, high: int, generator: torch.Generator) -> int:
    """An integer in [low, high] inclusive."""
    return int(torch.randint(low, high + 1, (), generator=generator))


class Compose:
    """Apply transforms in order, passing the same generator to each, then convert to uint8 CHW (into out, a
    batch's row, when given: the thread pipeline's)."""

    def __init__(self, transforms: Sequence[Transform]):
        self.transforms = list(transforms)

    def __call__(self, img: Image.Image, generator: torch.Generator, out: torch.Tensor | None = None) -> torch.Tensor:
        for transform in self.transforms:
            img = transform(img, generator)
        return to_uint8_chw(img, out)

    def __repr__(self) -> str:
        return f"Compose({self.transforms!r})"


class RandomResizedCrop:
    """Crop a random area and aspect ratio, resize it to size x size (bilinear).

    The torchvision algorithm: up to 10 tries of area ~ U(scale) * image area and
    log(aspect) ~ U(log ratio); if none fits, a center crop with the ratio clamped into range.
    """

    def __init__(self, size: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        self.size = size
        self.scale = scale
        self.ratio = ratio

    def get_params(self, width: int, height: int, generator: torch.Generator):
        """(left, top, crop_width, crop_height) of the crop box."""
        area = width * height
        log_low, log_high = math.log(self.ratio[0]), math.log(self.ratio[1])
        for _ in range(10):
            target_area = area * _uniform(*self.scale, generator)
            aspect = math.exp(_uniform(log_low, log_high, generator))
            crop_w = round(math.sqrt(target_area * aspect))
            crop_h = round(math.sqrt(target_area / aspect))
            if 0 < crop_w <= width and 0 < crop_h <= height:
                top = _randint(0, height - crop_h, generator)
                left = _randint(0, width - crop_w, generator)
                return left, top, crop_w, crop_h
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            crop_w, crop_h = width, round(width / self.ratio[0])
        elif in_ratio > self.ratio[1]:
            crop_w, crop_h = round(height * self.ratio[1]), height
        else:
            crop_w, crop_h = width, height
        return (width - crop_w) // 2, (height - crop_h) // 2, crop_w, crop_h

    def __call__(self, img: Image.Image, generator: torch.Generator) -> Image.Image:
        left, top, crop_w, crop_h = self.get_params(img.width, img.height, generator)
        box = (left, top, left + crop_w, top + crop_h)
        return img.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box)

    def __repr__(self) -> str:
        return f"RandomResizedCrop({self.size}, scale={self.scale}, ratio={self.ratio})"


class FastRandomResizedCrop(RandomResizedCrop):
    """RandomResizedCrop that draws the same box, then decodes only the detail the box needs.

    A JPEG that is not decoded yet (ImageFolderSource hands large ones over that way) is decoded
    at 1/r scale, r in 8, 4, 2, when the box is at least r x size pixels on both sides, so the
    box is still scaled down to size, never up; Pillow then resizes the box, in sub-pixel
    coordinates of the reduced image (at most a few times size per side: cheap). A full-scale
    box is cut out and resized as a uint8 tensor by torch's antialiased bilinear kernel, the
    filter of Pillow's BILINEAR resize. Returns a uint8 (3, size, size) tensor.
    """

    def __call__(self, img: Image.Image | torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if isinstance(img, torch.Tensor):  # decoded already, a uint8 (H, W, 3) tensor (data.cpu_decoder)
            height, width = img.shape[:2]
            left, top, crop_w, crop_h = self.get_params(width, height, generator)
            return resize_hwc(img[top:top + crop_h, left:left + crop_w], self.size)
        left, top, crop_w, crop_h = self.get_params(img.width, img.height, generator)
        img, scale = decode_at(img, draft_reduction(crop_w, crop_h, self.size))
        if scale == 1.0:
            return resize_uint8(img.crop((left, top, left + crop_w, top + crop_h)), self.size)
        box = (left / scale, top / scale, (left + crop_w) / scale, (top + crop_h) / scale)
        return to_uint8_chw(img.resize((self.size, self.size), Image.Resampling.BILINEAR, box=box))

    def __repr__(self) -> str:
        return f"FastRandomResizedCrop({self.size}, scale={self.scale}, ratio={self.ratio})"


def draft_reduction(crop_w: int, crop_h: int, size: int) -> int:
    """The largest r in DRAFT_REDUCTIONS with the crop still >= size pixels per side at 1/r, else 1."""
    for reduction in DRAFT_REDUCTIONS:
        if crop_w >= reduction * size and crop_h >= reduction * size:
            return reduction
    return 1


def decode_at(img: Image.Image, reduction: int) -> tuple[Image.Image, float]:
    """Decode img, at 1/reduction scale if it is a JPEG not decoded yet; return it as RGB and
    the size of one of its pixels in pixels of the original (1.0 without reduction)."""
    scale = 1.0
    if reduction > 1:
        width = img.width
        drafted = img.draft("RGB", (img.width // reduction, img.height // reduction))
        if drafted is not None:  # None: not a JPEG, or decoded already
            scale = width / drafted[1][2]
    try:
        img.load()
    except Exception as err:  # decode errors of a file the source could only check, not decode
        # ImageDataset skips it (or stops, with data.on_bad_sample=error) like any unreadable file.
        path = getattr(img, "filename", "") or "an image"
        raise BadSample(path, f"{type(err).__name__}: {' '.join(str(err).split())}") from None
    return (img if img.mode == "RGB" else img.convert("RGB")), scale


def resize_uint8(img: Image.Image, size: int) -> torch.Tensor:
    """An RGB image resized to size x size by antialiased bilinear interpolation on uint8 (no
    float copy of the image), as a contiguous uint8 (3, size, size) tensor."""
    return resize_hwc(_shared_hwc(img), size)


def resize_hwc(hwc: torch.Tensor, size: int) -> torch.Tensor:
    """resize_uint8 of a uint8 (H, W, 3) tensor (or a crop's view of one)."""
    nchw = hwc.permute(2, 0, 1).unsqueeze(0)  # a channels-last view: torch's fast uint8 kernel
    out = F.interpolate(nchw, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return out[0].contiguous()


def pillow_build() -> str:
    """Which Pillow decodes: pillow-simd installs under the same name (PIL), so it is used
    whenever it is installed; its versions end in .postN."""
    version = PIL.__version__
    return f"Pillow-SIMD {version}" if ".post" in version else f"Pillow {version}"


class RandomHorizontalFlip:
    """Mirror left-right with probability p (a PIL image, or a CHW tensor)."""

    def __init__(self, p: float = 0.5):
        self.p = p

    def draw(self, generator: torch.Generator) -> bool:
        """Whether to mirror: the one draw this transform takes from the generator."""
        return float(torch.rand((), generator=generator)) < self.p

    def __call__(self, img: Image.Image | torch.Tensor, generator: torch.Generator) -> Image.Image | torch.Tensor:
        if self.draw(generator):
            if isinstance(img, torch.Tensor):
                return img.flip(-1)
            return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return img

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class RandomCrop:
    """A size x size crop at a random offset of the image padded by `padding` zeros per side."""

    def __init__(self, size: int, padding: int = 0):
        self.size = size
        self.padding = padding

    def __call__(self, img: Image.Image, generator: torch.Generator) -> Image.Image:
        # PIL fills the part of a crop box outside the image with zeros: that is the padding.
        left = _randint(0, img.width + 2 * self.padding - self.size, generator) - self.padding
        top = _randint(0, img.height + 2 * self.padding - self.size, generator) - self.padding
        return img.crop((left, top, left + self.size, top + self.size))

    def __repr__(self) -> str:
        return f"RandomCrop({self.size}, padding={self.padding})"


class RandomRotation:
    """Rotate by an angle ~ U(-degrees, degrees) about the center, nearest neighbour, zero fill,
    keeping the size (torchvision RandomRotation defaults)."""

    def __init__(self, degrees: float):
        self.degrees = degrees

    def __call__(self, img: Image.Image, generator: torch.Generator) -> Image.Image:
        angle = _uniform(-self.degrees, self.degrees, generator)
        return img.rotate(angle, resample=Image.Resampling.NEAREST, fillcolor=(0,) * len(img.getbands()))

    def __repr__(self) -> str:
        return f"RandomRotation({self.degrees})"


def center_crop_geometry(width: int, height: int, *, resize: int | None = None,
                         size: int | None = None) -> tuple[int, int, int, int]:
    """The validation view's geometry, the one the CPU path (ResizeShorter, CenterCrop) and the device path share:
    (width, height) of the image with its shorter side resized to `resize` (the longer one scaled and truncated,
    torchvision's Resize; unchanged without resize), and the (left, top) of its central size x size crop
    (torchvision's rounding; 0, 0 without size). A crop larger than the image has negative offsets."""
    if resize is not None:
        width, height = (resize, int(resize * height / width)) if width <= height else \
            (int(resize * width / height), resize)
    if size is None:
        return width, height, 0, 0
    return width, height, int(round((width - size) / 2.0)), int(round((height - size) / 2.0))


class ResizeShorter:
    """Resize (bilinear) so that the shorter side is `size`, keeping the aspect ratio."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, img: Image.Image, generator: torch.Generator | None = None) -> Image.Image:
        new_size = center_crop_geometry(*img.size, resize=self.size)[:2]
        if new_size == img.size:
            return img
        return img.resize(new_size, Image.Resampling.BILINEAR)

    def __repr__(self) -> str:
        return f"ResizeShorter({self.size})"


class CenterCrop:
    """The central size x size square (torchvision's rounding of the offsets)."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, img: Image.Image, generator: torch.Generator | None = None) -> Image.Image:
        _, _, left, top = center_crop_geometry(img.width, img.height, size=self.size)
        return img.crop((left, top, left + self.size, top + self.size))

    def __repr__(self) -> str:
        return f"CenterCrop({self.size})"


class Resize:
    """Resize to exactly size x size (bilinear)."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, img: Image.Image, generator: torch.Generator | None = None) -> Image.Image:
        if img.size == (self.size, self.size):
            return img
        return img.resize((self.size, self.size), Image.Resampling.BILINEAR)

    def __repr__(self) -> str:
        return f"Resize({self.size})"


class DeviceRandomResizedCrop:
    """The ImageNet train recipe for the device decode path (data.decode=gpu).

    A JpegFile (a JPEG the device decodes) comes out as an Encoded sample: its bytes with the crop
    box and flip drawn from the generator exactly as the CPU path's RandomResizedCrop and
    RandomHorizontalFlip draw them, so the augmentation does not depend on where the file is decoded.
    Any other image goes through the CPU fast path with the same generator, to a uint8 crop.
    """

    def __init__(self, size: int):
        self.crop = RandomResizedCrop(size)
        self.flip = RandomHorizontalFlip()
        self.cpu = Compose([FastRandomResizedCrop(size), self.flip])

    def __call__(self, img: JpegFile | Image.Image, generator: torch.Generator) -> Encoded | torch.Tensor:
        if not isinstance(img, JpegFile):
            return self.cpu(img, generator)
        box = self.crop.get_params(img.width, img.height, generator)
        return Encoded(img.data, img.width, img.height, box, self.flip.draw(generator))

    def __repr__(self) -> str:
        return f"DeviceRandomResizedCrop({self.crop.size})"


class DeviceCenterCrop:
    """The ImageNet validation recipe for the device decode path: a JpegFile comes out as an Encoded
    sample of the whole image (the device resizes and crops it); any other image is resized and
    cropped here by the CPU path's transform."""

    def __init__(self, size: int, resize: int):
        self.cpu = imagenet_val_transform(size, resize)

    def __call__(self, img: JpegFile | Image.Image, generator: torch.Generator) -> Encoded | torch.Tensor:
        if not isinstance(img, JpegFile):
            return self.cpu(img, generator)
        return Encoded(img.data, img.width, img.height, (0, 0, img.width, img.height), False)

    def __repr__(self) -> str:
        return f"DeviceCenterCrop({self.cpu!r})"


def imagenet_train_transform(size: int = 224, decode: str = "fast") -> Compose | DeviceRandomResizedCrop:
    """RandomResizedCrop(size) + horizontal flip; decode "fast", "plain" or "gpu" (DataConfig.decode,
    resolved: "auto" is not a path)."""
    if decode not in DECODE_PATHS:
        raise ConfigError(f"data.decode={decode!r}; use one of {', '.join(DECODE_PATHS)}")
    if decode == "gpu":
        return DeviceRandomResizedCrop(size)
    crop = FastRandomResizedCrop(size) if decode == "fast" else RandomResizedCrop(size)
    return Compose([crop, RandomHorizontalFlip()])


def imagenet_val_transform(size: int = 224, resize: int | None = None) -> Compose:
    """Resize the shorter side to `resize` (default size * 256 / 224), then center crop."""
    return Compose([ResizeShorter(val_resize(size, resize)), CenterCrop(size)])


def val_resize(size: int, resize: int | None) -> int:
    """The shorter side validation images are resized to: `resize`, or size * 256 / 224."""
    return resize if resize is not None else round(size * 256 / 224)


def cifar_train_transform(size: int = 32, rotation_degrees: float = 15.0) -> Compose:
    """SC20: RandomCrop(32, padding=4), RandomHorizontalFlip, RandomRotation(15)."""
    return Compose([RandomCrop(size, padding=4), RandomHorizontalFlip(), RandomRotation(rotation_degrees)])


def cifar_val_transform() -> Compose:
    return Compose([])


def collate_images(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack uint8 CHW tensors of one size into a uint8 NCHW tensor."""
    return torch.stack(list(images))
