import math

import numpy as np
import pytest
import torch
from PIL import Image

from dlscale.data import transforms as T
from dlscale.data.dataset import seeded_generator


def _coordinate_image(width: int, height: int) -> Image.Image:
    """Red = x, green = y, blue = 7: every pixel says where it came from."""
    y, x = np.mgrid[0:height, 0:width]
    array = np.stack([x, y, np.full_like(x, 7)], axis=-1).astype(np.uint8)
    return Image.fromarray(array)


def _random_image(width: int, height: int, seed: int = 0) -> Image.Image:
    array = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(array)


def test_to_uint8_chw_layout():
    out = T.to_uint8_chw(_coordinate_image(5, 3))
    assert out.dtype == torch.uint8 and out.shape == (3, 3, 5) and out.is_contiguous()
    assert out[0, 2, 4] == 4 and out[1, 2, 4] == 2 and out[2, 0, 0] == 7


@pytest.mark.parametrize(
    ("transform", "size"),
    [
        (T.imagenet_train_transform(24), (24, 24)),
        (T.imagenet_val_transform(24), (24, 24)),
        (T.cifar_train_transform(), (32, 32)),
    ],
)
def test_recipes_give_uint8_chw(transform, size):
    image = _random_image(40, 50) if size == (24, 24) else _random_image(32, 32)
    out = transform(image, torch.Generator().manual_seed(0))
    assert out.dtype == torch.uint8 and out.shape == (3, *size)


def test_cifar_val_is_identity():
    image = _random_image(32, 32)
    out = T.cifar_val_transform()(image, torch.Generator())
    assert torch.equal(out, T.to_uint8_chw(image))


def test_random_resized_crop_area_and_ratio_within_bounds():
    crop = T.RandomResizedCrop(16)
    width, height = 1000, 800
    generator = torch.Generator().manual_seed(1)
    areas, ratios = [], []
    for _ in range(2000):
        left, top, crop_w, crop_h = crop.get_params(width, height, generator)
        assert left >= 0 and top >= 0 and left + crop_w <= width and top + crop_h <= height
        areas.append(crop_w * crop_h / (width * height))
        ratios.append(crop_w / crop_h)
    # Rounding the sides to whole pixels moves area and ratio by well under 1 %.
    assert min(areas) >= 0.08 * 0.99 and max(areas) <= 1.0
    assert min(ratios) >= 3 / 4 * 0.99 and max(ratios) <= 4 / 3 * 1.01
    # ... and the draws do span the ranges (area uniform, log-ratio uniform).
    assert min(areas) < 0.1 and max(areas) > 0.9
    assert min(ratios) < 0.77 and max(ratios) > 1.3


def test_random_resized_crop_falls_back_to_clamped_center_crop():
    # A 1000 x 10 strip: no crop with ratio <= 4/3 and area >= 8 % fits in 10 tries.
    left, top, crop_w, crop_h = T.RandomResizedCrop(8).get_params(1000, 10, torch.Generator().manual_seed(0))
    assert (crop_w, crop_h) == (13, 10) and top == 0 and left == (1000 - 13) // 2


def test_random_resized_crop_resizes_the_chosen_box():
    crop = T.RandomResizedCrop(10)
    image = _coordinate_image(200, 100)
    left, top, crop_w, crop_h = crop.get_params(200, 100, torch.Generator().manual_seed(3))
    out = np.asarray(crop(image, torch.Generator().manual_seed(3)))
    assert out.shape == (10, 10, 3)
    # Bilinear resize of a linear ramp stays within the box it came from.
    assert left <= out[..., 0].min() and out[..., 0].max() <= left + crop_w - 1
    assert top <= out[..., 1].min() and out[..., 1].max() <= top + crop_h - 1


def test_center_crop_takes_the_center():
    out = T.to_uint8_chw(T.CenterCrop(10)(_coordinate_image(30, 20)))
    assert out[0, 0].tolist() == list(range(10, 20))  # x from (30 - 10) / 2 = 10
    assert out[1, :, 0].tolist() == list(range(5, 15))  # y from (20 - 10) / 2 = 5


def test_resize_shorter_keeps_aspect():
    assert T.ResizeShorter(64)(_random_image(100, 50)).size == (128, 64)
    assert T.ResizeShorter(64)(_random_image(50, 100)).size == (64, 128)


def test_val_transform_resizes_by_256_over_224_then_crops_center():
    transform = T.imagenet_val_transform(224)
    assert [type(t) for t in transform.transforms] == [T.ResizeShorter, T.CenterCrop]
    assert transform.transforms[0].size == 256
    # 512 x 256 already has a shorter side of 256; the crop starts at x = 144, y = 16.
    out = transform(_coordinate_image(512, 256), torch.Generator())
    assert out.shape == (3, 224, 224)
    assert out[0, 0, :3].tolist() == [144, 145, 146]
    assert out[1, :3, 0].tolist() == [16, 17, 18]
    # A smaller image is scaled up first: shorter side 128 -> 256.
    assert T.imagenet_val_transform(224)(_random_image(128, 200), torch.Generator()).shape == (3, 224, 224)


def test_random_crop_with_padding_is_a_window_of_the_zero_padded_image():
    y, x = np.mgrid[0:32, 0:32]
    array = np.stack([x + 100, y + 100, np.full_like(x, 9)], axis=-1).astype(np.uint8)  # no zeros
    padded = np.pad(array, ((4, 4), (4, 4), (0, 0)))
    crop = T.RandomCrop(32, padding=4)
    generator = torch.Generator().manual_seed(0)
    shifts = set()
    for _ in range(1000):
        out = np.asarray(crop(Image.fromarray(array), generator))
        # The middle pixel always comes from the image; its coordinates give the shift.
        dx, dy = int(out[16, 16, 0]) - 100 - 16, int(out[16, 16, 1]) - 100 - 16
        assert np.array_equal(out, padded[dy + 4:dy + 36, dx + 4:dx + 36])
        shifts.add((dx, dy))
    assert shifts == {(dx, dy) for dx in range(-4, 5) for dy in range(-4, 5)}


def test_horizontal_flip_mirrors_with_probability():
    image = _coordinate_image(6, 4)
    assert np.array_equal(np.asarray(T.RandomHorizontalFlip(1.0)(image, torch.Generator())),
                          np.asarray(image)[:, ::-1])
    assert T.RandomHorizontalFlip(0.0)(image, torch.Generator()) is image
    generator = torch.Generator().manual_seed(0)
    flips = sum(T.RandomHorizontalFlip()(image, generator) is not image for _ in range(1000))
    assert 430 < flips < 570


def test_rotation_within_degrees():
    square = np.zeros((32, 32, 3), np.uint8)
    square[8:24, 8:24] = 255
    image = Image.fromarray(square)
    assert np.array_equal(np.asarray(T.RandomRotation(0)(image, torch.Generator())), square)
    generator = torch.Generator().manual_seed(0)
    rotated = [np.asarray(T.RandomRotation(15)(image, generator)) for _ in range(50)]
    assert all(r.shape == (32, 32, 3) for r in rotated)
    assert any(not np.array_equal(r, square) for r in rotated)
    # Rotating a centered square by up to 15 degrees keeps its center and its corners' reach:
    # a 45 degree turn would put white at (16, 4); 15 degrees cannot (4 < 16 - 8 * sqrt(2) * cos(30)).
    limit = 16 - 8 * math.sqrt(2) * math.cos(math.radians(30))
    assert all(r[16, 16, 0] == 255 and r[16, : int(limit) - 1, 0].max() == 0 for r in rotated)


def test_cifar_train_flip_crop_and_rotation_keep_uint8_32():
    transform = T.cifar_train_transform()
    assert [type(t) for t in transform.transforms] == [T.RandomCrop, T.RandomHorizontalFlip, T.RandomRotation]
    assert transform.transforms[0].padding == 4 and transform.transforms[2].degrees == 15


def test_same_seed_same_output_and_different_seeds_differ():
    image = _random_image(64, 48)
    transform = T.imagenet_train_transform(16)
    first = transform(image, seeded_generator(0, 1, 2))
    again = transform(image, seeded_generator(0, 1, 2))
    other = [transform(image, seeded_generator(0, 2, 2)), transform(image, seeded_generator(0, 1, 3))]
    assert torch.equal(first, again)
    assert not any(torch.equal(first, o) for o in other)


def test_collate_images_stacks_nchw_uint8():
    images = [torch.full((3, 4, 4), i, dtype=torch.uint8) for i in range(5)]
    batch = T.collate_images(images)
    assert batch.dtype == torch.uint8 and batch.shape == (5, 3, 4, 4) and batch[3].eq(3).all()
