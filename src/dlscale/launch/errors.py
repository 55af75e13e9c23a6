"""Errors across a launched job, without torch: a worker's one-line error where torchrun's agent
reads it (its failure summary then names that line as the cause), and the error a collective
raises on this rank because another rank died."""

from __future__ import annotations

import json
import os
import time

PEER_FAILURE_MESSAGES = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing",
                         "NCCL communicator was aborted", "Broken pipe")
"""What a collective raises on this rank when another rank of the job has died."""


def peer_failed(error: BaseException) -> bool:
    """True for the error a collective raises because another rank died (its own error says why)."""
    return isinstance(error, RuntimeError) and any(text in str(error) for text in PEER_FAILURE_MESSAGES)


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
