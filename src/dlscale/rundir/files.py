"""Files on disk: JSON and JSON-lines read back with one line for anything wrong, written atomically, and
every output path checked before the work starts. The one module of dlscale that opens what the
commands write (an import contract: no other part imports json).

Errors are one line naming the file (or the flag that gave the path): a DlscaleError, which the CLI
prints without a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

from dlscale.errors import ConfigError, StorageError, one_line, too_many_digits


def to_jsonable(value: Any) -> Any:
    """Dataclasses, tuples, paths, dtypes and devices as JSON; nan/inf as null (JSON has neither)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def json_text(data: Any) -> str:
    """The indented form every JSON file of dlscale has."""
    return json.dumps(to_jsonable(data), indent=2) + "\n"


def json_value(value: Any) -> str:
    """A value as JSON on one line (MLflow's parameters)."""
    return json.dumps(to_jsonable(value))


def json_line(record: Any) -> str:
    """One record of a JSON-lines file (metrics.jsonl, NVIDIA's DLLL lines)."""
    return json_value(record) + "\n"


# ------------------------------------------------------------------------------------------ reading

JSON_LIMIT_BYTES = 64 << 20
"""The most a JSON file of dlscale's (a summary with every epoch, a sweep, a reference) is read to: hundreds of
times what any holds; a larger one is not one dlscale wrote."""
RECORDS_LIMIT_BYTES = 1 << 30
"""The most metrics.jsonl is read to: a record a log step of about 600 bytes, so a run logging every step of
ImageNet's 90 epochs on 256 GPUs (450,000 records) holds a quarter of it."""


class NotAFile(OSError):
    """What open_regular raises for a folder, a FIFO, a device or a socket: `kind` names it ("a FIFO")."""

    def __init__(self, kind: str):
        super().__init__(errno.EINVAL, f"{kind}, not a file")
        self.kind = kind

    def __str__(self) -> str:
        return self.strerror


def open_regular(path: str | os.PathLike) -> tuple[int, os.stat_result]:
    """A descriptor for reading the regular file at path, and its fstat; NotAFile for anything else (the descriptor
    closed), the OSError of the open for a file that cannot be opened. Opened non-blocking, so that a FIFO's open
    does not wait for a writer: the descriptor's reads do not block on a regular file either way."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    facts = os.fstat(fd)
    if not stat.S_ISREG(facts.st_mode):
        os.close(fd)
        raise NotAFile(_file_type(facts.st_mode))
    return fd, facts


def read_bounded(path: str | os.PathLike, limit: int, fix: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; one line naming the file and `fix` for anything else:
    a FIFO or a device (a link to /dev/zero) is never read, a larger file never read whole. FileNotFoundError is
    the caller's to answer."""
    then = f"; {fix}" if fix else ""
    try:
        fd, _ = open_regular(path)
    except FileNotFoundError:
        raise
    except NotAFile as error:
        raise ConfigError(f"{path}: {error.kind}, not a file{then}") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror or error}){then}") from None
    with os.fdopen(fd, "rb") as file:
        try:
            data = file.read(limit + 1)
        except OSError as error:
            raise ConfigError(f"{path}: cannot be read ({error.strerror or error}){then}") from None
    if len(data) > limit:
        raise ConfigError(f"{path}: more than {_size_text(limit)}, larger than any file dlscale writes{then}")
    return data


def _size_text(size: int) -> str:
    """A size in bytes in the largest unit (bytes, KiB, MiB) of which it holds at least one whole: `64 MiB`,
    `4 KiB`, `100 bytes`; rounded down, so that "more than" it stays true."""
    for shift, unit in ((20, "MiB"), (10, "KiB")):
        if size >> shift:
            return f"{size >> shift:,} {unit}"
    return f"{size:,} byte{'' if size == 1 else 's'}"


def _file_type(mode: int) -> str:
    """What a file that is not a regular one is: "a folder", "a FIFO", ..."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"  # no other kind of file exists on POSIX


def parse_json(text: str | bytes) -> Any:
    """JSON as dlscale writes it: every failure a ValueError (a number of more digits than Python converts, a
    nesting deeper than it recurses, NaN or an infinity, which dlscale writes as null)."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested deeper than Python reads") from None
    except ValueError as error:
        if (said := too_many_digits(error)) is not None:
            raise ValueError(said) from None
        raise


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is beyond a 64-bit float")
    return value


def read_json(path: Path, what: str = "", *, kind: type = dict, fix: str = "") -> Any:
    """A JSON object (or `kind`) that dlscale wrote; one line naming the file and what to do (`fix`, else re-run
    `what` or remove the directory) otherwise."""
    fix = fix or f"re-run{what} or remove the directory"
    try:
        data = parse_json(read_bounded(path, JSON_LIMIT_BYTES, fix).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; {fix}") from None
    except (UnicodeDecodeError, ValueError) as error:
        why = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else one_line(error, 120)
        raise ConfigError(f"{path}: cannot be read as JSON ({why}); {fix}") from None
    if not isinstance(data, kind):
        raise ConfigError(f"{path}: not a JSON {'object' if kind is dict else kind.__name__}; {fix}")
    return data


def read_records(path: Path) -> tuple[dict, ...]:
    """The JSON objects of a JSON-lines file, one per line; () when there is no file.

    A line that does not parse is one cut short by a crash (a run resumed after it appends on the
    next line): it is left out. A file of which no line parses is not a record at all: one line."""
    fix = "re-run or remove the directory"
    try:
        text = read_bounded(path, RECORDS_LIMIT_BYTES, fix).decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ()
    records, bad = [], 0
    for line in text.splitlines():
        try:
            record = parse_json(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif line.strip():
            bad += 1
    if bad and not records:
        raise ConfigError(f"{path}: not JSON lines (none of its {bad} lines is a record); {fix}")
    return tuple(records)


# ------------------------------------------------------------------------------------------ writing

STORAGE_ADVICE = {
    errno.ENOSPC: "free space",
    errno.EDQUOT: "free space within the quota",
    errno.EACCES: "make it writable",
    errno.EPERM: "make it writable",
    errno.EROFS: "write to a file system mounted read-write",
    errno.EFBIG: "raise the file size limit (ulimit -f)",
}
"""What the user does about a write the system refused, by its errno."""


def storage_cause(error: OSError) -> tuple[str, str]:
    """(what stopped a write, in the system's words, what to do): ('No space left on device', 'free space');
    no advice for an error without its own."""
    words = error.strerror or (os.strerror(error.errno) if error.errno else one_line(error, 120))
    return words, STORAGE_ADVICE.get(error.errno, "")


def storage_error(path: str | os.PathLike, error: OSError, flag: str = "") -> StorageError:
    """One line for a write that failed: `cannot write PATH (no space left on the device); free space or choose
    another FLAG`."""
    cause, advice = storage_cause(error)
    instead = f"choose another {flag}" if flag else ""
    todo = " or ".join(part for part in (advice, instead) if part)
    return StorageError(f"cannot write {path} ({_why(Path(path), error, cause)})" + (f"; {todo}" if todo else ""))


def write_json(path: Path, data: Any) -> Path:
    """Write atomically (a temporary file renamed over the target): a reader never sees half a file."""
    return write_text(path, json_text(data))


def write_text(path: Path, text: str, *, mode: int | None = None, flag: str = "") -> Path:
    """`text` into `path` atomically; `mode`: its permissions (a script's 0o755)."""
    data = text.encode("utf-8")
    try:
        replace_atomically(path, lambda file: file.write(data), mode=mode, flag=flag)
    except OSError as error:
        raise storage_error(path, error, flag) from None
    return Path(path)


def replace_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], object], *, tmp: Path | None = None,
                       verify: Callable[[Path], object] | None = None, mode: int | None = None, durable: bool = False,
                       flag: str = "") -> None:
    """The one atomic writer: `write` fills a new temporary file beside the target (`tmp`, else a hidden name),
    `verify` may read it back, and it is renamed over the target, so that a reader sees the old file or the new,
    never half of one. Only a new path or a regular file is replaced (through a link, its target): a device, a
    FIFO or a folder of that name is left as it is, in one line. `durable`: fsync the file and the folder (a
    checkpoint survives a power loss). A failed write leaves the target as it was, removes the temporary file and
    raises what failed (an OSError: storage_error makes it one line)."""
    path = Path(path)
    target = Path(os.path.realpath(path))
    refuse_non_regular(path, flag)
    tmp = tmp or target.with_name(f".{target.name}.tmp.{os.getpid()}")
    made = False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        made = True
        with os.fdopen(fd, "wb") as file:
            write(file)
            file.flush()
            if mode is not None:
                os.fchmod(file.fileno(), mode)
            if durable:
                os.fsync(file.fileno())
        if verify is not None:
            verify(tmp)
        os.replace(tmp, target)
        made = False
        if durable:
            fsync_directory(target.parent)
    finally:
        if made:
            with contextlib.suppress(OSError):
                tmp.unlink()


def fsync_directory(directory: Path) -> None:
    """Make a rename durable (POSIX: the directory entry lives in the directory)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def refuse_non_regular(path: str | os.PathLike, flag: str = "") -> None:
    """Nothing but a regular file (or a link to one) is replaced or appended to: one line naming `flag` for a
    device (/dev/null), a FIFO, a socket or a folder."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as error:
        if error.errno == errno.ENOTDIR:
            return  # a file on the way: the write says so
        raise storage_error(path, error, flag) from None
    named = f"{flag} {path}" if flag else str(path)
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{named} is a directory; give a file name")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{named} is {_file_type(mode)}, not a file: dlscale writes only a new file or replaces a "
                          "regular one; " + (f"give another {flag}" if flag else "move it away"))


def append_line(path: Path, line: str) -> None:
    """One line appended to a file of the run (metrics.jsonl); one line if it cannot be."""
    with open_append(path, "", check=False) as file:
        try:
            file.write(line)
            file.flush()
        except OSError as error:
            raise storage_error(path, error) from None


def open_append(path: str | os.PathLike, flag: str, *, check: bool = True) -> IO[str]:
    """A regular file that records are appended to (--raport-file, metrics.jsonl), created if missing; its folder
    checked first (`check`). Never a FIFO, a device or a link to one: one line naming `flag`."""
    if check:
        check_output_file(path, flag)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as error:
        if error.errno == errno.ENXIO:  # a FIFO nobody reads
            refuse_non_regular(path, flag)
        raise storage_error(path, error, flag) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        named = f"{flag} {path}" if flag else str(path)
        raise ConfigError(f"{named} is {_file_type(mode)}, not a file: dlscale appends only to a regular file; "
                          + (f"give another {flag}" if flag else "move it away"))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


def write_json_file(path: Path, data: Any, flag: str = "--json") -> None:
    """`--json PATH`: the object as indented JSON, its folder created if missing."""
    check_output_file(path, flag)
    write_text(path, json_text(data), flag=flag)


# ------------------------------------------------------------------------------------ output paths


def check_output_dir(path: str | os.PathLike, flag: str, what: str = "the output directory") -> Path:
    """A directory outputs go into, created now with its parents: one line naming `flag` when it cannot be
    (a file in its place or on the way to it, a place where nothing can be created such as /proc/x)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        cause, _ = storage_cause(error)
        raise StorageError(f"cannot create {what} {path} ({_why(path, error, cause)}); choose another {flag}") \
            from None
    return path


def check_output_file(path: str | os.PathLike, flag: str) -> Path:
    """A file that will be written: a new one or a regular file (never a folder, a device or a FIFO), its folder
    created, and a file can be created there (tried with a temporary one). One line naming `flag` otherwise."""
    path = Path(path)
    refuse_non_regular(path, flag)
    check_output_dir(path.parent, flag, "the folder")
    probe = path.with_name(f".{path.name}.probe.{os.getpid()}")
    try:
        probe.touch()
        probe.unlink()
    except OSError as error:
        cause, advice = storage_cause(error)
        raise StorageError(f"{flag} {path}: cannot be written ({_why(path, error, cause)}); "
                           f"{advice + ' or ' if advice else ''}choose another {flag}") from None
    return path


@contextlib.contextmanager
def writing(path: str | os.PathLike, flag: str) -> Iterator[Path]:
    """Write `path` inside the block (a plot, a table, a script): an OSError on the way (a folder of that
    name, a file where its folder should be, a full disk) is one line naming the file and `flag`; a device or a
    FIFO of that name is refused before."""
    path = Path(path)
    refuse_non_regular(path, flag)
    with storing(path, flag):
        yield path


@contextlib.contextmanager
def storing(path: str | os.PathLike, flag: str = "") -> Iterator[None]:
    """Writes into `path` (a file or a folder another library fills: TensorBoard's events, a trace, logs) inside
    the block: an OSError is one line naming the file it names (else `path`) and the cause (storage_error)."""
    try:
        yield
    except OSError as error:
        named = os.fsdecode(error.filename) if isinstance(error.filename, str | bytes) else path
        raise storage_error(named, error, flag) from None


def _why(path: Path, error: OSError, cause: str = "") -> str:
    """What stops a path: the file in the way, else the operating system's words."""
    for place in (path, *path.parents):
        try:
            in_the_way = place.exists() and not place.is_dir()
        except OSError:  # a name too long to look at: the operating system's words say so
            in_the_way = False
        if in_the_way and error.errno in (errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            return f"{place} is a file" if place != path else "a file of that name exists"
    return cause or error.strerror or str(error)


def is_file(path: str | os.PathLike) -> bool:
    """path names a regular file; False also where the system cannot look (a name too long, a loop of links),
    as pathlib answers from Python 3.14 on."""
    try:
        return Path(path).is_file()
    except OSError:
        return False


def is_dir(path: str | os.PathLike) -> bool:
    """path names a folder; False also where the system cannot look."""
    try:
        return Path(path).is_dir()
    except OSError:
        return False
