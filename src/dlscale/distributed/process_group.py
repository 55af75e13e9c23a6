"""Process-group set-up on top of DistEnv: device choice, init with a timeout, teardown."""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import socket
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from dlscale.distributed.env import DistEnv
from dlscale.errors import DeviceError, one_line, shown

DEFAULT_TIMEOUT_S = 600.0
"""Process-group timeout: a collective that a peer never joins fails after this many seconds.
torch's own default is 30 minutes (docs/references.md#pg-timeout)."""


def select_device(env: DistEnv, kind: str = "auto") -> torch.device:
    """`auto`: this rank's GPU when CUDA is visible, else the CPU.

    A rank sees either all GPUs of its node (torchrun; srun with --gpus-per-node) and takes the
    one of its local rank, or exactly one (srun --gpus-per-task=1, or a CUDA_VISIBLE_DEVICES of its
    own) and takes that one, whatever its local rank.
    """
    if kind not in ("auto", "cpu", "cuda"):
        raise DeviceError(f"--device {kind!r} is not one of auto, cpu, cuda")
    if kind == "cpu" or (kind == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DeviceError("--device cuda was asked but no CUDA device is visible; use --device cpu")
    count = torch.cuda.device_count()
    if count == 1:
        return torch.device("cuda", 0)
    if env.local_world_size > count:
        raise DeviceError(
            f"{env.local_world_size} processes on this node but only {count} GPU(s); "
            f"start at most {count} per node (--nproc-per-node {count})"
        )
    return torch.device("cuda", env.local_rank)


def init_process_group(env: DistEnv, device: torch.device, timeout_s: float = DEFAULT_TIMEOUT_S, *,
                       one_rank_group: bool = False) -> None:
    """Join the job's process group (NCCL on GPUs, gloo on CPUs); nothing for one process, unless
    `one_rank_group` asks for a group of that one process (what DDP needs to wrap a single rank).

    Under torchrun the workers reuse the agent's TCPStore. On the pinned torch a restarted
    attempt then reads keys left by the failed one and fails to connect or hangs
    (docs/references.md#torchrun-store-restart-bug, pytorch#135712), so each attempt gets its own key prefix.
    A one-rank group needs no rendezvous: its store is an in-process HashStore (no port, no file), with a
    launcher or without.
    """
    if env.launcher == "torchrun":
        exit_with_parent()
    if dist.is_initialized() or not (env.is_distributed or one_rank_group):
        return
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=timeout_s)
    if not env.is_distributed:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
        return
    _check_host(env.master_addr, env.launcher)
    try:
        if env.agent_store:
            store = attempt_store(env, timeout)
            dist.init_process_group(backend, store=store, rank=env.rank, world_size=env.world_size, timeout=timeout)
            return
        dist.init_process_group(backend, init_method=f"tcp://{_bracket(env.master_addr)}:{env.master_port}",
                                rank=env.rank, world_size=env.world_size, timeout=timeout)
    except dist.DistError as error:  # the store's connection or its wait for the other ranks
        raise DeviceError(f"rank {env.rank} of {env.world_size} could not join the job at {env.master_addr}:"
                          f"{env.master_port} within {timeout_s:g} s ({one_line(error, 200)}); start every rank "
                          "with the same MASTER_ADDR and MASTER_PORT, or raise --pg-timeout") from None


def _check_host(host: str | None, launcher: str) -> None:
    """The rendezvous host resolves: one line now, not a store's timeout or traceback later. The line names what
    the user set: torchrun's flags under torchrun (its agent sets MASTER_ADDR from --rdzv-endpoint or
    --master-addr), else MASTER_ADDR."""
    if host is None:
        raise DeviceError("no rendezvous host: set MASTER_ADDR")
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError) as error:
        if launcher == "torchrun":
            raise DeviceError(f"torchrun's rendezvous host {shown(host)} (its MASTER_ADDR) does not resolve "
                              f"({one_line(error, 120)}); give torchrun's --rdzv-endpoint HOST:PORT (or --master-addr) "
                              "a host name or address every node reaches") from None
        raise DeviceError(f"MASTER_ADDR {shown(host)} does not resolve ({one_line(error, 120)}); "
                          "export the host name or address of rank 0's node") from None


def attempt_store(env: DistEnv, timeout: timedelta) -> dist.Store:
    """A client of torchrun's agent store whose keys are private to this restart attempt.

    The agent's TCPStore outlives failed attempts; without a prefix, a restarted worker can read
    a peer's address key written by the previous attempt before the peer overwrites it, and
    connect to a dead process (seen here: 1 hang in 4 plain restarts; the canary test checks
    that torch still shares the keys).
    """
    store = dist.TCPStore(env.master_addr, env.master_port, env.world_size, is_master=False, timeout=timeout)
    return dist.PrefixStore(f"dlscale/attempt_{env.restart_count}", store)


def shutdown() -> None:
    """Leave the process group. Objects that hold it (a DDP model, subgroups) must be gone first:
    freed only at interpreter exit, after the group's destruction, they can abort the process
    ("terminate called without an active exception")."""
    if dist.is_initialized():
        gc.collect()  # reference cycles that still hold the group
        dist.destroy_process_group()


def _bracket(host: str | None) -> str:
    if host is None:
        raise DeviceError("no rendezvous host: set MASTER_ADDR")
    return f"[{host}]" if ":" in host else host


PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal the kernel sends this process when its parent thread dies."""


def exit_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send `sig` to this process when its parent (torchrun's agent) dies.

    An agent killed by a signal it does not handle (SIGUSR1 under plain torchrun, SIGKILL) would
    otherwise leave its workers training as orphans. SIGTERM makes a training worker checkpoint at
    the next step boundary and stop (train/signals.py). Linux only; elsewhere nothing happens.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the request: nobody will send the signal
        os.kill(os.getpid(), sig)
