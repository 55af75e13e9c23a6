"""Who sends to whom in a neighbour exchange, without torch: the traffic `dlscale predict` costs.

The graphs are those of decentralized/topology.py (BlueFog's; docs/references.md#bluefog-topologies)
by name as `--topology` takes them: exp2 (rank r sends to r + 2^i mod n), ring (r - 1 and r + 1),
mesh (the 4-neighbour grid of mesh_grid_2d_graph's default shape), star (leaves and rank 0), full.
A test checks the out-neighbours against decentralized.topology for small n.

Three exchange schedules:

- `static`: every rank sends to all its out-neighbours each time;
- `one_peer`: dlscale's dynamic schedule (topology.dynamic_one_peer_schedule): at step t each rank
  sends to its (t mod d)-th out-neighbour clockwise; the cost is averaged over a cycle of d steps;
- `inner_outer`: BlueFog's benchmark default on several machines
  (GetInnerOuterExpo2DynamicSendRecvRanks): each step one rank per machine sends to another
  machine, every other rank to a rank of its own machine; one message per rank.

`traffic(...)` returns, per step, the busiest device's bytes inside its node and the busiest
node's bytes leaving it, in units of the message size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlscale.errors import ConfigError

TOPOLOGIES = ("exp2", "ring", "mesh", "star", "full")
SCHEDULES = ("static", "one_peer", "inner_outer")


def _grid_shape(n: int) -> tuple[int, int]:
    rows = math.isqrt(n)
    while n % rows:
        rows -= 1
    return rows, n // rows


def out_neighbors(topology: str, n: int, rank: int) -> list[int]:
    """Ranks `rank` sends to (never itself), clockwise: sorted by (peer - rank) mod n."""
    if topology == "exp2":
        peers = {(rank + 2 ** i) % n for i in range(max(n - 1, 0).bit_length())}
    elif topology == "ring":
        peers = {(rank - 1) % n, (rank + 1) % n}
    elif topology == "mesh":
        _, cols = _grid_shape(n)
        peers = set()
        if (rank + 1) % cols:
            peers.add(rank + 1)
        if rank % cols:
            peers.add(rank - 1)
        if rank + cols < n:
            peers.add(rank + cols)
        if rank - cols >= 0:
            peers.add(rank - cols)
    elif topology == "star":
        peers = set(range(n)) if rank == 0 else {0}
    elif topology == "full":
        peers = set(range(n))
    else:
        raise ConfigError(f"unknown topology {topology!r}; choose one of {', '.join(TOPOLOGIES)}")
    peers.discard(rank)
    return sorted(peers, key=lambda p: (p - rank) % n)


@dataclass(frozen=True)
class Traffic:
    messages: float
    """Messages the busiest rank sends per step (each carries the whole parameter vector)."""
    intra: float
    """Messages the busiest device sends to devices of its own node."""
    inter: float
    """Messages the busiest node sends to other nodes."""


def traffic(topology: str, schedule: str, n: int, per_node: int) -> Traffic:
    """Per-step traffic, averaged over the schedule's cycle for the dynamic ones."""
    if schedule not in SCHEDULES:
        raise ConfigError(f"unknown exchange schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if n == 1:
        return Traffic(0, 0, 0)
    k = min(per_node, n)
    nodes = math.ceil(n / k)
    if schedule == "inner_outer":
        return Traffic(1, 1, 1 if nodes > 1 else 0)
    if topology == "full":  # closed form: n x n is too many pairs at thousands of devices
        if schedule == "static":
            return Traffic(n - 1, k - 1, k * (n - k))
        return _one_peer_average(topology, n, k)
    sends = {r: out_neighbors(topology, n, r) for r in range(n)}
    if schedule == "static":
        return _step(sends, n, k)
    return _one_peer_average(topology, n, k, sends)


def _step(sends: dict[int, list[int]], n: int, k: int) -> Traffic:
    intra, inter = 0, [0] * math.ceil(n / k)
    messages = 0
    for rank, peers in sends.items():
        node = rank // k
        local = sum(1 for p in peers if p // k == node)
        intra = max(intra, local)
        inter[node] += len(peers) - local
        messages = max(messages, len(peers))
    return Traffic(messages, intra, max(inter))


def _one_peer_average(topology: str, n: int, k: int, sends: dict[int, list[int]] | None = None) -> Traffic:
    if sends is None:  # full graph: over a cycle every other rank is the peer once
        return Traffic(1, (k - 1) / (n - 1), k * (n - k) / (n - 1))
    # The schedule repeats after lcm(out-degrees) steps; capped at 64 (a star's centre has n - 1
    # peers, so its cycle is sampled, not walked).
    cycle = min(math.lcm(*(len(p) for p in sends.values() if p)) if any(sends.values()) else 1, 64)
    steps = [_step({r: [p[t % len(p)]] if p else [] for r, p in sends.items()}, n, k) for t in range(cycle)]
    count = len(steps)
    return Traffic(sum(s.messages for s in steps) / count, sum(s.intra for s in steps) / count,
                   sum(s.inter for s in steps) / count)
