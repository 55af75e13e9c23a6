"""Allreduce against neighbor-allreduce on the same model, ranks and batch, measured in one run.

    python benchmarks/strategies.py                    # 4 CPU ranks, resnet18 at 64 px, batch 16
    python benchmarks/strategies.py --nproc 8 --model resnet50 --image-size 224 --batch-size 64

For each strategy it runs `dlscale bench` under torchrun and prints total img/s, the strategy's
communication time per step (blocking time; DDP's allreduce overlaps backward and has none to
show) and bytes sent per rank per step, beside what the communication models predict for a
model of M bytes on p ranks: ring allreduce 2(p-1)/p x M, static exponential-2 graph
log2(p) x M, dynamic one-peer exchange 1 x M.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

STRATEGIES = [
    ("allreduce (DDP)", ["--dist-optimizer", "allreduce"], "ring"),
    ("gradient_allreduce", ["--dist-optimizer", "gradient_allreduce"], "ring"),
    ("neighbor_allreduce, exp2, one peer", ["--dist-optimizer", "neighbor_allreduce"], "one"),
    ("neighbor_allreduce, exp2, static", ["--dist-optimizer", "neighbor_allreduce",
                                          "--disable-dynamic-topology"], "exp2"),
]


def predicted_bytes(kind: str, model_bytes: float, p: int) -> float:
    return {"ring": 2 * (p - 1) / p * model_bytes, "exp2": math.ceil(math.log2(p)) * model_bytes,
            "one": model_bytes}[kind]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-iters", type=int, default=5)
    parser.add_argument("--num-batches-per-iter", type=int, default=3)
    args = parser.parse_args()
    flags = ["--model", args.model, "--image-size", str(args.image_size), "--batch-size", str(args.batch_size),
             "--num-iters", str(args.num_iters), "--num-batches-per-iter", str(args.num_batches_per_iter),
             "--num-warmup-batches", "3", "--num-classes", "100"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra, kind in STRATEGIES:
            out = Path(tmp) / "summary.json"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
                   "-m", "dlscale", "bench", *flags, *extra, "--json", str(out), "--output-dir", tmp]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
            rows.append((label, kind, json.loads(out.read_text())))
    model_bytes = _model_bytes(args.model)
    print(f"{args.model} ({model_bytes / 1e6:.1f} MB of fp32 parameters), {args.nproc} ranks, "
          f"batch {args.batch_size} per rank, {args.image_size} px")
    print(f"{'strategy':38} {'img/s total':>16} {'comm ms/step':>13} {'MB/step/rank':>13} {'model MB':>9}")
    for label, kind, s in rows:
        comm = "overlapped" if s["comm_time_ms_per_step"] is None else f"{s['comm_time_ms_per_step']:.1f}"
        print(f"{label:38} {s['img_per_sec_total_mean']:>9.1f} +-{s['img_per_sec_total_ci95']:<5.1f} {comm:>13} "
              f"{s['comm_bytes_per_step'] / 1e6:>13.2f} {predicted_bytes(kind, model_bytes, args.nproc) / 1e6:>9.2f}")


def _model_bytes(name: str) -> float:
    from dlscale.models import build_model, count_parameters

    return 4.0 * count_parameters(build_model(name, num_classes=100))


if __name__ == "__main__":
    main()
