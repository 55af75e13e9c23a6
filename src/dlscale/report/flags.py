"""Figures that cannot be true, marked with their likely cause wherever they are printed or drawn.

A scaling efficiency above 100% says that N ranks did more than N times the work of the baseline's
ranks per second. With the same work per rank on idle, equal devices that cannot happen; when it is
measured, the baseline was slow (a loaded host, more threads than cores) or the runs did not do the
same work. `above_ideal` names what the two runs' own records show, most telling first:

- different work per rank: another batch per rank (strong scaling);
- different threads per rank (torchrun sets OMP_NUM_THREADS=1 for several ranks per node and leaves one
  rank alone): the baseline's threads contend where cores are short;
- oversubscription at the baseline: its ranks x threads above the cores it could use (env.json);
- a loaded host at the baseline: a load average at or above those cores (env.json, where recorded);
- noise: the two measurements' 95% intervals reach the ideal;
- else a slow baseline of unknown cause (re-measure it on an idle machine).

A figure whose run's own record shows it is not the model's speed (its threads' share of the time, an interval
wider than its mean: metrics/host_load.py's disturbance) is marked too: `host_note` names it, its cells carry
HOST_MARK, its plot points a grey square, and an efficiency against a baseline so measured is marked the
same way.
"""

from __future__ import annotations

from dlscale.metrics.host_load import run_disturbance
from dlscale.rundir import Run, number

LIMIT = 1.0005
"""Efficiencies from here up print as above 100.0% and are marked."""
MARK = " (!)"
"""What a marked figure carries in a table cell."""
HOST_MARK = " (?)"
"""What a figure carries in a table cell when its run (or its baseline) did not measure the model's speed."""


def host_note(run: Run, base: Run | None = None) -> str:
    """'' or one line: which of the run and its baseline did not measure the model's speed, with the evidence of
    its own record."""
    notes = [f"{who}{r.name}: {reason}" for who, r in (("", run), ("baseline ", base))
             if r is not None and (r is run or r.path != run.path) and (reason := run_disturbance(r))]
    return "; ".join(notes)


def host_cell(text: str, run: Run | None) -> str:
    """A table cell of the run's rate, marked where its own record shows it is not the model's speed."""
    return text + (HOST_MARK if run is not None and run_disturbance(run) else "")


def impossible(efficiency: float | None) -> bool:
    return efficiency is not None and efficiency >= LIMIT


def above_ideal(run: Run, base: Run, efficiency: float | None) -> str:
    """'' for an efficiency of 100% or less; else one line: the figure is impossible and why it was measured."""
    if not impossible(efficiency):
        return ""
    causes = [text for _, text in likely_causes(run, base)]
    return (f"efficiency {100 * efficiency:.1f}% is above 100%, impossible for the same work per rank; "
            f"likely cause: {'; '.join(causes)}")


def short_cause(run: Run, base: Run) -> str:
    """The first likely cause in a few words, for a plot's annotation."""
    return likely_causes(run, base)[0][0]


def likely_causes(run: Run, base: Run) -> list[tuple[str, str]]:
    """(a few words, the evidence) of each cause the records show; never empty."""
    causes = []
    if base.per_rank_batch and run.per_rank_batch and base.per_rank_batch != run.per_rank_batch:
        causes.append(("different work per rank", f"different work per rank: {base.per_rank_batch} images per rank "
                                                  f"at the baseline ({base.name}), {run.per_rank_batch} here"))
    threads, cores = _threads(base), _cores(base)
    if base.device == "cpu" and threads and _threads(run) and threads != _threads(run):
        causes.append(("different threads per rank", f"different threads per rank: {threads} at the baseline, "
                                                     f"{_threads(run)} here (a slower baseline where they contend)"))
    if base.device == "cpu" and threads and cores and threads * base.world_size > cores:
        causes.append(("oversubscribed baseline", f"oversubscription at the baseline: {base.world_size} rank(s) x "
                                                  f"{threads} threads on {cores} cores"))
    load = _load(base)
    if load is not None and cores and load >= cores:
        causes.append(("loaded host at the baseline", f"a loaded host at the baseline: load average {load:.2f} on "
                                                      f"{cores} cores"))
    if _within_noise(run, base):
        causes.append(("within noise", "noise: the two measurements' 95% intervals reach the ideal"))
    if not causes:
        causes.append(("slow baseline?", f"a slow baseline ({base.name}) of unrecorded cause, such as other work on "
                                         "a shared host: re-measure it on an idle machine"))
    return causes


def _host(run: Run) -> dict:
    """The run's host_load record (env.json's at the start, else summary.json's: metrics/host_load.py)."""
    for record in (run.env, run.summary):
        host = record.get("host_load")
        if isinstance(host, dict):
            return host
    return {}


def _threads(run: Run) -> int | None:
    value = number(_host(run).get("threads_per_rank")) or number(run.env.get("torch_threads"))
    return int(value) if value else None


def _cores(run: Run) -> int | None:
    value = (number(_host(run).get("cores_available")) or number(run.env.get("cpu_available"))
             or number(run.env.get("cpu_count")))
    return int(value) if value else None


def _load(run: Run) -> float | None:
    """The host's load average when the run started, where its env.json or summary.json recorded one (a
    `load_average*`, `load_avg*` or `loadavg*` field: a number, a list of the 1-, 5- and 15-minute averages,
    or a start/end pair), at its top level or in its host_load record."""
    for record in (run.env, run.summary, _host(run)):
        for key, value in record.items():
            if key.startswith(("load_average", "load_avg", "loadavg")):
                found = _first_number(value)
                if found is not None:
                    return found
    return None


def _first_number(value) -> float | None:
    if isinstance(value, dict):
        value = value.get("start", next(iter(value.values()), None))
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    return number(value)


def _within_noise(run: Run, base: Run) -> bool:
    if not (run.total_ci95 and base.total_ci95 and run.total_ips and base.total_ips):
        return False
    scale = run.world_size / base.world_size
    ideal, ideal_ci = base.total_ips * scale, base.total_ci95 * scale
    return run.total_ips - run.total_ci95 <= ideal + ideal_ci
