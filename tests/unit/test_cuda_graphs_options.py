"""`dlscale bench --cuda-graphs` without a GPU: the flag reaches the config and the recorded speed options,
and what the capture cannot hold is refused with one line (the capture itself: tests/gpu/test_gpu_cuda_graphs.py)."""

from dataclasses import asdict

import pytest
import torch

from dlscale.bench.cuda_graphs import autocast_cache_disabled, check_ranks
from dlscale.bench.synthetic import run_bench
from dlscale.cli import build_parser
from dlscale.cli.bench import config_from_args
from dlscale.config import BenchConfig, load_config
from dlscale.distributed import DistEnv
from dlscale.errors import ConfigError, DeviceError
from dlscale.precision import build_precision
from dlscale.speed import SpeedOptions

CPU = torch.device("cpu")


def _bench_config(*flags: str) -> BenchConfig:
    args = build_parser().parse_args(["bench", "--model", "resnet18", *flags])
    return config_from_args(args, has_gpu=False)[0]


def test_the_flag_lands_in_the_config_and_the_record():
    cfg = _bench_config("--cuda-graphs", "--channels-last")
    assert cfg.speed.cuda_graphs and cfg.speed.channels_last and not cfg.speed.compile
    assert not _bench_config().speed.cuda_graphs
    assert asdict(cfg)["speed"]["cuda_graphs"] is True  # config.json of the run directory
    assert asdict(cfg.speed.resolved(torch.device("cuda")))["cuda_graphs"] is True  # summary.json's speed keys


def test_refused_with_compile():
    with pytest.raises(ConfigError, match="--cuda-graphs and --compile do not combine.*--compile-mode reduce-overhead"):
        _bench_config("--cuda-graphs", "--compile-mode", "reduce-overhead")
    with pytest.raises(ConfigError, match="do not combine"):
        SpeedOptions(cuda_graphs=True, compile=True)


def test_refused_on_the_cpu():
    with pytest.raises(DeviceError, match="--cuda-graphs needs a CUDA device, this run is on the CPU"):
        SpeedOptions(cuda_graphs=True).apply_globals(CPU)


def test_refused_for_several_ranks_before_any_process_group():
    check_ranks(1)
    with pytest.raises(ConfigError, match="this job has 2 ranks; .*--compile-mode reduce-overhead"):
        check_ranks(2)
    cfg = BenchConfig(model="resnet18", speed=SpeedOptions(cuda_graphs=True), device="cpu")
    env = DistEnv(rank=1, world_size=2, local_world_size=2, master_addr="127.0.0.1", master_port=1)
    with pytest.raises(ConfigError, match="2 ranks"):  # before select_device and the rendezvous (port 1)
        run_bench(cfg, env)


def test_amp_fp16_needs_the_fused_optimizer():
    """GradScaler steps other SGDs after reading the overflow flag on the host: not capturable."""
    with pytest.raises(ConfigError, match="amp_fp16 needs the fused optimizer: drop --no-fused-optimizer"):
        _bench_config("--cuda-graphs", "--precision", "amp_fp16", "--no-fused-optimizer")
    assert _bench_config("--cuda-graphs", "--precision", "amp_fp16").speed.fused_optimizer is None  # fused on CUDA
    assert _bench_config("--cuda-graphs", "--precision", "amp_bf16", "--no-fused-optimizer").speed.cuda_graphs


def test_training_refuses_it():
    with pytest.raises(ConfigError, match="speed.cuda_graphs is a `dlscale bench` option"):
        load_config("cpu:digits", ["speed.cuda_graphs=true"])


def test_capture_runs_autocast_without_its_cache():
    precision = build_precision("amp_bf16", CPU)
    before = torch.is_autocast_cache_enabled()
    with autocast_cache_disabled(), precision.autocast():
        assert not torch.is_autocast_cache_enabled()
    with precision.autocast():
        assert torch.is_autocast_cache_enabled() == before
    assert torch.is_autocast_cache_enabled() == before


def test_the_gpu_default_is_the_fastest_measured_and_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # an H100, as far as this asks
    parse = build_parser().parse_args
    cfg, note = config_from_args(parse(["bench"]), has_gpu=True)
    assert (cfg.model, cfg.batch_size, cfg.image_size, cfg.precision) == ("resnet50", 256, 224, "amp_bf16")
    assert cfg.speed == SpeedOptions(channels_last=True, cudnn_benchmark=True, fused_optimizer=True, compile=True,
                                     compile_mode="reduce-overhead")
    assert "torch.compile reduce-overhead" in note and "--precision amp_bf16 --channels-last" in note
    # --cuda-graphs takes the eager graph path instead of compiling; a given mode wins; profile times the eager step
    graphs = config_from_args(parse(["bench", "--cuda-graphs"]), has_gpu=True)[0].speed
    assert graphs.cuda_graphs and not graphs.compile and graphs.channels_last
    assert config_from_args(parse(["bench", "--compile-mode", "max-autotune"]), has_gpu=True)[0].speed.compile_mode \
        == "max-autotune"
    assert not config_from_args(parse(["bench"]), has_gpu=True, eager=True)[0].speed.compile
    # the batch: 512 where the device holds it (an 80 GB H100), 256 on a 16 GB GPU or where memory is unknown
    big, big_note = config_from_args(parse(["bench"]), has_gpu=True, memory_gib=79.2)
    small, small_note = config_from_args(parse(["bench"]), has_gpu=True, memory_gib=15.8)
    assert (big.batch_size, small.batch_size) == (512, 256)
    assert "batch 512 (79 GiB of device memory holds it" in big_note and "--batch-size 512" in big_note
    assert "batch 256 (16 GiB of device memory: batch 512 (23.3 GB peak) needs 40 GiB)" in small_note
    assert config_from_args(parse(["bench", "--batch-size", "128"]), has_gpu=True, memory_gib=79.2)[0].batch_size == 128
    # with a model named, nothing is chosen: plain eager fp32 unless the flags say otherwise
    named = config_from_args(parse(["bench", "--model", "resnet50"]), has_gpu=True)[0]
    assert not named.speed.compile and named.precision == "fp32"
