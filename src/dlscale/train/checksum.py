"""A checkpoint's CRC-32: computed over the archive as torch.save writes it, stored as the archive's zip
comment (the last bytes of the file, written and renamed with it), checked over every byte before a load.

Why CRC-32 over the serialized bytes (docs/benchmarks.md#checkpoint-checksum has the measurements):
* the damage to catch is accidental (a flipped bit on a disk or in a copy, a bad transfer); a checksum
  kept in the file it checks cannot stop a deliberate edit whatever the hash (weights_only=True is what
  guards against a hostile file), so the fastest code that detects such damage wins. A CRC-32 detects
  every burst of up to 32 flipped bits and misses random damage with probability 2^-32;
* zlib.crc32 ran at twice the speed of blake2b and sha256 over ResNet-50's state, and faster than adler32;
* torch.save already computes a CRC-32 of each record for the zip's directory, which torch.load never
  checks; it is turned off while dlscale saves, so the one CRC-32 of the whole file replaces it and a
  save costs less than before. The per-record CRCs would not do as the check: they leave the zip's own
  directory unchecked, and a flipped bit there can make torch read a record's bytes from another offset.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import torch

END_OF_ARCHIVE = b"PK\x05\x06"
"""The zip's end-of-central-directory record starts so; it is 22 bytes, its last 2 the comment's length."""
END_RECORD_BYTES = 22
CHECKSUM_TAG = b"dlscale-crc32 "
COMMENT_BYTES = len(CHECKSUM_TAG) + 8
"""The comment: the tag and the CRC-32 as 8 lower-case hex digits."""
READ_CHUNK_BYTES = 8 << 20


class DamagedCheckpoint(Exception):
    """The file's bytes do not match the CRC-32 written with them: it changed after it was saved."""


class _Crc32Writer:
    """Passes what torch.save writes on to `file`, folding it into a running CRC-32 (zlib releases the GIL)."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.crc32 = 0
        self.tail = b""
        self.failed: OSError | None = None
        """What the file refused (a full disk): torch.save's zip writer reports it as `unexpected pos`."""

    def write(self, data: Any) -> int:
        self.crc32 = zlib.crc32(data, self.crc32)
        self.tail = (self.tail + bytes(memoryview(data)[-END_RECORD_BYTES:]))[-END_RECORD_BYTES:]
        try:
            return self.file.write(data)
        except OSError as error:
            self.failed = error
            raise

    def flush(self) -> None:
        self.file.flush()


def save_with_checksum(payload: Any, file: BinaryIO) -> None:
    """torch.save(payload) into `file` (open for writing, at its start), then the archive's CRC-32 as its
    zip comment: the end record's comment length, then the comment, written over and after its last 2 bytes."""
    writer = _Crc32Writer(file)
    try:
        with _torch_record_crc32_off():
            torch.save(payload, writer)
    except RuntimeError:
        if writer.failed is not None:  # the file's own error (ENOSPC, EDQUOT, ...), not torch's account of it
            raise writer.failed from None
        raise
    if not (writer.tail.startswith(END_OF_ARCHIVE) and writer.tail.endswith(b"\0\0")):
        raise RuntimeError("torch.save did not end the archive with a comment-less end record; "
                           "dlscale cannot store the checkpoint's checksum")
    file.seek(-2, os.SEEK_END)
    file.write(struct.pack("<H", COMMENT_BYTES) + _comment(writer.crc32))


def verify_checksum(path: Path) -> bool:
    """True when the file's bytes match the CRC-32 stored at its end; False when it carries none (a
    checkpoint dlscale wrote before it stored them: a zip that ends without a comment).

    DamagedCheckpoint on a mismatch; EOFError when the file ends in neither form (truncated, or its last
    bytes damaged).
    """
    size = path.stat().st_size
    with open(path, "rb") as file:
        file.seek(max(0, size - END_RECORD_BYTES - COMMENT_BYTES))
        tail = file.read()
        if tail[-END_RECORD_BYTES:].startswith(END_OF_ARCHIVE) and tail.endswith(b"\0\0"):
            return False
        if not (len(tail) == END_RECORD_BYTES + COMMENT_BYTES and tail.startswith(END_OF_ARCHIVE)):
            raise EOFError("the file ends neither in a zip end record nor in the checksum dlscale writes "
                           "after one: truncated, or its last bytes damaged")
        file.seek(0)
        crc32 = zlib.crc32(b"\0\0", _crc32_of(file, size - COMMENT_BYTES - 2))  # as torch.save wrote it
    if tail[-COMMENT_BYTES - 2:] != struct.pack("<H", COMMENT_BYTES) + _comment(crc32):
        raise DamagedCheckpoint(f"its bytes do not match the CRC-32 written with it: {_printable(tail[-8:])} "
                                f"written, {crc32:08x} now; the file changed after it was saved")
    return True


def _comment(crc32: int) -> bytes:
    return CHECKSUM_TAG + f"{crc32:08x}".encode()


def _crc32_of(file: BinaryIO, length: int) -> int:
    crc32, left = 0, length
    buffer = bytearray(READ_CHUNK_BYTES)
    while left > 0:
        got = file.readinto(memoryview(buffer)[: min(left, READ_CHUNK_BYTES)])
        if not got:
            raise EOFError(f"the file ended {left} bytes early while its checksum was computed")
        crc32 = zlib.crc32(memoryview(buffer)[:got], crc32)
        left -= got
    return crc32


def _printable(data: bytes) -> str:
    return data.decode("ascii", errors="replace")


@contextlib.contextmanager
def _torch_record_crc32_off() -> Iterator[None]:
    """torch.save computes a CRC-32 per record (torch.serialization.set_crc32_options, torch >= 2.6), which
    torch.load never checks; the file's own CRC-32 replaces it, so it is skipped while dlscale saves."""
    get_option = getattr(torch.serialization, "get_crc32_options", None)
    if get_option is None or not get_option():
        yield
        return
    torch.serialization.set_crc32_options(False)
    try:
        yield
    finally:
        torch.serialization.set_crc32_options(True)
