"""Where a training run's numbers go: metrics.jsonl, TensorBoard, NVIDIA's raport file, the terminal.

Only rank 0 constructs a Records with `enabled=True`; on other ranks every call does nothing.
Keys carry units: `_pct` percent, `_s` seconds, `_ms` milliseconds, `_img_per_s` images/s.

With --mlflow, the same records go to MLflow (dlscale.metrics.tracking): config.json as parameters,
each record's numbers as `train/<key>` or `epoch/<key>` at its step, the summary, the run directory.

The terminal: on a TTY a progress bar (epoch, step, loss, img/s, the time left in the epoch and
in the run) follows every step and the epoch lines print above it; elsewhere every log step's
line (`epoch 0 step 5: loss ...`) as before, with a plain `progress:` line carrying the time left
at most every 30 s (dlscale.metrics.progress).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path

from dlscale.metrics.progress import ProgressDisplay, format_eta
from dlscale.metrics.tracking import Tracker, TrackingTarget, numbers
from dlscale.rundir import RunDir, json_line, open_append, read_json, storing

# TensorBoard tags (docs/references.md#tensorboard-tags; HAL and SC20 log the same quantities). Log steps
# and epoch ends write disjoint tags, so every tag is one increasing sequence of steps.
TB_TRAIN_TAGS = {"train_loss": "loss/train", "lr": "lr", "throughput_img_per_s": "throughput/train",
                 "consensus_distance": "consensus/distance", "comm_time_ms_per_step": "comm/time_ms_per_step",
                 **{f"io_{key}": f"io/{key}" for key in ("read_gb_per_s", "read_ops_per_s", "files_per_s",
                                                         "file_read_gb_per_s", "storage_read_gb_per_s")}}
"""io/*: what the input pipeline read per second in each log window, over all ranks (HAL's file-system
GB/s and IOPS over a run: docs/references.md#hal-io)."""
TB_EPOCH_TAGS = {"val_loss": "loss/val", "val_top1_pct": "top1/val", "val_top5_pct": "top5/val",
                 "throughput_img_per_s": "throughput/epoch"}

# NVIDIA ConvNets' metrics with the metadata its register_metric calls give them, in its order
# (image_classification/logger.py, TrainingMetrics and ValidationMetrics; docs/references.md#dllogger-format).
_LOSS = {"unit": None, "format": ":.5f"}
_IPS = {"unit": "images/s", "format": ":.2f"}
_TIME = {"unit": "s", "format": ":.5f"}
_ACC = {"unit": "%", "format": ":.2f"}
DLLL_METADATA = {
    "train.loss": _LOSS, "train.compute_ips": _IPS, "train.total_ips": _IPS, "train.data_time": _TIME,
    "train.compute_time": _TIME, "train.lr": {}, "train.grad_scale": _LOSS,
    "val.top1": _ACC, "val.top5": _ACC, "val.loss": _LOSS, "val.compute_ips": _IPS, "val.total_ips": _IPS,
    "val.data_time": _TIME, "val.compute_latency": _TIME, "val.compute_latency_at100": _TIME,
    "val.compute_latency_at99": _TIME, "val.compute_latency_at95": _TIME,
}
"""train.lr is registered without metadata: its METADATA line carries {}."""

# Record key -> dllogger key; `_ms` values are logged in seconds, as ConvNets logs its times.
# train.compute_time is the iteration time less the data wait (ConvNets: it_time - data_time),
# derived from step_time_ms and data_time_ms in _dlll_data.
DLLL_KEYS = {
    "train_loss": "train.loss",
    "throughput_img_per_s": "train.total_ips",
    "compute_img_per_s": "train.compute_ips",
    "data_time_ms": "train.data_time",
    "lr": "train.lr",
    "grad_scale": "train.grad_scale",
    "val_top1_pct": "val.top1",
    "val_top5_pct": "val.top5",
    "val_loss": "val.loss",
    "val_compute_img_per_s": "val.compute_ips",
    "val_total_img_per_s": "val.total_ips",
    "val_data_time_ms": "val.data_time",
    "val_compute_latency_ms": "val.compute_latency",
    "val_compute_latency_at100_ms": "val.compute_latency_at100",
    "val_compute_latency_at99_ms": "val.compute_latency_at99",
    "val_compute_latency_at95_ms": "val.compute_latency_at95",
}
SUMMARY_MEANS = ("val.total_ips", "val.compute_ips", "val.compute_latency")
"""Validation metrics the final record carries as their mean over epochs (ConvNets' run average)."""


def time_left(*, iteration: int, steps_per_epoch: int, step: int, total_steps: int | None, step_s: float,
              wall_s_per_step: float | None) -> tuple[float, float | None]:
    """(seconds left in the epoch, in the run). The epoch's from the last log window's step time; the
    run's from the wall time per step since this attempt's first log step, which counts evaluations and
    checkpoints once an epoch has ended (the window's step time until then)."""
    epoch_left = max(steps_per_epoch - iteration, 0) * step_s
    if total_steps is None:
        return epoch_left, None
    return epoch_left, max(total_steps - step, 0) * (wall_s_per_step or step_s)


class Records:
    def __init__(self, run: RunDir | None, *, enabled: bool, resume_step: int = 0,
                 raport_file: str | Path | None = None, tensorboard: bool = True,
                 steps_per_epoch: int | None = None, epochs: int | None = None,
                 display: ProgressDisplay | None = None, tracking: TrackingTarget | None = None) -> None:
        self.enabled = enabled and run is not None
        self.run = run
        self.writer = None
        self.raport = None
        self.raport_path = ""
        self.steps_per_epoch, self.epochs = steps_per_epoch, epochs
        self.display = display or ProgressDisplay(enabled=self.enabled)
        self._shown_epoch: int | None = None
        self._first_log: tuple[float, int] | None = None
        """(time, step) of this attempt's first log step: the run's wall time per step counts from it."""
        self._epoch_end: tuple[int, float] | None = None
        """(epoch, elapsed_s) of the last epoch this attempt printed: the next epoch's own time counts from it."""
        self.tracker = Tracker(None, run_name="")
        self.ended = "FAILED"
        """How the MLflow run ends if close() comes before a summary: the run raised."""
        if not self.enabled:
            return
        if tracking is not None:
            self.tracker = Tracker(tracking, run_name=run.path.name, run_dir=run.path,
                                   tags={"dlscale.kind": "train", "dlscale.run_dir": str(run.path.resolve())})
            if (run.path / "config.json").is_file():  # every setting as written, its schema version included
                self.tracker.params(read_json(run.path / "config.json"))
        self.started = datetime.now()  # dllogger's elapsedtime counts from its Logger's creation
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: events at or after the resume step, left by an interrupted attempt,
            # are hidden, so every tag reads as one increasing sequence (docs/references.md#tensorboard-purge-step).
            self._thread_hook, threading.excepthook = threading.excepthook, self._thread_failed  # before its thread
            try:
                with storing(run.path / "tb"):
                    self.writer = SummaryWriter(str(run.path / "tb"), purge_step=resume_step or None)
            except BaseException:
                threading.excepthook = self._thread_hook
                raise
        if raport_file:
            self.raport = open_append(raport_file, "--raport-file")  # closed in close()
            self.raport_path = raport_file

    def _thread_failed(self, args) -> None:
        """TensorBoard's writer thread lets a failed write escape (a traceback on stderr) and raises it again in
        this thread at the next add_scalar, flush or close, which makes it one line: the thread's is not shown."""
        if isinstance(args.exc_value, OSError) and type(args.thread).__name__ == "_AsyncWriterThread":
            return
        self._thread_hook(args)

    def parameters(self, params: dict) -> None:
        """The run's parameters (one PARAMETER record), then one METADATA record per metric."""
        if not self.enabled:
            return
        self._dlll("LOG", step="PARAMETER", data=params)
        for metric, metadata in DLLL_METADATA.items():
            self._dlll("METADATA", metric=metric, metadata=metadata)

    def train(self, record: dict) -> None:
        """One log step: record has epoch, step, iteration and the training metrics."""
        if not self.enabled:
            return
        self.run.append({"record": "train", **record})
        self.tracker.metrics(numbers(record, "train/", skip=("step",)), record["step"])
        self._scalars(TB_TRAIN_TAGS, record, record["step"])
        self._dlll("LOG", step=[record["epoch"], record["iteration"]], data=self._dlll_data(record))
        figures = (f"loss {record['train_loss']:.4f} lr {record['lr']:.5f} "
                   f"{record['throughput_img_per_s']:.1f} img/s")
        if self.display.mode != "bar":
            print(f"epoch {record['epoch']} step {record['step']}: {figures}", flush=True)
        self._show(record["epoch"], record["iteration"])
        total = self.epochs * self.steps_per_epoch if self.epochs and self.steps_per_epoch else None
        self.display.update(record["iteration"], status=f"step {record['step']}" + (f"/{total}" if total else "")
                            + f", {figures}", left=self._left(record, total), redraw=True)

    def tick(self, epoch: int, iteration: int) -> None:
        """After every step (cheap): the bar follows the steps between log steps."""
        if self.enabled and self.display.mode == "bar":
            self._show(epoch, iteration)
            self.display.update(iteration)

    def _show(self, epoch: int, iteration: int) -> None:
        """The bar or line follows the epoch: a new epoch starts a new count of its steps."""
        if self._shown_epoch != epoch and self.display.active:
            self._shown_epoch = epoch
            self.display.start(f"epoch {epoch}", self.steps_per_epoch, completed=iteration)

    def _left(self, record: dict, total_steps: int | None) -> str | None:
        if not self.steps_per_epoch:
            return None
        now, step = time.monotonic(), record["step"]
        if self._first_log is None:
            self._first_log = (now, step)
        then, first = self._first_log
        wall = (now - then) / (step - first) if step > first else None
        epoch_left, run_left = time_left(iteration=record["iteration"], steps_per_epoch=self.steps_per_epoch,
                                         step=step, total_steps=total_steps, step_s=record["step_time_ms"] / 1000,
                                         wall_s_per_step=wall)
        text = f"{format_eta(epoch_left)} left in the epoch"
        return text + (f", {format_eta(run_left)} in the run" if run_left is not None else "")

    def epoch(self, record: dict) -> None:
        """End of an epoch: validation metrics and the epoch's throughput."""
        if not self.enabled:
            return
        self.run.append({"record": "epoch", **record})
        self.tracker.metrics(numbers(record, "epoch/", skip=("step",)), record["step"])
        self._scalars(TB_EPOCH_TAGS, record, record["step"])
        self._dlll("LOG", step=[record["epoch"]], data=self._dlll_data(record))
        print(f"epoch {record['epoch']}: val top1 {record['val_top1_pct']:.2f}% top5 {record['val_top5_pct']:.2f}% "
              f"loss {record['val_loss']:.4f} | {_rate(record['throughput_img_per_s'])} | "
              f"{self._epoch_time(record)}elapsed {record['elapsed_s']:.1f} s", flush=True)
        if self.writer is not None:
            with storing(self.run.path / "tb"):  # TensorBoard's thread raises a failed write here
                self.writer.flush()

    def _epoch_time(self, record: dict) -> str:
        """'time taken 79.9 s, ': the epoch's own seconds (training and validation), as SC20's log prints "Time
        taken for epoch N"; '' for the first epoch after a resume, whose start this attempt did not see."""
        epoch, elapsed = record["epoch"], record["elapsed_s"]
        last, self._epoch_end = self._epoch_end, (epoch, elapsed)
        if epoch == 0:
            return f"time taken {elapsed:.1f} s, "
        return f"time taken {elapsed - last[1]:.1f} s, " if last and last[0] == epoch - 1 else ""

    def summary(self, summary: dict) -> None:
        if not self.enabled:
            return
        self.run.finish(summary)
        self.tracker.metrics(numbers(summary, "summary/"), summary.get("steps", 0))
        self.ended = "KILLED" if summary.get("preempted") else "FINISHED"  # a preempted run resumes later
        data = {"train.total_ips": summary.get("total_ips"), "val.top1": summary.get("best_top1_pct"),
                "val.top5": summary.get("best_top5_pct")}
        epochs = [self._dlll_data(record) for record in summary.get("history", [])]
        for key in SUMMARY_MEANS:
            values = [e[key] for e in epochs if e.get(key) is not None]
            if values:
                data[key] = sum(values) / len(values)
        self._dlll("LOG", step=[], data=data)

    def message(self, text: str) -> None:
        if self.enabled:
            print(text, flush=True)

    def close(self) -> None:
        self.display.close()
        if self.tracker.enabled:
            self.tracker.artifacts(self.run.path)
        self.tracker.close(self.ended)
        writer, raport, self.writer, self.raport = self.writer, self.raport, None, None
        with storing(self.run.path / "tb"):
            if writer is not None:
                try:
                    writer.close()
                finally:
                    threading.excepthook = self._thread_hook
        with storing(self.raport_path, "--raport-file"):
            if raport is not None:
                raport.close()

    def _scalars(self, tags: dict, record: dict, step: int) -> None:
        if self.writer is None:
            return
        with storing(self.run.path / "tb"):
            for key, tag in tags.items():
                if record.get(key) is not None:
                    self.writer.add_scalar(tag, record[key], step)

    @staticmethod
    def _dlll_data(record: dict) -> dict:
        data = {}
        for ours, key in DLLL_KEYS.items():
            if record.get(ours) is not None:
                value = record[ours]
                data[key] = value / 1000.0 if ours.endswith("_ms") else value  # NVIDIA logs seconds
        if record.get("step_time_ms") is not None and record.get("data_time_ms") is not None:
            data["train.compute_time"] = (record["step_time_ms"] - record["data_time_ms"]) / 1000.0
        return data

    def _dlll(self, kind: str, **fields) -> None:
        """One `DLLL {json}` line as dllogger's JSONStreamBackend writes it: timestamp (epoch seconds),
        datetime (`str(datetime.now())`) and elapsedtime (seconds since the logger started) as strings,
        keys in its order (NVIDIA/dllogger@89913fd2 dllogger/logger.py, v1.0.0, which ConvNets pins)."""
        if self.raport is None:
            return
        now = datetime.now()
        times = {"timestamp": str(now.timestamp()), "datetime": str(now),
                 "elapsedtime": str((now - self.started).total_seconds())}
        if kind == "METADATA":  # dllogger writes elapsedtime before datetime here
            times = {key: times[key] for key in ("timestamp", "elapsedtime", "datetime")}
        entry = {**times, "type": kind, **fields}
        with storing(self.raport_path, "--raport-file"):
            self.raport.write("DLLL " + json_line(entry))
            self.raport.flush()


def _rate(images_per_s: float | None) -> str:
    """An epoch's rate as the terminal prints it; none where every step of the epoch ran before a resume."""
    return "no steps in this attempt" if images_per_s is None else f"{images_per_s:.1f} img/s"
