"""The thread input pipeline (data.workers_kind=thread): a rank's loader threads write each sample into its row
of the batch.

DataLoader's worker processes each make a sample as its own tensor, pickle it into shared memory, and the main
process collates the samples into a batch (and copies that into pinned memory on CUDA). Pillow's JPEG decode and
resize and torch's uint8 kernels release the GIL, so threads of the training process run the same transforms in
parallel without any of that: ThreadLoader allocates each batch once (pinned where it goes to a CUDA device), and
its threads decode, crop and flip sample after sample straight into their rows, ahead of the step by a bounded
number of batches. The samples, their crops and flips, their order, the bad files skipped and the batches are the
DataLoader's, bit for bit: every sample is drawn from its own generator (ImageDataset), whoever makes it.

Each thread runs torch with one intra-op thread (as DataLoader workers and torch's pin-memory thread do): a thread
that forked a team of its own per resize would make the threads contend for the cores. On the device decode path
(a data set with a device_plan) the threads read the files and draw the crops, and the batch is collated as the
workers' batches are (collate_encoded). An error in a sample is raised in the consumer's thread, as itself, when
its batch is due; closing the iterator (an epoch cut short, a step that raised) stops the threads and waits for
them, each at most the sample it is making.

Batches in pageable memory are used again (_Batches): a fresh 9.6 MB batch (64 rows of 3x224x224) is memory the
kernel maps and zeroes page by page as the rows are first written (docs/profiling.md, "Threads or processes"). A batch
goes back to the threads only when nothing outside the loader holds its memory any more (the storage's use count,
as torch's CUDA graph trees tell when memory they handed out is free). Pinned batches are torch's caching host
allocator's, which reuses them only after the copies that read them are done.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from dlscale.data.counting import reads_as
from dlscale.data.dataset import Batch, ImageDataset, Sample
from dlscale.data.encoded import collate_encoded

THREAD_NAME = "dlscale-input"
"""The loader threads' names (with their number): what a test looks for among the threads still alive."""


def _holders(tensor: torch.Tensor) -> int:
    """The use count of a tensor's storage as read here (the storage object asking counts in some versions of torch,
    not in others: compare with the count of a tensor nothing else holds, read the same way)."""
    return torch._C._storage_Use_Count(tensor.untyped_storage()._cdata)


class _Batches:
    """Uint8 batch tensors of the loader's batches, each used again once nothing outside holds its memory: a new
    batch takes a free one of its shape, or is allocated (and kept, up to `keep`: beyond that, a consumer that keeps
    its batches gets fresh ones). What is handed out is an alias of the kept tensor, so that its storage's use
    count tells: a kept tensor is free when the count is a lone tensor's (`alone`). Every tensor, view or Batch
    made from it counts; a bare storage object the consumer keeps (untyped_storage()) does not."""

    def __init__(self, keep: int, pin: bool):
        self.keep = keep
        self.pin = pin
        self.kept: list[torch.Tensor] = []
        self.lock = threading.Lock()
        self.alone = _holders(torch.empty(1, dtype=torch.uint8))

    def take(self, shape: tuple) -> torch.Tensor:
        if self.pin:  # the caching host allocator's: reused only after the copies reading it
            return torch.empty(shape, dtype=torch.uint8, pin_memory=True)
        with self.lock:
            for kept in self.kept:
                if kept.shape == shape and _holders(kept) == self.alone:
                    return kept.detach()
            fresh = torch.empty(shape, dtype=torch.uint8)
            if len(self.kept) < self.keep:
                self.kept.append(fresh)
            return fresh.detach()


@dataclass
class _Pending:
    """A batch being made: its rows as the threads finish them."""

    keys: list
    images: torch.Tensor | None
    samples: list = field(default_factory=list)
    left: int = 0
    error: BaseException | None = None


class ThreadLoader:
    """A DataLoader of ImageDataset with `threads` loader threads in this process (the attributes the training
    uses: dataset, sampler, batch_size, num_workers, drop_last, len, iter).

    image_shape: the (3, H, W) of every sample (the data set's image size), so that a batch is allocated before
    its first sample is made. depth: batches made ahead of the consumer (ready or being made), at least 1.
    pin: allocate the batches in page-locked memory (host-to-device copies that do not wait for the host)."""

    def __init__(self, dataset: ImageDataset, sampler, batch_size: int, *, threads: int, image_shape: tuple,
                 drop_last: bool, depth: int = 2, pin: bool = False):
        if threads < 1:
            raise ValueError(f"threads={threads}: a thread loader needs at least one thread")
        self.dataset = dataset
        self.sampler = sampler
        self.batch_size = batch_size
        self.num_workers = threads
        self.image_shape = tuple(image_shape)
        self.drop_last = drop_last
        self.depth = max(int(depth), 1)
        self.pin_memory = pin
        # depth batches being made or ready, one the consumer holds, one its previous step may still hold
        self.batches = _Batches(keep=self.depth + 2, pin=pin)

    def __len__(self) -> int:
        count = len(self.sampler)
        return count // self.batch_size if self.drop_last else -(-count // self.batch_size)

    def __iter__(self) -> Iterator[Batch]:
        keys = list(self.sampler)
        usable = len(keys) // self.batch_size * self.batch_size if self.drop_last else len(keys)
        batches = [keys[start:start + self.batch_size] for start in range(0, usable, self.batch_size)]
        return _Epoch(self, batches).run()


class _Epoch:
    """One pass over the batches: the threads, the batches in flight, and the consumer's side."""

    def __init__(self, loader: ThreadLoader, batches: list[list]):
        self.loader = loader
        self.batches = batches
        self.cond = threading.Condition()
        self.pending: dict[int, _Pending] = {}
        self.next_row = (0, 0)
        """(batch, row) the next thread to ask takes."""
        self.consumed = 0
        """Batches handed to the consumer."""
        self.stopping = False
        self.threads: list[threading.Thread] = []

    def run(self) -> Iterator[Batch]:
        started = threading.Barrier(self.loader.num_workers + 1)
        for number in range(self.loader.num_workers):
            thread = threading.Thread(target=self._work, args=(number, started), daemon=True,
                                      name=f"{THREAD_NAME}-{number}")
            thread.start()
            self.threads.append(thread)
        started.wait()
        # Each thread set torch's intra-op threads to 1 for itself, and so torch's default for threads started from
        # now on: this thread's own count is that default again.
        torch.set_num_threads(torch.get_num_threads())
        try:
            for number in range(len(self.batches)):
                yield self._take(number)
        finally:  # also where the consumer stops early or a step raised
            with self.cond:
                self.stopping = True
                self.cond.notify_all()
            for thread in self.threads:
                thread.join()

    def _take(self, number: int) -> Batch:
        with self.cond:
            while number not in self.pending or self.pending[number].left:
                self.cond.wait()
            pending = self.pending.pop(number)
            self.consumed = number + 1
            self.cond.notify_all()
        if pending.error is not None:
            raise pending.error
        return self._batch(pending)

    def _batch(self, pending: _Pending) -> Batch:
        if pending.images is None:  # the device decode path: files and crops, collated as the workers' are
            batch = collate_encoded(pending.samples)
            return batch.pin_memory() if self.loader.pin_memory else batch
        labels = torch.tensor([sample.label for sample in pending.samples], dtype=torch.int64)
        skipped = tuple(sample.skipped for sample in pending.samples if sample.skipped is not None)
        return Batch(pending.images, labels.pin_memory() if self.loader.pin_memory else labels, skipped)

    def _claim(self) -> tuple[int, int, _Pending] | None:
        """The next row to make (waiting while `depth` batches are ahead of the consumer), or None at the end."""
        with self.cond:
            while True:
                number, row = self.next_row
                if self.stopping or number >= len(self.batches):
                    return None
                if number < self.consumed + self.loader.depth:
                    break
                self.cond.wait()
            keys = self.batches[number]
            if row == 0:
                self.pending[number] = self._open(keys)
            self.next_row = (number, row + 1) if row + 1 < len(keys) else (number + 1, 0)
            return number, row, self.pending[number]

    def _open(self, keys: list) -> _Pending:
        images = None
        if self.loader.dataset.device_plan is None:
            images = self.loader.batches.take((len(keys), *self.loader.image_shape))
        return _Pending(keys, images, [None] * len(keys), left=len(keys))

    def _work(self, number: int, started: threading.Barrier) -> None:
        # torch sets a thread's intra-op threads from its default at the thread's first parallel op unless that
        # was done already: done here first (get_num_threads), so that restoring the default keeps this one's.
        torch.get_num_threads()
        torch.set_num_threads(1)
        reads_as(number)
        started.wait()
        while (claimed := self._claim()) is not None:
            batch, row, pending = claimed
            try:
                pending.samples[row] = self._sample(pending, row)
            except BaseException as error:  # noqa: BLE001 - raised again in the consumer's thread
                pending.error = pending.error or error
            with self.cond:
                pending.left -= 1
                if not pending.left:
                    self.cond.notify_all()

    def _sample(self, pending: _Pending, row: int) -> Sample:
        key = pending.keys[row]
        epoch, index = key if isinstance(key, tuple) else (0, key)
        out = None if pending.images is None else pending.images[row]
        sample = self.loader.dataset.sample_from(epoch, index, out=out)
        if out is not None and sample.image is not out:
            if tuple(sample.image.shape) != self.loader.image_shape:
                raise ValueError(f"a sample of shape {tuple(sample.image.shape)} where the batch holds "
                                 f"{self.loader.image_shape}")
            out.copy_(sample.image)
        return sample
