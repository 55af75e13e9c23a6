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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from dlscale.errors import ConfigError, shown

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


MAX_HOSTS = 100_000
"""The most hosts a node list may name: more than the largest machines have (Frontier: 9,408 nodes); a list that
expands to more is not one a launcher wrote (`n[1-999999999]` would take the process's memory)."""
MAX_DIGITS = 18
"""The most digits of a number a launcher's variable holds (a rank, a size, a port, a job id)."""


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None or value == "":
        if default is None:
            raise ConfigError(f"environment variable {name} is missing")
        return default
    text = value.strip()
    if not (text.isascii() and text.lstrip("-").isdigit() and len(text) <= MAX_DIGITS):
        raise ConfigError(f"environment variable {name}={shown(value)} is not a whole number the launcher sets")
    return int(text)


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    """A TCP port from the environment: 1 to 65535 (a rendezvous must connect to it)."""
    port = _int(env, name, default)
    if not 1 <= port <= 65535:
        raise ConfigError(f"environment variable {name}={port} is not a TCP port: give 1 to 65535")
    return port


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
        master_port=_port(env, "MASTER_PORT", 29500),
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
        master_port=_port(env, "MASTER_PORT", 20000 + job_id % 20000),
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
        master_port=_port(env, "MASTER_PORT", 29500),
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
        return first_host(nodelist)
    if num_nodes <= 1:
        return "127.0.0.1"
    raise ConfigError(
        f"{launcher} started {num_nodes} nodes but the rendezvous host is unknown: "
        "export MASTER_ADDR=<first host> (and MASTER_PORT) in the job script"
    )


def expand_hostlist(hostlist: str, limit: int = MAX_HOSTS) -> list[str]:
    """Expand a SLURM host list: 'gpu[07-09],cpu1' -> ['gpu07', 'gpu08', 'gpu09', 'cpu1'].

    Ranges keep their zero padding; several bracket groups in one name multiply out
    ('n[1-2]-ib[0-1]'). The same result as `scontrol show hostnames`, without needing scontrol.
    A list of more than `limit` hosts, or one that is not a host list, is one line.
    """
    items = [_parse_item(item, hostlist) for item in _split_top_level(hostlist.strip()) if item]
    total = sum(_count(item) for item in items)
    if total > limit:
        raise ConfigError(f"host list {shown(hostlist)} names {total:,} hosts, more than {limit:,}: not a list a "
                          "launcher writes")
    hosts = [host for item in items for host in _names(item)]
    if not hosts:
        raise ConfigError(f"host list {shown(hostlist)} names no host")
    return hosts


def first_host(hostlist: str) -> str:
    """The first host of a SLURM host list (the rendezvous host), however many it names."""
    items = [_parse_item(item, hostlist) for item in _split_top_level(hostlist.strip()) if item]
    for item in items:
        for host in _names(item):
            return host
    raise ConfigError(f"host list {shown(hostlist)} names no host")


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
        raise ConfigError(f"host list {shown(text)} has unbalanced brackets")
    parts.append("".join(current))
    return parts


Item = list  # [text, [(low, high, width), ...], text, [...], ..., text]: names between bracket groups


def _parse_item(item: str, hostlist: str) -> Item:
    """'n[1-2]-ib[0-1]' -> ['n', [(1, 2, 1)], '-ib', [(0, 1, 1)], '']."""
    parts: Item = []
    rest = item
    while (match := re.search(r"\[([^\]]*)\]", rest)) is not None:
        ranges = []
        for part in match.group(1).split(","):
            found = re.fullmatch(r"([0-9]{1,9})(?:-([0-9]{1,9}))?", part, re.ASCII)
            if found is None or int(found.group(2) or found.group(1)) < int(found.group(1)):
                raise ConfigError(f"host list {shown(hostlist)}: {shown(part)} is not a number or a range LOW-HIGH")
            ranges.append((int(found.group(1)), int(found.group(2) or found.group(1)), len(found.group(1))))
        parts += [rest[: match.start()], ranges]
        rest = rest[match.end():]
    return [*parts, rest]


def _count(item: Item) -> int:
    count = 1
    for ranges in item[1::2]:
        count *= sum(high - low + 1 for low, high, _ in ranges)
    return count


def _names(item: Item) -> Iterator[str]:
    """The host names of one item, in order, made one at a time."""
    if len(item) == 1:
        yield item[0]
        return
    prefix, ranges, rest = item[0], item[1], item[2:]
    for low, high, width in ranges:
        for number in range(low, high + 1):
            for tail in _names(rest):
                yield f"{prefix}{number:0{width}d}{tail}"


def _tasks_on_node(tasks_per_node: str, node_rank: int) -> int:
    """Parse SLURM_TASKS_PER_NODE ('2(x3),1') and return the count for node `node_rank` (the last node's
    for a rank beyond the list), without writing out the repeats."""
    node, count = 0, 0
    for part in tasks_per_node.split(","):
        match = re.fullmatch(r"([0-9]{1,9})(?:\(x([0-9]{1,9})\))?", part.strip(), re.ASCII)
        if not match:
            raise ConfigError(f"cannot parse SLURM_TASKS_PER_NODE={shown(tasks_per_node)}")
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        if node_rank < node + repeat:
            return count
        node += repeat
    return count
