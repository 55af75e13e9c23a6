"""What dlscale's benchmark costs over a bare PyTorch loop, and 2 ranks against 1.

    python benchmarks/overhead.py                      # CPU defaults: resnet50, batch 16, 128 px
    python benchmarks/overhead.py --model resnet50 --batch-size 256 --image-size 224 \
        --precision amp_bf16 --channels-last             # on a GPU

Part 1 runs the same model, batch, precision and synthetic data through (a) a bare loop
written here with plain torch calls and (b) dlscale.bench.run_bench, in the same process,
interleaved (a b a b ...) so drift of the machine hits both alike, and prints the ratio of
the medians. Goal: >= 0.98 on one process. On a shared machine, --clock cpu times both by this
process's CPU time (images per CPU-second), which other processes disturb far less.

Part 2 (--scaling) runs `dlscale bench` under torchrun with 1 and 2 ranks of one thread each
and prints the weak-scaling efficiency total(2) / (2 x total(1)).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from bare_loop import timed_rates

from dlscale.bench.synthetic import run_bench
from dlscale.config import BenchConfig
from dlscale.distributed import DistEnv
from dlscale.models import build_model
from dlscale.speed import SpeedOptions

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def bare_loop(cfg: BenchConfig, device: torch.device, clock=time.perf_counter) -> float:
    """The reference: plain PyTorch, no dlscale code in the timed region. Returns img/s."""
    torch.manual_seed(cfg.seed)
    fmt = torch.channels_last if cfg.speed.channels_last else torch.contiguous_format
    model = build_model(cfg.model, num_classes=cfg.num_classes, width=cfg.width).to(device, memory_format=fmt)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9,
                                **({"fused": True} if cfg.speed.fused_optimizer else {}))
    shape = (cfg.batch_size, 3, cfg.image_size, cfg.image_size)
    pool = [(torch.randn(shape, device=device).contiguous(memory_format=fmt),
             torch.randint(0, cfg.num_classes, (cfg.batch_size,), device=device)) for _ in range(cfg.pool_batches)]
    rates = timed_rates(model, optimizer, cfg.precision, pool, warmup=cfg.num_warmup_batches, iters=cfg.num_iters,
                        per_iter=cfg.num_batches_per_iter, device=device, clock=clock)
    return statistics.mean(rates)


def compare_with_bare(cfg: BenchConfig, repeats: int, clock_name: str) -> None:
    clock = CLOCKS[clock_name]
    unit = "img/s" if clock_name == "wall" else "img per CPU-s"
    env = DistEnv()
    device = torch.device("cuda" if torch.cuda.is_available() and cfg.device != "cpu" else "cpu")
    bare, ours = [], []
    for r in range(repeats):
        bare.append(bare_loop(cfg, device, clock))
        ours.append(run_bench(cfg, env, out=lambda line: None, clock=clock)["img_per_sec_total_mean"])
        print(f"repeat {r}: bare {bare[-1]:.1f} {unit}, dlscale {ours[-1]:.1f} {unit}", flush=True)
    ratio = statistics.median(ours) / statistics.median(bare)
    print(f"bare loop      median {statistics.median(bare):.1f} {unit}")
    print(f"dlscale bench  median {statistics.median(ours):.1f} {unit}")
    print(f"ratio dlscale/bare ({clock_name} clock): {ratio:.3f} (goal >= 0.98)")


def scaling(cfg: BenchConfig, flags: list[str]) -> None:
    totals = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1, 2):
            out = Path(tmp) / f"n{n}.json"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
                   "-m", "dlscale", "bench", *flags, "--json", str(out), "--output-dir", tmp]
            subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
            totals[n] = json.loads(out.read_text())
            s = totals[n]
            mean, ci = s["img_per_sec_total_mean"], s["img_per_sec_total_ci95"]
            print(f"{n} rank(s), 1 thread each: {mean:.1f} +-{ci:.1f} img/s")
    efficiency = totals[2]["img_per_sec_total_mean"] / (2 * totals[1]["img_per_sec_total_mean"])
    print(f"weak-scaling efficiency 2 vs 1 rank: {efficiency:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--fused-optimizer", action="store_true")
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--num-batches-per-iter", type=int, default=3)
    p.add_argument("--num-warmup-batches", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--scaling", action="store_true", help="also 2 ranks vs 1 under torchrun")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="wall: images per second; cpu: images per CPU-second of this process, which other "
                        "processes on a shared machine disturb far less")
    args = p.parse_args()
    cfg = BenchConfig(model=args.model, batch_size=args.batch_size, image_size=args.image_size,
                      precision=args.precision, num_iters=args.num_iters,
                      num_batches_per_iter=args.num_batches_per_iter, num_warmup_batches=args.num_warmup_batches,
                      speed=SpeedOptions(channels_last=args.channels_last, fused_optimizer=args.fused_optimizer))
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, threads {torch.get_num_threads()}, "
          f"cuda {torch.cuda.is_available()}")
    compare_with_bare(cfg, args.repeats, args.clock)
    if args.scaling:
        flags = ["--model", cfg.model, "--batch-size", str(cfg.batch_size), "--image-size", str(cfg.image_size),
                 "--precision", cfg.precision, "--num-iters", str(cfg.num_iters),
                 "--num-batches-per-iter", str(cfg.num_batches_per_iter),
                 "--num-warmup-batches", str(cfg.num_warmup_batches)]
        scaling(replace(cfg), flags)


if __name__ == "__main__":
    main()
