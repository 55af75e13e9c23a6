"""Time of a collective on a two-level network (devices in nodes, nodes on a fabric), and the
latency-bandwidth fit of measured timings.

A network has two levels. `intra` is what one device reaches inside its node (NVLink, PCIe,
loopback): its bus bandwidth in GB/s and the latency of one algorithm step. `inter` is what one
node reaches outside (all its NICs together) and the latency of one step across the fabric.

Bandwidth terms are nccl-tests' (docs/references.md#nccl-tests-busbw): an allreduce of S bytes
over n ranks moves 2(n-1)/n x S through each rank at best, so t = 2(n-1)/n x S / B for a bus
bandwidth B; reduce-scatter and all-gather move (n-1)/n x S, broadcast S. A ring that spans
nodes runs at the slower level: B = min(intra, inter), since every node's traffic leaves through
its NICs (docs/prediction.md derives it).

Latency terms are NCCL's own tuning model (docs/references.md#nccl-tuning-model): a fixed
`base_us` per call plus one `hop_us` per step; a ring allreduce takes 2(n-1) steps, of which
2(m-1) cross nodes (m nodes); NCCL's tree takes 2((k-1) + log2(m)) (k devices per node) and
moves its data at 0.92 of the bus bandwidth with an algorithm bandwidth of half of it.
`auto` takes the faster of ring and tree, as NCCL's tuner does. `hierarchical` is the two-level
(2D) form of Jia et al. 2018 and Mikami et al. 2018: reduce-scatter in the node, an allreduce of each
device's share across nodes (one per rail, the faster of ring and tree), all-gather in the node.
`sharp` is in-network reduction (NCCL's CollNet Direct on SHARP switches): reduce-scatter and
all-gather in the node, and each node sends its data to the switches once and receives the result
once, with NCCL's CollNet latencies (docs/references.md#nccl-tuning-model); it is chosen, never
assumed (`auto` does not take it: a fabric without SHARP switches has none).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dlscale.errors import ConfigError

GB = 1e9
ALGORITHMS = ("auto", "ring", "tree", "hierarchical", "sharp")

SHARP_NET_US = 31.0
"""NCCL's network latency of one CollNet Direct call (Simple protocol): tuning.cc's hwLatencies[NET]."""
SHARP_NVLINK_US = 3.7
"""NCCL's NVLink step latency of CollNet Direct (Simple protocol)."""
SHARP_ARITY_US = 0.4
"""NCCL's serialization latency per local device of CollNet Direct ("0.4 us arity serialization latency")."""
SHARP_BANDWIDTH_FACTOR = 0.9
"""NCCL takes 0.9 of the network's bandwidth for CollNet (tuning.cc: bwInter * 0.9f)."""

TREE_BANDWIDTH_FACTOR = 0.92
"""NCCL scales the tree's allreduce bus bandwidth by .92 (docs/references.md#nccl-tuning-model)."""

BUSBW_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
"""busbw = algbw x factor(n), per collective: nccl-tests' doc/PERFORMANCE.md (docs/references.md#nccl-tests-busbw).
The neighbour exchange's factor is its out-degree (dlscale's own: each rank sends S to every
out-neighbour, so busbw is the bytes one rank sends per second)."""


@dataclass(frozen=True)
class Level:
    bandwidth_gbs: float
    """Bus bandwidth in GB/s (1e9 bytes/s): per device inside a node, per node between nodes."""
    hop_us: float
    """Latency of one algorithm step at this level, in microseconds."""


@dataclass(frozen=True)
class Network:
    name: str
    devices_per_node: int
    intra: Level
    inter: Level
    base_us: float = 0.0
    """Fixed cost of one collective call (NCCL's base latency), microseconds."""
    nics_per_node: int = 1
    """NICs of a node; one device alone (hierarchical neighbour exchange) uses one of them."""
    source: str = ""
    """Where the figures came from, in words."""

    def nodes(self, n: int) -> int:
        return math.ceil(n / self.devices_per_node)

    def per_node(self, n: int) -> int:
        return min(self.devices_per_node, n)

    def ring_bandwidth(self, n: int) -> float:
        """Bytes/s of a ring over n devices: the slower level once it leaves the node."""
        if self.nodes(n) == 1:
            return self.intra.bandwidth_gbs * GB
        if self.per_node(n) == 1:
            return self.inter.bandwidth_gbs * GB
        return min(self.intra.bandwidth_gbs, self.inter.bandwidth_gbs) * GB


def check_size(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"a device count must be a positive integer, got {n!r}")


def _log2_floor(m: int) -> int:
    return max(m.bit_length() - 1, 0)


def allreduce_times(net: Network, size_bytes: float, n: int) -> dict[str, float]:
    """Seconds of one allreduce of size_bytes over n devices, per algorithm (0 for one device)."""
    check_size(n)
    if n == 1:
        return dict.fromkeys(ALGORITHMS[1:], 0.0)
    m, k = net.nodes(n), net.per_node(n)
    intra_hop, inter_hop = net.intra.hop_us * 1e-6, net.inter.hop_us * 1e-6
    base = net.base_us * 1e-6
    bw = net.ring_bandwidth(n)
    ring = base + 2 * (n - m) * intra_hop + 2 * (m - 1) * inter_hop + 2 * (n - 1) / n * size_bytes / bw
    tree = (base + 2 * ((k - 1) * intra_hop + _log2_floor(m) * inter_hop)
            + 2 * size_bytes / (TREE_BANDWIDTH_FACTOR * bw))
    if m == 1:
        return {"ring": ring, "tree": tree, "hierarchical": ring, "sharp": ring}
    intra_bw, inter_bw = net.intra.bandwidth_gbs * GB, net.inter.bandwidth_gbs * GB
    in_node = 0.0 if k == 1 else base + (k - 1) * intra_hop + (k - 1) / k * size_bytes / intra_bw
    across = base + min(2 * (m - 1) * inter_hop + 2 * (m - 1) / m * size_bytes / inter_bw,
                        2 * _log2_floor(m) * inter_hop + 2 * size_bytes / (TREE_BANDWIDTH_FACTOR * inter_bw))
    sharp_latency = 2 * (min(1, k - 1) * SHARP_NVLINK_US + (k - 1) * SHARP_ARITY_US) + SHARP_NET_US
    sharp = sharp_latency * 1e-6 + max(2 * (k - 1) / k * size_bytes / intra_bw,
                                       size_bytes / (SHARP_BANDWIDTH_FACTOR * inter_bw))
    return {"ring": ring, "tree": tree, "hierarchical": 2 * in_node + across, "sharp": sharp}


def allreduce_time(net: Network, size_bytes: float, n: int, algorithm: str = "auto") -> float:
    """One allreduce: the named algorithm, or with `auto` the faster of ring and tree (NCCL's choice)."""
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    times = allreduce_times(net, size_bytes, n)
    if algorithm == "auto":
        return min(times["ring"], times["tree"])
    return times[algorithm]


def collective_time(net: Network, op: str, size_bytes: float, n: int) -> float:
    """A ring collective of size_bytes (the whole array, as nccl-tests counts it) over n devices."""
    if op == "all_reduce":
        return allreduce_time(net, size_bytes, n, "ring")
    check_size(n)
    if n == 1:
        return 0.0
    m = net.nodes(n)
    latency_us = net.base_us + (n - m) * net.intra.hop_us + (m - 1) * net.inter.hop_us  # n - 1 steps, m - 1 across
    latency = latency_us * 1e-6
    return latency + BUSBW_FACTORS[op](n) * size_bytes / net.ring_bandwidth(n)


def exchange_time(net: Network, size_bytes: float, *, messages: int, intra_bytes: float, inter_bytes: float,
                  crosses_nodes: bool) -> float:
    """Point-to-point messages sent at once: the busiest device's bytes over its link, the busiest
    node's bytes over its NICs, whichever is slower, plus one step of latency per message."""
    hop = net.inter.hop_us if crosses_nodes else net.intra.hop_us
    transfer = max(intra_bytes / (net.intra.bandwidth_gbs * GB),
                   inter_bytes / (net.inter.bandwidth_gbs * GB) if inter_bytes else 0.0)
    return net.base_us * 1e-6 + messages * hop * 1e-6 + transfer


# ----------------------------------------------------------------------------- the fit


@dataclass(frozen=True)
class Fit:
    """t(S) = latency + S x factor / busbw, fitted to measured (S, t)."""

    latency_us: float
    busbw_gbs: float
    points: int
    rms_relative_error: float
    """Root mean square of (fit - measured) / measured over the points used."""

    def time_s(self, size_bytes: float, factor: float) -> float:
        return self.latency_us * 1e-6 + size_bytes * factor / (self.busbw_gbs * GB)


def fit_latency_bandwidth(sizes: Sequence[float], times_s: Sequence[float], factor: float) -> Fit:
    """Least squares of t = a + b S on relative errors (weights 1/t^2, so a 8-byte and a
    256 MiB point count alike); a >= 0 (refitted through the origin if it comes out negative).
    busbw = factor / b. Needs two sizes or more with positive times."""
    pairs = [(float(s), float(t)) for s, t in zip(sizes, times_s, strict=True) if t > 0 and s >= 0]
    if len({s for s, _ in pairs}) < 2:
        raise ConfigError("a latency-bandwidth fit needs timings at two message sizes or more")
    if factor <= 0:
        raise ConfigError("this collective moves no bytes between ranks (one rank?): nothing to fit")
    w = [1.0 / t ** 2 for _, t in pairs]
    sw = sum(w)
    sx = sum(wi * s for wi, (s, _) in zip(w, pairs, strict=True))
    sy = sum(wi * t for wi, (_, t) in zip(w, pairs, strict=True))
    sxx = sum(wi * s * s for wi, (s, _) in zip(w, pairs, strict=True))
    sxy = sum(wi * s * t for wi, (s, t) in zip(w, pairs, strict=True))
    det = sw * sxx - sx * sx
    b = (sw * sxy - sx * sy) / det
    a = (sy - b * sx) / sw
    if a < 0:
        a, b = 0.0, sxy / sxx
    if b <= 0:
        raise ConfigError("the timings do not grow with the message size: no bandwidth can be fitted "
                          "(give sizes up to a few MiB or more)")
    errors = [(a + b * s - t) / t for s, t in pairs]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    return Fit(latency_us=a * 1e6, busbw_gbs=factor / b / GB, points=len(pairs), rms_relative_error=rms)
