"""Files on disk: JSON and JSON-lines read back with one line for anything wrong, written atomically, and
every output path checked before the work starts. The one module of dlscale that opens what the
commands write (an import contract: no other part imports json).

Errors are one line naming the file (or the flag that gave the path): a DlscaleError, which the CLI
prints without a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from dlscale.errors import ConfigError, StorageError


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


def read_json(path: Path, what: str = "", *, kind: type = dict, fix: str = "") -> Any:
    """A JSON object (or `kind`) that dlscale wrote; one line naming the file and what to do (`fix`, else re-run
    `what` or remove the directory) otherwise."""
    fix = fix or f"re-run{what} or remove the directory"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        why = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else " ".join(str(error).split())[:120]
        raise ConfigError(f"{path}: cannot be read as JSON ({why}); {fix}") from None
    if not isinstance(data, kind):
        raise ConfigError(f"{path}: not a JSON {'object' if kind is dict else kind.__name__}; {fix}")
    return data


def read_records(path: Path) -> tuple[dict, ...]:
    """The JSON objects of a JSON-lines file, one per line; () when there is no file.

    A line that does not parse is one cut short by a crash (a run resumed after it appends on the
    next line): it is left out. A file of which no line parses is not a record at all: one line."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ()
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror or error}); re-run or remove the directory") \
            from None
    records, bad = [], 0
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        elif line.strip():
            bad += 1
    if bad and not records:
        raise ConfigError(f"{path}: not JSON lines (none of its {bad} lines is a record); re-run or remove "
                          "the directory")
    return tuple(records)


# ------------------------------------------------------------------------------------------ writing


def write_json(path: Path, data: Any) -> Path:
    """Write atomically (a temporary file renamed over the target): a reader never sees half a file."""
    return write_text(path, json_text(data))


def write_text(path: Path, text: str) -> Path:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as error:
        if tmp.parent.is_dir():
            tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path} ({error.strerror or error})") from None
    return path


def append_line(path: Path, line: str) -> None:
    try:
        with open(path, "a") as file:
            file.write(line)
    except OSError as error:
        raise StorageError(f"cannot write {path} ({error.strerror or error})") from None


def open_append(path: Path, flag: str) -> IO[str]:
    """A file that records are appended to (--raport-file), checked as an output first."""
    check_output_file(path, flag)
    return open(path, "a")  # noqa: SIM115 - the caller closes it


def write_json_file(path: Path, data: Any, flag: str = "--json") -> None:
    """`--json PATH`: the object as indented JSON, its folder created if missing."""
    write_json(check_output_file(path, flag), data)


# ------------------------------------------------------------------------------------ output paths


def check_output_dir(path: str | os.PathLike, flag: str, what: str = "the output directory") -> Path:
    """A directory outputs go into, created now with its parents: one line naming `flag` when it cannot be
    (a file in its place or on the way to it, a place where nothing can be created such as /proc/x)."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StorageError(f"cannot create {what} {path} ({_why(path, error)}); choose another {flag}") from None
    return path


def check_output_file(path: str | os.PathLike, flag: str) -> Path:
    """A file that will be written: not a directory, its folder created, and a file can be created there
    (tried with a temporary one). One line naming `flag` otherwise."""
    path = Path(path)
    if is_dir(path):
        raise ConfigError(f"{flag} {path} is a directory; give a file name")
    check_output_dir(path.parent, flag, "the folder")
    probe = path.with_name(f".{path.name}.probe.{os.getpid()}")
    try:
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise StorageError(f"{flag} {path}: cannot be written ({_why(path, error)}); choose another {flag}") \
            from None
    return path


@contextlib.contextmanager
def writing(path: str | os.PathLike, flag: str) -> Iterator[Path]:
    """Write `path` inside the block (a plot, a table, a script): an OSError on the way (a folder of that
    name, a file where its folder should be, a full disk) is one line naming the file and `flag`."""
    path = Path(path)
    try:
        yield path
    except OSError as error:
        raise StorageError(f"cannot write {path} ({_why(path, error)}); choose another {flag}") from None


def _why(path: Path, error: OSError) -> str:
    """What stops a path: the file in the way, else the operating system's words."""
    for place in (path, *path.parents):
        try:
            in_the_way = place.exists() and not place.is_dir()
        except OSError:  # a name too long to look at: the operating system's words say so
            in_the_way = False
        if in_the_way:
            return f"{place} is a file" if place != path else "a file of that name exists"
    return error.strerror or str(error)


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
