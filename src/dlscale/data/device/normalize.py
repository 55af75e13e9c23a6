"""uint8 batches become float on the device: (x - 255 mean) / (255 std), optionally channels_last.

Batches cross the host-device link as uint8 (a quarter of the bytes of float32) and become float on the device,
as in the HAL/apex `fast_collate` + `data_prefetcher` pattern.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class DeviceNormalizer:
    """uint8 NCHW images on the device -> float (x - 255 mean) / (255 std), optionally channels_last.

    mean and std are per channel in 0..1 units (DatasetInfo.mean / .std); they are scaled by 255
    here because the images are still bytes.
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        device: torch.device | str = "cpu",
        *,
        channels_last: bool = False,
        dtype: torch.dtype = torch.float32,
    ):
        self.mean = torch.tensor(mean, dtype=dtype, device=device).mul(255).view(1, -1, 1, 1)
        self.inv_std = torch.tensor(std, dtype=dtype, device=device).mul(255).reciprocal().view(1, -1, 1, 1)
        self.channels_last = channels_last
        self.dtype = dtype

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            # Reorder the bytes, not the floats; elementwise ops keep the memory format.
            images = images.contiguous(memory_format=torch.channels_last)
        return (images.to(self.dtype) - self.mean) * self.inv_std


def normalize(images: torch.Tensor, mean: Sequence[float], std: Sequence[float], *,
              channels_last: bool = False) -> torch.Tensor:
    """One-off form of DeviceNormalizer (builds the constants each call)."""
    return DeviceNormalizer(mean, std, images.device, channels_last=channels_last)(images)
