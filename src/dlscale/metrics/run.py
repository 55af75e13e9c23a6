"""The run directory: what a run did, on what, and what it measured. Written by rank 0 only.

    runs/<name>/config.json    resolved configuration
    runs/<name>/env.json       versions, devices, world size, git sha
    runs/<name>/metrics.jsonl  one record per log step
    runs/<name>/summary.json   final figures

`dlscale report` reads these files and nothing else.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import socket
import sys
import time
from pathlib import Path
from typing import Any

import filelock
import torch

from dlscale.distributed.env import DistEnv
from dlscale.errors import ConfigError, StorageError
from dlscale.metrics.provenance import host_info


class RunInUse(ConfigError):
    """Another process holds the run directory."""


class RunDir:
    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, root: str | os.PathLike, name: str) -> RunDir:
        path = Path(root) / name
        path.mkdir(parents=True, exist_ok=True)
        return cls(path)

    def write_json(self, filename: str, data: Any) -> Path:
        """Write atomically: a reader never sees half a file."""
        target = self.path / filename
        tmp = target.with_name(f".{target.name}.tmp.{os.getpid()}")
        tmp.write_text(json.dumps(to_jsonable(data), indent=2, sort_keys=False) + "\n")
        os.replace(tmp, target)
        return target

    def claim(self) -> filelock.BaseFileLock:
        """Create the directory and hold its lock until released: one run per run directory.

        The lock is the operating system's (fcntl), so it dies with its holder and a crashed run
        never blocks the next. StorageError when the directory cannot be created; RunInUse, naming
        the holder, when another run holds it.
        """
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StorageError(f"cannot create the run directory {self.path} ({error.strerror or error}); "
                               "choose another --output-dir") from None
        lock = filelock.FileLock(self.path / ".lock", timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            holder = self.path / ".lock.holder"
            who = holder.read_text().strip() if holder.is_file() else "another process"
            raise RunInUse(f"{self.path} is in use by {who}; wait for it to end or stop it, or choose another "
                           "--name") from None
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        command = " ".join(["dlscale", *sys.argv[1:]])[:200]
        (self.path / ".lock.holder").write_text(f"`{command}` (pid {os.getpid()} on {socket.gethostname()}, "
                                                f"started {started})\n")
        return lock

    def write_setup(self, config: dict, env: DistEnv, device: torch.device) -> None:
        """config.json (what the run was asked to do, `kind` first) and env.json (what it ran on):
        every kind of run writes both with this call."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.write_json("config.json", config)
        self.write_json("env.json", environment_info(env.world_size, device, env.launcher))

    def append_metrics(self, record: dict) -> None:
        with open(self.path / "metrics.jsonl", "a") as f:
            f.write(json.dumps(to_jsonable(record)) + "\n")

    def read_json(self, filename: str) -> Any:
        return json.loads((self.path / filename).read_text())


def default_run_name(kind: str, *parts: object) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return "-".join([kind, *(str(p) for p in parts if p not in (None, "")), stamp])


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


def environment_info(world_size: int, device: torch.device, launcher: str = "single") -> dict:
    """Versions and hardware for env.json: enough to tell two runs' set-ups apart."""
    host = host_info()
    info: dict[str, Any] = {
        "dlscale": host["dlscale"],
        "git_sha": host["git_sha"],
        "python": host["python"],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl": None,
        "hostname": host["hostname"],
        "platform": host["platform"],
        "cpu_count": host["cpu_count"],
        "torch_threads": torch.get_num_threads(),
        "world_size": world_size,
        "launcher": launcher,
        "device_type": device.type,
        "device_name": device_name(device),
    }
    if device.type == "cuda":
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        info["device_count"] = torch.cuda.device_count()
        info["device_capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
    return info


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"
