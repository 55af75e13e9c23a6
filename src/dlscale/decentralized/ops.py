"""Neighbor averaging on torch.distributed point-to-point messages: BlueFog's ops without MPI.

Each rank sends flat byte views of its tensor with ``dist.batch_isend_irecv`` (gloo and NCCL
both run it), so any dtype travels bit-exact and only the weighting does arithmetic.
Semantics follow BlueFog's mpi_ops.py (Bluefog-Lib/bluefog@9ee376a7;
docs/references.md#bluefog-neighbor-allreduce, docs/references.md#bluefog-hierarchical):

    y_i = self_weight * x_i + sum_{j in src} src_weights[j] * dst_weight(j -> i) * x_j

with the sender j multiplying by its own dst weight before sending. Every rank must make the
same sequence of calls of these ops with tensors of one shape and dtype.

State lives in this module, one graph per process, reset when the default process group
changes: the rank topology (`set_topology`; default exponential_graph(world_size), BlueFog's
default), the machine topology (`set_machine_topology`; default exponential_graph(machines),
where BlueFog raises instead) and counters of what these ops sent (`comm_stats`).
"""

from __future__ import annotations

import hashlib
import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from dlscale.decentralized import topology

# --------------------------------------------------------------------------- state


@dataclass
class _Graph:
    matrix: torch.Tensor
    is_weighted: bool
    _default_plans: dict[int, topology.ExchangePlan] = field(default_factory=dict)

    def plan(self, node: int, self_weight, src_weights, dst_weights) -> topology.ExchangePlan:
        """A rank's exchange; the default one (no weights given) is made once per graph."""
        if self_weight is None and src_weights is None and dst_weights is None:
            if node not in self._default_plans:
                self._default_plans[node] = topology.plan_exchange(self.matrix, node, is_weighted=self.is_weighted)
            return self._default_plans[node]
        return topology.plan_exchange(self.matrix, node, is_weighted=self.is_weighted, self_weight=self_weight,
                                      src_weights=src_weights, dst_weights=dst_weights)

    def machine_plan(self, machine: int, self_weight, src_weights, dst_weights) -> topology.ExchangePlan:
        """A machine's exchange under BlueFog's hierarchical rules; the default one made once."""
        if self_weight is None and src_weights is None and dst_weights is None and machine in self._default_plans:
            return self._default_plans[machine]
        plan = topology.plan_machine_exchange(self.matrix, machine, is_weighted=self.is_weighted,
                                              self_weight=self_weight, src_machine_weights=src_weights,
                                              dst_machine_weights=dst_weights)
        if not plan.dynamic and self_weight is None:
            self._default_plans[machine] = plan
        return plan


@dataclass
class _State:
    world: weakref.ref | None = None
    """The default process group this state belongs to; a new one starts a fresh state.
    Process groups are held weakly so that destroy_process_group really frees them: one kept
    alive until interpreter exit can abort the process there (seen with gloo subgroups)."""
    graph: _Graph | None = None
    machine_graph: _Graph | None = None
    local_size: int | None = None
    """Ranks per machine set by `set_machine_topology`; None reads LOCAL_WORLD_SIZE."""
    local_groups: dict[int, weakref.ref] = field(default_factory=dict)
    """local_size -> this rank's machine subgroup, made once (new_group is collective)."""


_STATE = _State()
_STATS = {"p2p_bytes_sent": 0, "p2p_messages_sent": 0, "collective_calls": 0, "collective_payload_bytes": 0}


def _state() -> _State:
    global _STATE
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialised: call dist.init_process_group() "
                           "first (under torchrun the environment already holds rank and world size)")
    world = dist.group.WORLD
    if _STATE.world is None or _STATE.world() is not world:
        _STATE = _State(world=weakref.ref(world))
    return _STATE


def comm_stats() -> dict[str, int]:
    """What this process sent in these ops since the last reset.

    p2p_bytes_sent / p2p_messages_sent: exact payload of the neighbor messages this rank sent.
    collective_calls / collective_payload_bytes: allreduce and broadcast calls (including the
    in-machine steps of the hierarchical op) and the size of the tensors they reduced; the bytes
    on the wire depend on the backend's algorithm (a ring allreduce sends 2(n-1)/n of it).
    The small control messages of the consistency checks are not counted.
    """
    return dict(_STATS)


def reset_comm_stats() -> None:
    """Zero the counters of `comm_stats`."""
    for key in _STATS:
        _STATS[key] = 0


# --------------------------------------------------------------------------- collective checks


def _control_device() -> torch.device:
    """Where small control tensors must live: NCCL moves only CUDA memory."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _all_gather_rows(row: torch.Tensor) -> torch.Tensor:
    row = row.to(_control_device())
    gathered = [torch.empty_like(row) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, row)
    return torch.stack(gathered).cpu()


def _digest(matrix: torch.Tensor | None, *extra: object) -> torch.Tensor:
    """32 bytes naming matrix and settings; all zeros stands for 'this rank had no valid matrix'."""
    if matrix is None:
        return torch.zeros(32, dtype=torch.uint8)
    h = hashlib.sha256(repr((tuple(matrix.shape), *extra)).encode())
    h.update(matrix.contiguous().numpy().tobytes())
    return torch.frombuffer(bytearray(h.digest()), dtype=torch.uint8)


def _agree_on_graph(op: str, W, *extra: object) -> torch.Tensor:
    """Collective: convert W on every rank and raise on every rank unless all hold the same.

    A rank whose W does not even convert still joins the all_gather (with a null digest), so
    a bad call on one rank is an error everywhere instead of a hang (BlueFog issue #90).
    """
    try:
        matrix, error = topology.as_matrix(W).clone(), None  # ours: the caller may reuse W
    except (TypeError, ValueError, RuntimeError) as exc:
        matrix, error = None, exc
    digests = _all_gather_rows(_digest(matrix, *extra))
    groups: dict[bytes, list[int]] = {}
    for rank, digest in enumerate(digests):
        groups.setdefault(digest.numpy().tobytes(), []).append(rank)
    if len(groups) > 1:
        listing = " | ".join(str(ranks) for ranks in groups.values())
        raise ValueError(f"{op}: ranks passed different matrices or settings: {listing}; every rank "
                         "must pass the same ones" + (f" (this rank's: {error})" if error else "")) from error
    if error is not None:
        raise ValueError(f"{op}: {error}") from error
    return matrix


def _check_sends_match_recvs(sends: Iterable[int], recvs: Iterable[int], size: int,
                             rows: Sequence[int], unit: str) -> None:
    """Collective: every node's sends must be exactly what its peers expect to receive.

    Each rank contributes a 2 x size row (whom it sends to, whom it receives from); `rows`
    picks the rank that speaks for each node (every rank, or each machine's local rank 0).
    """
    mine = torch.zeros(2, size, dtype=torch.int32)
    mine[0, list(sends)] = 1
    mine[1, list(recvs)] = 1
    table = _all_gather_rows(mine)[list(rows)]
    send, recv = table[:, 0, :], table[:, 1, :]  # send[i, j]: i sends to j; recv[j, i]: j takes from i
    problems = [f"{unit} {i} sends to {unit} {j} but {unit} {j} does not receive from it"
                for i, j in (send > recv.T).nonzero().tolist()]
    problems += [f"{unit} {j} expects {unit} {i} but {unit} {i} does not send to it"
                 for i, j in (send < recv.T).nonzero().tolist()]
    if problems:
        raise ValueError("sends and receives do not match: " + "; ".join(problems[:8]))


# --------------------------------------------------------------------------- topology state


def set_topology(W, is_weighted: bool = False) -> None:
    """Use W (world_size x world_size, W[i, j] = weight of edge i -> j) for neighbor_allreduce.

    Collective: every rank must call it with the same matrix and flag, else every rank raises
    ValueError. is_weighted=False (BlueFog's default) uses only W's edges and averages uniformly,
    1/(in-degree + 1); is_weighted=True uses column rank of W as the receive weights.
    """
    state = _state()
    matrix = _agree_on_graph("set_topology", W, bool(is_weighted))
    size = dist.get_world_size()
    if matrix.shape[0] != size:
        raise ValueError(f"set_topology: the matrix is {matrix.shape[0]} x {matrix.shape[0]} but "
                         f"world_size={size}; make it {size} x {size}")
    if not torch.isfinite(matrix).all():
        raise ValueError("set_topology: the matrix holds inf or nan weights")
    state.graph = _Graph(matrix, bool(is_weighted))


def get_topology() -> torch.Tensor:
    """A copy of the topology in use; exponential_graph(world_size) until set_topology."""
    return _graph().matrix.clone()


def is_topology_weighted() -> bool:
    """Whether neighbor_allreduce's default weights come from the matrix (else uniform)."""
    return _graph().is_weighted


def _graph() -> _Graph:
    state = _state()
    if state.graph is None:
        state.graph = _Graph(topology.exponential_graph(dist.get_world_size()), False)
    return state.graph


# --------------------------------------------------------------------------- data movement


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise TypeError(f"neighbor averaging needs a floating-point or complex tensor, got {tensor.dtype}")
    return tensor.detach().reshape(-1).contiguous()


def _wire_device(flat: torch.Tensor) -> torch.device:
    """gloo moves only CPU memory: a CUDA tensor on a gloo group is staged through the host."""
    return torch.device("cpu") if dist.get_backend() == "gloo" else flat.device


def _exchange(flat: torch.Tensor, sends: Mapping[int, float], recvs: Iterable[int]) -> dict[int, torch.Tensor]:
    """Send flat * dst weight to every destination rank, receive a flat buffer from every source."""
    wire = _wire_device(flat)
    ops, payload = [], flat.to(wire)
    for dst, weight in sends.items():
        buffer = payload if weight == 1.0 else payload * weight
        ops.append(dist.P2POp(dist.isend, buffer.view(torch.uint8), dst))
    received = {src: torch.empty_like(payload) for src in recvs}
    ops += [dist.P2POp(dist.irecv, buffer.view(torch.uint8), src) for src, buffer in received.items()]
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    _STATS["p2p_bytes_sent"] += len(sends) * payload.numel() * payload.element_size()
    _STATS["p2p_messages_sent"] += len(sends)
    return {src: buffer.to(flat.device) for src, buffer in received.items()}


def _accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _combine(flat: torch.Tensor, received: Mapping[int, torch.Tensor], plan: topology.ExchangePlan) -> torch.Tensor:
    acc = _accumulation_dtype(flat.dtype)
    if plan.uniform:
        out = flat.to(acc, copy=True)
        for buffer in received.values():
            out += buffer.to(acc)
        return out.div_(len(received) + 1).to(flat.dtype)
    out = flat.to(acc) * plan.self_weight
    for src, weight in plan.src_weights.items():
        out.add_(received[src].to(acc), alpha=weight)
    return out.to(flat.dtype)


# --------------------------------------------------------------------------- ops


def neighbor_allreduce(tensor: torch.Tensor, *, self_weight: float | None = None,
                       src_weights: Mapping[int, float] | None = None,
                       dst_weights: Sequence[int] | Mapping[int, float] | None = None,
                       enable_topo_check: bool = True) -> torch.Tensor:
    """Weighted average of tensor with the in-neighbors' tensors; a new tensor, input untouched.

    Defaults average over the topology: uniform 1/(in-degree + 1), or column rank of the
    matrix when it is weighted. self_weight and src_weights ({src rank: weight}) come together;
    without dst_weights their keys must be in-neighbors and every rank still sends to all its
    out-neighbors. dst_weights (a list of ranks, weight 1.0 each, or {dst rank: weight}) makes
    the graph dynamic: this rank sends only there, and receives only from src_weights' keys.
    enable_topo_check then verifies collectively that sends and receives pair up (ValueError on
    every rank otherwise); without it a mismatch hangs until the process group's timeout.
    The result carries no autograd history. Float16/bfloat16 are weighted in float32.
    """
    flat = _flat(tensor)
    plan = _graph().plan(dist.get_rank(), self_weight, src_weights, dst_weights)
    if plan.dynamic and enable_topo_check:
        size = dist.get_world_size()
        _check_sends_match_recvs(plan.sends, plan.recvs, size, range(size), "rank")
    received = _exchange(flat, plan.sends, plan.recvs)
    return _combine(flat, received, plan).view(tensor.shape)


def allreduce(tensor: torch.Tensor, average: bool = True) -> torch.Tensor:
    """Sum (average=False) or mean of tensor over all ranks, as a new tensor."""
    if average and not (tensor.is_floating_point() or tensor.is_complex()):
        raise TypeError(f"allreduce(average=True) needs a floating-point tensor, got {tensor.dtype}")
    out = tensor.detach().clone(memory_format=torch.contiguous_format)
    dist.all_reduce(out)
    _count_collective(out)
    return out.div_(dist.get_world_size()) if average else out


def broadcast_parameters(module: torch.nn.Module, root: int = 0) -> None:
    """Copy every parameter and buffer of module from rank root to all ranks, in place.

    One broadcast per (device, dtype): the tensors are packed into a flat buffer, sent as bytes
    and unpacked, so non-contiguous buffers and integer counters come through unchanged.
    """
    size = dist.get_world_size()
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < size:
        raise ValueError(f"root must be a rank in [0, {size}), got {root!r}")
    tensors = list(module.parameters()) + list(module.buffers())
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.device, t.dtype), []).append(t)
    with torch.no_grad():
        for members in groups.values():
            packed = torch.cat([t.detach().reshape(-1) for t in members])
            wire = _wire_device(packed)
            on_wire = packed.to(wire)
            dist.broadcast(on_wire.view(torch.uint8), src=root)
            _count_collective(on_wire)
            if dist.get_rank() != root:
                chunks = on_wire.to(packed.device).split([m.numel() for m in members])
                for t, chunk in zip(members, chunks, strict=True):
                    t.copy_(chunk.view(t.shape))


def _count_collective(tensor: torch.Tensor) -> None:
    _STATS["collective_calls"] += 1
    _STATS["collective_payload_bytes"] += tensor.numel() * tensor.element_size()


# --------------------------------------------------------------------------- machines


@dataclass(frozen=True)
class _Layout:
    local_size: int
    num_machines: int
    machine: int
    local_rank: int

    def leader(self, machine: int) -> int:
        return machine * self.local_size


def _resolve_local_size(override: int | None) -> int:
    """Ranks per machine: the override, else LOCAL_WORLD_SIZE as torchrun sets it."""
    size = dist.get_world_size()
    if override is None:
        raw = os.environ.get("LOCAL_WORLD_SIZE")
        if raw is None:
            raise RuntimeError("the number of ranks per machine is unknown: run under torchrun "
                               "(it sets LOCAL_WORLD_SIZE) or pass local_size to set_machine_topology")
        override = int(raw)
    if isinstance(override, bool) or not isinstance(override, int) or override < 1 or size % override:
        raise ValueError(f"local_size={override!r} does not divide world_size={size}: hierarchical ops "
                         "need the same number of ranks on every machine")
    return override


def _layout() -> _Layout:
    local_size = _resolve_local_size(_state().local_size)
    rank = dist.get_rank()
    return _Layout(local_size, dist.get_world_size() // local_size, rank // local_size, rank % local_size)


def set_machine_topology(W, is_weighted: bool = False, local_size: int | None = None) -> None:
    """Use W (machines x machines) for hierarchical_neighbor_allreduce; collective like set_topology.

    Machines are blocks of local_size consecutive ranks (torchrun's placement); local_size
    defaults to LOCAL_WORLD_SIZE. Without a call the machine graph is exponential_graph(machines).
    """
    state = _state()
    matrix = _agree_on_graph("set_machine_topology", W, bool(is_weighted), local_size)
    machines = dist.get_world_size() // _resolve_local_size(local_size)
    if matrix.shape[0] != machines:
        raise ValueError(f"set_machine_topology: the matrix is {matrix.shape[0]} x {matrix.shape[0]} "
                         f"but there are {machines} machines; make it {machines} x {machines}")
    state.local_size = local_size
    state.machine_graph = _Graph(matrix, bool(is_weighted))


def get_machine_topology() -> torch.Tensor:
    """A copy of the machine topology in use (exponential_graph(machines) by default)."""
    return _machine_graph(_layout()).matrix.clone()


def _machine_graph(layout: _Layout) -> _Graph:
    state = _state()
    if state.machine_graph is None:
        state.machine_graph = _Graph(topology.exponential_graph(layout.num_machines), False)
    if state.machine_graph.matrix.shape[0] != layout.num_machines:
        raise RuntimeError(f"the machine topology has {state.machine_graph.matrix.shape[0]} machines but "
                           f"there are {layout.num_machines}; call set_machine_topology again")
    return state.machine_graph


def _local_group(layout: _Layout):
    """This rank's machine subgroup; collective the first time (every rank makes every group)."""
    state = _state()
    ref = state.local_groups.get(layout.local_size)
    group = ref() if ref is not None else None
    if group is None:
        group, _ = dist.new_subgroups(group_size=layout.local_size)
        state.local_groups[layout.local_size] = weakref.ref(group)
    return group


def hierarchical_neighbor_allreduce(tensor: torch.Tensor, *, self_weight: float | None = None,
                                    src_machine_weights: Mapping[int, float] | None = None,
                                    dst_machine_weights: Sequence[int] | Mapping[int, float] | None = None,
                                    enable_topo_check: bool = False) -> torch.Tensor:
    """neighbor_allreduce between machines, of each machine's average; same result on its ranks.

    (1) average inside each machine, (2) local rank 0 of each machine runs the neighbor exchange
    on the machine graph with the weights' meaning of neighbor_allreduce (keys are machine
    ranks), (3) broadcast inside the machine. All ranks of a machine must pass the same
    arguments; local rank 0's are the ones used. enable_topo_check defaults to False as in BlueFog.
    As in BlueFog, and unlike neighbor_allreduce: explicit weights need all three of self_weight,
    src_machine_weights and dst_machine_weights; their machines must be neighbours in the machine
    topology; and every machine must send to at least one machine (ValueError otherwise).
    """
    flat = _flat(tensor)
    layout = _layout()
    if layout.local_size == 1:
        raise RuntimeError("local size is 1 (one rank per machine): use neighbor_allreduce directly")
    plan = _machine_graph(layout).machine_plan(layout.machine, self_weight, src_machine_weights, dst_machine_weights)
    if plan.dynamic and enable_topo_check:
        leaders = [layout.leader(m) for m in range(layout.num_machines)]
        _check_sends_match_recvs(plan.sends, plan.recvs, layout.num_machines, leaders, "machine")
    group = _local_group(layout)
    machine_mean = flat.to(_wire_device(flat), copy=True)
    dist.all_reduce(machine_mean, group=group)
    _count_collective(machine_mean)
    machine_mean = machine_mean.to(flat.device).div_(layout.local_size)
    if layout.local_rank == 0:
        sends = {layout.leader(m): w for m, w in plan.sends.items()}
        received = _exchange(machine_mean, sends, [layout.leader(m) for m in plan.recvs])
        by_machine = {src // layout.local_size: buffer for src, buffer in received.items()}
        result = _combine(machine_mean, by_machine, plan)
    else:
        result = torch.empty_like(machine_mean)
    on_wire = result.to(_wire_device(result))
    dist.broadcast(on_wire.view(torch.uint8), src=layout.leader(layout.machine), group=group)
    _count_collective(on_wire)
    return on_wire.to(flat.device).view(tensor.shape)
