"""Errors across a launched job, without torch: a worker's one-line error where torchrun's agent
reads it (its failure summary then names that line as the cause), and the error a collective
raises on this rank because another rank died."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from dlscale.errors import line_of
from dlscale.rundir.files import open_regular

PEER_FAILURE_MESSAGES = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing",
                         "NCCL communicator was aborted", "Broken pipe")
"""What a collective raises on this rank when another rank of the job has died."""


def peer_failed(error: BaseException) -> bool:
    """True for the error a collective raises because another rank died (its own error says why)."""
    return isinstance(error, RuntimeError) and any(text in str(error) for text in PEER_FAILURE_MESSAGES)


TAIL_BYTES = 64 << 10
"""How much of a log's end last_line reads."""


def tail_text(path: str | os.PathLike, limit: int = TAIL_BYTES) -> str:
    """The last `limit` bytes of a log as text; "" when there is no such regular file (a FIFO or a device is never
    read: it could wait or never end)."""
    try:
        fd, facts = open_regular(path)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as file:
        file.seek(max(0, facts.st_size - limit))
        return file.read(limit).decode(errors="replace")


def last_line(path: Path) -> str:
    """The last line of a log that is not blank (a failed worker's stderr), from its end only; "" when there is no
    such regular file."""
    return line_of(tail_text(path), 500, last=True)


def record_error_for_launcher(line: str) -> None:
    """Under torchrun, write the one-line error where the agent reads a worker's error
    (TORCHELASTIC_ERROR_FILE), so that its summary names it as the failure's cause."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {"message": {"message": line, "extraInfo": {"py_callstack": line, "timestamp": str(int(time.time()))}}}
    try:
        with open(path, "w") as file:
            json.dump(data, file)
    except OSError:
        pass  # the agent then reports the exit code alone
