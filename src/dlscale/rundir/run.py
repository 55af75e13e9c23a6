"""What a run directory holds, as report, explain and predict read it: Run (a bench or train run) and
CommRun (a comm run's fits and rows). The figures every throughput run has are under one name each
(schema.FIGURES); what only one kind records is asked of the summary by its own key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dlscale.rundir.schema import FIGURES, VERSION, number

SPEED_FLAGS = ("channels_last", "fused_optimizer", "cudnn_benchmark", "compile", "cuda_graphs")


@dataclass(frozen=True)
class Run:
    """One finished run of dlscale bench or train, as its files describe it."""

    path: Path
    summary: dict
    config: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    windows: tuple[dict, ...] = ()
    """metrics.jsonl's log-window records (`record: train`; train runs)."""
    epochs: tuple[dict, ...] = ()
    """Per-epoch validation records (train runs): epoch, val_top1_pct, elapsed_s, ..."""
    sweep: str | None = None
    """Name of the sweep directory this run belongs to, if any."""
    point: dict = field(default_factory=dict)
    """The run's entry in sweep.json (settings, series, nnodes), if any."""
    schema: int = VERSION

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
        return int(self.point.get("nnodes") or self.summary.get("num_nodes") or 1)

    def figure(self, name: str) -> float | None:
        """A figure of schema.FIGURES, from the key this run's kind writes it under; None: not measured."""
        key = FIGURES[name].get(self.kind)
        return None if key is None else number(self.summary.get(key))

    @property
    def total_ips(self) -> float | None:
        """Measured images/s summed over ranks."""
        return self.figure("total_ips")

    @property
    def total_ci95(self) -> float | None:
        return self.figure("total_ci95")

    @property
    def per_rank_ips(self) -> float | None:
        """The mean of the ranks' rates (bench), else the total over the ranks."""
        if self.kind in FIGURES["per_rank_ips"]:
            return self.figure("per_rank_ips")
        return self.per_device_ips

    @property
    def per_rank_ci95(self) -> float | None:
        return self.figure("per_rank_ci95")

    @property
    def per_device_ips(self) -> float | None:
        """The total over the ranks."""
        total = self.total_ips
        return None if total is None else total / self.world_size

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
        """Images per rank per step."""
        value = self.summary.get("batch_size")
        return int(value) if value else None

    @property
    def per_rank_batch(self) -> int | None:
        return self.summary.get("batch_size")

    @property
    def global_batch(self) -> int | None:
        return self.summary.get("global_batch_size")

    @property
    def final_top1(self) -> float | None:
        return number(self.summary.get("final_top1_pct"))

    @property
    def train_time_s(self) -> float | None:
        return number(self.summary.get("train_time_s"))

    @property
    def options(self) -> tuple[str, ...]:
        """Speed options that were on, in a fixed order."""
        return tuple(flag for flag in SPEED_FLAGS if self.summary.get(flag))

    @property
    def setting(self) -> str:
        """Precision and speed options, e.g. 'amp_bf16 +channels_last'."""
        return " ".join([self.summary.get("precision", "?"), *(f"+{o}" for o in self.options)])

    @property
    def data(self) -> str:
        """The data set's name ('synthetic' for bench)."""
        return str(self.summary.get("data") or self.config.get("data", {}).get("name") or "synthetic")

    @property
    def data_settings(self) -> dict:
        """The data settings of a train run ({} for bench: synthetic batches already on the device)."""
        return self.config.get("data", {}) if self.kind == "train" else {}

    def speed(self, key: str) -> bool | None:
        """A speed option as the run recorded it (bench: summary; train: config speed.*)."""
        if key in self.summary:
            return self.summary[key]
        return self.config.get("speed", {}).get(key)

    def steady_windows(self) -> list[dict]:
        """Log windows after the first of each epoch (whose data wait includes the workers' start)."""
        seen, steady = set(), []
        for window in self.windows:
            if window.get("epoch") in seen:
                steady.append(window)
            seen.add(window.get("epoch"))
        return steady

    def steady_rates(self) -> tuple[float | None, float | None]:
        """(total, compute) images/s: the bench's figures, or the mean over a train run's log windows after
        each epoch's first (all windows when there are no others); compute leaves the data wait out."""
        if self.kind == "bench":
            return self.total_ips, self.figure("compute_ips")
        windows = self.steady_windows() or list(self.windows)
        pairs = [(w["throughput_img_per_s"], w["compute_img_per_s"]) for w in windows
                 if number(w.get("throughput_img_per_s")) and number(w.get("compute_img_per_s"))]
        if not pairs:
            return self.total_ips, None
        return sum(p[0] for p in pairs) / len(pairs), sum(p[1] for p in pairs) / len(pairs)

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

    def io_windows(self) -> tuple[dict, ...]:
        """The log windows that carry the input pipeline's read counters (io_*) and their length."""
        return tuple(w for w in self.windows if w.get("io_read_bytes") is not None and number(w.get("window_s")))


@dataclass(frozen=True)
class CommRun:
    """A `dlscale comm` run: its summary.json (kind comm) as bench/comm.py writes it."""

    path: Path
    summary: dict

    @property
    def ranks(self) -> int:
        return int(self.summary["world_size"])

    @property
    def per_node(self) -> int:
        return int(self.summary.get("local_world_size") or self.ranks)

    @property
    def num_nodes(self) -> int:
        return int(self.summary.get("num_nodes") or 1)

    def all_reduce(self, level: str = "world") -> dict | None:
        """all_reduce's entry at a level (world, intra, inter): its ranks, rows and fits; None: not measured."""
        entry = (self.summary.get("results") or {}).get(level, {}).get("all_reduce")
        return entry if isinstance(entry, dict) else None

    def largest(self) -> tuple[int, float, str] | None:
        """(size in bytes, busbw GB/s, column) of all_reduce at its largest measured size over all ranks:
        the faster of the out-of-place and in-place columns (what the network delivered)."""
        rows = [row for row in (self.all_reduce() or {}).get("rows", [])
                if row.get("out-of-place") or row.get("in-place")]
        if not rows:
            return None
        row = max(rows, key=lambda r: r["size"])
        column = max((m for m in ("out-of-place", "in-place") if row.get(m)), key=lambda m: row[m]["busbw_gbs"])
        return row["size"], row[column]["busbw_gbs"], column
