"""Neighbour exchange of CUDA tensors over gloo: two ranks share the one GPU (NCCL would refuse two
ranks on one device; gloo does not care). gloo reduces and broadcasts CUDA tensors itself; its
send and receive move host memory, so dlscale stages point-to-point messages through the host
(decentralized/ops.py, _wire_device). Checked with BlueFog's rule: on two ranks every rank is the
other's only neighbour, so neighbor_allreduce equals allreduce's mean; and the strategies keep
CUDA replicas in step."""

import pytest
import torch
from multiproc import run_ranks

from dlscale.config import BenchConfig, StrategyConfig
from dlscale.decentralized import ops
from dlscale.distributed import DistEnv

pytestmark = pytest.mark.gpu

DTYPES = ["float32", "float16", "bfloat16", "float64"]


def _ops_on_cuda(rank, size):
    torch.cuda.set_device(0)
    cuda = torch.device("cuda", 0)
    result = {}
    for name in DTYPES:
        dtype = getattr(torch, name)
        x = torch.full((3, 5), float(rank + 1), dtype=dtype, device=cuda)
        mixed = ops.neighbor_allreduce(x)
        mean = ops.allreduce(x)  # gloo's own CUDA allreduce
        result[name] = {
            "device": str(mixed.device), "dtype": str(mixed.dtype).removeprefix("torch."),
            "equal_to_mean": bool(torch.equal(mixed, mean)), "value": mixed.double().mean().item(),
            "input_untouched": bool((x == rank + 1).all()),
        }
    ring = (rank + 1) % size
    moved = ops.neighbor_allreduce(torch.full((4,), float(rank), device=cuda), self_weight=0.0,
                                   src_weights={ring: 1.0}, dst_weights=[ring])  # dynamic: one peer
    result["dynamic"] = moved.tolist()
    model = torch.nn.Conv2d(3, 4, 3).to(cuda)
    ops.broadcast_parameters(model, root=0)
    result["broadcast_sum"] = sum(p.double().sum().item() for p in model.parameters())
    return result


def test_neighbor_allreduce_of_cuda_tensors_over_gloo():
    ranks = run_ranks(_ops_on_cuda, 2, timeout_s=180)
    for rank, result in enumerate(ranks):
        for name in DTYPES:
            got = result[name]
            assert got["device"] == "cuda:0" and got["dtype"] == name, (rank, name, got)
            assert got["equal_to_mean"] and got["value"] == 1.5 and got["input_untouched"], (rank, name, got)
        assert result["dynamic"] == [float(1 - rank)] * 4  # each rank got the other's tensor
    assert ranks[0]["broadcast_sum"] == ranks[1]["broadcast_sum"]


def _train_in_step(rank, size, dist_optimizer, atc_style):
    """Three steps of a small ResNet on cuda:0, different data per rank; parameters per rank."""
    from dlscale.bench.synthetic import build_bench
    from dlscale.train.step import train_step

    torch.cuda.set_device(0)
    env = DistEnv(rank=rank, world_size=size, local_rank=rank, local_world_size=size)
    cfg = BenchConfig(model="resnet18", width=8, image_size=32, batch_size=8, num_classes=10, pool_batches=3,
                      device="cuda", seed=0,
                      strategy=StrategyConfig(dist_optimizer=dist_optimizer, atc_style=atc_style,
                                              dynamic_topology=False))
    setup = build_bench(cfg, env, torch.device("cuda", 0))  # its pool is seeded with seed + rank
    losses = [train_step(setup.parts, [batch]).item() for batch in setup.pool]
    params = torch.cat([p.detach().double().reshape(-1) for p in setup.parts.model.parameters()])
    return {"losses": losses, "checksum": params.sum().item(), "first": params[:8].tolist(),
            "comm_bytes": setup.parts.strategy.comm_stats()["comm_bytes_per_step"]}


@pytest.mark.parametrize("dist_optimizer,atc_style", [("neighbor_allreduce", True), ("gradient_allreduce", False)])
def test_strategies_keep_cuda_replicas_in_step_over_gloo(dist_optimizer, atc_style):
    """Adapt-then-combine on two ranks ends every step with the average of both replicas, and
    gradient averaging applies the same update to identical replicas: equal parameters either way."""
    ranks = run_ranks(_train_in_step, 2, dist_optimizer, atc_style, timeout_s=180)
    assert ranks[0]["losses"] != ranks[1]["losses"]  # the ranks saw different data
    assert ranks[0]["checksum"] == ranks[1]["checksum"] and ranks[0]["first"] == ranks[1]["first"]
    assert all(r["comm_bytes"] > 0 for r in ranks)
