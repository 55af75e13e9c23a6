"""Faults for the tests, made by the operating system where it can make them: a disk that fills (writes into
/dev/full fail with ENOSPC from the kernel), a write refused as the system refuses it (EACCES, EROFS, EDQUOT), a
character device and a FIFO where a file should be, a read that would never end (a guard that stops it).

    with failing_writes("checkpoint*", errno.ENOSPC):   # every write-open of a matching file name
        main(["train", ...])
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import fnmatch
import io
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR


@contextlib.contextmanager
def failing_writes(pattern: str, error: int = errno.ENOSPC) -> Iterator[list[str]]:
    """Every open for writing of a file whose name matches `pattern` (fnmatch) fails as a full disk or a refusing
    file system fails it: ENOSPC by opening /dev/full instead, whose writes the kernel refuses (an append, which
    checks that it opened a regular file, at the open); any other errno at the open. Yields the paths hit."""
    hit: list[str] = []
    real_os_open, real_open = os.open, builtins.open

    def matches(path) -> bool:  # TensorBoard's file system opens its events by a bytes name
        return isinstance(path, str | bytes | os.PathLike) and fnmatch.fnmatch(Path(os.fsdecode(path)).name, pattern)

    def fail(path):
        hit.append(os.fsdecode(path))
        raise OSError(error, os.strerror(error), os.fsdecode(path))

    def os_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & WRITE_FLAGS and matches(path):
            if error != errno.ENOSPC or flags & os.O_APPEND:  # an append checks it opened a regular file
                fail(path)
            hit.append(str(path))
            return real_os_open("/dev/full", os.O_WRONLY | os.O_CLOEXEC)
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    def open_(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+") and matches(file):
            if error != errno.ENOSPC:
                fail(file)
            hit.append(str(file))
            return real_open("/dev/full", mode.replace("x", "w").replace("a", "w"), *args, **kwargs)
        return real_open(file, mode, *args, **kwargs)

    os.open, builtins.open, io.open = os_open, open_, open_  # io.open: TensorBoard's file system calls it
    try:
        yield hit
    finally:
        os.open, builtins.open, io.open = real_os_open, real_open, real_open


def device(path: Path) -> Path:
    """A character device at path (as /dev/null: major 1, minor 3) made with mknod, where this process may (root);
    a FIFO otherwise, which no file output may replace or write either."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        os.mkfifo(path)
    return path


class Hung(Exception):
    """A guarded call did not return in time (a read that waits forever)."""


@contextlib.contextmanager
def hang_guard(seconds: int) -> Iterator[None]:
    """Raise Hung in this thread (the main one) after `seconds`: a blocking open() or read() is interrupted by the
    signal, so a reader that would wait on a FIFO forever fails the test instead of stopping the suite."""
    def expire(signum, frame):
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
