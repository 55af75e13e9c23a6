"""One rank in an NCCL group running dlscale's collectives; started by test_gpu_bench.py:

    python -m torch.distributed.run --standalone --nproc_per_node 1 tests/gpu/nccl_one_rank.py OUT.json

dlscale joins no process group for a single process, so this script joins one itself; every
collective dlscale issues then goes through NCCL: the bench's rate gather and its comm and memory
reductions, under every strategy, and the decentralized ops on CUDA tensors. Writes OUT.json.
`--backend gloo` runs the same on the CPU (how the script itself is checked without a GPU).
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.distributed as dist

from dlscale.bench.synthetic import run_bench
from dlscale.config import BenchConfig, StrategyConfig
from dlscale.decentralized import ops
from dlscale.distributed import DistEnv
from dlscale.strategies import STRATEGIES

KEEP = ("img_per_sec_total_mean", "world_size", "peak_memory_kind", "comm_bytes_per_step")


def bench_every_strategy(env: DistEnv, device: str) -> dict:
    results = {}
    for name in STRATEGIES:
        cfg = BenchConfig(model="resnet18", width=16, image_size=32, batch_size=16, num_warmup_batches=2,
                          num_batches_per_iter=2, num_iters=2, device=device,
                          strategy=StrategyConfig(dist_optimizer=name))
        summary = run_bench(cfg, env, out=lambda line: None)
        results[name] = {key: summary[key] for key in KEEP}
    return results


def ops_on(device: torch.device) -> dict:
    x = torch.arange(6, dtype=torch.float32, device=device)
    model = torch.nn.Linear(4, 3).to(device)
    before = [p.detach().clone() for p in model.parameters()]
    ops.broadcast_parameters(model, root=0)
    return {
        "allreduce": torch.equal(ops.allreduce(x), x),
        "broadcast": all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)),
        "neighbor_allreduce": torch.equal(ops.neighbor_allreduce(x), x),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    args = parser.parse_args()
    env = DistEnv.from_env()
    if args.backend == "nccl":
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    try:
        result = {"backend": dist.get_backend(), "world_size": dist.get_world_size(),
                  "bench": bench_every_strategy(env, device.type), "ops": ops_on(device)}
    finally:
        dist.destroy_process_group()
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
