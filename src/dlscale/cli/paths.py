"""Every flag that names a file or a folder: its text checked when the command line is parsed against what a
file system can hold, so that no part of a command meets a path the operating system refuses to look at.

    p.add_argument("--json", type=paths.PATH, default=None)       # a pathlib.Path
    p.add_argument("--resume", type=paths.TEXT, default="auto")   # the text itself (a word or a file)

A name longer than NAME_MAX bytes, or a path longer than PATH_MAX, is one line naming the flag (`stat` answers
ENAMETOOLONG for it, which pathlib's is_file() and exists() raise rather than answer False). Whether the file is
there, readable or writable is for the command to say: its readers and rundir's output checks do.
tests/smoke/test_cli_fuzz.py checks that every option naming a file or a folder takes one of these.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

NAME_MAX = 255
"""Bytes of one name in a path: ext4, XFS, btrfs, NFS and APFS hold at most 255."""
PATH_MAX = 4096
"""Bytes of a whole path that Linux looks up (including its terminating zero)."""


class PathText:
    """Text naming a file or a folder (or a word such as --resume's auto), checked for its length; kept as text."""

    path = True
    """Marks a path flag's type (the fuzz test finds them by it)."""
    __name__ = "path"

    def __call__(self, text: str) -> str:
        encoded = os.fsencode(text)
        if len(encoded) >= PATH_MAX:
            raise argparse.ArgumentTypeError(f"a path of {len(encoded):,} bytes: Linux looks up at most "
                                             f"{PATH_MAX - 1:,}; give a shorter one")
        longest = max(encoded.split(b"/"), key=len)
        if len(longest) > NAME_MAX:
            raise argparse.ArgumentTypeError(f"a name of {len(longest):,} bytes ({os.fsdecode(longest[:24])}...): "
                                             f"a file system holds at most {NAME_MAX} per name; give a shorter one")
        return text


class PathType(PathText):
    """A checked path as a pathlib.Path."""

    def __call__(self, text: str) -> Path:  # type: ignore[override]
        return Path(super().__call__(text))


PATH = PathType()
TEXT = PathText()
