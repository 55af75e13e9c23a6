"""Input-pipeline runs of `dlscale loader` in the report: the workers table and speedup plot.

Beside them, Marconi100's published speedups over DataLoader workers (4 V100s, ResNet training:
4.0x at 16 workers; references/marconi100.json) when that reference is selected.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlscale.report.figure import figure, legend, save
from dlscale.report.references import Reference

HEADERS = ["run", "decode", "workers", "img/s", "speedup", "files/s", "file GB/s", "storage GB/s", "CPU busy"]
CSV = ["run", "decode", "workers", "images_per_s", "speedup", "files_per_s", "file_read_gb_per_s",
       "storage_read_gb_per_s", "cpu_cores_busy", "path"]


@dataclass(frozen=True)
class LoaderRun:
    path: Path
    summary: dict

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def settings(self) -> list[dict]:
        return self.summary.get("settings", [])


def table(loaders: list[LoaderRun]) -> tuple[list, list]:
    shown, raw = [], []
    for run in loaders:
        for s in run.settings:
            values = [run.name, run.summary.get("decode"), s["workers"], s["images_per_s"], s["speedup"],
                      s["files_per_s"], s["file_read_gb_per_s"], s["storage_read_gb_per_s"], s["cpu_cores_busy"]]
            raw.append([*values, str(run.path)])
            shown.append([run.name, values[1], s["workers"], f"{s['images_per_s']:.1f}", f"{s['speedup']:.2f}x",
                          f"{s['files_per_s']:.1f}", f"{s['file_read_gb_per_s']:.4f}",
                          f"{s['storage_read_gb_per_s']:.4f}", f"{s['cpu_cores_busy']:.2f}"])
    return shown, raw


def speedup_plot(path: Path, loaders: list[LoaderRun], references: list[Reference]) -> str | None:
    """Speedup over each run's first worker count, against workers, with Marconi100's if selected."""
    if not loaders:
        return "needs runs of dlscale loader"
    fig, (ax,) = figure("Input pipeline: speedup vs DataLoader workers",
                               "speedup over each run's first setting; img/s of the pipeline alone")
    workers: list[int] = []
    for run in loaders:
        points = [(s["workers"], s["speedup"]) for s in run.settings]
        workers += [w for w, _ in points]
        rate = max(s["images_per_s"] for s in run.settings)
        ax.plot([w for w, _ in points], [v for _, v in points], marker="o",
                label=f"{run.name} ({run.summary.get('decode')} decode, best {rate:.0f} img/s)")
    for ref in references:
        for series in ref.of_kind("workers"):
            points = [(p["workers"], p["speedup"]) for p in series.points]
            workers += [w for w, _ in points]
            ax.plot(*zip(*points, strict=True), linestyle=":", marker="s", color="gray",
                    label=f"{series.label} (epoch-time speedup)")
    ticks = sorted(set(workers))
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlabel("DataLoader worker processes (0: loading in the main process)")
    ax.set_ylabel("speedup over the first setting (x)")
    legend(ax)
    save(fig, path)
    return None
