"""Does a run get its cores? The host's load and the compute threads against the cores this process may
use, one line at the start when they will slow the run, and the record of both (no torch).

    host = HostLoad.start(ranks_per_node=2, threads_per_rank=torch.get_num_threads())
    host.warning()                 # one line, or None
    env["host_load"] = host.at_start()
    host.timed()                   # the timed part begins: the process's CPU time counts from here
    summary["host_load"] = host.finish()

On a 2-core machine that other work loaded (load average 1.4-4.7), torch's default 2 threads per rank
ran a ResNet-50 bench up to 40x slower than one thread: an OpenMP thread that waits at a barrier for a
peer the kernel has descheduled spins. Hence both checks: ranks x intra-op threads against the cores
(sched_getaffinity: what SLURM or taskset leave this process), and the 1-minute load average against them.

The load average is /proc/loadavg's (os.getloadavg), or that of the file DLSCALE_LOADAVG_FILE names, in
the same format: a container's own view of its load, or a machine made to look loaded in the tests.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.metrics.hardware import available_cores

LOADAVG_FILE_VARIABLE = "DLSCALE_LOADAVG_FILE"

LoadAverage = tuple[float, float, float]


def read_loadavg(environ: Mapping[str, str] | None = None) -> LoadAverage | None:
    """The 1-, 5- and 15-minute load averages: of the file DLSCALE_LOADAVG_FILE names, else the kernel's;
    None where the system has none."""
    environ = os.environ if environ is None else environ
    path = environ.get(LOADAVG_FILE_VARIABLE)
    if not path:
        try:
            return os.getloadavg()
        except OSError:
            return None
    try:
        fields = Path(path).read_text().split()
        return float(fields[0]), float(fields[1]), float(fields[2])
    except (OSError, ValueError, IndexError):
        raise ConfigError(f"{LOADAVG_FILE_VARIABLE}={path}: not a readable load average (the format of "
                          "/proc/loadavg: '1.00 0.50 0.25 ...'); unset it to read the kernel's") from None


def loadavg_source(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    return environ.get(LOADAVG_FILE_VARIABLE) or "/proc/loadavg"


@dataclass
class HostLoad:
    """One rank's view of the cores it shares: its node's ranks, their threads, the cores it may use, the
    load average at the start and end, and its own CPU time over the timed part."""

    ranks_per_node: int
    threads_per_rank: int
    """torch's intra-op threads (OMP_NUM_THREADS, torch.set_num_threads)."""
    cores: int
    """The cores this process may use (its affinity mask)."""
    load_start: LoadAverage | None
    host_cores: int | None = None
    """The machine's cores, which its load average is spread over (default: `cores`)."""
    source: str = "/proc/loadavg"
    loadavg: Callable[[], LoadAverage | None] = field(default=read_loadavg, repr=False)
    cpu_clock: Callable[[], float] = field(default=time.process_time, repr=False)
    """This process's CPU time, every thread's, user and system."""
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)
    _timed_from: tuple[float, float] | None = field(default=None, repr=False)

    @classmethod
    def start(cls, ranks_per_node: int, threads_per_rank: int, *, cores: int | None = None,
              host_cores: int | None = None, loadavg: Callable[[], LoadAverage | None] = read_loadavg) -> HostLoad:
        cores = cores or available_cores()
        return cls(max(ranks_per_node, 1), max(threads_per_rank, 1), cores, loadavg(),
                   host_cores or max(os.cpu_count() or cores, cores), loadavg_source(), loadavg)

    @property
    def machine_cores(self) -> int:
        return self.host_cores or self.cores

    @property
    def threads(self) -> int:
        """Compute threads of the node's ranks together."""
        return self.ranks_per_node * self.threads_per_rank

    @property
    def oversubscribed(self) -> bool:
        return self.threads > self.cores

    @property
    def loaded(self) -> bool:
        """Other work already keeps more than the machine's cores busy (the 1-minute average at the start): the
        load average counts the whole machine's runnable tasks, so it is set against the machine's cores (a job
        given 4 of a node's 64 is not loaded by work on the other 60); where they are the process's own, the
        same."""
        return self.load_start is not None and self.load_start[0] > self.machine_cores

    def advice(self) -> str:
        """What to set: threads per rank that fit the cores, fewer ranks where one core each does not fit ("" when
        one rank of one thread already runs). On a loaded host the others keep every core busy: one rank of
        one thread suffers least."""
        free = 1 if self.loaded else self.cores
        ranks = min(self.ranks_per_node, free)
        threads = max(free // ranks, 1)
        out = [f"OMP_NUM_THREADS={threads} (now {self.threads_per_rank})"] if threads < self.threads_per_rank else []
        if ranks < self.ranks_per_node:
            out.append(f"fewer ranks per node (--nproc {ranks}, now {self.ranks_per_node})")
        return " and ".join(out)

    def warning(self) -> str | None:
        """One line when the ranks' threads exceed the cores or the load average already does; else None."""
        said = []
        if self.oversubscribed:
            said.append(f"{self.ranks_per_node} rank(s) x {self.threads_per_rank} threads = {self.threads} compute "
                        f"threads on the {self.cores} cores this process may use")
        if self.loaded:
            said.append(f"the host is already loaded: load average {self.load_start[0]:.2f} over the last minute "
                        f"on {self.machine_cores} cores")
        if not said:
            return None
        settings = self.advice()
        fix = " or ".join(([f"set {settings}"] if settings else []) +
                          (["run where nothing else runs"] if self.loaded else []))
        return (f"warning: {' and '.join(said)}: threads wait for cores and the figures come out low (dlscale "
                f"explain ranks it); {fix}")

    def at_start(self) -> dict:
        """env.json's record: the load at the start and the threads against the cores."""
        return {"load_avg_start": list(self.load_start) if self.load_start else None, "load_avg_source": self.source,
                "cores_available": self.cores, "host_cores": self.machine_cores, "ranks_per_node": self.ranks_per_node,
                "threads_per_rank": self.threads_per_rank, "threads_per_node": self.threads,
                "oversubscribed": self.oversubscribed, "loaded": self.loaded}

    @staticmethod
    def start_part(record: dict | None) -> dict | None:
        """at_start's part of a finished record (summary.json's), for env.json written after the work."""
        keys = ("load_avg_start", "load_avg_source", "cores_available", "host_cores", "ranks_per_node",
                "threads_per_rank", "threads_per_node", "oversubscribed", "loaded")
        return {key: record.get(key) for key in keys} if record else None

    def timed(self) -> None:
        """The timed part begins."""
        self._timed_from = (self.clock(), self.cpu_clock())

    def finish(self) -> dict:
        """summary.json's record: at_start's, the load at the end, and the process's CPU time over the timed
        part (from timed(), else from the start of this record's life) as cores busy and as a share of what its
        threads could have run."""
        wall_from, cpu_from = self._timed_from or (self.clock(), self.cpu_clock())
        wall, cpu = self.clock() - wall_from, self.cpu_clock() - cpu_from
        end = self.loadavg()
        busy = cpu / wall if wall > 0 else None
        return {**self.at_start(), "load_avg_end": list(end) if end else None, "timed_s": wall,
                "process_cpu_s": cpu, "process_cores_busy": busy,
                "thread_share": busy / self.threads_per_rank if busy is not None else None,
                "warning": self.warning()}
