"""CIFAR's python version downloaded and checked before it is used (`--download`, `dlscale data download`).

As torchvision's CIFAR10/CIFAR100(download=True): the archive from the data set's page, its MD5 checked
against the published one (CifarLayout.archive_md5), then unpacked under the data root. A wrong checksum
is one line and leaves nothing behind (the partial file is removed), so the next attempt starts clean.
The archive is unpacked with tarfile's "data" filter (no member outside the root, no links out, no
device files) and removed once its files are in place. Ranks that share the root wait on one file lock:
the first downloads, the others find the files there.
"""

from __future__ import annotations

import hashlib
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from dlscale.data.cifar import CifarLayout, cifar_folder
from dlscale.errors import DataError, shown
from dlscale.rundir import check_output_file, storage_error

CHUNK_BYTES = 1 << 20
TIMEOUT_S = 60.0
"""Seconds without a byte before the download gives up."""
ARCHIVE_LIMIT_BYTES = 512 << 20
"""The most a download may bring: CIFAR-10's and CIFAR-100's python archives are about 163 and 161 MiB; an answer
three times that (or one that never ends) is not one, and is stopped before it fills the disk."""
UNPACKED_LIMIT_BYTES = 1 << 30
"""The most an archive may unpack to: CIFAR's python batches are about 180 MiB."""


def ensure_cifar(root: str | Path, layout: CifarLayout, *, url: str | None = None, md5: str | None = None,
                 out: Callable[[str], None] = lambda line: None, flag: str = "DIR") -> Path:
    """The folder of the data set under root, downloaded first when it is not there. url and md5 replace
    the published archive's (a mirror's own copy); out gets one line before and one after a download; flag: what
    names root in an error (`dlscale data download`'s DIR, a run's data.path)."""
    root = Path(root)
    found = cifar_folder(root, layout)
    if found is not None:
        return found
    url, md5 = url or layout.archive_url, (md5 or layout.archive_md5).lower()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise DataError(f"cannot create the data folder {root} for {layout.folder}: {error.strerror}") from None
    lock = check_output_file(root / f".{layout.folder}.download.lock", flag)  # a lock that cannot be made waits
    with FileLock(str(lock)):
        found = cifar_folder(root, layout)  # another rank may have fetched it while this one waited
        if found is not None:
            return found
        archive = root / f"{layout.folder}.tar.gz"
        out(f"downloading {url} into {root}")
        size = fetch(url, archive, md5, flag)
        unpack(archive, root, layout)
        out(f"{layout.folder}: {size / 2**20:.1f} MiB, MD5 {md5} as published; unpacked under {root}")
    found = cifar_folder(root, layout)
    if found is None:
        raise DataError(f"{url} holds no {layout.folder}/ with {', '.join(layout.train_files + layout.val_files)}: "
                        "not the python version of the data set")
    return found


def fetch(url: str, path: Path, md5: str, flag: str = "DIR") -> int:
    """url's bytes into path, checked against md5 while they arrive; returns their count. DataError, with
    nothing left at path, for a download that fails or whose checksum differs."""
    partial = path.with_name(path.name + ".part")
    digest = hashlib.md5(usedforsecurity=False)
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, open(partial, "wb") as file:
            announced = response.headers.get("Content-Length", "") if hasattr(response, "headers") else ""
            if announced.isdigit() and int(announced) > ARCHIVE_LIMIT_BYTES:
                raise _TooLarge(int(announced))
            while chunk := response.read(CHUNK_BYTES):
                digest.update(chunk)
                file.write(chunk)
                size += len(chunk)
                if size > ARCHIVE_LIMIT_BYTES:
                    raise _TooLarge(size)
    except _TooLarge as error:
        partial.unlink(missing_ok=True)
        raise DataError(f"{url}: {error.size:,} bytes or more, larger than any CIFAR archive (at most "
                        f"{ARCHIVE_LIMIT_BYTES >> 20} MiB taken); not the data set: stopped and removed") from None
    except OSError as error:
        partial.unlink(missing_ok=True)
        if not isinstance(error, urllib.error.URLError) and error.filename is not None:  # writing, not fetching
            raise storage_error(partial, error, flag) from None
        reason = getattr(error, "reason", None) or error
        raise DataError(f"{url}: download failed ({reason}); check the address and the network, or put the "
                        f"files in {path.parent} yourself") from None
    except ValueError as error:
        partial.unlink(missing_ok=True)
        reason = error
        raise DataError(f"{url}: download failed ({reason}); check the address and the network, or put the "
                        f"files in {path.parent} yourself") from None
    if digest.hexdigest() != md5:
        partial.unlink(missing_ok=True)
        raise DataError(f"{url}: MD5 {digest.hexdigest()} is not the published {md5} ({size:,} bytes received): "
                        "a corrupt or different file, removed; download again")
    partial.replace(path)
    return size


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


def unpack(archive: Path, root: Path, layout: CifarLayout) -> None:
    """The archive's files and folders under root, then the archive removed. A member that is neither, or that
    would land outside root, refuses the archive (tarfile's "data" filter does the same where Python has it)."""
    inside = root.resolve()
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = _members(tar, archive, layout)
            for member in members:
                outside = not (inside / member.name).resolve().is_relative_to(inside)
                if outside or not (member.isfile() or member.isdir()):
                    raise DataError(f"{archive}: member {shown(member.name)} is not a file or folder under {root}; "
                                    f"not a {layout.folder} archive")
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
                tar.extractall(root, members=members, filter="data")
            else:
                tar.extractall(root, members=members)
    except (tarfile.TarError, OSError, EOFError) as error:
        raise DataError(f"{archive}: not a readable {layout.folder} archive ({error}); download again") from None
    finally:
        archive.unlink(missing_ok=True)


def _members(tar: tarfile.TarFile, archive: Path, layout: CifarLayout) -> list[tarfile.TarInfo]:
    """The archive's members, read one by one and refused once they would unpack to more than UNPACKED_LIMIT_BYTES
    (or hold more entries than a CIFAR archive's few dozen many times over)."""
    members, total = [], 0
    for member in tar:
        members.append(member)
        total += member.size
        if total > UNPACKED_LIMIT_BYTES or len(members) > 10_000:
            raise DataError(f"{archive}: unpacks to more than {UNPACKED_LIMIT_BYTES >> 20} MiB or 10,000 entries; "
                            f"not a {layout.folder} archive")
    return members
