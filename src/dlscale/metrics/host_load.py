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

The load average samples the host at two moments and lags by a minute; what the run measured of itself says
whether it got its cores: the share of its threads' time it ran, and how far its rate swung from one timed
iteration (or log window) to the next. `disturbance` judges a finished run by those two, with the load
samples beside them; every place that shows a run's rates marks them with it (the terminal, report's tables,
CSV files and plots, the sweep's table) and `dlscale explain` ranks the host as a cause by it.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.metrics.hardware import available_cores
from dlscale.rundir import Run, number

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


# ------------------------------------------------------------------------- a finished run's own evidence

SHARE_FLOOR = 0.5
"""A CPU run's compute threads run all the time the step computes; one whose threads ran less than half the time
they could (rank 0's CPU time over the timed part, its waits for data taken out) waited for a core longer than it
ran: its rates are at least 2x below what the cores give the model, a measure of the host's other work (or of
its own oversubscription), not of the model. The bench that showed it (`make bench` beside other work)
recorded 45% and an interval wider than its mean."""
Z95 = 1.96
"""The +- of a rate: 1.96 x the population standard deviation over its timed iterations (metrics/timing.py)."""


def disturbance(record: Mapping | None, *, cpu: bool, mean: float | None, ci95: float | None,
                computing: float = 1.0) -> str | None:
    """Why a finished run's rates are not the model's speed, in one clause: the run's own evidence (own_evidence)
    with the load samples beside it; None when its own evidence shows nothing."""
    own = own_evidence(record, cpu=cpu, mean=mean, ci95=ci95, computing=computing)
    return " and ".join(own) + load_samples(record or {}) if own else None


def own_evidence(record: Mapping | None, *, cpu: bool, mean: float | None, ci95: float | None,
                 computing: float = 1.0) -> list[str]:
    """What the run measured of itself that makes its rates no measure of the model: on a CPU, its threads' share
    of the time below SHARE_FLOOR (the host's other work or its own oversubscription kept them off the cores); a
    95% interval wider than its mean. computing: the share of the timed part the run was not waiting for data
    (total over compute img/s)."""
    own = []
    share = number((record or {}).get("thread_share"))
    if cpu and share is not None:
        ran = min(share / min(max(computing, 0.01), 1.0), 1.0)
        if ran < SHARE_FLOOR:
            waits = "" if computing >= 0.99 else ", data waits left out"
            own.append(f"its threads ran {100 * ran:.0f}% of the time they could (rank 0's CPU time{waits})")
    if mean and ci95 is not None and ci95 > mean:
        own.append(f"its 95% interval (+-{ci95:.1f}) is wider than its mean ({mean:.1f} img/s)")
    return own


def load_samples(record: Mapping) -> str:
    """'; load average 1.40 at the start, 3.90 at the end, on 2 cores', as far as the record has them."""
    said = [f"{value[0]:.2f} at the {when}" for when, value in (("start", record.get("load_avg_start")),
                                                             ("end", record.get("load_avg_end")))
            if isinstance(value, list) and value and number(value[0]) is not None]
    cores = number(record.get("host_cores")) or number(record.get("cores_available"))
    return f"; load average {', '.join(said)}{f', on {cores:.0f} cores' if cores else ''}" if said else ""


def run_disturbance(run: Run) -> str | None:
    """disturbance() of a run as its directory records it (metrics/host_load.py's record in env.json and
    summary.json; bench: its iterations' interval; train: its steady log windows' rates)."""
    return disturbance(host_record(run), **_measured(run))


def run_evidence(run: Run) -> list[str]:
    """own_evidence() of a run as its directory records it."""
    return own_evidence(host_record(run), **_measured(run))


def _measured(run: Run) -> dict:
    mean, ci95 = rate_spread(run)
    total, compute = run.steady_rates()
    return {"cpu": run.device == "cpu", "mean": mean, "ci95": ci95,
            "computing": total / compute if total and compute else 1.0}


def host_record(run: Run) -> dict:
    """The run's host_load record: env.json's at the start, updated by summary.json's at the end."""
    env, summary = run.env.get("host_load"), run.summary.get("host_load")
    return {**(env if isinstance(env, dict) else {}), **(summary if isinstance(summary, dict) else {})}


def rate_spread(run: Run) -> tuple[float | None, float | None]:
    """(mean, 95% half-width) of the run's rate: a bench's over its timed iterations, a train run's over its log
    windows after each epoch's first (two at least)."""
    if run.kind == "bench":
        return run.total_ips, run.total_ci95
    rates = [w["throughput_img_per_s"] for w in run.steady_windows() if number(w.get("throughput_img_per_s"))]
    if len(rates) < 2:
        return None, None
    return statistics.fmean(rates), Z95 * statistics.pstdev(rates)


def marked(text: str, reason: str) -> str:
    """The terminal's line after a run's rates when disturbance() found a reason: what to read into them."""
    return (f"warning: {text} not the model's speed: {reason}; run where nothing else runs (dlscale explain "
            "ranks the causes)")
