"""The JSON files that dlscale's commands write, read back: one reader for report, explain and predict.
Standard library only (explain and predict start without torch or matplotlib).
"""

from __future__ import annotations

import json
from pathlib import Path

from dlscale.errors import ConfigError

KINDS = ("bench", "train")
"""The kinds of run that measured training throughput."""


def read_json(path: Path, what: str = "") -> dict:
    """A JSON object that a dlscale command wrote; one line naming the file (and `what` to re-run) otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        why = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else " ".join(str(error).split())
        raise ConfigError(f"{path}: cannot be read as JSON ({why}); re-run{what} or remove the directory") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object; re-run{what} or remove the directory")
    return data


def number(value) -> float | None:
    """A JSON number as a float; None for anything else (a missing key, null, true/false, text)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
