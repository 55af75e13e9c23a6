"""Where a result came from, without torch: the dlscale checkout's git sha and the host.

metrics/run.py adds torch, CUDA and device facts for runs that use them; `dlscale predict`
records these alone (it never imports torch).
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from pathlib import Path

import dlscale


def git_sha() -> str | None:
    """The sha of the dlscale checkout, if dlscale runs from one."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def host_info() -> dict:
    """dlscale's version and git sha, Python, host name, platform and CPU count."""
    return {
        "dlscale": dlscale.__version__,
        "git_sha": git_sha(),
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }
