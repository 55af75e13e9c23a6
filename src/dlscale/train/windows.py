"""Log windows: what training measures between two log steps, and what a run's summary keeps of them.

A window keeps its losses on the device and its data wait and forward passes in device timers, so no
step waits for the device. The log step closes it: one device synchronisation before its clock is read,
then one collective over the ranks (dlscale.distributed.reductions): the sums that make the job's loss,
throughput and reads, and every rank's step, data wait and forward time (dlscale.metrics.ranks). The
summary keeps the ranks' times and rank 0's communication of every window but the epochs' first: their
data wait includes the loader workers' start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from dlscale.data.counting import ReadMeter
from dlscale.distributed import over_ranks
from dlscale.metrics.ranks import lead_times, slowest, stragglers
from dlscale.metrics.timing import DeviceTimer, time_forward
from dlscale.strategies.base import Strategy
from dlscale.train.step import no_regions

READ_KEYS = ("files", "file_bytes", "read_bytes", "read_calls", "storage_read_bytes", "cpu_s")
"""What the input pipeline read in a window (data.counting.ReadMeter), summed over ranks, and the CPU
time of the training processes and their loader workers."""

RANK_TIMES = ("step_ms", "data_ms", "forward_ms")
"""Each rank's times per step in a window, gathered from every rank."""


@dataclass
class Window:
    """Loss and timing since the last log step; losses stay on the device until then."""

    start: float
    data: DeviceTimer
    """The time the device waited for its batches (on the CPU: the time the step waited)."""
    forward: DeviceTimer
    """The forward passes, timed without a host synchronisation (LogWindows.forward, reset for this window)."""
    forward_in_regions: bool = False
    first: bool = False
    """The epoch's first window: its data wait includes the loader workers' start-up."""
    images: int = 0
    steps: int = 0
    losses: list = field(default_factory=list)

    def add(self, loss: torch.Tensor, images: int) -> None:
        self.losses.append(loss)
        self.images += images
        self.steps += 1

    def regions(self, name: str):
        """train_step's regions: the forward timer around "forward", nothing around the other parts."""
        return self.forward if self.forward_in_regions and name == "forward" else no_regions(name)


class LogWindows:
    """A run's log windows: opens each, closes it into its record's figures, keeps what the summary needs."""

    def __init__(self, device: torch.device, *, model: nn.Module, strategy: Strategy, compiled: bool,
                 reads: ReadMeter | None, sync: Callable[[], None], clock: Callable[[], float]) -> None:
        self.device, self.model, self.strategy = device, model, strategy
        self.reads = reads
        """What the training input pipeline read (data set counts and /proc counters), per window."""
        self.sync, self.clock = sync, clock
        """The device synchronisation that ends every window before the host clock is read."""
        self.forward = DeviceTimer(device)
        """Times the forward passes (by hooks on the model unless it is compiled)."""
        self.forward_in_regions = compiled
        """A compiled model: its forward is timed as train_step's "forward" region (with DDP's broadcast)."""
        if not compiled:
            time_forward(model, self.forward)
        self.rank_windows: list[dict] = []
        """Each window's per-rank step, data wait, forward and lead (data + forward) times in ms per step."""
        self.comm_windows: list[tuple[float, float]] = []
        """Each window's communication per step as the strategy's own timer measured it on this rank (ms,
        bytes), for strategies that time it (not DDP: its allreduce runs inside backward)."""

    def open(self, first: bool = False) -> Window:
        """A window from now. An epoch's first counts the training input's reads from here (opened before the
        loader starts its workers, so evaluation's reads are left out); every later one from the previous
        window's close, without a gap: the workers load while the main process logs."""
        if first and self.reads is not None:
            self.reads.sample()
        self.forward.reset()
        return Window(self.clock(), DeviceTimer(self.device), self.forward, self.forward_in_regions, first=first)

    def close(self, window: Window, *, also_sum: Mapping[str, list[float]]) -> tuple[dict, dict]:
        """The window's figures over all ranks and also_sum's figures summed over them: one device sync, one
        collective (and the strategy's consensus distance, one allreduce of the model, where it has one)."""
        mean_loss = torch.stack(window.losses).double().mean()
        self.sync()  # the window's device work is done before its clock is read
        elapsed = self.clock() - window.start
        data_s, forward_s = window.data.total_s(), window.forward.total_s()
        reads = self.reads.sample() if self.reads is not None else {}
        ranks = over_ranks(
            self.device,  # sums over ranks: the ranks' rates add up to the job's throughput
            sum={"loss": mean_loss, "images_per_s": window.images / elapsed,
                 "compute_images_per_s": window.images / max(elapsed - data_s, 1e-9),
                 **{key: reads.get(key, 0.0) for key in READ_KEYS}, **also_sum},
            gather={"step_ms": 1000 * elapsed / window.steps, "data_ms": 1000 * data_s / window.steps,
                    "forward_ms": 1000 * forward_s / window.steps})  # the one host sync of the window
        total, rate = ranks.sum, ranks.sum["images_per_s"]
        step_ms, data_ms, forward_ms = (ranks.gather[key] for key in RANK_TIMES)
        figures = {
            "train_loss": total["loss"] / len(step_ms), "throughput_img_per_s": rate,
            "compute_img_per_s": total["compute_images_per_s"],
            "data_time_ms": 1000 * data_s / window.steps, "step_time_ms": 1000 * elapsed / window.steps,
            **self._strategy_figures(), **_reads_record(total, elapsed, rate * elapsed), "window_s": elapsed,
            **self._ranks_record(window, step_ms, data_ms, forward_ms),
        }
        if not window.first and figures["comm_time_ms_per_step"] is not None:
            self.comm_windows.append((figures["comm_time_ms_per_step"], figures["comm_bytes_per_step"]))
        return figures, {name: total[name] for name in also_sum}

    def _strategy_figures(self) -> dict:
        """Communication per step since the last log step, and, for strategies whose replicas drift apart,
        the consensus distance (one allreduce of the model: only on log steps)."""
        stats = self.strategy.comm_stats()
        self.strategy.reset_stats()
        return {"comm_time_ms_per_step": stats["comm_time_ms_per_step"],
                "comm_bytes_per_step": stats["comm_bytes_per_step"], **self.strategy.metrics(self.model)}

    def _ranks_record(self, window: Window, step_ms: list, data_ms: list, forward_ms: list) -> dict:
        """Every rank's step, data wait and forward time per step, and the slowest rank by lead time
        (data wait + forward: what allreduce does not even out; dlscale.metrics.ranks)."""
        lead = lead_times([data_ms], [forward_ms])[0]
        rank, excess = slowest(lead)
        if not window.first:
            self.rank_windows.append({"step": step_ms, "data": data_ms, "forward": forward_ms, "lead": lead})
        return {"rank_step_ms": step_ms, "rank_data_ms": data_ms, "rank_forward_ms": forward_ms,
                "slowest_rank": rank, "slowest_excess_pct": 100 * excess}

    def summary(self) -> dict:
        """Each rank's mean step, data wait, forward and lead time per step over the windows, the straggler
        verdict over them, and rank 0's mean communication per step (None for strategies that do not time
        it); epochs' first windows left out. metrics.jsonl has each window."""
        windows = self.rank_windows

        def mean(key: str) -> list[float] | None:
            if not windows:
                return None
            return [sum(w[key][r] for w in windows) / len(windows) for r in range(len(windows[0][key]))]

        comm = self.comm_windows
        return {"rank_step_ms": mean("step"), "rank_data_ms": mean("data"), "rank_forward_ms": mean("forward"),
                "rank_lead_ms": mean("lead"), "stragglers": stragglers([w["lead"] for w in windows]),
                "comm_time_ms_per_step": sum(t for t, _ in comm) / len(comm) if comm else None,
                "comm_bytes_per_step": sum(b for _, b in comm) / len(comm) if comm else None}


def _reads_record(read: dict, elapsed: float, images: float) -> dict:
    """The window's reads over all ranks, as counts and rates (docs/explain.md#io-throughout-training), and
    the CPU of the training processes and their loader workers: cores busy, ms per image trained."""
    return {
        "host_cpu_cores": read["cpu_s"] / elapsed, "host_cpu_ms_per_image": 1000 * read["cpu_s"] / max(images, 1e-9),
        "io_files": int(read["files"]), "io_file_bytes": int(read["file_bytes"]),
        "io_read_bytes": int(read["read_bytes"]), "io_read_calls": int(read["read_calls"]),
        "io_storage_read_bytes": int(read["storage_read_bytes"]),
        "io_files_per_s": read["files"] / elapsed, "io_file_read_gb_per_s": read["file_bytes"] / elapsed / 1e9,
        "io_read_gb_per_s": read["read_bytes"] / elapsed / 1e9, "io_read_ops_per_s": read["read_calls"] / elapsed,
        "io_storage_read_gb_per_s": read["storage_read_bytes"] / elapsed / 1e9,
    }
