"""Image decoders for the device decode path (data.decode=gpu): a Protocol (base.py) and a registry.

    decoder = build_decoder(device)          # nvJPEG on a CUDA device, Pillow on the CPU
    images = decoder.decode(files)           # uint8 (3, H, W) on the device, or None per file

A decoder is one file and one line in DECODERS (DALI's or nvImageCodec's would be another file).
resolve_decode turns DataConfig.decode into the path a run takes on its device, refusing "gpu" in
one line where the device decoder cannot run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from dlscale.data.decoders.base import ImageDecoder
from dlscale.data.decoders.nvjpeg import NvjpegDecoder
from dlscale.data.decoders.pillow import PillowDecoder
from dlscale.errors import ConfigError

DECODERS: dict[str, Callable[[torch.device], ImageDecoder]] = {
    "nvjpeg": NvjpegDecoder,
    "pillow": PillowDecoder,
}
"""Decoders by name; each class also answers unavailable(device): None, or why it cannot run there."""

DEVICE_DECODERS = {"cuda": "nvjpeg", "cpu": "pillow"}
"""The decoder of each device type."""


def decoder_name(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type not in DEVICE_DECODERS:
        raise ConfigError(f"data.decode=gpu has no decoder for {device.type} devices; use data.decode=fast")
    return DEVICE_DECODERS[device.type]


def build_decoder(device: torch.device | str) -> ImageDecoder:
    """The decoder of device's type, on device."""
    return DECODERS[decoder_name(device)](torch.device(device))


def resolve_decode(decode: str, device: torch.device | str | None) -> str:
    """The decode path for batches that go to device (None: they stay on the host): "auto" becomes
    "gpu" where the device decoder can run there, else "fast"; "gpu" is refused in one line where it
    cannot, naming what to install or change."""
    if decode not in ("auto", "gpu"):
        return decode
    why = NvjpegDecoder.unavailable(torch.device(device) if device is not None else None)
    if why is None:
        return "gpu"
    if decode == "auto":
        return "fast"
    raise ConfigError(f"data.decode=gpu: {why}; or use data.decode=fast (auto takes gpu where it can run)")


__all__ = ["DECODERS", "ImageDecoder", "NvjpegDecoder", "PillowDecoder", "build_decoder", "decoder_name",
           "resolve_decode"]
