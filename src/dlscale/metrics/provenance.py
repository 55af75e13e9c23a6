"""Where a result came from, without torch: the dlscale checkout, the command, the host and its
software. env.json of every run holds these (metrics/run.py adds torch, CUDA and device facts);
`dlscale predict` records these alone (it never imports torch); `dlscale explain --against`
compares two runs' records.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import dlscale

ENV_PREFIXES = ("OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "BLIS_", "NUMEXPR_", "VECLIB_", "TORCH_",
                "PYTORCH_", "NCCL_", "CUDA_", "CUDNN_", "CUBLAS_", "NVIDIA_", "GLOO_", "TORCHELASTIC_",
                "SLURM_CPUS", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS", "LD_PRELOAD", "MALLOC_", "PYTHONHASHSEED",
                "DLSCALE_")
"""Environment variables a run records: threads, affinity, allocators and the libraries' settings (OMP,
MKL, NCCL, CUDA, torch..., dlscale's own: DLSCALE_LOADAVG_FILE). Only these prefixes: an environment also holds
credentials."""


def _git(*args: str) -> str | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=5, check=True)
        return out.stdout
    except (OSError, subprocess.SubprocessError):
        return None


def git_sha() -> str | None:
    """The sha of the dlscale checkout, if dlscale runs from one."""
    out = _git("rev-parse", "HEAD")
    return out.strip() or None if out is not None else None


def git_dirty() -> bool | None:
    """Whether the checkout has local changes to tracked files (None outside a checkout)."""
    out = _git("status", "--porcelain", "--untracked-files=no")
    return None if out is None else bool(out.strip())


def command_line() -> dict:
    """The exact command of this process, and its parent's (torchrun's, srun's, mpirun's line)."""
    parent = _cmdline(os.getppid())
    return {"command": shlex.join(_command_words()), "argv": list(sys.argv),
            "parent_command": shlex.join(parent) if parent else None}


def _command_words() -> list[str]:
    """sys.argv as it was typed: `python -m dlscale ...` (Python puts __main__.py's path in argv[0]), a
    script under its interpreter, or a console script (bin/dlscale) by its own path."""
    first = sys.argv[0] if sys.argv else ""
    if first.endswith(os.path.join("dlscale", "__main__.py")):
        return [sys.executable, "-m", "dlscale", *sys.argv[1:]]
    if first.endswith(".py") or first in ("", "-c"):
        return [sys.executable, *sys.argv]
    return list(sys.argv)


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part] or None


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo), else what the platform module says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model", "Processor"):
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def thread_env(environ=None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {key: environ[key] for key in sorted(environ) if key.startswith(ENV_PREFIXES)}


def packages() -> dict[str, str]:
    """Every installed distribution and its version."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[name] = dist.version
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def loaded_libraries(pattern: str, maps: str = "/proc/self/maps") -> list[str]:
    """Paths of the shared libraries this process has mapped whose file name matches pattern."""
    try:
        lines = Path(maps).read_text().splitlines()
    except OSError:
        return []
    paths = {line.split(None, 5)[5] for line in lines if len(line.split(None, 5)) == 6}
    return sorted(path for path in paths if re.search(pattern, os.path.basename(path)))


def nccl_version_text(code: int) -> str:
    """ncclGetVersion's code as major.minor.patch (NCCL_VERSION_CODE: major*10000 + minor*100 + patch
    since 2.9, major*1000 + minor*100 + patch before)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def loaded_nccl(maps: str = "/proc/self/maps") -> dict | None:
    """The NCCL library this process has loaded and the version it reports (ncclGetVersion), which
    is what runs: torch.cuda.nccl.version() is the version torch was built against, and a pip
    package's version says nothing about what LD_LIBRARY_PATH or LD_PRELOAD put first. None when no
    NCCL is loaded (CPU builds, before CUDA initialises)."""
    for path in loaded_libraries(r"^libnccl.*\.so", maps):
        try:
            library = ctypes.CDLL(path)  # already loaded: the same handle, nothing new runs
            code = ctypes.c_int()
            if library.ncclGetVersion(ctypes.byref(code)) == 0:
                return {"version": nccl_version_text(code.value), "library": path}
        except (OSError, AttributeError):
            continue
    return None


def host_info() -> dict:
    """dlscale's version and git state, the command, Python, the host, its CPU, the thread and library
    environment variables, and the installed packages."""
    return {
        "dlscale": dlscale.__version__,
        "git_sha": git_sha(),
        "git_dirty": git_dirty(),
        **command_line(),
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "env_vars": thread_env(),
        "packages": packages(),
    }
