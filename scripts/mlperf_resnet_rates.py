"""The training rate and time to train of MLPerf Training ResNet-50 results, read from their MLLOG files.

    git clone https://github.com/mlcommons/training_results_v2.0 v2.0
    .venv/bin/python scripts/mlperf_resnet_rates.py v2.0 NVIDIA/results/dgxa100_n8_ngc22.04_mxnet/resnet

For each result folder (result_0.txt ... result_N.txt, one run each) it prints the median over the successful
runs of:

- img/s: the training rate between evaluations, epochs x 1,281,167 images / (block time - evaluation time),
  over every block of epochs but the first (block_start .. block_stop, which end with the evaluation); the
  per-epoch markers alone are not used: at thousands of GPUs the host logs an epoch's end before its steps have
  run;
- time to train: run_stop - run_start (what MLPerf reports; initialisation is before run_start), with its
  evaluation time and epoch count.

A run succeeded when its last `run_stop` says so; a log without `run_stop` (a run cut off before it finished)
has no time to train and is not counted. It reads the files from the clone's HEAD (git show), so the numbers
name a commit. dlscale's references/mlperf_scale.json holds what it printed (docs/references.md#mlperf-scale).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass

from dlscale.metrics.cost import IMAGENET_TRAIN_IMAGES


@dataclass(frozen=True)
class Run:
    global_batch: int | None
    img_per_s: float | None
    """Epochs x images / training time (evaluations out) over the blocks after the first; over every block where a
    run has two or fewer."""
    time_to_train_s: float | None
    """run_stop - run_start; None where the log has no run_stop (the run did not finish)."""
    eval_s: float
    epochs: int
    succeeded: bool


def events(text: str) -> list[tuple[float, str, object, dict]]:
    """(seconds, key, value, metadata) of every MLLOG line: v0.6's `:::MLL t key: {...}` and the later
    `:::MLLOG {...}`."""
    found = []
    for line in text.splitlines():
        if ":::MLLOG" in line:
            try:
                record = json.loads(line.split(":::MLLOG", 1)[1])
            except ValueError:
                continue
            found.append((record["time_ms"] / 1e3, record["key"], record.get("value"), record.get("metadata") or {}))
            continue
        match = re.search(r":::MLL ([0-9.]+) (\w+): (\{.*\})", line)
        if match:
            try:
                record = json.loads(match.group(3))
            except ValueError:
                continue
            found.append((float(match.group(1)), match.group(2), record.get("value"), record.get("metadata") or {}))
    return found


def blocks(log: list[tuple[float, str, object, dict]]) -> list[tuple[int, float, float]]:
    """(epochs, seconds, evaluation seconds) of every block of epochs."""
    out, start, count, evaluating, evaluated = [], None, 0, None, 0.0
    for time, key, _, meta in log:
        if key == "block_start":
            start, count, evaluated = time, int(meta.get("epoch_count") or 0), 0.0
        elif key == "eval_start":
            evaluating = time
        elif key == "eval_stop" and evaluating is not None:
            evaluated, evaluating = evaluated + time - evaluating, None
        elif key == "block_stop" and start is not None and count:
            out.append((count, time - start, evaluated))
            start = None
    return out


def read_run(text: str) -> Run:
    log = events(text)
    first = {}
    for time, key, value, meta in log:
        first.setdefault(key, (time, value, meta))
    done = [meta.get("status") for _, key, _, meta in log if key == "run_stop"]
    counted = blocks(log)
    later = counted[1:] if len(counted) > 2 else counted
    train = sum(seconds - evaluated for _, seconds, evaluated in later)
    rate = sum(epochs for epochs, _, _ in later) * IMAGENET_TRAIN_IMAGES / train if train > 0 else None
    batch = first.get("global_batch_size", (0, None))[1]
    finished = bool(done) and "run_start" in first
    return Run(int(batch) if batch else None, rate,
               first["run_stop"][0] - first["run_start"][0] if finished else None,
               sum(evaluated for _, _, evaluated in counted), sum(epochs for epochs, _, _ in counted),
               finished and done[-1] in (None, "success"))


def git_show(clone: str, path: str) -> str:
    return subprocess.run(["git", "-C", clone, "show", f"HEAD:{path}"], capture_output=True, text=True,
                          errors="replace", check=True).stdout


def result_files(clone: str, folder: str) -> list[str]:
    listed = subprocess.run(["git", "-C", clone, "ls-tree", "--name-only", "HEAD", folder.rstrip("/") + "/"],
                            capture_output=True, text=True, check=True).stdout.split()
    return sorted(p for p in listed if re.search(r"/result_\d+\.txt$", p))


def summary(clone: str, folder: str) -> dict:
    runs = [read_run(git_show(clone, path)) for path in result_files(clone, folder)]
    good = [r for r in runs if r.succeeded and r.img_per_s]
    unfinished = sum(r.time_to_train_s is None for r in runs)
    said = {"unfinished": unfinished} if unfinished else {}
    if not good:
        return {"folder": folder, "runs": 0, **said}
    return {"folder": folder, "runs": len(good), "of": len(runs), **said, "global_batch": good[0].global_batch,
            "img_per_s": round(statistics.median(r.img_per_s for r in good)),
            "time_to_train_s": round(statistics.median(r.time_to_train_s for r in good), 1),
            "eval_s": round(statistics.median(r.eval_s for r in good), 1),
            "epochs": statistics.median(r.epochs for r in good)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("clone", help="a git clone of mlcommons/training_results_vX")
    parser.add_argument("folders", nargs="+", help="result folders, e.g. NVIDIA/results/dgxa100_ngc22.04_mxnet/resnet")
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "-C", args.clone, "rev-parse", "--short=8", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    for folder in args.folders:
        print(json.dumps({"commit": commit, **summary(args.clone, folder)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
