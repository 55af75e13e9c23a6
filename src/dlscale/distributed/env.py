"""Who am I in the job: rank, world size and node, read from whichever launcher started us.

`DistEnv.from_env()` is the only reader of launcher variables in dlscale. Precedence is fixed
(docs/references.md#launcher-precedence): torchrun's variables first, because workers that torchrun starts
inside one srun task inherit SLURM_PROCID=0 and SLURM_NTASKS=1 and would otherwise all think
they are rank 0 of 1; then Open MPI, MVAPICH and PMI (mpirun, MPICH, Intel MPI), for the same
reason: ranks that mpirun starts inside an allocation inherit the batch step's SLURM_PROCID=0
(seen on a one-node cluster: both ranks took rank 0); then SLURM (srun with one task per
device, where PMI's variables, if set, agree with SLURM's); then a single process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from dlscale.errors import ConfigError

DETECTED_LAUNCHERS = ("torchrun", "env", "slurm", "openmpi", "mvapich", "pmi", "single")
"""The launchers DistEnv.from_env recognises by the variables they set ("env": RANK and WORLD_SIZE set by
hand; "single": none, one process): what DistEnv.launcher names."""


@dataclass(frozen=True, kw_only=True)
class DistEnv:
    rank: int = 0
    """Global rank of this process, 0 .. world_size-1."""
    world_size: int = 1
    """Number of processes in the job."""
    local_rank: int = 0
    """Rank of this process on its node; selects the GPU."""
    local_world_size: int = 1
    """Processes on this node."""
    node_rank: int = 0
    """Index of this node, 0 .. num_nodes-1."""
    num_nodes: int = 1
    """Nodes in the job."""
    master_addr: str | None = None
    """Host of the rendezvous store (rank 0's node); None for a single process."""
    master_port: int | None = None
    """Port of the rendezvous store."""
    launcher: str = "single"
    """Which launcher's variables were read: one of DETECTED_LAUNCHERS."""
    restart_count: int = 0
    """torchrun's restart attempt. Only names the store prefix; resuming never depends on it."""
    agent_store: bool = False
    """True when torchrun's agent hosts the TCPStore (TORCHELASTIC_USE_AGENT_STORE)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DistEnv:
        env = os.environ if environ is None else environ
        for reader in (_torchrun, _openmpi, _mvapich, _pmi, _slurm):
            found = reader(env)
            if found is not None:
                found._check()
                return found
        return cls()

    def _check(self) -> None:
        if self.world_size < 1:
            raise ConfigError(f"world size {self.world_size} from {self.launcher} must be >= 1")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"rank {self.rank} from {self.launcher} is not in 0..{self.world_size - 1}; "
                "check the launcher's rank and size variables"
            )
        if not 0 <= self.local_rank < self.local_world_size:
            raise ConfigError(
                f"local rank {self.local_rank} from {self.launcher} is not below the "
                f"local world size {self.local_world_size}"
            )


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None or value == "":
        if default is None:
            raise ConfigError(f"environment variable {name} is missing")
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer") from None


def _torchrun(env: Mapping[str, str]) -> DistEnv | None:
    if not all(k in env for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return None
    world = _int(env, "WORLD_SIZE")
    local_world = _int(env, "LOCAL_WORLD_SIZE", world)
    rank = _int(env, "RANK")
    return DistEnv(
        rank=rank,
        world_size=world,
        local_rank=_int(env, "LOCAL_RANK"),
        local_world_size=local_world,
        node_rank=_int(env, "GROUP_RANK", rank // max(local_world, 1)),
        num_nodes=_int(env, "GROUP_WORLD_SIZE", max(world // max(local_world, 1), 1)),
        master_addr=env.get("MASTER_ADDR") or ("127.0.0.1" if world == 1 else None),
        master_port=_int(env, "MASTER_PORT", 29500),
        launcher="torchrun" if "TORCHELASTIC_RUN_ID" in env else "env",
        restart_count=_int(env, "TORCHELASTIC_RESTART_COUNT", 0),
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
    )


def _slurm(env: Mapping[str, str]) -> DistEnv | None:
    if "SLURM_PROCID" not in env or not ("SLURM_NTASKS" in env or "SLURM_NPROCS" in env):
        return None
    world = _int(env, "SLURM_NTASKS") if "SLURM_NTASKS" in env else _int(env, "SLURM_NPROCS")
    num_nodes = _int(env, "SLURM_STEP_NUM_NODES", _int(env, "SLURM_JOB_NUM_NODES", _int(env, "SLURM_NNODES", 1)))
    tasks_per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    node_rank = _int(env, "SLURM_NODEID", 0)
    local_world = _tasks_on_node(tasks_per_node, node_rank) if tasks_per_node else max(world // num_nodes, 1)
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    job_id = _int(env, "SLURM_JOB_ID", 0)
    return DistEnv(
        rank=_int(env, "SLURM_PROCID"),
        world_size=world,
        local_rank=_int(env, "SLURM_LOCALID", 0),
        local_world_size=local_world,
        node_rank=node_rank,
        num_nodes=num_nodes,
        master_addr=_master_addr(env, nodelist, num_nodes, "slurm"),
        # A port derived from the job id, so two jobs sharing a node do not collide.
        master_port=_int(env, "MASTER_PORT", 20000 + job_id % 20000),
        launcher="slurm",
    )


def _mpi(env, launcher, rank_var, size_var, local_rank_var, local_size_var, node_rank_var=None):
    if rank_var not in env or size_var not in env:
        return None
    world = _int(env, size_var)
    local_world = _int(env, local_size_var, world) if local_size_var else world
    rank = _int(env, rank_var)
    num_nodes = max(world // max(local_world, 1), 1)
    node_rank = _int(env, node_rank_var, rank // max(local_world, 1)) if node_rank_var else rank // max(local_world, 1)
    return DistEnv(
        rank=rank,
        world_size=world,
        local_rank=_int(env, local_rank_var, 0) if local_rank_var else 0,
        local_world_size=local_world,
        node_rank=node_rank,
        num_nodes=num_nodes,
        master_addr=_master_addr(env, env.get("SLURM_JOB_NODELIST"), num_nodes, launcher),
        master_port=_int(env, "MASTER_PORT", 29500),
        launcher=launcher,
    )


def _openmpi(env):
    return _mpi(env, "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_NODE_RANK")


def _mvapich(env):
    return _mpi(env, "mvapich", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
                "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE")


def _pmi(env):
    # MPICH and Intel MPI (Hydra): PMI_RANK/PMI_SIZE, local rank in MPI_LOCALRANKID.
    return _mpi(env, "pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")


def _master_addr(env: Mapping[str, str], nodelist: str | None, num_nodes: int, launcher: str) -> str:
    """MASTER_ADDR if set, else the first host of the node list, else loopback on one node.

    A rendezvous host that cannot be resolved on several nodes is an error, never a silent
    fallback to localhost: that makes every node rendezvous with itself and hang
    (docs/references.md#slurm-hostlist, pytorch#76069).
    """
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    if nodelist:
        return expand_hostlist(nodelist)[0]
    if num_nodes <= 1:
        return "127.0.0.1"
    raise ConfigError(
        f"{launcher} started {num_nodes} nodes but the rendezvous host is unknown: "
        "export MASTER_ADDR=<first host> (and MASTER_PORT) in the job script"
    )


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a SLURM host list: 'gpu[07-09],cpu1' -> ['gpu07', 'gpu08', 'gpu09', 'cpu1'].

    Ranges keep their zero padding; several bracket groups in one name multiply out
    ('n[1-2]-ib[0-1]'). The same result as `scontrol show hostnames`, without needing scontrol.
    """
    hosts: list[str] = []
    for item in _split_top_level(hostlist.strip()):
        if item:
            hosts.extend(_expand_one(item))
    if not hosts:
        raise ConfigError(f"host list {hostlist!r} names no host")
    return hosts


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise ConfigError(f"host list {text!r} has unbalanced brackets")
    parts.append("".join(current))
    return parts


def _expand_one(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if not match:
        return [item]
    prefix, suffix = item[: match.start()], item[match.end():]
    names = []
    for part in match.group(1).split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            width = len(low)
            names += [f"{prefix}{n:0{width}d}" for n in range(int(low), int(high) + 1)]
        else:
            names.append(f"{prefix}{part}")
    return [host for name in names for host in _expand_one(name + suffix)]


def _tasks_on_node(tasks_per_node: str, node_rank: int) -> int:
    """Parse SLURM_TASKS_PER_NODE ('2(x3),1') and return the count for node `node_rank`."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise ConfigError(f"cannot parse SLURM_TASKS_PER_NODE={tasks_per_node!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts[min(node_rank, len(counts) - 1)]
