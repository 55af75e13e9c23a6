"""Processes on this host: every torchrun command line dlscale builds, and running and stopping
process trees.

`torchrun_command` is the one builder of a torchrun line: the sweep's points, the emulated
nodes of a multi-node sweep on one host, and the Nsight Systems rerun that `dlscale profile`
prints. `run_commands` starts several commands together, each in its own session with its own
log, and stops the whole tree of any that outlives its time (torchrun forwards SIGTERM to its
workers; what is left after a grace period gets SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.metrics.hardware import host_memory_bytes
from dlscale.rundir import storing

TERM_GRACE_S = 20.0
"""After SIGTERM, how long a command that timed out may take to stop before it is killed."""
RANK_MIN_BYTES = 256 << 20
"""The least memory one rank's process holds: a Python process with torch and dlscale's training imported is
resident at about a quarter of a GiB before any model, batch or loader worker."""


def check_local_ranks(ranks: int, flag: str, memory_bytes: int | None = None) -> None:
    """Refuse, before any starts, more ranks on this host than its memory could hold even empty (RANK_MIN_BYTES
    each): 1,000 ranks on a small host would start, then take its memory and be killed one by one."""
    memory_bytes = host_memory_bytes() if memory_bytes is None else memory_bytes
    if memory_bytes is None:
        return
    most = max(memory_bytes // RANK_MIN_BYTES, 1)
    if ranks > most:
        raise ConfigError(f"{flag} starts {ranks:,} ranks on this host; each needs at least "
                          f"{RANK_MIN_BYTES >> 20} MiB (a process with torch loaded, before any model or data), "
                          f"{ranks * RANK_MIN_BYTES / 2**30:,.1f} GiB in all, more than its "
                          f"{memory_bytes / 2**30:.1f} GiB: give at most {most:,}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_command(program: Sequence[str], *, nproc_per_node: int, nnodes: int = 1,
                     rendezvous: str | None = None, run_id: str | None = None, local_addr: str | None = None,
                     python: str = sys.executable) -> list[str]:
    """`python -m torch.distributed.run ... program`: --standalone on one node; on several, a c10d
    rendezvous at `rendezvous` (HOST:PORT), with torchrun's --rdzv-id, and --local-addr and no
    restarts where agents share one host."""
    if nnodes == 1:
        nodes = ["--standalone"]
    else:
        nodes = ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rendezvous or "HOST:PORT"]
        nodes += ["--rdzv-id", run_id] if run_id else []
        nodes += ["--local-addr", local_addr, "--max-restarts", "0"] if local_addr else []
    return [python, "-m", "torch.distributed.run", *nodes, "--nproc_per_node", str(nproc_per_node), *program]


def torchrun_commands(nproc_per_node: int, nnodes: int, program: list[str]) -> list[list[str]]:
    """torchrun on this host: one command for one node; for several, one agent per emulated node,
    meeting at a c10d rendezvous on a free local port."""
    if nnodes == 1:
        return [torchrun_command(program, nproc_per_node=nproc_per_node)]
    agent = torchrun_command(program, nproc_per_node=nproc_per_node, nnodes=nnodes,
                             rendezvous=f"127.0.0.1:{free_port()}", run_id=uuid.uuid4().hex[:12],
                             local_addr="127.0.0.1")
    return [list(agent) for _ in range(nnodes)]


def nsys_command(argv: Sequence[str], *, out_dir: Path, world_size: int = 1, local_world_size: int = 1,
                 num_nodes: int = 1, rendezvous: str | None = None, python: str = sys.executable) -> str:
    """The nsys command line that reruns `dlscale <argv>` and captures only the PROFILE range.

    The rerun takes --trace-steps 0: torch.profiler and nsys both use CUPTI and must not run
    together. NSYS_NVTX_PROFILER_REGISTER_ONLY=0 lets nsys see torch's unregistered NVTX strings.
    """
    args = [*without_option(list(argv), "--trace-steps"), "--trace-steps", "0"]
    program = ["-m", "dlscale", *args]
    launch = [python, *program]
    if world_size > 1:
        launch = torchrun_command(program, nproc_per_node=local_world_size, nnodes=num_nodes,
                                  rendezvous=rendezvous, python=python)
    nsys = ["nsys", "profile", "-o", str(Path(out_dir) / "nsys" / "profile"), "--force-overwrite=true",
            "--trace=cuda,nvtx", "--capture-range=nvtx", "--nvtx-capture=PROFILE"]
    return "NSYS_NVTX_PROFILER_REGISTER_ONLY=0 " + shlex.join([*nsys, *launch])


def without_option(argv: Sequence[str], *names: str) -> list[str]:
    """argv minus every `NAME VALUE` and `NAME=VALUE` for each of names."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in names:
            skip = True
        elif not arg.startswith(tuple(name + "=" for name in names)):
            out.append(arg)
    return out


# ------------------------------------------------------------------------ running and stopping


def run_commands(commands: list[list[str]], logs: list[Path], timeout_s: float) -> tuple[int | None, bool]:
    """Start every command at once (each its own session), wait for all; (first non-zero exit
    code or 0, timed out). A timeout stops them: SIGTERM, then SIGKILL of what is left."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = []
    try:
        for command, log in zip(commands, logs, strict=True):
            with storing(log, "--output-dir"), open(log, "wb") as out:
                procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                              start_new_session=True))
        deadline = time.monotonic() + timeout_s
        for proc in procs:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stop(procs)
        return None, True
    except BaseException:
        stop(procs)
        raise
    codes = [p.returncode for p in procs]
    return next((c for c in codes if c), 0), False


def stop(procs: list[subprocess.Popen], grace_s: float | None = None) -> None:
    """SIGTERM to every process still running (torchrun forwards it to its workers, which run in
    sessions of their own), then after the grace period SIGKILL to each and its descendants."""
    grace_s = TERM_GRACE_S if grace_s is None else grace_s
    family = {p.pid: descendants(p.pid) for p in procs if p.poll() is None}
    for pid in family:
        send_signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    for pid, children in family.items():
        for child in [pid, *children]:
            send_signal(child, signal.SIGKILL)
    for p in procs:
        p.wait()


def send_signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process, from /proc (Linux); empty where /proc cannot be read."""
    parents: dict[int, int] = {}
    entries = os.listdir("/proc") if os.path.isdir("/proc") else []
    for entry in filter(str.isdigit, entries):
        # A process may end meanwhile: then it has no children to find.
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{entry}/stat") as f:
            parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
    return parents


def children(pid: int) -> list[int]:
    """The direct children of pid (torchrun's workers, not their loader processes)."""
    return [child for child, parent in _parents().items() if parent == pid]


def descendants(pid: int) -> list[int]:
    """Every process below pid."""
    parents = _parents()
    found, frontier = [], [pid]
    while frontier:
        children = [c for c, p in parents.items() if p in frontier]
        found += children
        frontier = children
    return found
