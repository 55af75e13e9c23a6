"""Epoch times, as Marconi100's thesis and SC20's log give them.

An epoch's own time is its `elapsed_s` minus the previous epoch's (SC20's "Time taken for epoch N is
79.9 sec": training and validation of that epoch). A run's epoch time is the mean over its epochs after
the first (the first also starts the loader workers and warms caches), or the first alone. Marconi100
draws it against GPUs in one node and against nodes (report/epoch_plot.py) and against DataLoader
workers (report/workers.py). No matplotlib here: the tables use it.
"""

from __future__ import annotations

from dlscale.rundir import Run, number


def epoch_times(run: Run) -> list[tuple[int, float]]:
    """(epoch, its own seconds) of every epoch whose predecessor's elapsed time is known (epoch 0: its own)."""
    out, previous = [], None
    for record in run.epochs:
        epoch, elapsed = record.get("epoch"), number(record.get("elapsed_s"))
        if not isinstance(epoch, int) or elapsed is None:
            previous = None
            continue
        if epoch == 0:
            out.append((0, elapsed))
        elif previous is not None and previous[0] == epoch - 1:
            out.append((epoch, elapsed - previous[1]))
        previous = (epoch, elapsed)
    return out


def epoch_time(run: Run) -> float | None:
    """The mean of a run's epoch times after the first; the first alone when there is one."""
    times = [seconds for _, seconds in epoch_times(run)]
    steady = times[1:] or times
    return sum(steady) / len(steady) if steady else None
