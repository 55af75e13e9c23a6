"""What the commands write besides their run directory (no torch: predict and explain use it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json_file(path: Path, data: Any) -> None:
    """`--json PATH`: the object as indented JSON, its folder created if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
