"""What the input pipeline read: files and bytes counted by the data set, and the kernel's counters of
the processes that read them (the main process and its DataLoader workers).

No kernel counter gives file opens, so the data set counts them itself, with the bytes of the files it
opened (what a source with load_sized() says it read; one os.stat per file for another source, and for a file
it could not read), in a shared-memory tensor with one row per process (main = row 0,
worker k = row k + 1) or per loader thread (thread k = row k + 1, data.workers_kind=thread): workers never
write the same element and no lock is needed. Each row also holds the pid of the process that last loaded
through it, which is how the main process finds its workers' /proc counters, also when the DataLoader restarts
them every epoch (the rows outlive them); loader threads are the main process's, in its own counters.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import torch
from torch.utils.data import get_worker_info

from dlscale.metrics.proc_io import ProcessReads

FILES, BYTES, PID = 0, 1, 2
_thread = threading.local()


def reads_as(worker: int) -> None:
    """Count this thread's reads in worker `worker`'s row (a loader thread of data.workers_kind=thread)."""
    _thread.row = worker + 1


class CountingSource:
    """A source that counts the files it opens and their bytes, and which process opened them."""

    def __init__(self, source, workers: int):
        self.source = source
        self.counts = torch.zeros((workers + 1, 3), dtype=torch.int64).share_memory_()
        self.has_files = hasattr(source, "path")
        self.sized = hasattr(source, "load_sized")
        self._rows = None

    def __len__(self) -> int:
        return len(self.source)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_rows": None}  # a spawned worker makes its own view of the shared tensor

    @property
    def rows(self):
        """The counts as a numpy view of the same shared memory: adding to an element is a few hundred
        nanoseconds that keep the GIL, where a tensor's indexing and add are several dispatches that each
        release and take it again (which loader threads on other cores then contend for)."""
        if self._rows is None:
            self._rows = self.counts.numpy()
        return self._rows

    def load(self, index: int):
        info = get_worker_info()
        row = self.rows[getattr(_thread, "row", 0) if info is None else info.id + 1]
        size = None
        try:
            if not self.sized:
                return self.source.load(index)
            image, label, size = self.source.load_sized(index)
            return image, label
        finally:
            if self.has_files:
                row[FILES] += 1
                row[BYTES] += _size(self.source.path(index)) if size is None else size
            row[PID] = os.getpid()

    def totals(self) -> tuple[int, int]:
        files, size = self.counts[:, :PID].sum(dim=0).tolist()
        return int(files), int(size)

    def worker_pids(self) -> list[int]:
        """Processes other than this one that have loaded samples (the current worker of each row)."""
        me = os.getpid()
        return [pid for pid in self.counts[:, PID].tolist() if pid and pid != me]


def _size(path: str) -> int:
    """The size of a file the source could not read or says no size of; 0 where it is gone (removed while the run
    reads it: the data set skips it as unreadable, and counting it must not raise instead)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def count_reads(loader) -> CountingSource:
    """Wrap the source of a DataLoader of ImageDataset in a CountingSource (before its workers start)."""
    counting = CountingSource(loader.dataset.source, loader.num_workers)
    loader.dataset.source = counting
    return counting


class ReadMeter:
    """A loader's reads since the last sample(): the data set's file counts and the kernel's counters
    of the main process and its workers, as one dict of differences:

        files, file_bytes        files the data set opened and their sizes
        read_bytes, read_calls   /proc rchar and syscr: every byte and read() call of those processes
        storage_read_bytes       /proc read_bytes: what had to come from storage (page-cache misses)
        cpu_s                    their CPU seconds

    also: the pids of other processes of the pipeline (a decode process), counted with them.
    """

    def __init__(self, counting: CountingSource, also: Callable[[], list[int]] | None = None):
        self.counting = counting
        self.also = also
        self.processes = ProcessReads()
        self.counted = (0, 0)
        self.sample()

    def sample(self) -> dict[str, float]:
        files, size = self.counting.totals()
        pids = [os.getpid(), *self.counting.worker_pids(), *(self.also() if self.also else [])]
        os_delta = self.processes.sample(list(dict.fromkeys(pids)))
        delta = {"files": float(files - self.counted[0]), "file_bytes": float(size - self.counted[1]),
                 "read_bytes": os_delta["rchar"], "read_calls": os_delta["syscr"],
                 "storage_read_bytes": os_delta["read_bytes"], "cpu_s": os_delta["cpu_s"]}
        self.counted = (files, size)
        return delta
