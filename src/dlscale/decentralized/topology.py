"""Communication graphs for decentralized averaging, written as weight matrices.

Every generator returns an n x n ``torch.float64`` tensor ``W`` (a matrix, not a graph
object: it is what `set_topology` takes, prints plainly and compares exactly). The convention is
BlueFog's (topology_util.py, read at Bluefog-Lib/bluefog@9ee376a7):

* ``W[i, j]`` is the weight of the edge i -> j: row i says what rank i sends, column j what rank
  j receives. A rank's in-neighbors are the non-zero entries of its column, its out-neighbors the
  non-zero entries of its row; the diagonal is the self weight and never makes a neighbor.
* The circulant graphs (exponential, ring, fully connected) have rows that are rotations of the
  first row, normalised to sum to 1.

The helpers accept any square matrix-like (tensor, numpy array, nested lists) and never modify
it. `plan_exchange` turns a matrix and the user's weights into one node's sends, receives and
weights; it is pure, so ops.py only moves data and every argument check runs without processes.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch

Matrix = torch.Tensor
"""An n x n float64 weight matrix, W[i, j] = weight of the edge i -> j."""


def _check_size(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"graph size must be an integer >= 1, got {n!r}")


def _check_base(base: int) -> None:
    if isinstance(base, bool) or not isinstance(base, int) or base < 2:
        raise ValueError(f"base must be an integer >= 2, got {base!r}")


def _is_power_of(k: int, base: int) -> bool:
    """True for k = base**e with e >= 0 (so 1 always counts). Integer arithmetic: BlueFog's
    float-log test is exact only while log(k, base) rounds well."""
    if k < 1:
        return False
    while k % base == 0:
        k //= base
    return k == 1


def _circulant(first_row: Sequence[float]) -> Matrix:
    x = torch.tensor(first_row, dtype=torch.float64)
    x = x / x.sum()
    return torch.stack([torch.roll(x, shift) for shift in range(len(x))])


def as_matrix(W) -> Matrix:
    """W as a square float64 tensor; ValueError if it is not square.

    No copy when W already is a float64 CPU tensor: callers here only read it.
    """
    matrix = torch.as_tensor(W, dtype=torch.float64, device="cpu").detach()
    if matrix.dim() != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 1:
        raise ValueError(f"a topology must be a non-empty square matrix, got shape {tuple(matrix.shape)}")
    return matrix


def _check_index(value: int, upper: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < upper:
        raise ValueError(f"{name} must be an integer in [0, {upper}), got {value!r}")


def _check_rank(matrix: Matrix, rank: int) -> None:
    _check_index(rank, matrix.shape[0], "rank")


# --------------------------------------------------------------------------- generators


def exponential_two_graph(n: int) -> Matrix:
    """Rank r sends to r + 2**k and receives from r - 2**k (mod n), k = 0 .. ceil(log2 n) - 1.

    Self-loop included; every weight is 1/(k+1). BlueFog's ExponentialTwoGraph (bit test
    ``i & (i - 1) == 0``); the same matrix as ``exponential_graph(n, 2)``.
    """
    _check_size(n)
    return _circulant([1.0 if i & (i - 1) == 0 else 0.0 for i in range(n)])


def exponential_graph(n: int, base: int = 2) -> Matrix:
    """Rank r sends to r + base**k (mod n) for every power of base below n; uniform row weights.

    BlueFog's ExponentialGraph, and its default topology (with base 2).
    """
    _check_size(n)
    _check_base(base)
    return _circulant([1.0] + [1.0 if _is_power_of(i, base) else 0.0 for i in range(1, n)])


def symmetric_exponential_graph(n: int, base: int = 4) -> Matrix:
    """Like `exponential_graph`, with distance i measured both ways round the ring.

    Offset i is an edge when min(i, n - i) is a power of base (i <= n // 2 uses i), so the graph
    is undirected: n=8 gives rank 0 the neighbors {1, 4, 7}, n=16 gives {1, 4, 12, 15}.
    """
    _check_size(n)
    _check_base(base)
    first_row = [1.0]
    for i in range(1, n):
        distance = i if i <= n // 2 else n - i
        first_row.append(1.0 if _is_power_of(distance, base) else 0.0)
    return _circulant(first_row)


def _default_grid_shape(n: int) -> tuple[int, int]:
    rows = math.isqrt(n)
    while n % rows != 0:
        rows -= 1
    return rows, n // rows  # prime n gives a 1 x n line


def mesh_grid_2d_graph(n: int, shape: tuple[int, int] | None = None) -> Matrix:
    """A rows x cols grid, ranks in row-major order, each linked to its 4 grid neighbours.

    shape defaults to (r, n // r) with r the largest divisor of n not above sqrt(n). Weights are
    Metropolis-Hastings: W[i, j] = 1 / max(d_i, d_j) for neighbours, d counting the rank itself,
    and W[i, i] = 1 - (sum of the others in row i). The matrix is symmetric and doubly stochastic.
    """
    _check_size(n)
    if shape is None:
        shape = _default_grid_shape(n)
    rows, cols = (int(s) for s in shape)
    if rows < 1 or cols < 1 or rows * cols != n:
        raise ValueError(f"mesh shape {tuple(shape)} holds {rows * cols} ranks, not n={n}; "
                         f"pick rows x cols = {n}")
    adjacency = torch.eye(n, dtype=torch.bool)
    for i in range(n):
        if (i + 1) % cols != 0:  # right neighbour in the same row
            adjacency[i, i + 1] = adjacency[i + 1, i] = True
        if i + cols < n:  # neighbour below
            adjacency[i, i + cols] = adjacency[i + cols, i] = True
    degree = adjacency.sum(dim=1)  # self included, as in BlueFog
    W = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        for j in adjacency[i].nonzero().flatten().tolist():
            if j != i:
                W[i, j] = 1.0 / max(int(degree[i]), int(degree[j]))
        W[i, i] = 1.0 - W[i].sum()
    return W


def star_graph(n: int, center: int = 0) -> Matrix:
    """Every leaf linked both ways to `center`; leaves keep 1 - 1/n, edges weigh 1/n.

    The centre's self weight is 1/n, not 1 - 1/n: BlueFog's loop writes 1 - 1/n on every
    diagonal entry and then overwrites the centre's with 1/n, and we keep that matrix. It is
    doubly stochastic (centre row: n * 1/n; leaf row: (1 - 1/n) + 1/n), so the weighted average
    still preserves the mean. Only `is_weighted=True` reads these values.
    """
    _check_size(n)
    _check_index(center, n, "center")
    W = torch.eye(n, dtype=torch.float64) * (1.0 - 1.0 / n)
    W[center, :] = 1.0 / n
    W[:, center] = 1.0 / n
    return W


def ring_graph(n: int, connect_style: int = 0) -> Matrix:
    """A ring. connect_style 0: both directions, self and two neighbours at 1/3 each;
    1 ("left"): W[i, i-1] = 1/2, so rank r receives from r + 1; 2 ("right"): W[i, i+1] = 1/2,
    so rank r receives from r - 1. n=1 gives [[1]] and n=2 all 1/2, whatever the style.
    """
    _check_size(n)
    if connect_style not in (0, 1, 2):
        raise ValueError(f"connect_style must be 0 (both ways), 1 (left) or 2 (right), got {connect_style!r}")
    if n <= 2:
        return torch.full((n, n), 1.0 / n, dtype=torch.float64)
    first_row = [0.0] * n
    first_row[0] = 1.0
    if connect_style in (0, 1):
        first_row[-1] = 1.0
    if connect_style in (0, 2):
        first_row[1] = 1.0
    return _circulant(first_row)


def fully_connected_graph(n: int) -> Matrix:
    """Every rank linked to every other; all weights 1/n (averaging on it equals allreduce)."""
    _check_size(n)
    return torch.full((n, n), 1.0 / n, dtype=torch.float64)


# --------------------------------------------------------------------------- queries


def in_neighbors(W, rank: int) -> list[int]:
    """Ranks with a non-zero edge into `rank` (column rank), sorted, never rank itself."""
    matrix = as_matrix(W)
    _check_rank(matrix, rank)
    return [s for s in matrix[:, rank].nonzero().flatten().tolist() if s != rank]


def out_neighbors(W, rank: int) -> list[int]:
    """Ranks that `rank` has a non-zero edge to (row rank), sorted, never rank itself."""
    matrix = as_matrix(W)
    _check_rank(matrix, rank)
    return [d for d in matrix[rank].nonzero().flatten().tolist() if d != rank]


def recv_weights(W, rank: int) -> tuple[float, dict[int, float]]:
    """(self_weight, {src: weight}) read from column `rank`: what a weighted topology applies."""
    matrix = as_matrix(W)
    sources = in_neighbors(matrix, rank)
    return float(matrix[rank, rank]), {s: float(matrix[s, rank]) for s in sources}


def is_regular(W) -> bool:
    """True when every rank has the same in-degree and the same out-degree (self excluded).

    BlueFog's IsRegularGraph compares networkx's total degree (in + out, self-loop counted
    twice); for the generators above both tests agree.
    """
    matrix = as_matrix(W)
    off_diagonal = (matrix != 0) & ~torch.eye(matrix.shape[0], dtype=torch.bool)
    in_degree, out_degree = off_diagonal.sum(dim=0), off_diagonal.sum(dim=1)
    return bool((in_degree == in_degree[0]).all() and (out_degree == out_degree[0]).all())


# --------------------------------------------------------------------------- dynamic schedules


def dynamic_one_peer_schedule(W, rank: int) -> Iterator[tuple[list[int], list[int]]]:
    """Yield (send_ranks, recv_ranks) per step: each rank talks to one out-neighbor at a time.

    Every rank orders its out-neighbors clockwise (by (dst - src) mod n) and at step t sends to
    entry t mod out-degree; `rank` receives from every rank whose step-t choice is `rank`.
    exponential_two_graph(8), rank 0: ([1], [7]), ([2], [6]), ([4], [4]), ([1], [7]), ...
    (BlueFog's GetDynamicOnePeerSendRecvRanks.) A rank without out-neighbors sends to [].
    Pass the pair as ``dst_weights=send_ranks`` and ``src_weights`` keyed by recv_ranks.
    """
    matrix = as_matrix(W)
    _check_rank(matrix, rank)
    n = matrix.shape[0]
    clockwise = [sorted(out_neighbors(matrix, r), key=lambda d, r=r: (d - r) % n) for r in range(n)]
    step = 0
    while True:
        chosen = [peers[step % len(peers)] if peers else None for peers in clockwise]
        send = [chosen[rank]] if chosen[rank] is not None else []
        recv = [src for src in range(n) if src != rank and chosen[src] == rank]
        yield send, recv
        step += 1


def dynamic_machine_one_peer_schedule(num_machines: int, machine_rank: int) -> Iterator[tuple[list[int], list[int]]]:
    """Yield ([send_machine], [recv_machine]) per step for hierarchical_neighbor_allreduce.

    At step t the distance is d = 2**(t mod (floor(log2(M - 1)) + 1)): machine m sends to m + d
    and receives from m - d (mod M). BlueFog's GetExp2DynamicSendRecvMachineRanks; the ids are
    machine ranks, meant for ``dst_machine_weights`` and ``src_machine_weights``.
    """
    if isinstance(num_machines, bool) or not isinstance(num_machines, int) or num_machines < 2:
        raise ValueError(f"a machine schedule needs num_machines >= 2, got {num_machines!r}")
    _check_index(machine_rank, num_machines, "machine_rank")
    num_distances = (num_machines - 1).bit_length()  # floor(log2(M - 1)) + 1
    step = 0
    while True:
        distance = 2 ** (step % num_distances)
        yield [(machine_rank + distance) % num_machines], [(machine_rank - distance) % num_machines]
        step += 1


def _check_machines(world_size: int, local_size: int, rank: int) -> tuple[int, int, int]:
    """(machines, machine, local rank) of `rank`; the inner-outer schedules' preconditions."""
    for name, value in (("world_size", world_size), ("local_size", local_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if world_size % local_size:
        raise ValueError(f"local_size={local_size} does not divide world_size={world_size}: the inner-outer "
                         "schedules need the same number of ranks on every machine")
    if local_size <= 2 or world_size == local_size:
        raise ValueError(f"the inner-outer schedules need more than 2 ranks per machine and at least 2 machines, "
                         f"got {local_size} per machine, {world_size} in all; use dynamic_one_peer_schedule")
    _check_index(rank, world_size, "rank")
    return world_size // local_size, rank // local_size, rank % local_size


def inner_outer_exp2_schedule(world_size: int, local_size: int, rank: int) -> Iterator[tuple[list[int], list[int]]]:
    """Yield ([send_rank], [recv_rank]) per step: BlueFog's GetInnerOuterExpo2DynamicSendRecvRanks.

    Machines are blocks of local_size consecutive ranks. At step t local rank t mod local_size of
    every machine talks to the same local rank of the machine at distance
    d = 2**(t mod (floor(log2(M - 1)) + 1)): it sends to machine m + d and receives from m - d.
    The other local ranks exchange inside their machine at distance 2**(t mod (floor(log2(L - 2)) + 1)),
    counted clockwise around the machine's ranks and skipping the one that went out (a distance
    that reaches or passes it grows by one). world 6, local 3, step 0: 0 <-> 3, 1 <-> 2, 4 <-> 5.
    BlueFog's examples use it whenever the job spans several machines (docs/references.md#bluefog-dynamic-schedules).
    """
    machines, machine, local = _check_machines(world_size, local_size, rank)
    outer_distances = (machines - 1).bit_length()  # floor(log2(M - 1)) + 1
    inner_distances = (local_size - 2).bit_length()  # floor(log2(L - 2)) + 1: the outgoing rank is skipped
    first = machine * local_size
    step = 0
    while True:
        outgoing = step % local_size
        if local == outgoing:
            distance = 2 ** (step % outer_distances)
            send = (machine + distance) % machines * local_size + local
            recv = (machine - distance) % machines * local_size + local
        else:
            distance = 2 ** (step % inner_distances)
            forward = distance + 1 if distance >= (outgoing - local) % local_size else distance
            backward = distance + 1 if distance >= (local - outgoing) % local_size else distance
            send = first + (local + forward) % local_size
            recv = first + (local - backward) % local_size
        yield [send], [recv]
        step += 1


def inner_outer_ring_schedule(world_size: int, local_size: int, rank: int) -> Iterator[tuple[list[int], list[int]]]:
    """Yield ([send_rank], [recv_rank]) per step: BlueFog's GetInnerOuterRingDynamicSendRecvRanks.

    At step t local rank t mod local_size sends to the same local rank of the next machine and
    receives from the previous one; the other local ranks pass to the next rank of their machine
    and take from the previous one, skipping the one that went out. world 6, local 3, step 0:
    0 -> 3 -> 0, and 1 <-> 2 and 4 <-> 5 inside the machines.
    """
    machines, machine, local = _check_machines(world_size, local_size, rank)
    first = machine * local_size
    step = 0
    while True:
        outgoing = step % local_size
        if local == outgoing:
            send = (machine + 1) % machines * local_size + local
            recv = (machine - 1) % machines * local_size + local
        else:
            after, before = (local + 1) % local_size, (local - 1) % local_size
            send = first + ((after + 1) % local_size if after == outgoing else after)
            recv = first + ((before - 1) % local_size if before == outgoing else before)
        yield [send], [recv]
        step += 1


# --------------------------------------------------------------------------- exchange plans


@dataclass(frozen=True)
class ExchangePlan:
    """One node's part of a neighbor exchange (a node is a rank, or a machine for the
    hierarchical op): y = self_weight * x + sum over src of src_weights[src] * (what src sent)."""

    sends: dict[int, float]
    """destination -> dst weight, which the sender multiplies in before sending."""
    recvs: list[int]
    """sources to receive from: all in-neighbors in the static case, src_weights' keys otherwise."""
    self_weight: float
    src_weights: dict[int, float]
    uniform: bool
    """The default unweighted average: sum, then divide by len(recvs) + 1 (exact for equal inputs)."""
    dynamic: bool
    """dst_weights was given: sends and recvs need not follow the topology (check them collectively)."""


def _as_weight(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} has to be a float, got {value!r}")
    return float(value)


def _self_weight(value) -> float:
    """BlueFog's check (mpi_ops.py): `isinstance(self_weight, float)`, so 1 or True is refused."""
    if not isinstance(value, float):
        raise ValueError(f"Argument self_weight has to be a float for self rank, got {value!r} "
                         f"({type(value).__name__})")
    return float(value)


def _check_peers(peers: Iterable[int], node: int, size: int, name: str) -> None:
    for peer in peers:
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < size:
            raise ValueError(f"{name} holds {peer!r}, which is not a rank in [0, {size})")
        if peer == node:
            raise ValueError(f"{name} holds the calling rank {node} itself; use self_weight for it")


def _dst_dict(dst_weights, node: int, size: int, name: str) -> dict[int, float]:
    if isinstance(dst_weights, Mapping):
        dst = {peer: _as_weight(w, f"{name}[{peer}]") for peer, w in dst_weights.items()}
    else:
        peers = list(dst_weights)
        if len(set(peers)) != len(peers):
            raise ValueError(f"{name} lists a destination twice: {peers}")
        dst = dict.fromkeys(peers, 1.0)
    _check_peers(dst, node, size, name)
    return dst


def plan_exchange(W, node: int, *, is_weighted: bool = False, self_weight: float | None = None,
                  src_weights: Mapping[int, float] | None = None,
                  dst_weights: Sequence[int] | Mapping[int, float] | None = None,
                  names: tuple[str, str] = ("src_weights", "dst_weights")) -> ExchangePlan:
    """Who node sends to and receives from, with which weights (BlueFog's rules,
    docs/references.md#bluefog-neighbor-allreduce).

    No weights: send to all out-neighbors, receive from all in-neighbors, weigh uniformly
    1/(in-degree + 1), or by column node of W when is_weighted. self_weight with src_weights:
    keys must be in-neighbors (unless dst_weights is given), the rest of the exchange stays
    static. dst_weights (list of ranks, weight 1.0 each, or dict) makes it dynamic. `names`
    are the argument names the error messages use.
    """
    matrix = as_matrix(W)
    _check_rank(matrix, node)
    src_name, dst_name = names
    if (self_weight is None) != (src_weights is None):
        raise ValueError(f"Arguments self_weight and {src_name} have to be presented at the same time")
    in_peers, out_peers = in_neighbors(matrix, node), out_neighbors(matrix, node)
    if self_weight is None:
        if dst_weights is not None:
            raise ValueError(f"{dst_name} needs self_weight and {src_name} too: "
                             "with a dynamic graph the receiver cannot infer its weights")
        sends = dict.fromkeys(out_peers, 1.0)
        if is_weighted:
            weight, src = recv_weights(matrix, node)
            return ExchangePlan(sends, in_peers, weight, src, uniform=False, dynamic=False)
        uniform = 1.0 / (len(in_peers) + 1)
        return ExchangePlan(sends, in_peers, uniform, dict.fromkeys(in_peers, uniform), uniform=True, dynamic=False)
    weight = _self_weight(self_weight)
    if not isinstance(src_weights, Mapping):
        raise ValueError(f"{src_name} has to be a dict from source rank to weight, got {type(src_weights).__name__}")
    src = {peer: _as_weight(w, f"{src_name}[{peer}]") for peer, w in src_weights.items()}
    _check_peers(src, node, matrix.shape[0], src_name)
    if dst_weights is None:
        outside = sorted(set(src) - set(in_peers))
        if outside:
            raise ValueError(f"{src_name} keys {outside} are not in-neighbors {in_peers} of {node} in the "
                             f"topology; pass {dst_name} as well for a graph outside the topology")
        return ExchangePlan(dict.fromkeys(out_peers, 1.0), in_peers, weight, src, uniform=False, dynamic=False)
    sends = _dst_dict(dst_weights, node, matrix.shape[0], dst_name)
    return ExchangePlan(sends, sorted(src), weight, src, uniform=False, dynamic=True)


MACHINE_NAMES = ("src_machine_weights", "dst_machine_weights")


def plan_machine_exchange(W, machine: int, *, is_weighted: bool = False, self_weight: float | None = None,
                          src_machine_weights: Mapping[int, float] | None = None,
                          dst_machine_weights: Sequence[int] | Mapping[int, float] | None = None) -> ExchangePlan:
    """A machine's part of hierarchical_neighbor_allreduce, with BlueFog's stricter rules there
    (mpi_ops.py `_hierarchical_neighbor_allreduce_nonblocking`, mpi_controller.cc;
    docs/references.md#bluefog-hierarchical).

    No weights: the static plan of the machine topology. Otherwise all three must be given (an
    explicit static weighting is refused), src keys must be in-neighbor machines and dst keys
    out-neighbor machines of the machine topology, and the send list must not be empty.
    """
    src_name, dst_name = MACHINE_NAMES
    if (self_weight is None) != (src_machine_weights is None):
        raise ValueError(f"Arguments self_weight and {src_name} have to be presented at the same time")
    given = (self_weight, src_machine_weights, dst_machine_weights)
    if any(v is None for v in given) and any(v is not None for v in given):
        raise ValueError(f"Arguments self_weight, {src_name}, {dst_name} have to be presented at the same time")
    plan = plan_exchange(W, machine, is_weighted=is_weighted, self_weight=self_weight, src_weights=src_machine_weights,
                         dst_weights=dst_machine_weights, names=MACHINE_NAMES)
    if plan.dynamic:
        _check_within(sorted(plan.src_weights), in_neighbors(W, machine), machine, src_name, "in")
        _check_within(sorted(plan.sends), out_neighbors(W, machine), machine, dst_name, "out")
    if not plan.sends:
        raise ValueError(f"machine {machine} sends to no machine: under hierarchical neighbor_allreduce "
                         f"{dst_name} (or the machine topology's out-neighbors) should not be empty")
    return plan


def _check_within(peers: list[int], neighbors: list[int], machine: int, name: str, direction: str) -> None:
    outside = [p for p in peers if p not in neighbors]
    if outside:
        raise ValueError(f"{name} keys {outside} are not {direction}-neighbor machines {neighbors} of machine "
                         f"{machine} in the machine topology; set_machine_topology a graph that has these edges")
