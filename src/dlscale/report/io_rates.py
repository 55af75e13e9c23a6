"""I/O throughout training, as HAL's report shows it (docs/references.md#hal-io: file-system GB/s and IOPS
over a whole ImageNet run, averaged over epochs 10 to 60): each train run's read GB/s and read
operations per second per log window over time, on twin axes, and their averages over an epoch range.

The figures are what `dlscale train` records per log window over all ranks (metrics.jsonl, io_*): bytes
and read() calls of the main processes and their loader workers from /proc/<pid>/io, and the files the
data sets opened. A window's rate is its count over its own duration; the average over an epoch range
is total counts over total window time (a time-weighted mean, as HAL's per-minute counters give).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from dlscale.errors import ConfigError, shown
from dlscale.report.figure import figure, legend
from dlscale.rundir import Run

HEADERS = ["run", "epochs", "read GB/s", "read ops/s", "files/s", "file GB/s", "storage GB/s", "windows"]
CSV = ["run", "first_epoch", "last_epoch", "read_gb_per_s", "read_ops_per_s", "files_per_s", "file_read_gb_per_s",
       "storage_read_gb_per_s", "windows", "path"]


def parse_epochs(text: str | None) -> tuple[int, int] | None:
    """`--io-epochs 10:60` (inclusive, HAL's range) -> (10, 60); None: every epoch."""
    if not text:
        return None
    first, sep, last = text.partition(":")
    try:
        span = (int(first), int(last)) if sep else (int(first), int(first))
    except ValueError:
        span = (-1, -1)
    if span[0] < 0 or span[1] < span[0]:
        raise ConfigError(f"--io-epochs {shown(text)}: give FIRST:LAST epochs (counted from 0), e.g. 10:60")
    return span


@dataclass(frozen=True)
class IORun:
    path: Path
    windows: tuple[dict, ...]

    @property
    def name(self) -> str:
        return self.path.name

    def within(self, epochs: tuple[int, int] | None) -> list[dict]:
        if epochs is None:
            return list(self.windows)
        return [w for w in self.windows if epochs[0] <= w["epoch"] <= epochs[1]]


def io_runs(runs: list[Run]) -> list[IORun]:
    """The runs whose log windows carry read counters."""
    return [IORun(run.path, run.io_windows()) for run in runs if run.io_windows()]


def averages(windows: list[dict]) -> dict | None:
    """Time-weighted rates over windows: total counts over total seconds."""
    seconds = sum(w["window_s"] for w in windows)
    if not windows or seconds <= 0:
        return None
    total = lambda key: sum(w.get(key) or 0 for w in windows)  # noqa: E731
    return {"read_gb_per_s": total("io_read_bytes") / seconds / 1e9, "read_ops_per_s": total("io_read_calls") / seconds,
            "files_per_s": total("io_files") / seconds, "file_read_gb_per_s": total("io_file_bytes") / seconds / 1e9,
            "storage_read_gb_per_s": total("io_storage_read_bytes") / seconds / 1e9, "windows": len(windows)}


def table(runs: list[IORun], epochs: tuple[int, int] | None) -> tuple[list, list]:
    shown, raw = [], []
    for run in runs:
        windows = run.within(epochs)
        mean = averages(windows)
        if mean is None:
            continue
        first, last = windows[0]["epoch"], windows[-1]["epoch"]
        raw.append([run.name, first, last, mean["read_gb_per_s"], mean["read_ops_per_s"], mean["files_per_s"],
                    mean["file_read_gb_per_s"], mean["storage_read_gb_per_s"], mean["windows"], str(run.path)])
        shown.append([run.name, f"{first}-{last}", f"{mean['read_gb_per_s']:.4f}", f"{mean['read_ops_per_s']:.0f}",
                      f"{mean['files_per_s']:.1f}", f"{mean['file_read_gb_per_s']:.4f}",
                      f"{mean['storage_read_gb_per_s']:.4f}", mean["windows"]])
    return shown, raw


def plot(runs: list[IORun], epochs: tuple[int, int] | None) -> Figure | str:
    """Read GB/s (solid, left axis) and read operations/s (dashed, right axis) per log window against
    the run's elapsed time; the chosen epoch range shaded, its averages in the legend."""
    if not runs:
        return "needs train runs that recorded their reads (io_* in metrics.jsonl)"
    span = "all epochs" if epochs is None else f"epochs {epochs[0]}-{epochs[1]}"
    fig, (ax,) = figure("I/O throughout training", f"per log window, over all ranks; averages over {span}")
    ops = ax.twinx()
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    for run, color in zip(runs, colors, strict=False):
        x = [w.get("elapsed_s", i) for i, w in enumerate(run.windows)]
        mean = averages(run.within(epochs)) or {"read_gb_per_s": 0.0, "read_ops_per_s": 0.0}
        ax.plot(x, [w["io_read_gb_per_s"] for w in run.windows], color=color,
                label=f"{run.name}: {mean['read_gb_per_s']:.4f} GB/s, {mean['read_ops_per_s']:.0f} ops/s")
        ops.plot(x, [w["io_read_ops_per_s"] for w in run.windows], color=color, linestyle="--")
        inside = [xi for xi, w in zip(x, run.windows, strict=True) if w in run.within(epochs)]
        if epochs is not None and inside:
            ax.axvspan(min(inside), max(inside), color=color, alpha=0.08)
    ax.set_xlabel("elapsed seconds of the run")
    ax.set_ylabel("read GB/s (solid)")
    ops.set_ylabel("read operations per second (dashed)")
    legend(ax)
    return fig
