"""torch.compile over DDP in a world of 8, in one process: torch's fake process group (FakeStore, backend
"fake") lets rank 0 of 8 build DDP and run its step with no communication at all. What must hold:

- the whole ResNet is one traced graph: its graph breaks are DDP's wrapper's own (counted on the same
  wrapper around a one-layer model), and a model that adds one is caught;
- DDP's optimizer (torch/_dynamo/backends/distributed.py) splits that graph into as many compiled graphs
  as DDP's buckets, predicted here from the parameter sizes alone: walk the layers backwards from the
  output (the order gradients become ready), close a bucket once it holds bucket_cap_mb (the first one:
  1 MiB, DDP's first-bucket cap).

The backend is aot_eager, not inductor: inductor took 50 s to compile this ResNet-18's forward and backward
on 2 CPU cores, and the structure under test (graphs, breaks, the split) is fixed by dynamo and the DDP
optimizer before any backend runs; aot_eager (AOT autograd, no code generation) shows it in seconds.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook
from torch.nn.parallel import DistributedDataParallel
from torch.testing._internal.distributed.fake_pg import FakeStore

from dlscale.config import StrategyConfig
from dlscale.distributed import DistEnv, shutdown
from dlscale.metrics.compile import CompileWatch
from dlscale.models import build_model
from dlscale.strategies import build_strategy

WORLD = 8
MIB = 2**20
DDP_BUCKET_CAP_MB = 25
"""DDP's default bucket_cap_mb (torch.nn.parallel.DistributedDataParallel), which dlscale keeps."""
FIRST_BUCKET_BYTES = 1 * MIB
"""DDP's cap for the first bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES), the DDP optimizer's too."""

pytestmark = pytest.mark.slow  # dynamo traces a ResNet-18 and DDP's split: seconds a test


@pytest.fixture
def world_of_8():
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    torch._dynamo.reset()
    yield DistEnv(rank=0, world_size=WORLD, local_rank=0, local_world_size=WORLD, launcher="env")
    torch._dynamo.reset()
    shutdown()


class CountingBackend:
    """A torch.compile backend that counts the graphs handed to it, then compiles them with aot_eager."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs):
        self.graphs += 1
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)


def compiled_step(model: nn.Module, wrapped: nn.Module, image_size: int = 32) -> dict:
    """One forward and backward of the compiled wrapper; the compile facts and the backend's count."""
    backend = CountingBackend()
    watch = CompileWatch(cudagraphs=False)
    compiled = torch.compile(wrapped, backend=backend)
    compiled(torch.randn(2, 3, image_size, image_size)).sum().backward()
    facts = watch.facts(torch.device("cpu"), steady_step_s=None, steps=1)
    assert all(p.grad is not None for p in model.parameters())
    return {"traced": facts["traced_graphs"], "compiled": facts["compiled_graphs"], "backend": backend.graphs,
            "breaks": facts["graph_breaks"]}


def ddp(model: nn.Module, **options) -> DistributedDataParallel:
    wrapped = DistributedDataParallel(model, **options)
    wrapped.register_comm_hook(None, noop_hook)  # the fake group's allreduce returns no tensor for DDP's hook
    return wrapped


def predicted_buckets(model: nn.Module, bucket_cap_mb: float, image_size: int = 32) -> int:
    """DDP's buckets from the parameters' bytes, layer by layer in reverse order of use in the forward
    (found by running it: the order gradients become ready in the backward)."""
    order: list[nn.Module] = []
    hooks = [m.register_forward_hook(lambda m, i, o: order.append(m)) for m in model.modules()
             if next(m.parameters(recurse=False), None) is not None]
    with torch.no_grad():
        model(torch.randn(2, 3, image_size, image_size))
    for hook in hooks:
        hook.remove()
    cap = bucket_cap_mb * MIB
    buckets, size = 1, 0
    for module in reversed(order):
        limit = FIRST_BUCKET_BYTES if buckets == 1 else cap
        if size >= limit:  # full: this layer starts the next bucket
            buckets, size = buckets + 1, 0
        size += sum(p.numel() * p.element_size() for p in module.parameters(recurse=False))
    return buckets


def wrapper_breaks() -> int:
    """The graph breaks of DDP's wrapper itself: the same DDP around one linear layer."""
    layer = nn.Linear(4, 4)
    wrapped = ddp(layer)
    before = CompileWatch(cudagraphs=False)
    torch.compile(wrapped, backend="aot_eager")(torch.randn(2, 4)).sum().backward()
    breaks = before.facts(torch.device("cpu"), steady_step_s=None, steps=1)["graph_breaks"]
    torch._dynamo.reset()
    return breaks


def test_the_strategys_ddp_splits_one_graph_at_its_buckets(world_of_8):
    """dlscale's own wrapper (the allreduce strategy, DDP's default buckets) around a ResNet-18 of 42.7 MiB:
    a 1 MiB bucket, a 25 MiB one and the rest, so three compiled graphs of one traced graph."""
    expected_breaks = wrapper_breaks()
    model = build_model("resnet18", num_classes=10)
    expected = predicted_buckets(model, DDP_BUCKET_CAP_MB)
    assert expected == 3  # 42.7 MiB = 1 + 25 + 16.7
    strategy = build_strategy(StrategyConfig(), world_of_8)
    wrapped = strategy.wrap(model, torch.device("cpu"))
    assert isinstance(wrapped, DistributedDataParallel) and wrapped.bucket_bytes_cap == DDP_BUCKET_CAP_MB * MIB
    wrapped.register_comm_hook(None, noop_hook)
    got = compiled_step(model, wrapped)
    assert got == {"traced": 1, "compiled": expected, "backend": expected, "breaks": expected_breaks}


def test_a_smaller_bucket_cap_gives_more_graphs(world_of_8):
    """bucket_cap_mb=2 on a ResNet-18 of width 32 (10.7 MiB): from the output, fc + the last block's second
    conv (2.26 MiB, over the first bucket's 1 MiB), its first conv (2.25), the block before's second conv
    (2.25), its first conv + shortcut + the next block's 0.56 MiB convs (2.38), the rest (1.56): five."""
    model = build_model("resnet18", num_classes=10, width=32)
    expected = predicted_buckets(model, 2)
    assert expected == 5
    got = compiled_step(model, ddp(model, bucket_cap_mb=2))
    assert (got["traced"], got["compiled"], got["backend"]) == (1, expected, expected)


class BreakingResNet(nn.Module):
    """A ResNet whose forward reads a value on the host between two stages: a graph break."""

    def __init__(self) -> None:
        super().__init__()
        self.net = build_model("resnet18", num_classes=10, width=8)

    def forward(self, x):
        net = self.net
        x = net.layer1(net.maxpool(net.relu(net.bn1(net.conv1(x)))))
        if x.sum().item() > 0:  # data-dependent control flow
            x = x + 0
        return net.fc(net.avgpool(net.layer4(net.layer3(net.layer2(x)))).flatten(1))


def test_a_graph_break_in_the_model_is_caught(world_of_8):
    """What the first test would see if a change broke the model's graph: more breaks, more graphs."""
    expected_breaks = wrapper_breaks()
    model = BreakingResNet()
    got = compiled_step(model, ddp(model))
    assert (got["breaks"], got["traced"]) == (expected_breaks + 1, 2)
