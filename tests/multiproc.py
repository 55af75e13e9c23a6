"""Run a function on several gloo ranks in spawned processes, for distributed tests on the CPU.

The pattern of PyTorch's own MultiProcessTestCase: spawn start method, a FileStore in a temporary
directory (no TCP port, so no port collisions), a short process-group timeout so a mismatched
collective fails instead of hanging, and results returned as JSON files, never as tensors
(a tensor sent through a queue dies with the child that made it).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any


def _child(fn, rank, world_size, args, workdir, pg_timeout_s, env):
    out = Path(workdir) / f"rank{rank}.json"
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        os.environ.update(env)
        os.environ.update(
            RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=env.get("LOCAL_WORLD_SIZE", str(world_size)),
        )
        dist.init_process_group(
            "gloo", init_method=f"file://{workdir}/store", rank=rank, world_size=world_size,
            timeout=timedelta(seconds=pg_timeout_s),
        )
        try:
            result = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        out.write_text(json.dumps({"ok": True, "result": result}))
    except BaseException:  # noqa: BLE001 - the parent reports it
        out.write_text(json.dumps({"ok": False, "error": traceback.format_exc()}))
        raise SystemExit(1) from None


SPAWN_S_PER_RANK = 30.0
"""A spawned rank's start (an interpreter, torch's import: about 2 s of one core) on CI's two cores at a load
of 10-12, with a margin: the hang guard grows by this much per rank, so that 8 ranks are not held to the
deadline of 2."""


def hang_guard_s(world_size: int, work_s: float = 120.0) -> float:
    """How long world_size spawned ranks may take before they count as hung: work_s for what they do, plus
    SPAWN_S_PER_RANK for each rank's start. Generous on purpose: a hang guard, never a speed test."""
    return work_s + SPAWN_S_PER_RANK * world_size


def run_ranks(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout_s: float | None = None,
    pg_timeout_s: float = 120.0,
    env: dict[str, str] | None = None,
) -> list[Any]:
    """Run fn(rank, world_size, *args) on world_size gloo ranks; return each rank's result.

    fn must be a module-level function and return JSON-serialisable data. A rank that raises,
    exits non-zero or outlives timeout_s (by default hang_guard_s(world_size)) fails the calling test
    with that rank's traceback. pg_timeout_s bounds each collective's wait for the other ranks (a
    mismatched collective fails after it); ranks that start seconds apart on a busy machine wait too.
    """
    timeout_s = hang_guard_s(world_size) if timeout_s is None else timeout_s
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="dlscale-ranks-") as workdir:
        procs = [
            ctx.Process(target=_child, args=(fn, r, world_size, args, workdir, pg_timeout_s, env or {}))
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        results, errors = [], []
        for rank in range(world_size):
            path = Path(workdir) / f"rank{rank}.json"
            record = json.loads(path.read_text()) if path.exists() else None
            if record and record["ok"]:
                results.append(record["result"])
            else:
                errors.append(f"rank {rank}: " + (record["error"] if record else "no result"))
        if hung:
            raise AssertionError(f"ranks {hung} still running after {timeout_s} s (hang)\n" + "\n".join(errors))
        if errors:
            raise AssertionError("\n".join(errors))
        return results


def run_torchrun_agents(program: list[str], log_dir: Path, *, nnodes: int = 2, nproc_per_node: int = 2,
                        timeout_s: float | None = None) -> tuple[list[int] | None, str]:
    """Start nnodes torchrun agents on this host that form one job, as on nnodes machines.

    They meet at a c10d rendezvous on a free loopback port (docs/references.md#cpu-ddp-testing). program is
    what torchrun runs (a script and its arguments). Returns the agents' exit codes (None if they
    outlived timeout_s, by default hang_guard_s of all their workers; each agent is then killed with the
    workers it started) and their output.
    """
    timeout_s = hang_guard_s(nnodes * nproc_per_node) if timeout_s is None else timeout_s
    import os
    import signal
    import subprocess
    import sys
    import uuid

    from dlscale.launch.local import free_port

    port = free_port()
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
               "--nproc-per-node", str(nproc_per_node), "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", uuid.uuid4().hex,
               "--local-addr", "127.0.0.1", "--max-restarts", "0", *program]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    logs = [Path(log_dir) / f"agent{i}.log" for i in range(nnodes)]
    # Each agent in a session of its own, so a hung one is stopped with the workers it started.
    agents = [subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                               start_new_session=True) for log in logs]
    try:
        codes = [agent.wait(timeout=timeout_s) for agent in agents]
    except subprocess.TimeoutExpired:
        codes = None
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
    return codes, "\n".join(log.read_text() for log in logs)
