"""Input-pipeline runs of `dlscale loader` in the report: what they hold and the workers table (their plot:
report/workers.py). No matplotlib: report/load.py reads them for `dlscale scale` too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

HEADERS = ["run", "decode", "workers", "kind", "img/s", "speedup", "files/s", "file GB/s", "storage GB/s", "CPU busy"]
CSV = ["run", "decode", "workers", "workers_kind", "images_per_s", "speedup", "files_per_s", "file_read_gb_per_s",
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
            kind = worker_kind(s)
            values = [run.name, run.summary.get("decode"), s["workers"], kind, s["images_per_s"], s["speedup"],
                      s["files_per_s"], s["file_read_gb_per_s"], s["storage_read_gb_per_s"], s["cpu_cores_busy"]]
            raw.append([*values, str(run.path)])
            shown.append([run.name, values[1], s["workers"], kind, f"{s['images_per_s']:.1f}", f"{s['speedup']:.2f}x",
                          f"{s['files_per_s']:.1f}", f"{s['file_read_gb_per_s']:.4f}",
                          f"{s['storage_read_gb_per_s']:.4f}", f"{s['cpu_cores_busy']:.2f}"])
    return shown, raw


def worker_kind(setting: dict) -> str:
    """A loader setting's kind of workers: main (0 workers), thread or process (runs from before the kinds
    were measured had worker processes)."""
    kind = setting.get("workers_kind")
    return kind if isinstance(kind, str) else "main" if setting["workers"] == 0 else "process"
