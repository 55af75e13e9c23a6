"""`dlscale bench --batch-size 16,32,64`: the step time as a function of the batch per rank.

Each batch size is its own benchmark (run_bench: its own model, warm-up and timed iterations), one after
the other in this process. The summary is the largest batch's, with the curve beside it under
`batch_curve`; `dlscale predict --from-run` interpolates along it (predict/compute.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence

import torch

from dlscale.bench.synthetic import run_bench
from dlscale.config.sections import BenchConfig
from dlscale.distributed import DistEnv


def batch_curve(summaries: Sequence[dict]) -> list[dict]:
    """One entry per batch size, smallest first: the step time, the total img/s and its 95% interval."""
    return [{"batch_size": s["batch_size"], "step_time_ms": s["step_time_ms"],
             "img_per_sec": s["img_per_sec_total_mean"], "ci95": s["img_per_sec_total_ci95"]}
            for s in sorted(summaries, key=lambda s: s["batch_size"])]


def with_curve(summaries: Sequence[dict]) -> dict:
    """The largest batch's summary, with every batch's figures under `batch_curve`."""
    largest = max(summaries, key=lambda s: s["batch_size"])
    return {**largest, "batch_curve": batch_curve(summaries)}


def run_curve(cfgs: Sequence[BenchConfig], env: DistEnv, *, out: Callable[[str], None] = print) -> dict:
    """Each configuration's benchmark in the order given, then the summary with the curve."""
    summaries = []
    for cfg in cfgs:
        if cfg.speed.compile:
            # A fresh compile per batch size: otherwise dynamo's second shape turns the batch dimension
            # dynamic, and the curve would time dynamic-shape kernels.
            torch.compiler.reset()
        summaries.append(run_bench(cfg, env, out=out))
        gc.collect()  # the previous size's model, optimizer and graphs go before the next is built
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return with_curve(summaries)


def curve_lines(curve: Sequence[dict]) -> list[str]:
    """The curve as printed after the last batch size."""
    lines = ["Batch curve (total over ranks):", f"{'batch':>7} {'step ms':>10} {'img/sec':>10} {'+-95%':>8}"]
    lines += [f"{c['batch_size']:>7} {c['step_time_ms']:>10.2f} {c['img_per_sec']:>10.1f} {c['ci95']:>8.1f}"
              for c in curve]
    return lines
