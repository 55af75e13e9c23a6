"""What processes read and how much CPU they used, from the kernel's per-process counters (no torch).

    /proc/<pid>/io    rchar       bytes returned by read() and friends: page-cache hits and the
                                  pipes between loader workers and the main process included
                      read_bytes  bytes the process caused to be fetched from storage (page-cache
                                  misses); 0 when the data are cached, and on file systems without
                                  a block device (tmpfs)
                      syscr       read system calls
    /proc/<pid>/stat  utime+stime CPU seconds

`dlscale loader` sums them over the main process and its DataLoader workers for a timed window;
`dlscale train` does the same for every log window (ProcessReads), where workers may be restarted
each epoch (data.persistent_workers=false).
"""

from __future__ import annotations

import os

COUNTERS = ("rchar", "read_bytes", "syscr", "cpu_s")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def read_counters(pid: int) -> dict[str, float] | None:
    """rchar, read_bytes, syscr and cpu_s of a process; None when it is gone (or there is no /proc)."""
    counters = dict.fromkeys(COUNTERS, 0.0)
    try:
        with open(f"/proc/{pid}/io") as file:
            for line in file:
                key, _, value = line.partition(":")
                if key in counters:
                    counters[key] = float(value)
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()  # after "(command name)"
        counters["cpu_s"] = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
    except (OSError, IndexError, ValueError):
        return None
    return counters


def process_counters(pid: int) -> dict[str, float]:
    """read_counters, with zeros for a process that already exited (or no /proc)."""
    return read_counters(pid) or dict.fromkeys(COUNTERS, 0.0)


def sum_counters(pids: list[int]) -> dict[str, float]:
    totals = dict.fromkeys(COUNTERS, 0.0)
    for pid in pids:
        for key, value in process_counters(pid).items():
            totals[key] += value
    return totals


class ProcessReads:
    """The counters of a changing set of processes (a main process and its loader workers), as
    differences: each sample(pids) returns what they did since the previous sample.

    The processes of the first sample count from that sample. A process first seen later started
    after it (workers start with an epoch's first batch, or again every epoch when they are not
    persistent): the kernel starts a new process's counters at 0, so all of its counts are new.
    A process that exited since the last sample is dropped; what it did after that sample is lost,
    which a training loop avoids by sampling after the epoch's last batch, when such a worker has
    nothing left to read.
    """

    def __init__(self) -> None:
        self.last: dict[int, dict[str, float]] | None = None

    def sample(self, pids: list[int]) -> dict[str, float]:
        now = {pid: counters for pid in dict.fromkeys(pids) if (counters := read_counters(pid)) is not None}
        delta = dict.fromkeys(COUNTERS, 0.0)
        if self.last is not None:
            for pid, counters in now.items():
                before = self.last.get(pid)
                for key in COUNTERS:
                    delta[key] += counters[key] - (before[key] if before else 0.0)
        self.last = now
        return delta
