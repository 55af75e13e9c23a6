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
import time
from pathlib import Path
from typing import Any

import torch

from dlscale.distributed.env import DistEnv
from dlscale.metrics.provenance import host_info


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
