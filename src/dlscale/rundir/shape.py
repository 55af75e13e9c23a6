"""The shape of a JSON document, checked when it is read: each field's type, and for numbers their range.

A shape is written as data, the way the document looks:

    {"world_size": "count", "total_ips": "number?", "history": [{"epoch": "whole", "val_top1_pct": "number?"}]}

A string names a type (TYPES); a trailing "?" lets the field be missing or null, as Maybe(shape) does for a dict
or a list. A dict checks the fields it names (others pass unchecked); a one-item list checks every item of a
list (Some: and there is one at least); a tuple is any one of its shapes; a key with "*" checks every field it
matches (fnmatch: "*" any key, "*_ms" every key ending in _ms). The first field that does not match is one line
naming the file, the field's path and what it should be:

    runs/x/summary.json: history[2].val_top1_pct is 'fast', not a number; re-run, or remove the directory

Readers then use the checked fields without guarding each one: a wrong file cannot reach them.
"""

from __future__ import annotations

import fnmatch
import math
from pathlib import Path
from typing import Any

from dlscale.errors import SHOWN_CHARS, ConfigError, shown


class Some:
    """A list of at least one item of `shape`."""

    def __init__(self, shape: Any) -> None:
        self.shape = shape


MISSING = object()
"""The value of a field that is not there."""


class Maybe:
    """A shape that may also be missing, or null (unless null=False)."""

    def __init__(self, shape: Any, *, null: bool = True) -> None:
        self.shape, self.null = shape, null


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


TYPES = {
    "number": ("a finite number", _number),
    "positive": ("a number above 0", lambda v: _number(v) and v > 0),
    "nonnegative": ("a number of 0 or more", lambda v: _number(v) and v >= 0),
    "whole": ("a whole number", _whole),
    "count": ("a whole number of 1 or more", lambda v: _whole(v) and v >= 1),
    "index": ("a whole number of 0 or more", lambda v: _whole(v) and v >= 0),
    "text": ("text", lambda v: isinstance(v, str)),
    "flag": ("true or false", lambda v: isinstance(v, bool)),
    "object": ("an object", lambda v: isinstance(v, dict)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "any": ("anything", lambda v: True),
}


def check(data: Any, shape: Any, file: str | Path, *, what: str = "re-run, or remove the directory") -> Any:
    """data itself when it has the shape; ConfigError naming the file and the first field that does not."""
    wrong = mismatch(data, shape, "")
    if wrong is not None:
        path, value, expected = wrong
        if value is MISSING:
            raise ConfigError(f"{file}: no {path} (it should be {expected}); {what}")
        quoted = shown(value)
        quoted = quoted if len(quoted) < SHOWN_CHARS else f"{type(value).__name__} {shown(value, 40)}"
        field = f"{path} is {quoted}" if path else f"the file holds {quoted}"
        raise ConfigError(f"{file}: {field}, not {expected}; {what}")
    return data


def mismatch(value: Any, shape: Any, path: str) -> tuple[str, Any, str] | None:
    """(path, value, what was expected) of the first field that does not have its shape, else None."""
    if isinstance(shape, Maybe):
        return None if value is None and shape.null else mismatch(value, shape.shape, path)
    if isinstance(shape, str):
        name, optional = shape.rstrip("?"), shape.endswith("?")
        if value is None and optional:
            return None
        described, holds = TYPES[name]
        return None if holds(value) else (path, value, described)
    if isinstance(shape, tuple):
        found = [mismatch(value, option, path) for option in shape]
        if not all(found):
            return None
        # A wrong field inside a value of the option's kind says more than the options do; a missing one, less.
        deeper = [f for f in found if f[0] != path and f[1] is not MISSING]
        return deeper[0] if deeper else (path, value, " or ".join(_described(option) for option in shape))
    if isinstance(shape, Some):
        if isinstance(value, list) and not value:
            return path, value, "a list of at least one item"
        return mismatch(value, [shape.shape], path)
    if isinstance(shape, list):
        if not isinstance(value, list):
            return path, value, "a list"
        for index, item in enumerate(value):
            wrong = mismatch(item, shape[0], f"{path}[{index}]")
            if wrong:
                return wrong
        return None
    if not isinstance(value, dict):
        return path, value, "an object"
    named = {key: inner for key, inner in shape.items() if "*" not in key}
    patterns = [(pattern, inner) for pattern, inner in shape.items() if "*" in pattern]
    items = list(named.items()) + [(key, inner) for key in value if key not in named
                                   for pattern, inner in patterns if fnmatch.fnmatchcase(str(key), pattern)]
    for key, inner in items:
        where = f"{path}.{key}" if path else str(key)
        if key not in value:
            if _optional(inner):
                continue
            return where, MISSING, _described(inner)
        wrong = mismatch(value[key], inner, where)
        if wrong:
            return wrong
    return None


def _optional(shape: Any) -> bool:
    """The field may be missing."""
    if isinstance(shape, tuple):
        return any(map(_optional, shape))
    return isinstance(shape, Maybe) or isinstance(shape, str) and shape.endswith("?")


def _described(shape: Any) -> str:
    if isinstance(shape, Maybe):
        return _described(shape.shape)
    if isinstance(shape, str):
        return TYPES[shape.rstrip("?")][0]
    if isinstance(shape, list | Some):
        return "a list"
    if isinstance(shape, tuple):
        return " or ".join(_described(s) for s in shape)
    required = [key for key, inner in shape.items() if "*" not in key and not _optional(inner)]
    return f"an object with {', '.join(required)}" if required else "an object"
