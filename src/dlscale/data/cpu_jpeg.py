"""The fast path's full-scale JPEG decodes through simplejpeg (data.cpu_decoder): libjpeg-turbo decodes a file's
bytes straight into a numpy array, with no Pillow image in between (Pillow parses the header in Python, keeps RGB
as four bytes per pixel and copies the pixels out again to hand them to numpy). The decoder settings are
Pillow's (the accurate integer DCT, fancy upsampling), so the pixels are the same. A file libjpeg-turbo reports
anything about (a truncated scan, corrupt data, an unknown marker) is left to Pillow, which decodes or refuses it
as before.

Only YCbCr JPEGs take this way: grayscale, CMYK/YCCK and Adobe RGB files, whose conversions to RGB are
Pillow's own, stay Pillow's.
"""

from __future__ import annotations

import torch

from dlscale.errors import ConfigError

try:
    import simplejpeg
except ImportError:  # a dependency of the package, missing where dlscale runs from its source tree: Pillow decodes
    simplejpeg = None


def resolve(choice: str, flag: str = "data.cpu_decoder") -> bool:
    """Whether data.cpu_decoder=`choice` decodes with simplejpeg here; `flag`: what the user set it with, for the
    error where it cannot."""
    if choice == "simplejpeg" and simplejpeg is None:
        said = " " if flag.startswith("--") else "="
        raise ConfigError(f"{flag}{said}simplejpeg: simplejpeg does not import here; `pip install simplejpeg`, "
                          f"or use {flag}{said}auto (Pillow where it is missing)")
    return choice != "pillow" and simplejpeg is not None


def name(choice: str) -> str:
    """The decoder data.cpu_decoder=`choice` resolves to here: "simplejpeg" or "pillow"."""
    return "simplejpeg" if resolve(choice) else "pillow"


def ycbcr_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) of a JPEG in YCbCr, from its header; None for any other file."""
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:  # not a JPEG, or one libjpeg-turbo cannot read the header of
        return None
    return (width, height) if colorspace == "YCbCr" else None


def decode_rgb(data: bytes) -> torch.Tensor | None:
    """The image as a uint8 (H, W, 3) tensor; None where libjpeg-turbo reports an error or a warning (strict)."""
    try:
        return torch.from_numpy(simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=False, fastupsample=False,
                                                       strict=True))
    except ValueError:
        return None
