"""torch.compile in each mode dlscale offers (speed.compile_mode, `--compile-mode`): the compiled step
trains (loss falls, no NaN) and its first loss equals the eager model's on the same weights.

The model is the smallest ResNet of dlscale's building blocks (one BasicBlock per stage, width 8):
compilation time grows with the graph, and the modes, not the model, are under test here. The
campaign (benchmarks/gpu.py) measures the modes on ResNet-50.
"""

import pytest
import torch
from gpu_helpers import assert_learns

from dlscale.config import OptimConfig, StrategyConfig
from dlscale.distributed import DistEnv
from dlscale.models.resnet import BasicBlock, ResNet
from dlscale.precision import build_precision
from dlscale.speed import SpeedOptions
from dlscale.train.replica import build_replica
from dlscale.train.step import train_step

pytestmark = pytest.mark.gpu

MODES = ["default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune"]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compiled_step_parts(mode: str, cuda: torch.device):
    torch.manual_seed(0)
    model = ResNet(BasicBlock, (1, 1, 1, 1), num_classes=10, width=8)
    precision = build_precision("amp_bf16", cuda)
    speed = SpeedOptions(channels_last=True, compile=True, compile_mode=mode)
    replica = build_replica(model, env=DistEnv(), device=cuda, speed=speed, strategy=StrategyConfig(),
                            optim=OptimConfig(lr=0.02, momentum=0.9, weight_decay=0.0), global_batch=32,
                            precision=precision, loss_fn=torch.nn.CrossEntropyLoss())
    generator = torch.Generator(device=cuda).manual_seed(1)
    pool = [(torch.randn(32, 3, 32, 32, device=cuda, generator=generator).contiguous(memory_format=torch.channels_last),
             torch.randint(0, 10, (32,), device=cuda, generator=generator)) for _ in range(2)]
    return replica, pool


@pytest.mark.parametrize("mode", MODES)
def test_compile_mode_trains_and_matches_eager(mode, cuda):
    replica, pool = _compiled_step_parts(mode, cuda)
    assert replica.parts.model is not replica.model, "compile=True left the model uncompiled"
    images, labels = pool[0]
    with torch.no_grad(), replica.parts.precision.autocast():
        eager = replica.parts.loss_fn(replica.model(images), labels).float()
    losses = []
    for i in range(30):
        # reduce-overhead and max-autotune replay CUDA graphs; a new step must be marked as such
        # when outputs of the last one are still referenced (the loss is read here every step).
        torch.compiler.cudagraph_mark_step_begin()
        losses.append(train_step(replica.parts, [pool[i % 2]]).item())
    # bf16 autocast: the compiled graph fuses and reorders, so agreement is to bf16 rounding.
    assert losses[0] == pytest.approx(eager.item(), rel=2e-2)
    assert_learns(losses)
