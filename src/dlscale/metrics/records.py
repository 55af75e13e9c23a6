"""Where a training run's numbers go: metrics.jsonl, TensorBoard, NVIDIA's raport file, the terminal.

Only rank 0 constructs a Records with `enabled=True`; on other ranks every call does nothing.
Keys carry units: `_pct` percent, `_s` seconds, `_ms` milliseconds, `_img_per_s` images/s.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from dlscale.metrics.run import RunDir, to_jsonable

# TensorBoard tags (docs/references.md#tensorboard-tags; HAL and SC20 log the same quantities). Log steps
# and epoch ends write disjoint tags, so every tag is one increasing sequence of steps.
TB_TRAIN_TAGS = {"train_loss": "loss/train", "lr": "lr", "throughput_img_per_s": "throughput/train",
                 "consensus_distance": "consensus/distance", "comm_time_ms_per_step": "comm/time_ms_per_step"}
TB_EPOCH_TAGS = {"val_loss": "loss/val", "val_top1_pct": "top1/val", "val_top5_pct": "top5/val",
                 "throughput_img_per_s": "throughput/epoch"}

# NVIDIA DeepLearningExamples' dllogger keys (docs/references.md#dllogger-format).
DLLL_KEYS = {
    "train_loss": ("train.loss", None),
    "throughput_img_per_s": ("train.total_ips", "images/s"),
    "compute_img_per_s": ("train.compute_ips", "images/s"),
    "lr": ("train.lr", None),
    "data_time_ms": ("train.data_time", "s"),
    "step_time_ms": ("train.compute_time", "s"),
    "val_top1_pct": ("val.top1", "%"),
    "val_top5_pct": ("val.top5", "%"),
    "val_loss": ("val.loss", None),
}


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
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step: events at or after the resume step, left by an interrupted attempt,
            # are hidden, so every tag reads as one increasing sequence (docs/references.md#tensorboard-purge-step).
            self.writer = SummaryWriter(str(run.path / "tb"), purge_step=resume_step or None)
        if raport_file:
            self.raport = open(raport_file, "a")  # noqa: SIM115 - closed in close()

    def parameters(self, params: dict) -> None:
        if not self.enabled:
            return
        self._dlll("LOG", step="PARAMETER", data=params)
        for ours, (key, unit) in DLLL_KEYS.items():
            if ours.endswith("_ms"):
                continue
            self._dlll("METADATA", metric=key, metadata={"unit": unit, "format": ":.5f"})

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
        for ours, (key, _) in DLLL_KEYS.items():
            if record.get(ours) is not None:
                value = record[ours]
                data[key] = value / 1000.0 if ours.endswith("_ms") else value  # NVIDIA logs seconds
        return data

    def _dlll(self, kind: str, **fields) -> None:
        if self.raport is None:
            return
        entry = {"timestamp": f"{time.time():.6f}", "datetime": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "type": kind, **fields}
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
