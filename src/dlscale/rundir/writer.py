"""The one writer of run and sweep directories, with one life cycle for every command:

    run = RunDir.claim_new(root, name, "bench")  # a new folder, created and locked before the work starts
    run.write_setup(config, env)          # config.json, env.json
    run.append(record)                    # metrics.jsonl, once per record
    run.finish(summary)                   # summary.json (a sweep: run.write_sweep(...) as points change)
    run.release()                         # or `with run:`; the lock also dies with its process

A run directory holds one run: the claim refuses a folder that holds another run or anything else, unless the
run goes on in it (a training run resuming, a restart of the same job), and `--name` is a name, not a path. Its
marker (.dlscale.json) says what it is: its kind and the command that claimed it. Rank 0 alone writes; the other
ranks hold a RunDir for its path only. JSON files are written atomically
(a reader never sees half a file) and carry the schema version (schema.VERSION).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from dlscale.errors import ConfigError, one_line, shown
from dlscale.rundir import files
from dlscale.rundir.schema import stamped


class RunInUse(ConfigError):
    """Another process holds the run directory."""


MARKER = ".dlscale.json"
"""What a run directory is: its kind, the command that claimed it and its job (written at the claim)."""
LOCKS = (".lock", ".lock.holder")
HOLDER_LIMIT_BYTES = 4096
"""The most of .lock.holder an error message reads: one line a claim wrote."""


def run_path(root: str | os.PathLike, name: str, flag: str = "--name") -> Path:
    """root/name for a run's `name`, which is one name, not a path: one line naming `flag` for an empty name,
    `.`, `..`, a `/` or a control character (`--name /` would make / the run directory, `--name ..` the folder
    above the runs)."""
    if not name or name in (".", "..") or "/" in name or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ConfigError(f"{flag} {shown(name)}: a run's name is one folder name (no '/', not '.' or '..', no "
                          "control characters); give the folder above it with --output-dir")
    return Path(root) / name


@dataclass(frozen=True)
class Occupant:
    """What a directory holds that a claim must not take over."""

    kind: str | None
    """A run's kind (bench, train, ..., sweep), or None for files that are not a run of dlscale."""
    command: str = ""
    """The command that made it, as recorded."""
    job: str | None = None
    """The job that claimed it (torchrun's run id): its restarts claim it again."""
    prepared: bool = False
    """`dlscale slurm` wrote a job's script there; the job's command has not claimed it yet."""
    names: tuple[str, ...] = ()

    def refusal(self, path: Path, flag: str) -> ConfigError:
        if self.kind is None:
            listed = ", ".join(self.names[:3]) + (", ..." if len(self.names) > 3 else "")
            return ConfigError(f"{path} already holds files that are not a run of dlscale ({listed}); a run goes "
                               f"into a new or empty folder: choose another {flag}")
        by = f" ({shown(self.command, 80)})" if self.command else ""
        what = "a run of an unknown kind" if self.kind == "unknown" else f"a {self.kind} run"
        return ConfigError(f"{path} holds {what}{by}: a run directory holds one run and nothing replaces it; choose "
                           f"another {flag}, or remove that run")


def occupant(path: Path) -> Occupant | None:
    """What `path` holds: None when it is free (missing, empty, or only a lock a refused run left)."""
    if not files.is_dir(path):
        return None
    names = tuple(sorted(entry for entry in os.listdir(path) if entry not in LOCKS))
    if not names:
        return None
    if MARKER in names:
        try:
            marker = files.read_json(path / MARKER)
        except ConfigError:
            return Occupant("unknown", names=names)
        kind = marker.get("kind")
        return Occupant(kind if isinstance(kind, str) else "unknown", str(marker.get("command", "")),
                        marker.get("job") if isinstance(marker.get("job"), str) else None,
                        marker.get("prepared") is True, names)
    for name in ("sweep.json", "config.json", "summary.json"):  # a run written before the marker existed
        if name in names:
            kind = "sweep" if name == "sweep.json" else _recorded_kind(path / name)
            return Occupant(kind, names=names)
    return Occupant(None, names=names)


def refuse_a_run(path: str | os.PathLike, flag: str, what: str) -> None:
    """A folder that `what` fills with files of its own (a report, a JPEG tree) is never a run's directory: one
    line naming `flag` when `path` holds a run of dlscale."""
    there = occupant(Path(path))
    if there is not None and there.kind is not None:
        raise ConfigError(f"{flag} {path} holds a dlscale run ({there.kind}); {what} goes into a folder of its own: "
                          f"choose another {flag}")


def _recorded_kind(file: Path) -> str:
    try:
        kind = files.read_json(file).get("kind")
    except ConfigError:
        return "unknown"
    return kind if isinstance(kind, str) else "unknown"


def _marker(kind: str, command: str, job: str | None, **facts: object) -> dict:
    """The object of a run directory's marker (MARKER): its kind, the command that made it (cut to 200
    characters), the job that claimed it, any further `facts` (prepared) and when it was written."""
    return {"kind": kind, "command": command[:200], "job": job, **facts,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def job_identity() -> str | None:
    """The job this process belongs to, as its restarts see it: torchrun's run id (the same for every restart
    of its workers); None outside torchrun."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    return f"torchrun:{run_id}" if run_id and run_id != "none" else None


class RunDir:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._lock: filelock.BaseFileLock | None = None
        self._made: list[Path] = []
        """The folders this claim created (the run directory and any missing parents), removed again by a release
        that finds nothing written."""

    @classmethod
    def create(cls, root: str | os.PathLike, name: str, flag: str = "--output-dir") -> RunDir:
        """The directory root/name, created now (one line naming `flag` when it cannot be)."""
        run = cls(run_path(root, name))
        files.check_output_dir(run.path, flag, "the run directory")
        return run

    @classmethod
    def claim_new(cls, root: str | os.PathLike, name: str, kind: str, flag: str = "--output-dir") -> RunDir:
        return cls(run_path(root, name)).claim(kind, flag, name_flag="--name")

    def claim(self, kind: str, flag: str = "--output-dir", *, name_flag: str = "", reuse: bool = False) -> RunDir:
        """Create the directory and hold its lock until released: one run per run directory, and a run
        directory is never taken over.

        The directory must be new or empty, or hold a run of this `kind` that may go on in it: a training run
        resuming (`reuse`), the same job restarted by torchrun, or a job `dlscale slurm` prepared for this
        command. Anything else there (another command's run, a second run of this kind, files that are not a
        run) is one line naming `name_flag` (else `flag`). The lock is the operating system's (fcntl), so it dies
        with its holder and a crashed run never blocks the next. StorageError when the directory cannot be
        created; RunInUse, naming the holder, when another run holds it.
        """
        there = occupant(self.path)
        job = job_identity()
        if there is not None and not (there.kind == kind and (reuse or there.prepared or (job and job == there.job))):
            if there.kind is not None and files.is_file(self.path / ".lock"):  # a run of dlscale: running now?
                self._acquire(flag, name_flag).release()
            raise there.refusal(self.path, name_flag or flag)
        self._made = [p for p in (self.path, *self.path.parents) if not files.is_dir(p)]
        files.check_output_dir(self.path, flag, "the run directory")
        self._lock = self._acquire(flag, name_flag)
        command = " ".join(["dlscale", *sys.argv[1:]])[:200]
        if there is None or there.prepared:
            files.write_json(self.path / MARKER, _marker(kind, command, job))
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        files.write_text(self.path / ".lock.holder", f"`{command}` (pid {os.getpid()} on {socket.gethostname()}, "
                                                     f"started {started})\n")
        return self

    def _acquire(self, flag: str, name_flag: str) -> filelock.BaseFileLock:
        lock = filelock.FileLock(self.path / ".lock", timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            self._made = []
            raise RunInUse(f"{self.path} is in use by {self._holder()}; wait for it to end or stop it, or choose "
                           f"another {name_flag or flag}") from None
        except OSError as error:
            self._made = []
            raise files.storage_error(self.path / ".lock", error, flag) from None
        return lock

    def _holder(self) -> str:
        try:
            text = files.read_bounded(self.path / ".lock.holder", HOLDER_LIMIT_BYTES, "").decode(errors="replace")
        except (OSError, ConfigError):
            return "another process"
        return one_line(text, 300) or "another process"

    @classmethod
    def prepare(cls, path: Path, kind: str, command: str, flag: str = "--output-dir", *, reuse: bool = False) -> RunDir:
        """A run directory made for a job that will run `kind` there (dlscale slurm writes its script and SLURM its
        log into it before the job's command claims it): refused as a claim would be (`reuse`: a run of `kind` may
        go on there, as a training run resumes), else created and marked."""
        run = cls(path)
        there = occupant(path)
        if there is not None and not (there.kind == kind and (there.prepared or reuse)):
            raise there.refusal(path, "--name")
        files.check_output_dir(path, flag, "the run directory")
        if there is None:
            files.write_json(path / MARKER, _marker(kind, command, None, prepared=True))
        return run

    def release(self) -> None:
        """Let the lock go. A directory this claim created that holds nothing but its marker and lock (the run was
        refused before it wrote anything) is removed, with the folders created for it."""
        if self._lock is None:
            return
        self._lock.release()
        self._lock = None
        made, self._made = self._made, []
        if not made or occupant_names(self.path) != {MARKER, *LOCKS}:
            return
        for name in (MARKER, *LOCKS):
            (self.path / name).unlink(missing_ok=True)
        for folder in made:
            try:
                folder.rmdir()
            except OSError:  # not empty: something else was put there meanwhile
                return

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


def occupant_names(path: Path) -> set[str]:
    """The names in a directory (none where there is no directory)."""
    try:
        return set(os.listdir(path))
    except OSError:
        return set()


def default_run_name(kind: str, *parts: object) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return "-".join([kind, *(str(p) for p in parts if p not in (None, "")), stamp])
