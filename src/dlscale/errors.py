"""Errors the user can fix. The CLI prints them as one line on stderr, never a traceback."""

from __future__ import annotations

import reprlib
import sys


class DlscaleError(Exception):
    """An error caused by input or environment that the message tells the user how to fix."""


class ConfigError(DlscaleError):
    """A bad flag, preset or configuration value."""


class DeviceError(DlscaleError):
    """The device cannot run what was asked (precision, memory, missing GPU)."""


class DataError(DlscaleError):
    """A data set that is missing, empty, malformed or unsafe."""


class StorageError(DlscaleError):
    """A run directory that cannot be created or written (no permission, a full disk)."""


SHOWN_CHARS = 60
"""The most of a value an error message quotes: enough to recognise it, never the whole of a hostile one."""


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """`value` as an error message quotes it: its repr, cut to `limit` characters. The work is bounded as well
    as the text: a structure is walked only to a few items and levels (an alias bomb of a YAML file expands to
    more than memory holds), and a whole number of thousands of digits is described, not converted."""
    text = _SHORT.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: object, limit: int) -> str:
    """`text` (an exception's, a log line) as one line of at most `limit` characters: every run of white space,
    newlines included, one space."""
    return " ".join(str(text).split())[:limit]


def line_of(text: object, limit: int, *, last: bool = False) -> str:
    """The first line of `text` that is not blank (the last with `last`), one_line'd; "" where there is none."""
    lines = [line for line in str(text).splitlines() if line.strip()]
    return one_line(lines[-1 if last else 0], limit) if lines else ""


def too_many_digits(error: BaseException) -> str | None:
    """What the user reads for the ValueError Python raises on a whole number of more digits than it converts
    (a JSON or YAML number of 5,000 digits; sys.get_int_max_str_digits); None for any other error."""
    if isinstance(error, ValueError) and "integer string conversion" in str(error):
        return f"a number of more than {sys.get_int_max_str_digits():,} digits"
    return None


class _ShortRepr(reprlib.Repr):
    def repr_int(self, value: int, level: int) -> str:
        digits = int(value.bit_length() * 0.30103) + 1
        return super().repr_int(value, level) if digits <= self.maxlong else f"<a number of about {digits:,} digits>"


_SHORT = _ShortRepr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxset = 3, 4, 4, 4, 4
_SHORT.maxstring = _SHORT.maxlong = _SHORT.maxother = SHOWN_CHARS
