"""When gradient communication runs during backward, and how much of it backward cannot hide.

Time 0 is the start of backward. Gradients become ready in backward order (the reverse of the
parameters' registration order, from the output layer back to the input); each is given with
its bytes and the time it is ready. Buckets group them:

- DDP (`ddp_buckets`): in ready order, a bucket closes once it holds at least its limit: 1 MiB
  for the first, 25 MiB after (torch's DistributedDataParallel defaults, `bucket_cap_mb` and
  `dist._DEFAULT_FIRST_BUCKET_BYTES`; the reducer rebuilds buckets in the order gradients were
  ready in the first step; docs/references.md#ddp-buckets).
- Horovod (`fusion_buckets`): every `cycle` seconds the gradients that became ready are fused,
  up to the fusion threshold per message (docs/references.md#horovod-fusion).

A bucket's allreduce starts when the bucket is ready and the previous one is done (one
communication stream), so `overlap` is a chain: end_i = max(ready_i, end_(i-1)) + t(bytes_i).
What is left after backward ends, end_last - backward, is the exposed communication.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

MIB = 1024 * 1024
DDP_BUCKET_CAP_BYTES = 25 * MIB
DDP_FIRST_BUCKET_BYTES = 1 * MIB


@dataclass(frozen=True)
class Gradient:
    bytes: int
    ready_s: float
    """Seconds after the start of backward when it is ready."""


@dataclass(frozen=True)
class Bucket:
    bytes: int
    ready_s: float
    """When its last gradient is ready (DDP) or when its fusion cycle ends (Horovod)."""
    gradients: int


@dataclass(frozen=True)
class Timeline:
    buckets: tuple[Bucket, ...]
    starts_s: tuple[float, ...]
    ends_s: tuple[float, ...]
    backward_s: float

    @property
    def comm_s(self) -> float:
        """Time the communication stream was busy."""
        return sum(e - s for s, e in zip(self.starts_s, self.ends_s, strict=True))

    @property
    def exposed_s(self) -> float:
        """Communication still running when backward has finished: what the step waits for."""
        return max(0.0, (self.ends_s[-1] if self.ends_s else 0.0) - self.backward_s)


def ddp_buckets(gradients: Sequence[Gradient], cap_bytes: int = DDP_BUCKET_CAP_BYTES,
                first_cap_bytes: int = DDP_FIRST_BUCKET_BYTES) -> list[Bucket]:
    """DDP's size-limited buckets over gradients in ready order."""
    buckets: list[Bucket] = []
    size = count = 0
    ready = 0.0
    for grad in gradients:
        size += grad.bytes
        count += 1
        ready = max(ready, grad.ready_s)
        if size >= (first_cap_bytes if not buckets else cap_bytes):
            buckets.append(Bucket(size, ready, count))
            size = count = 0
    if count:
        buckets.append(Bucket(size, ready, count))
    return buckets


def fusion_buckets(gradients: Sequence[Gradient], cycle_s: float, cap_bytes: int) -> list[Bucket]:
    """Horovod's tensor fusion: at the end of each cycle, what became ready, in messages of at most cap_bytes."""
    buckets: list[Bucket] = []
    pending: list[Gradient] = []
    cycle_end = cycle_s
    for grad in sorted(gradients, key=lambda g: g.ready_s):
        while grad.ready_s > cycle_end:
            buckets += _fuse(pending, cycle_end, cap_bytes)
            pending = []
            cycle_end += cycle_s
        pending.append(grad)
    buckets += _fuse(pending, cycle_end, cap_bytes)
    return buckets


def _fuse(pending: list[Gradient], at_s: float, cap_bytes: int) -> list[Bucket]:
    out: list[Bucket] = []
    size = count = 0
    for grad in pending:
        if count and size + grad.bytes > cap_bytes:
            out.append(Bucket(size, at_s, count))
            size = count = 0
        size += grad.bytes
        count += 1
    if count:
        out.append(Bucket(size, at_s, count))
    return out


def overlap(buckets: Sequence[Bucket], comm_s: Callable[[int], float], backward_s: float) -> Timeline:
    """Each bucket's allreduce as soon as it is ready and the stream is free."""
    starts, ends = [], []
    free = 0.0
    for bucket in buckets:
        start = max(bucket.ready_s, free)
        free = start + comm_s(bucket.bytes)
        starts.append(start)
        ends.append(free)
    return Timeline(tuple(buckets), tuple(starts), tuple(ends), backward_s)


def after_backward(buckets: Sequence[Bucket], comm_s: Callable[[int], float], backward_s: float) -> Timeline:
    """Every bucket's allreduce after backward has finished, one after another (apex's
    delay_allreduce, dlscale's gradient_allreduce, Horovod configured without overlap)."""
    return overlap([Bucket(b.bytes, backward_s, b.gradients) for b in buckets], comm_s, backward_s)
