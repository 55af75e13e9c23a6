"""Where a training run's numbers go: metrics.jsonl, TensorBoard, NVIDIA's raport file, the terminal.

Only rank 0 constructs a Records with `enabled=True`; on other ranks every call does nothing.
Keys carry units: `_pct` percent, `_s` seconds, `_ms` milliseconds, `_img_per_s` images/s.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from dlscale.metrics.run import RunDir, to_jsonable

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


class Records:
    def __init__(self, run: RunDir | None, *, enabled: bool, resume_step: int = 0,
                 raport_file: str | Path | None = None, tensorboard: bool = True) -> None:
        self.enabled = enabled and run is not None
        self.run = run
        self.writer = None
        self.raport = None
        self.interactive = sys.stdout.isatty()
        if not self.enabled:
            return
        self.started = datetime.now()  # dllogger's elapsedtime counts from its Logger's creation
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: events at or after the resume step, left by an interrupted attempt,
            # are hidden, so every tag reads as one increasing sequence (docs/references.md#tensorboard-purge-step).
            self.writer = SummaryWriter(str(run.path / "tb"), purge_step=resume_step or None)
        if raport_file:
            self.raport = open(raport_file, "a")  # noqa: SIM115 - closed in close()

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
        self.run.append_metrics({"record": "train", **record})
        self._scalars(TB_TRAIN_TAGS, record, record["step"])
        self._dlll("LOG", step=[record["epoch"], record["iteration"]], data=self._dlll_data(record))
        self._print(
            f"epoch {record['epoch']} step {record['step']}: loss {record['train_loss']:.4f} "
            f"lr {record['lr']:.5f} {record['throughput_img_per_s']:.1f} img/s",
            transient=True,
        )

    def epoch(self, record: dict) -> None:
        """End of an epoch: validation metrics and the epoch's throughput."""
        if not self.enabled:
            return
        self.run.append_metrics({"record": "epoch", **record})
        self._scalars(TB_EPOCH_TAGS, record, record["step"])
        self._dlll("LOG", step=[record["epoch"]], data=self._dlll_data(record))
        self._print(
            f"epoch {record['epoch']}: val top1 {record['val_top1_pct']:.2f}% top5 {record['val_top5_pct']:.2f}% "
            f"loss {record['val_loss']:.4f} | {record['throughput_img_per_s']:.1f} img/s, "
            f"{record['elapsed_s']:.1f} s"
        )
        if self.writer is not None:
            self.writer.flush()

    def summary(self, summary: dict) -> None:
        if not self.enabled:
            return
        self.run.write_json("summary.json", summary)
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
            self._print(text)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.raport is not None:
            self.raport.close()

    def _scalars(self, tags: dict, record: dict, step: int) -> None:
        if self.writer is None:
            return
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
        self.raport.write("DLLL " + json.dumps(to_jsonable(entry)) + "\n")
        self.raport.flush()

    def _print(self, text: str, transient: bool = False) -> None:
        # A progress line that rewrites itself on a terminal; plain lines in logs and pipes.
        if self.interactive and transient:
            print("\r" + text[:150].ljust(150), end="", flush=True)
        elif self.interactive:
            print("\r" + text.ljust(150), flush=True)
        else:
            print(text, flush=True)
