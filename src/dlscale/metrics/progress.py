"""How far a long command is and how long it has left: a bar on a terminal, plain lines elsewhere.

On a terminal (stdout is a TTY and TERM is not `dumb`) a `ProgressDisplay` draws one bar with
rich: what is running, done of total, the caller's figures (loss, img/s), the time elapsed and
the time left. It is redrawn from the caller's updates only, at most every REDRAW_S seconds (no
drawing thread, so nothing competes with a timed step for the interpreter, unless `live=True`
for a command that only waits, such as a sweep). Lines printed while it shows (the benchmark's
Horovod lines, epoch lines, warnings) appear above it as they are; the bar is removed when the
work ends, so a terminal keeps exactly the lines a log file gets.

Elsewhere (a pipe, a CI log, a SLURM job's log file) the same facts are one plain line starting
with `progress:`, printed at most every DLSCALE_PROGRESS_EVERY seconds (30) and never before that
much time has passed: a short command prints nothing more than it always did, and the lines that
parsers read (`Total img/sec on ...`, `epoch N: val top1 ...`) are never touched.

DLSCALE_PROGRESS=auto (default), bar, plain or off overrides the choice.

Imports no torch: commands that never load it (report, predict) can use it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

MODES = ("auto", "bar", "plain", "off")
PLAIN_EVERY_S = 30.0
"""Seconds between two plain progress lines (DLSCALE_PROGRESS_EVERY)."""
REDRAW_S = 0.5
"""Least seconds between two redraws of the bar from updates (rendering costs about a millisecond)."""


def resolve_mode(environ: Mapping[str, str] | None = None, stream=None) -> str:
    """bar, plain or off: DLSCALE_PROGRESS if it names one, else bar on a terminal and plain elsewhere."""
    environ = os.environ if environ is None else environ
    mode = environ.get("DLSCALE_PROGRESS", "auto").strip().lower()
    if mode in MODES and mode != "auto":
        return mode
    stream = sys.stdout if stream is None else stream
    tty = bool(getattr(stream, "isatty", lambda: False)())
    return "bar" if tty and environ.get("TERM", "") != "dumb" else "plain"


def plain_every_s(environ: Mapping[str, str] | None = None) -> float:
    environ = os.environ if environ is None else environ
    try:
        return max(float(environ.get("DLSCALE_PROGRESS_EVERY", PLAIN_EVERY_S)), 0.0)
    except ValueError:
        return PLAIN_EVERY_S


def format_eta(seconds: float | None) -> str:
    """H:MM:SS (hours unbounded), '?' when unknown."""
    if seconds is None or seconds != seconds or seconds < 0 or seconds == float("inf"):
        return "?"
    total = int(round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def remaining_s(done: float, total: float, rate_per_s: float | None) -> float | None:
    """Seconds to finish total at rate_per_s (units per second); None without a rate."""
    if rate_per_s is None or rate_per_s <= 0:
        return None
    return max(total - done, 0.0) / rate_per_s


def _count(value: float) -> str:
    """1200000 -> '1200000', 2.5 -> '2.5' (never '1.2e+06')."""
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


@dataclass
class _Task:
    description: str
    total: float | None
    unit: str
    completed: float
    started: float
    status: str = ""
    left: str | None = None
    """The caller's own estimate of the time left, as text; None: from the rate since the first update."""
    first: tuple[float, float] | None = None
    """(time, completed) at the first update: the rate leaves out whatever preceded it (start-up)."""

    def rate(self, now: float) -> float | None:
        if self.first is None or now <= self.first[0] or self.completed <= self.first[1]:
            return None
        return (self.completed - self.first[1]) / (now - self.first[0])

    def text(self, now: float) -> str:
        """`12/97 steps, loss 2.31, 0:00:05 elapsed, 0:00:31 left` (without the description)."""
        count = _count(self.completed) + (f"/{_count(self.total)}" if self.total is not None else "")
        parts = [f"{count} {self.unit}".strip()]
        if self.status:
            parts.append(self.status)
        parts.append(f"{format_eta(now - self.started)} elapsed")
        if self.left is not None:
            parts.append(self.left)
        elif self.total is not None:
            left = remaining_s(self.completed, self.total, self.rate(now))
            if left is not None:
                parts.append(f"{format_eta(left)} left")
        return ", ".join(parts)


class ProgressDisplay:
    """One piece of work at a time (start() replaces the last); update() as it goes; close() at the end.

    Disabled (enabled=False: ranks other than 0), or in mode off, every call does nothing.
    """

    def __init__(self, *, enabled: bool = True, mode: str | None = None, every_s: float | None = None,
                 live: bool = False, clock: Callable[[], float] = time.monotonic,
                 out: Callable[[str], None] | None = None) -> None:
        self.mode = (mode or resolve_mode()) if enabled else "off"
        self.every_s = plain_every_s() if every_s is None else every_s
        self.live = live
        self.clock = clock
        self.out = out or (lambda line: print(line, flush=True))
        self.task: _Task | None = None
        self._bar = None  # rich's Progress and its task id, from the first start() on a terminal
        self._bar_task = None
        self._drawn = 0.0
        self._last_line: float | None = None

    @property
    def active(self) -> bool:
        return self.mode != "off"

    def start(self, description: str, total: float | None, *, unit: str = "steps", completed: float = 0,
              status: str = "") -> None:
        if not self.active:
            return
        now = self.clock()
        self.task = _Task(description, total, unit, completed, now, status)
        if self._last_line is None:
            self._last_line = now  # the first plain line comes every_s after the work began
        if self.mode == "bar":
            self._start_bar()
            self._bar.reset(self._bar_task, total=total, completed=completed, description=description)
            self._draw(now, force=True)

    def update(self, completed: float | None = None, *, advance: float = 0, status: str | None = None,
               left: str | None = None, redraw: bool = False) -> None:
        """New figures of the current work; left: the caller's estimate of the time left, as text;
        redraw: draw the bar now, however recently it was drawn (for infrequent updates)."""
        task = self.task
        if task is None or not self.active:
            return
        now = self.clock()
        task.completed = (task.completed if completed is None else completed) + advance
        if task.first is None:
            task.first = (now, task.completed)
        if status is not None:
            task.status = status
        if left is not None:
            task.left = left
        if self.mode == "bar":
            self._draw(now, force=redraw)
        elif now - self._last_line >= self.every_s:
            self._last_line = now
            self.out(f"progress: {task.description} {task.text(now)}")

    def close(self) -> None:
        """Remove the bar (a terminal keeps only the lines printed above it)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        self.task = None

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start_bar(self) -> None:
        if self._bar is not None:
            return
        # markup and highlighting off, soft wrap on: lines printed above the bar come out as printed.
        console = Console(markup=False, highlight=False, soft_wrap=True, force_terminal=True)
        columns = (TextColumn("{task.description}"), BarColumn(bar_width=24), TextColumn("{task.fields[text]}"))
        self._bar = Progress(*columns, console=console, transient=True, auto_refresh=self.live, refresh_per_second=1,
                             redirect_stdout=True, redirect_stderr=True)
        self._bar_task = self._bar.add_task(self.task.description, total=self.task.total, text="")
        self._bar.start()

    def _draw(self, now: float, force: bool = False) -> None:
        if not force and now - self._drawn < REDRAW_S:
            return
        task = self.task
        self._bar.update(self._bar_task, completed=task.completed, total=task.total, description=task.description,
                         text=task.text(now))
        self._bar.refresh()
        self._drawn = now
