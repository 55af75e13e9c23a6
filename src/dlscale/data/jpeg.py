"""A JPEG file's header, read in pure Python: the one walk over its segments that the loader (whether a file goes
to the device decoder, whether it is complete) and `dlscale data check` (its frame, colour and size) share.

A JPEG is a start-of-image marker (FF D8), header segments (a marker, FF xx, and a two-byte length that counts
itself), a start-of-frame segment among them (size, precision, components), then the scans' entropy-coded data
up to an end-of-image marker (FF D9).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple


class JpegHeader(NamedTuple):
    """What a JPEG's header says of its image (its frame, and an Adobe segment if any)."""

    width: int
    height: int
    components: int
    precision: int
    """Bits per sample (8 in nearly every JPEG; 12 in a few medical ones)."""
    frame: int
    """The start-of-frame marker's second byte: 0xC0 baseline, 0xC1 extended, 0xC2 progressive, ..."""
    component_ids: bytes
    adobe_transform: int | None
    """The Adobe (APP14) segment's colour transform: 0 none (RGB or CMYK), 1 YCbCr, 2 YCCK; None without one."""


DEVICE_FRAMES = (0xC0, 0xC1, 0xC2)
"""Huffman-coded baseline, extended and progressive frames: what nvJPEG decodes (lossless, hierarchical
and arithmetic-coded frames are left to libjpeg)."""
START_OF_SCAN = 0xDA


def segments(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(marker, offset, payload) of each header segment after start-of-image, up to and including the first
    start-of-scan (whose payload is its scan header); stops where the bytes are not a marker (not a JPEG, or cut)."""
    position = 2  # after start-of-image
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte before a marker
            position += 1
            continue
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:  # markers without a length
            position += 2
            continue
        length = int.from_bytes(data[position + 2:position + 4], "big")
        yield marker, position, data[position + 4:position + 2 + length]
        if marker == START_OF_SCAN:
            return
        position += 2 + length


def first_scan(data: bytes) -> int:
    """Offset of the first start-of-scan (FF DA) marker; -1 if none."""
    return next((offset for marker, offset, _ in segments(data) if marker == START_OF_SCAN), -1)


def jpeg_is_complete(data: bytes) -> bool:
    """True when an end-of-image marker (FF D9) follows the first start-of-scan marker.

    Inside scan data an FF byte is always followed by 00 or a restart marker, so FF D9 there is
    the real end; one inside a header segment (an EXIF thumbnail's) comes before the first scan
    and does not count. Bytes after the end-of-image marker are allowed, as decoders allow them.
    """
    scan = first_scan(data)
    return scan >= 0 and data.rfind(b"\xff\xd9", scan) >= 0


def jpeg_header(data: bytes) -> JpegHeader | None:
    """The header of a JPEG file's bytes, walking its segments to the start-of-frame; None when the
    bytes are not a JPEG (or the frame is not found before the first scan)."""
    if data[:2] != b"\xff\xd8":
        return None
    adobe = None
    for marker, _, segment in segments(data):
        if marker == START_OF_SCAN:  # a scan before any frame
            return None
        if marker == 0xEE and segment[:5] == b"Adobe" and len(segment) >= 12:
            adobe = segment[11]
        elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # DHT, JPG and DAC are not frames
            if len(segment) < 6:
                return None
            components = segment[5]
            return JpegHeader(width=int.from_bytes(segment[3:5], "big"), height=int.from_bytes(segment[1:3], "big"),
                              components=components, precision=segment[0], frame=marker,
                              component_ids=bytes(segment[6:6 + 3 * components:3]), adobe_transform=adobe)
    return None


def device_decodable(header: JpegHeader | None) -> bool:
    """A JPEG the device path decodes: three 8-bit YCbCr components in a Huffman-coded frame. CMYK
    (4 components), grayscale (1), RGB-coded JPEGs (Adobe transform 0, or components named R, G, B)
    and other frames go through the CPU path, which converts them as Pillow does."""
    return (header is not None and header.frame in DEVICE_FRAMES and header.precision == 8
            and header.components == 3 and header.width > 0 and header.height > 0
            and header.adobe_transform != 0 and header.component_ids != b"RGB")
