"""What `dlscale explain` reads: run directories (summary.json, config.json, env.json, metrics.jsonl)
and sweep directories (sweep.json and a run directory per point). JSON only: no torch, no matplotlib.
Every problem with the input is a ConfigError of one line.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.report.files import KINDS, number, read_json


@dataclass(frozen=True)
class RunFacts:
    """One bench or train run as its files describe it."""

    path: Path
    summary: dict
    config: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    windows: tuple[dict, ...] = ()
    """metrics.jsonl's log-step records (train runs)."""

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def kind(self) -> str:
        return self.summary["kind"]

    @property
    def world_size(self) -> int:
        return int(self.summary.get("world_size") or 1)

    @property
    def num_nodes(self) -> int:
        return int(self.summary.get("num_nodes") or 1)

    @property
    def model(self) -> str:
        return str(self.summary.get("model") or self.config.get("model", {}).get("name") or "?")

    @property
    def precision(self) -> str:
        return str(self.summary.get("precision") or self.config.get("precision") or "fp32")

    @property
    def device(self) -> str:
        return str(self.summary.get("device") or self.env.get("device_type") or "cpu")

    @property
    def device_name(self) -> str:
        return str(self.summary.get("device_name") or self.env.get("device_name") or self.device)

    @property
    def batch(self) -> int | None:
        value = self.summary.get("batch_size")
        return int(value) if value else None

    @property
    def total_ips(self) -> float | None:
        key = "img_per_sec_total_mean" if self.kind == "bench" else "total_ips"
        return number(self.summary.get(key))

    @property
    def per_device_ips(self) -> float | None:
        total = self.total_ips
        return None if total is None else total / self.world_size

    def steady_rates(self) -> tuple[float | None, float | None]:
        """(total, compute) images/s: the bench's figures, or the mean over a train run's log windows after
        each epoch's first (all windows when there are no others); compute leaves the data wait out."""
        if self.kind == "bench":
            return self.total_ips, number(self.summary.get("compute_ips"))
        windows = self.steady_windows() or list(self.windows)
        pairs = [(w["throughput_img_per_s"], w["compute_img_per_s"]) for w in windows
                 if w.get("throughput_img_per_s") and w.get("compute_img_per_s")]
        if not pairs:
            return self.total_ips, None
        return sum(p[0] for p in pairs) / len(pairs), sum(p[1] for p in pairs) / len(pairs)

    def speed(self, key: str) -> bool | None:
        """A speed option as the run recorded it (bench: summary; train: config speed.*)."""
        if key in self.summary:
            return self.summary[key]
        return self.config.get("speed", {}).get(key)

    @property
    def data(self) -> dict:
        """The data settings of a train run ({} for bench: synthetic batches already on the device)."""
        return self.config.get("data", {}) if self.kind == "train" else {}

    def comm_per_step(self) -> tuple[float | None, float | None, str]:
        """(ms, bytes) of communication per step as the strategy's own timer measured it, and where that
        comes from: summary.json (bench: the slowest rank; train: rank 0's mean over its log windows), else
        the mean of metrics.jsonl's log windows (train runs written before the summary held it)."""
        if number(self.summary.get("comm_time_ms_per_step")) is not None:
            where = "the slowest rank" if self.kind == "bench" else "rank 0, mean of its log windows"
            return self.summary["comm_time_ms_per_step"], number(self.summary.get("comm_bytes_per_step")), where
        timed = [w for w in (self.steady_windows() or list(self.windows))
                 if number(w.get("comm_time_ms_per_step")) is not None]
        if not timed:
            return None, None, ""
        sent = [w["comm_bytes_per_step"] for w in timed if number(w.get("comm_bytes_per_step")) is not None]
        return (sum(w["comm_time_ms_per_step"] for w in timed) / len(timed), sum(sent) / len(sent) if sent else None,
                f"rank 0, mean of {len(timed)} log windows in metrics.jsonl")

    def steady_windows(self) -> list[dict]:
        """Log windows after the first of each epoch (whose data wait includes the workers' start)."""
        seen, steady = set(), []
        for window in self.windows:
            if window.get("epoch") in seen:
                steady.append(window)
            seen.add(window.get("epoch"))
        return steady


def read_run(path: str | Path) -> RunFacts:
    """A run directory of dlscale bench or train."""
    directory = Path(path)
    if not directory.is_dir():
        raise ConfigError(f"{directory}: no such directory; give a run directory of dlscale bench or train, "
                          "or a sweep directory of dlscale scale")
    file = directory / "summary.json"
    if not file.is_file():
        raise ConfigError(f"{directory} holds no summary.json: not a finished run of dlscale bench or train "
                          "(nor a sweep: no sweep.json)")
    summary = read_json(file, " the command")
    if summary.get("kind") not in KINDS:
        raise ConfigError(f"{directory} is a {summary.get('kind', 'unknown')} run; dlscale explain reads bench, "
                          "train and scale runs")
    if "world_size" not in summary:
        raise ConfigError(f"{file}: no world_size; not written by dlscale bench or train")
    for key in ("world_size", "num_nodes"):
        value = summary.get(key)
        if key == "num_nodes" and value is None:
            continue  # not recorded: one node
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{file}: {key} {value!r} is not a positive whole number; not as dlscale bench or "
                              "train writes it: re-run, or remove the directory")
    config = read_json(directory / "config.json") if (directory / "config.json").is_file() else {}
    env = read_json(directory / "env.json") if (directory / "env.json").is_file() else {}
    return RunFacts(directory, summary, config, env, _windows(directory / "metrics.jsonl"))


def _windows(log: Path) -> tuple[dict, ...]:
    if not log.is_file():
        return ()
    windows = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        if isinstance(record, dict) and record.get("record") == "train":
            windows.append(record)
    return tuple(windows)


def read_runs(path: str | Path) -> list[RunFacts]:
    """A run directory, or a sweep directory's finished points (smallest world size first)."""
    directory = Path(path)
    sweep = directory / "sweep.json"
    if not sweep.is_file():
        return [read_run(directory)]
    points = read_json(sweep, " dlscale scale").get("points", [])
    done = [p["run_dir"] for p in points if p.get("status") in ("ok", "submitted") and p.get("run_dir")]
    runs = [read_run(directory / name) for name in done if (directory / name / "summary.json").is_file()]
    if not runs:
        raise ConfigError(f"{directory}: the sweep has no finished point to explain")
    return sorted(runs, key=lambda r: (r.world_size, r.name))


@dataclass(frozen=True)
class CommRun:
    """A `dlscale comm` run: its summary.json (kind comm) as bench/comm.py writes it."""

    path: Path
    summary: dict

    @classmethod
    def read(cls, path: str | Path) -> CommRun:
        directory = Path(path)
        file = directory / "summary.json"
        if not file.is_file():
            raise ConfigError(f"--comm-run {directory}: no summary.json; give a run directory of dlscale comm")
        summary = read_json(file, " dlscale comm")
        if summary.get("kind") != "comm":
            raise ConfigError(f"--comm-run {directory} is a {summary.get('kind', 'unknown')} run; give a run "
                              "directory of dlscale comm")
        if isinstance(summary.get("world_size"), bool) or not isinstance(summary.get("world_size"), int):
            raise ConfigError(f"{file}: no world_size; not written by dlscale comm")
        return cls(directory, summary)

    @property
    def ranks(self) -> int:
        return int(self.summary["world_size"])

    @property
    def per_node(self) -> int:
        return int(self.summary.get("local_world_size") or self.ranks)

    def largest(self) -> tuple[int, float, str] | None:
        """(size in bytes, busbw GB/s, column) of all_reduce at its largest measured size over all ranks:
        the faster of the out-of-place and in-place columns (what the network delivered)."""
        entry = self.summary.get("results", {}).get("world", {}).get("all_reduce")
        rows = [row for row in (entry or {}).get("rows", []) if row.get("out-of-place") or row.get("in-place")]
        if not rows:
            return None
        row = max(rows, key=lambda r: r["size"])
        column = max((m for m in ("out-of-place", "in-place") if row.get(m)), key=lambda m: row[m]["busbw_gbs"])
        return row["size"], row[column]["busbw_gbs"], column

    def remeasure(self, size: int) -> str:
        nodes = int(self.summary.get("num_nodes") or 1)
        words = ["torchrun", *(["--nnodes", str(nodes)] if nodes > 1 else []), "--nproc_per_node",
                 str(self.per_node), "-m", "dlscale", "comm", "--op", "all_reduce", "-e", str(size)]
        return shlex.join(words)
