"""The one writer of run and sweep directories, with one life cycle for every command:

    run = RunDir.claim_new(root, name)   # create the directory, hold its lock (before the work starts)
    run.write_setup(config, env)          # config.json, env.json
    run.append(record)                    # metrics.jsonl, once per record
    run.finish(summary)                   # summary.json (a sweep: run.write_sweep(...) as points change)
    run.release()                         # or `with run:`; the lock also dies with its process

Rank 0 alone writes; the other ranks hold a RunDir for its path only. JSON files are written atomically
(a reader never sees half a file) and carry the schema version (schema.VERSION).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import filelock

from dlscale.errors import ConfigError, StorageError
from dlscale.rundir import files
from dlscale.rundir.schema import stamped


class RunInUse(ConfigError):
    """Another process holds the run directory."""


class RunDir:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock: filelock.BaseFileLock | None = None

    @classmethod
    def create(cls, root: str | os.PathLike, name: str, flag: str = "--output-dir") -> RunDir:
        """The directory root/name, created now (one line naming `flag` when it cannot be)."""
        run = cls(Path(root) / name)
        files.check_output_dir(run.path, flag, "the run directory")
        return run

    @classmethod
    def claim_new(cls, root: str | os.PathLike, name: str, flag: str = "--output-dir") -> RunDir:
        return cls(Path(root) / name).claim(flag)

    def claim(self, flag: str = "--output-dir") -> RunDir:
        """Create the directory and hold its lock until released: one run per run directory.

        The lock is the operating system's (fcntl), so it dies with its holder and a crashed run
        never blocks the next. StorageError when the directory cannot be created; RunInUse, naming
        the holder, when another run holds it.
        """
        files.check_output_dir(self.path, flag, "the run directory")
        lock = filelock.FileLock(self.path / ".lock", timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            holder = self.path / ".lock.holder"
            who = holder.read_text().strip() if holder.is_file() else "another process"
            raise RunInUse(f"{self.path} is in use by {who}; wait for it to end or stop it, or choose another "
                           "--name") from None
        except OSError as error:
            raise StorageError(f"cannot lock the run directory {self.path} ({error.strerror or error}); "
                               f"choose another {flag}") from None
        self._lock = lock
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        command = " ".join(["dlscale", *sys.argv[1:]])[:200]
        files.write_text(self.path / ".lock.holder", f"`{command}` (pid {os.getpid()} on {socket.gethostname()}, "
                                                     f"started {started})\n")
        return self

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def write_setup(self, config: dict, env: dict) -> dict:
        """config.json (what the run was asked to do, `kind` first) and env.json (what it ran on):
        every kind of run writes both with this call. Returns config.json's object as written."""
        files.check_output_dir(self.path, "--output-dir", "the run directory")
        written = files.to_jsonable(stamped(config))
        files.write_json(self.path / "config.json", written)
        files.write_json(self.path / "env.json", stamped(env))
        return written

    def append(self, record: dict) -> None:
        """One record of metrics.jsonl."""
        files.append_line(self.path / "metrics.jsonl", files.json_line(record))

    def clear_records(self) -> None:
        """Start metrics.jsonl afresh (a command that rewrites its records; a resumed run appends)."""
        (self.path / "metrics.jsonl").unlink(missing_ok=True)

    def finish(self, summary: dict) -> Path:
        """summary.json: what the run measured (written again by a run that resumes)."""
        return files.write_json(self.path / "summary.json", stamped(summary))

    def write_sweep(self, sweep: dict) -> Path:
        """sweep.json: the plan and each point's status."""
        return files.write_json(self.path / "sweep.json", stamped(sweep))

    def write_text(self, filename: str, text: str) -> Path:
        """Another file of the run (a table as text)."""
        return files.write_text(self.path / filename, text)

    def write_json(self, filename: str, data: Any) -> Path:
        return files.write_json(self.path / filename, data)


def default_run_name(kind: str, *parts: object) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return "-".join([kind, *(str(p) for p in parts if p not in (None, "")), stamp])
