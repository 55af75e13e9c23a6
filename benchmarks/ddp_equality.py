"""DDP equals one process: W ranks training with DistributedDataParallel, each on its own batch, end with
the weights of one process that accumulates the same W batches (dlscale's train_step over W micro-batches:
each loss divided by W, so the gradient is the mean over the batches, which DDP's averaging allreduce gives).

On a machine with several GPUs (NCCL, one rank per GPU), from the repository (PYTHONPATH=src where
dlscale is not installed):

    torchrun --standalone --nproc_per_node 8 benchmarks/ddp_equality.py --json ddp_equality.json

On the CPU (gloo): add `--device cpu --cases eager_fp32,amp_bf16_channels_last`. The GPU tier runs the same
functions with two ranks sharing one GPU over gloo (tests/gpu/test_gpu_ddp.py).

Every case trains the smallest ResNet of dlscale's blocks (one BasicBlock per stage) for --steps SGD steps
(momentum 0.9) from the same seed; rank r's batch at step s is generated from (s, r), so every process can
make every batch. Each rank then trains the reference itself (one process, no DDP, same settings) and
measures

    distance = |w_ddp - w_reference| / |w_reference - w_start|

the disagreement relative to how far the weights moved. It must stay within the case's tolerance. Where
every kernel is deterministic and W is a power of two the two agree exactly (0 for both eager cases
with two CPU ranks): DDP divides each gradient by W and sums over ranks, the reference divides each
loss by W and sums over micro-batches, in the same order, and dividing by 2^k is exact. On GPUs cuDNN's
backward kernels may add in any order, and under bf16 autocast one different rounding of a weight's 8-bit
mantissa moves the next steps' gradients at the 1e-2 level: the tolerances (1e-3 fp32, 5e-2 bf16) leave
room for that and stay 20x below the control's distance (about 1.3). The control, the weights after
training on rank 0's batch alone, must be far outside the tolerance (the check can fail). BatchNorm
normalises each rank's batch and each micro-batch alone, so the two agree; its running statistics differ
(DDP keeps rank 0's) and are not weights.

Writes a JSON object per case; exits 1 if any case disagrees.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from dlscale.config import OptimConfig, StrategyConfig
from dlscale.distributed import DistEnv, init_process_group, select_device, shutdown
from dlscale.models.resnet import BasicBlock, ResNet
from dlscale.precision import build_precision
from dlscale.speed import SpeedOptions
from dlscale.train.replica import build_replica
from dlscale.train.step import train_step


@dataclass(frozen=True)
class Case:
    precision: str
    speed: SpeedOptions
    tolerance: float
    """The largest distance (see the module docstring) that counts as equal."""


FAST = dict(channels_last=True)
CASES = {
    "eager_fp32": Case("fp32", SpeedOptions(), 1e-3),
    "amp_bf16_channels_last": Case("amp_bf16", SpeedOptions(**FAST), 5e-2),
    "compiled_default": Case("amp_bf16", SpeedOptions(**FAST, compile=True), 5e-2),
    "compiled_reduce_overhead": Case("amp_bf16", SpeedOptions(**FAST, compile=True, compile_mode="reduce-overhead"),
                                     5e-2),
}
"""The settings under test: IEEE fp32, the GPU default's precision and memory format, and that compiled in
torch.compile's default mode and in reduce-overhead (CUDA graphs; on CUDA only)."""

NUM_CLASSES = 10


def batch(step: int, rank: int, *, batch_size: int, image_size: int, device: torch.device,
          speed: SpeedOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s batch at `step`: the same in every process (made on the CPU from (step, rank))."""
    generator = torch.Generator().manual_seed(1_000 * step + rank)
    images = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
    labels = torch.randint(0, NUM_CLASSES, (batch_size,), generator=generator)
    return speed.place_batch(images.to(device)), labels.to(device)


def train(case: Case, env: DistEnv, device: torch.device, batches, *, steps: int, width: int,
          global_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(start, end) weights of `steps` steps, each over `batches(step)` (micro-batches, accumulated), wrapped in
    DDP when env has several ranks."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = ResNet(BasicBlock, (1, 1, 1, 1), num_classes=NUM_CLASSES, width=width)
    replica = build_replica(model, env=env, device=device, speed=case.speed, strategy=StrategyConfig(),
                            optim=OptimConfig(lr=0.05, momentum=0.9, weight_decay=0.0), global_batch=global_batch,
                            precision=build_precision(case.precision, device), loss_fn=nn.CrossEntropyLoss())
    start = flat(replica.model)  # after DDP's broadcast of rank 0's weights
    for step in range(steps):
        if case.speed.compile_mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        train_step(replica.parts, batches(step))
    return start, flat(replica.model)


def flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().double().reshape(-1).cpu() for p in model.parameters()])


def check_case(name: str, env: DistEnv, device: torch.device, *, steps: int, batch_size: int, image_size: int,
               width: int) -> dict:
    """This rank's DDP run against the reference (and the control), on this rank's device."""
    case = CASES[name]
    world = env.world_size

    def make(step, rank):
        return batch(step, rank, batch_size=batch_size, image_size=image_size, device=device, speed=case.speed)

    kwargs = dict(steps=steps, width=width, global_batch=world * batch_size)
    start, ddp = train(case, env, device, lambda s: [make(s, env.rank)], **kwargs)
    alone = DistEnv()
    _, reference = train(case, alone, device, lambda s: [make(s, r) for r in range(world)], **kwargs)
    _, control = train(case, alone, device, lambda s: [make(s, 0)], **kwargs)
    moved = (reference - start).norm().item()
    return {"case": name, "rank": env.rank, "precision": case.precision, "compile": case.speed.compile,
            "compile_mode": case.speed.compile_mode, "channels_last": case.speed.channels_last,
            "distance": (ddp - reference).norm().item() / moved,
            "control_distance": (control - reference).norm().item() / moved,
            "tolerance": case.tolerance, "checksum": ddp.sum().item()}


def run_cases(names: list[str], env: DistEnv, device: torch.device, *, steps: int = 5, batch_size: int = 8,
              image_size: int = 32, width: int = 8) -> dict:
    """Every case on every rank; every rank returns all ranks' results and the verdict per case."""
    local = [check_case(name, env, device, steps=steps, batch_size=batch_size, image_size=image_size,
                        width=width) for name in names]
    gathered: list = [None] * env.world_size
    dist.all_gather_object(gathered, local)
    cases = {}
    for i, name in enumerate(names):
        ranks = [results[i] for results in gathered]
        worst = max(r["distance"] for r in ranks)
        control = min(r["control_distance"] for r in ranks)
        tolerance = CASES[name].tolerance
        cases[name] = {"world_size": env.world_size, "device": device.type, "steps": steps,
                       "distance": worst, "control_distance": control, "tolerance": tolerance,
                       "ranks_identical": len({r["checksum"] for r in ranks}) == 1,
                       "equal": worst <= tolerance < control, "ranks": ranks}
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=None, help=f"comma-separated, of {', '.join(CASES)} "
                        "(default: all on CUDA; the CPU skips the compiled ones, which CPU inductor makes slow)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8, help="images per rank per step")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None, help="write the results here (rank 0)")
    args = parser.parse_args(argv)
    env = DistEnv.from_env()
    device = select_device(env, args.device)
    default = list(CASES) if device.type == "cuda" else ["eager_fp32", "amp_bf16_channels_last"]
    names = args.cases.split(",") if args.cases else default
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    if not env.is_distributed:
        parser.error("run it under torchrun with 2 or more ranks: torchrun --standalone --nproc_per_node 2 "
                     "benchmarks/ddp_equality.py")
    init_process_group(env, device)
    try:
        cases = run_cases(names, env, device, steps=args.steps, batch_size=args.batch_size,
                          image_size=args.image_size, width=args.width)
    finally:
        shutdown()
    if env.is_main:
        for name, result in cases.items():
            print(f"{name}: {'equal' if result['equal'] else 'NOT EQUAL'} on {result['world_size']} ranks "
                  f"({result['device']}): distance {result['distance']:.2e} (tolerance {result['tolerance']:.0e}; "
                  f"one rank's batch alone: {result['control_distance']:.2e})", flush=True)
        if args.json:
            args.json.write_text(json.dumps(cases, indent=2))
    return 0 if all(result["equal"] for result in cases.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
