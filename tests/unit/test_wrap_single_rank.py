"""strategy.wrap_single_rank (`dlscale bench --wrap-single-rank`): DDP wraps one process's model, in a
one-rank process group made for it; the wrapped step must equal the bare step (DDP averages over one
rank). Also the GPU default's choice for several ranks, and train's compile facts under the wrapper."""

from dataclasses import replace

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import dlscale.train.loop as loop
from dlscale import cli
from dlscale.cli.bench import GPU_FASTEST, GPU_MULTI_RANK_FASTEST, config_from_args
from dlscale.cli.common import resolve_config
from dlscale.config import OptimConfig, StrategyConfig, load_config
from dlscale.distributed import DistEnv, init_process_group, shutdown
from dlscale.errors import ConfigError
from dlscale.models import build_model
from dlscale.precision import build_precision
from dlscale.speed import SpeedOptions
from dlscale.train.replica import build_replica
from dlscale.train.step import train_step

CPU = torch.device("cpu")


def parse(argv):
    return cli.build_parser().parse_args(argv)


def test_only_the_allreduce_strategy_wraps_a_single_rank():
    assert StrategyConfig(wrap_single_rank=True).dist_optimizer == "allreduce"
    with pytest.raises(ConfigError, match="wrap_single_rank wraps in DDP, which is the allreduce strategy"):
        StrategyConfig(wrap_single_rank=True, dist_optimizer="neighbor_allreduce")
    with pytest.raises(ConfigError, match="--dist-optimizer allreduce"):
        config_from_args(parse(["bench", "--model", "resnet18", "--wrap-single-rank", "--dist-optimizer",
                                "gradient_allreduce"]), has_gpu=False)


def test_the_flag_and_the_setting_reach_the_config():
    bench = config_from_args(parse(["bench", "--model", "resnet18", "--wrap-single-rank"]), has_gpu=False)[0]
    assert bench.strategy.wrap_single_rank
    assert not config_from_args(parse(["bench", "--model", "resnet18"]), has_gpu=False)[0].strategy.wrap_single_rank
    train, _ = resolve_config(parse(["train", "--config", "cpu:digits", "--set", "strategy.wrap_single_rank=true"]))
    assert train.strategy.wrap_single_rank


def _weights_after_steps(wrap: bool, steps: int = 3) -> tuple[type, torch.Tensor]:
    torch.manual_seed(0)
    model = build_model("resnet18", num_classes=10, width=8)
    replica = build_replica(model, env=DistEnv(), device=CPU, speed=SpeedOptions(),
                            strategy=StrategyConfig(wrap_single_rank=wrap),
                            optim=OptimConfig(lr=0.1, momentum=0.9, weight_decay=0.0), global_batch=8,
                            precision=build_precision("fp32", CPU), loss_fn=nn.CrossEntropyLoss())
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        batch = (torch.randn(8, 3, 32, 32, generator=generator), torch.randint(0, 10, (8,), generator=generator))
        train_step(replica.parts, [batch])
    weights = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return type(replica.parts.model), weights


def test_a_wrapped_single_rank_steps_as_the_bare_model():
    init_process_group(DistEnv(), CPU, 30.0, one_rank_group=True)
    try:
        assert dist.get_world_size() == 1 and dist.get_backend() == "gloo"
        wrapped_type, wrapped = _weights_after_steps(wrap=True)
    finally:
        shutdown()
    assert not dist.is_initialized()
    bare_type, bare = _weights_after_steps(wrap=False)
    assert wrapped_type is DistributedDataParallel and bare_type is not DistributedDataParallel
    # DDP divides by a world of 1 and adds nothing: float rounding at most.
    torch.testing.assert_close(wrapped, bare, rtol=1e-5, atol=1e-6)


def test_no_group_is_made_unless_asked():
    init_process_group(DistEnv(), CPU, 30.0)
    assert not dist.is_initialized()


def test_the_multi_rank_gpu_default_is_named_and_explained():
    one, one_note = config_from_args(parse(["bench"]), has_gpu=True)
    many, note = config_from_args(parse(["bench"]), has_gpu=True, world_size=8)
    assert one.speed == GPU_FASTEST and many.speed == GPU_MULTI_RANK_FASTEST
    last = note.splitlines()[-1]
    assert last.startswith("With 8 ranks (DDP) the default compiles in mode reduce-overhead, as on one GPU: the "
                           "fastest with DDP's wrapper on one H100 (0.977x unwrapped")
    assert "docs/benchmarks.md" in last and "With" not in one_note
    eager = config_from_args(parse(["bench"]), has_gpu=True, eager=True, world_size=8)[0]
    assert not eager.speed.compile and "With 8 ranks" not in config_from_args(
        parse(["bench"]), has_gpu=True, eager=True, world_size=8)[1]


@pytest.mark.slow
def test_train_records_what_compiling_did_under_the_wrapper(tmp_path, monkeypatch):
    """A compiled, wrapped single-rank training run: its summary holds the compile facts. aot_eager stands in
    for inductor (a CPU inductor compile of a ResNet takes tens of seconds); the counters are the same."""
    original = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: original(model, backend="aot_eager"))
    cfg, _ = load_config("cpu:synthetic", ["schedule.epochs=1", "schedule.warmup_epochs=0", "max_steps_per_epoch=4",
                                           "log_every=2", "model.width=8", "speed.compile=true",
                                           "strategy.wrap_single_rank=true", "checkpoint.enabled=false"])
    try:
        summary = loop.fit(cfg, DistEnv(), run_name="c", output_dir=tmp_path)
    finally:
        shutdown()
    facts = summary["compile_facts"]
    # Graphs: training and evaluation (model.eval() retraces); DDP's wrapper breaks its own forward.
    assert facts["traced_graphs"] >= 1 and facts["compiled_graphs"] >= facts["traced_graphs"]
    assert facts["graph_breaks"] > 0 and facts["cudagraphs"] is False and facts["cudagraph_replays"] is None
    assert facts["compile_s"] is not None and facts["compile_s"] > 0
    bare = replace(cfg, strategy=StrategyConfig())
    assert loop.fit(bare, DistEnv(), run_name="b", output_dir=tmp_path)["compile_facts"]["graph_breaks"] == 0
