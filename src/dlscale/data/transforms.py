"""Image transforms on uint8: a PIL image in, a uint8 CHW tensor out; no float until the device.

Each random transform is called as `transform(img, generator)` and draws only from that
torch.Generator, so a sample's augmentation is a pure function of its seed. The data set
seeds one generator per sample from (run seed, epoch, index); see dataset.seeded_generator.

Recipes, as the references use them:
- ImageNet train: RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) + horizontal flip;
  val: resize the shorter side to size * 256 / 224, center crop (HAL, pytorch/examples).
- CIFAR train: random crop 32 from the image padded by 4 zeros, horizontal flip, rotation by
  up to 15 degrees (NERSC SC20 tutorial); val: nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from PIL import Image

Transform = Callable[[Image.Image, torch.Generator], Image.Image]


def to_uint8_chw(img: Image.Image) -> torch.Tensor:
    """An RGB PIL image as a contiguous uint8 tensor of shape (3, H, W)."""
    if img.mode != "RGB":
        img = img.convert("RGB")
    array = np.array(img, dtype=np.uint8)  # a writable copy that torch may share
    return torch.from_numpy(array).permute(2, 0, 1).contiguous()


def _uniform(low: float, high: float, generator: torch.Generator) -> float:
    return low + (high - low) * float(torch.rand((), generator=generator))


def _randint(low: int, high: int, generator: torch.Generator) -> int:
    """An integer in [low, high] inclusive."""
    return int(torch.randint(low, high + 1, (), generator=generator))


class Compose:
    """Apply transforms in order, passing the same generator to each, then convert to uint8 CHW."""

    def __init__(self, transforms: Sequence[Transform]):
        self.transforms = list(transforms)

    def __call__(self, img: Image.Image, generator: torch.Generator) -> torch.Tensor:
        for transform in self.transforms:
            img = transform(img, generator)
        return to_uint8_chw(img)

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


class RandomHorizontalFlip:
    """Mirror left-right with probability p."""

    def __init__(self, p: float = 0.5):
        self.p = p

    def __call__(self, img: Image.Image, generator: torch.Generator) -> Image.Image:
        if float(torch.rand((), generator=generator)) < self.p:
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


class ResizeShorter:
    """Resize (bilinear) so that the shorter side is `size`, keeping the aspect ratio."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, img: Image.Image, generator: torch.Generator | None = None) -> Image.Image:
        width, height = img.size
        if width <= height:
            new_size = (self.size, int(self.size * height / width))
        else:
            new_size = (int(self.size * width / height), self.size)
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
        left = int(round((img.width - self.size) / 2.0))
        top = int(round((img.height - self.size) / 2.0))
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


def imagenet_train_transform(size: int = 224) -> Compose:
    return Compose([RandomResizedCrop(size), RandomHorizontalFlip()])


def imagenet_val_transform(size: int = 224, resize: int | None = None) -> Compose:
    """Resize the shorter side to `resize` (default size * 256 / 224), then center crop."""
    resize = resize if resize is not None else round(size * 256 / 224)
    return Compose([ResizeShorter(resize), CenterCrop(size)])


def cifar_train_transform(size: int = 32, rotation_degrees: float = 15.0) -> Compose:
    """SC20: RandomCrop(32, padding=4), RandomHorizontalFlip, RandomRotation(15)."""
    return Compose([RandomCrop(size, padding=4), RandomHorizontalFlip(), RandomRotation(rotation_degrees)])


def cifar_val_transform() -> Compose:
    return Compose([])


def collate_images(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """Stack uint8 CHW tensors of one size into a uint8 NCHW tensor."""
    return torch.stack(list(images))
