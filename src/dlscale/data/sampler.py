"""Samplers for data-parallel training and exact data-parallel evaluation.

Training (ShardedTrainSampler): every rank draws the same seeded permutation of the data set for
the epoch and takes every world_size-th index of it, starting at its rank; the tail that does not
fill a whole row of world_size is dropped, so every rank has the same number of samples and no
rank waits in a collective for another that has run out. With drop_last=False it pads the
permutation with its own first indices to a multiple of world_size instead, as torch's
DistributedSampler without drop_last does (HAL's loader; docs/references.md#hal-lr-schedule).
An epoch can start part-way, so a resumed run continues where it stopped.

Evaluation (ExactShardSampler): rank r takes indices r, r + world_size, ...: each sample exactly
once over all ranks, no padded duplicates, no dropped tail; ranks may get one sample more than
others. Sum correct counts and losses on each rank and all-reduce the sums once at the end
(all_reduce_eval_sums). Because ranks can have different numbers of batches, run no collective
per batch during evaluation: evaluate the unwrapped model (ddp.module), not the DDP wrapper.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch.utils.data import Sampler

from dlscale.data.dataset import seeded_generator
from dlscale.distributed import sum_over_ranks
from dlscale.errors import DataError


def _check_rank(rank: int, world_size: int) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} and world_size={world_size}: need 0 <= rank < world_size")


class ShardedTrainSampler(Sampler[tuple[int, int]]):
    """This rank's shard of a per-epoch permutation; yields (epoch, index) keys.

    The epoch travels with the index so that ImageDataset seeds each sample's augmentation from
    (seed, epoch, index), identically in any worker and after a resume.

    Checkpoint state (state_dict): epoch, start_index (samples of the epoch's permutation that all
    ranks together have consumed), seed and dataset_size. Since the permutation does not depend on
    world_size, a run may resume on a different number of ranks: they share out the remainder.
    """

    def __init__(self, dataset_size: int, *, rank: int, world_size: int, seed: int = 0, drop_last: bool = True):
        _check_rank(rank, world_size)
        if dataset_size < world_size:
            raise DataError(f"{dataset_size} training samples cannot be shared by {world_size} ranks; "
                            "use a larger data set or fewer ranks")
        self.dataset_size = dataset_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.start_index = 0
        self._resume_at: dict[int, int] = {}

    @property
    def total_size(self) -> int:
        """Length of the epoch's order: the data set, or padded to ceil(N / world_size) per rank."""
        if self.drop_last:
            return self.dataset_size
        return -(-self.dataset_size // self.world_size) * self.world_size

    def set_epoch(self, epoch: int, start_index: int | None = None) -> None:
        """Call before each epoch's iterator. start_index: samples of this epoch's order
        already consumed by all ranks together; None means 0, or the position load_state_dict
        restored if this is the epoch the checkpoint was taken in. With drop_last=False a
        position past the padded end (the partial last batch counted whole) means the epoch is done."""
        if start_index is None:
            start_index = self._resume_at.pop(epoch, 0)
        if not self.drop_last:
            start_index = min(start_index, self.total_size)
        if not 0 <= start_index <= self.total_size:
            raise ValueError(f"start_index={start_index} is outside 0..{self.total_size}")
        self.epoch = epoch
        self.start_index = start_index

    def permutation(self, epoch: int) -> torch.Tensor:
        """The epoch's order of all indices, the same on every rank."""
        return torch.randperm(self.dataset_size, generator=seeded_generator(self.seed, epoch))

    def order(self, epoch: int) -> torch.Tensor:
        """The permutation, padded with its first indices to total_size when drop_last=False
        (torch's DistributedSampler: `indices += indices[:padding_size]`)."""
        permutation = self.permutation(epoch)
        return torch.cat([permutation, permutation[:self.total_size - self.dataset_size]])

    def indices(self) -> list[int]:
        """This rank's indices for the current epoch, from start_index on."""
        remaining = self.order(self.epoch)[self.start_index:]
        usable = len(remaining) // self.world_size * self.world_size
        return remaining[self.rank:usable:self.world_size].tolist()

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch = self.epoch
        return iter([(epoch, index) for index in self.indices()])

    def __len__(self) -> int:
        return (self.total_size - self.start_index) // self.world_size

    def state_dict(self, consumed: int = 0) -> dict[str, int]:
        """The sampler's position after this rank took `consumed` samples from the current
        epoch's iterator (batches done x per-rank batch size); every rank saves the same dict."""
        return {
            "epoch": self.epoch,
            "start_index": min(self.start_index + consumed * self.world_size, self.total_size),
            "seed": self.seed,
            "dataset_size": self.dataset_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["dataset_size"] != self.dataset_size or state["seed"] != self.seed:
            raise DataError(
                f"the checkpoint's sampler saw {state['dataset_size']} samples with seed {state['seed']}, "
                f"this run has {self.dataset_size} with seed {self.seed}; resume with the same data and seed"
            )
        self._resume_at = {state["epoch"]: state["start_index"]}
        self.set_epoch(state["epoch"], state["start_index"])


class ExactShardSampler(Sampler[int]):
    """Indices rank, rank + world_size, ...: every sample once over all ranks, in order."""

    def __init__(self, dataset_size: int, *, rank: int, world_size: int):
        _check_rank(rank, world_size)
        self.dataset_size = dataset_size
        self.rank = rank
        self.world_size = world_size

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.dataset_size, self.world_size))

    def __len__(self) -> int:
        return len(range(self.rank, self.dataset_size, self.world_size))


class EvalTotals(NamedTuple):
    """Evaluation sums over all ranks."""

    correct_top1: float
    correct_top5: float
    loss_sum: float
    count: float

    @property
    def top1(self) -> float:
        """Top-1 accuracy in percent."""
        return 100.0 * self.correct_top1 / max(self.count, 1.0)

    @property
    def top5(self) -> float:
        """Top-5 accuracy in percent."""
        return 100.0 * self.correct_top5 / max(self.count, 1.0)

    @property
    def loss(self) -> float:
        """Mean loss per sample."""
        return self.loss_sum / max(self.count, 1.0)


def all_reduce_eval_sums(
    correct_top1: float | torch.Tensor,
    correct_top5: float | torch.Tensor,
    loss_sum: float | torch.Tensor,
    count: float | torch.Tensor,
    *,
    device: torch.device | str | None = None,
) -> EvalTotals:
    """Sum this rank's evaluation sums over all ranks; without torch.distributed, return them.

    Values may be numbers or 0-d tensors accumulated on the device (no host sync per batch).
    device: where to reduce (NCCL needs the GPU); default: the first tensor's device, else CPU.
    One host sync, at the end. Every rank must call it.
    """
    values = (correct_top1, correct_top5, loss_sum, count)
    if device is None:
        device = next((v.device for v in values if isinstance(v, torch.Tensor)), torch.device("cpu"))
    sums = sum_over_ranks(dict(zip(EvalTotals._fields, values, strict=True)), device)
    return EvalTotals(**sums)
