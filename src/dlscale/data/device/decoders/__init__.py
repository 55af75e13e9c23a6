"""Image decoders for the device decode path (data.decode=gpu): a Protocol (base.py) and a registry.

    decoder = build_decoder(device)          # nvImageCodec (else nvJPEG) on a CUDA device, Pillow on the CPU
    images = decoder.decode(files)           # uint8 (3, H, W) on the device, or None per file

A decoder is one file and one line in DECODERS. data.decoder names one, or "auto" takes the device type's
first that can run there (DEVICE_DECODERS). resolve_decode turns DataConfig.decode into the path a run takes
on its device, refusing "gpu" in one line where no decoder can run, naming what to install or change.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from dlscale.config.data import DECODERS as DECODER_NAMES
from dlscale.data.device.decoders.base import ImageDecoder
from dlscale.data.device.decoders.nvimgcodec import NvimgcodecDecoder
from dlscale.data.device.decoders.nvjpeg import NvjpegDecoder
from dlscale.data.device.decoders.pillow import PillowDecoder
from dlscale.errors import ConfigError

DECODERS: dict[str, Callable[[torch.device], ImageDecoder]] = {
    "nvimgcodec": NvimgcodecDecoder,
    "nvjpeg": NvjpegDecoder,
    "pillow": PillowDecoder,
}
"""Decoders by name; each class also answers unavailable(device): None, or why it cannot run there."""

DEVICE_DECODERS = {"cuda": ("nvimgcodec", "nvjpeg"), "cpu": ("pillow",)}
"""Each device type's decoders in the order data.decoder=auto tries them."""


def decoder_name(device: torch.device | str, asked: str = "auto") -> str:
    """The decoder a device path on device uses: `asked` (data.decoder), or for "auto" the device type's first
    decoder that can run there (its last if none can: resolve_decode says why)."""
    device = torch.device(device)
    if asked != "auto":
        return asked
    if device.type not in DEVICE_DECODERS:
        raise ConfigError(f"data.decode=gpu has no decoder for {device.type} devices; use data.decode=fast")
    names = DEVICE_DECODERS[device.type]
    return next((name for name in names[:-1] if DECODERS[name].unavailable(device) is None), names[-1])


def build_decoder(device: torch.device | str, asked: str = "auto") -> ImageDecoder:
    """The decoder data.decoder=`asked` names for device (auto: decoder_name's choice), on device."""
    return DECODERS[decoder_name(device, asked)](torch.device(device))


def resolve_decode(decode: str, device: torch.device | str | None, decoder: str = "auto") -> str:
    """The decode path for batches that go to device (None: they stay on the host): "auto" becomes
    "gpu" where a device decoder can run there (data.decoder's, or for auto either CUDA decoder), else "fast";
    "gpu" is refused in one line where none can, saying why for each and naming what to install or change."""
    if decode not in ("auto", "gpu"):
        return decode
    where = torch.device(device) if device is not None else None
    reasons = []
    for name in DEVICE_DECODERS["cuda"] if decoder == "auto" else (decoder,):
        # named, a decoder may run where auto would not take it (nvImageCodec's CPU backend on the CPU device)
        check = DECODERS[name].unavailable if decoder == "auto" else \
            getattr(DECODERS[name], "unavailable_named", DECODERS[name].unavailable)
        why = check(where)
        if why is None:
            return "gpu"
        reasons.append(why)
    if decode == "auto":
        return "fast"
    raise ConfigError(f"data.decode=gpu: {'; '.join(reasons)}; or use data.decode=fast (auto takes gpu where it "
                      "can run)")


assert set(DECODERS) == set(DECODER_NAMES) - {"auto"}  # the configuration's names are these

__all__ = ["DECODERS", "ImageDecoder", "NvimgcodecDecoder", "NvjpegDecoder", "PillowDecoder", "build_decoder",
           "decoder_name", "resolve_decode"]
