import pytest
import torch
from torch import nn

from dlscale.config import PRECISIONS, StrategyConfig
from dlscale.distributed import DistEnv
from dlscale.errors import DeviceError
from dlscale.precision import build_precision
from dlscale.speed import SpeedOptions
from dlscale.strategies import build_strategy
from dlscale.train.step import StepParts, train_step

CPU = torch.device("cpu")


def _tiny():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4, 5))


@pytest.mark.parametrize("name,dtype,scaled", [
    ("fp32", torch.float32, False), ("amp_bf16", torch.bfloat16, False), ("amp_fp16", torch.float16, True),
])
def test_cpu_modes_train(name, dtype, scaled):
    precision = build_precision(name, CPU)
    assert precision.scaler.is_enabled() is scaled  # GradScaler for fp16 only
    model = _tiny()
    with precision.autocast():
        assert model[0](torch.randn(2, 3, 8, 8)).dtype == dtype
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    parts = StepParts(model, opt, precision, build_strategy(StrategyConfig(), DistEnv()), nn.CrossEntropyLoss())
    loss = train_step(parts, [(torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3]))])
    assert torch.isfinite(loss)
    assert all(p.grad is None for p in model.parameters())  # zero_grad(set_to_none=True)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_fp16_scaler_skips_overflowing_step():
    precision = build_precision("amp_fp16", CPU)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()
    precision.backward(model(torch.tensor([[float("inf"), 1.0]])).sum())
    scale = precision.scaler.get_scale()
    precision.step(opt)
    assert torch.equal(model.weight, before)  # step skipped on inf gradients
    assert precision.scaler.get_scale() < scale  # and the scale backed off
    restored = build_precision("amp_fp16", CPU)
    restored.load_state_dict(precision.state_dict())
    assert restored.scaler.get_scale() == precision.scaler.get_scale()


def test_unsupported_modes_name_the_alternative():
    with pytest.raises(DeviceError, match="on the CPU use fp32"):
        build_precision("tf32", CPU)
    with pytest.raises(DeviceError, match="choose one of"):
        build_precision("fp8", CPU)
    assert set(PRECISIONS) == {"fp32", "tf32", "amp_fp16", "amp_bf16"}


def test_speed_options_on_cpu():
    speed = SpeedOptions(channels_last=True, fused_optimizer=True)
    model = speed.place_model(_tiny(), CPU)
    assert model[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert speed.place_batch(torch.randn(2, 3, 8, 8)).is_contiguous(memory_format=torch.channels_last)
    assert speed.optimizer_kwargs() == {"fused": True}
    with pytest.raises(DeviceError, match="CUDA"):
        SpeedOptions(cudnn_benchmark=True).apply_globals(CPU)


@pytest.mark.slow
def test_a_compiled_step_equals_the_eager_step():
    """The same weights, batch and optimizer through train_step, compiled by inductor and eager: the same
    loss and the same weights after the step (inductor fuses and reorders float sums: 1e-5 apart, where a
    wrong step, e.g. a missed gradient or BatchNorm in eval mode, is 1e-2 or more)."""
    pytest.importorskip("torch._inductor")
    batch = [(torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 3]))]
    losses, weights = {}, {}
    for compiled in (False, True):
        model = SpeedOptions(compile=compiled).maybe_compile(_tiny())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        parts = StepParts(model, opt, build_precision("fp32", CPU), build_strategy(StrategyConfig(), DistEnv()),
                          nn.CrossEntropyLoss())
        losses[compiled] = train_step(parts, batch)
        weights[compiled] = [p.detach().clone() for p in model.parameters()]
    assert torch.isfinite(losses[True])
    torch.testing.assert_close(losses[True], losses[False], rtol=1e-5, atol=1e-6)
    for compiled_weight, eager_weight in zip(weights[True], weights[False], strict=True):
        torch.testing.assert_close(compiled_weight, eager_weight, rtol=1e-5, atol=1e-6)
    assert any(not torch.equal(w, b) for w, b in zip(weights[False], _tiny().parameters(), strict=True))


@pytest.fixture
def tf32_switches():
    """Restore torch's process-wide TF32 switches after a test changes them."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("enabled", [True, False])
def test_tf32_switches_leave_every_getter_readable(tf32_switches, enabled):
    """Setting only torch's new fp32_precision flags made the legacy getters raise ("a mix of the
    legacy and new APIs"), which inductor's max-autotune reads: both kinds must answer, and agree."""
    from dlscale.precision import _set_tf32

    _set_tf32(enabled)
    assert torch.get_float32_matmul_precision() == ("high" if enabled else "highest")
    assert torch.backends.cuda.matmul.allow_tf32 is enabled
    assert torch.backends.cudnn.allow_tf32 is enabled
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        assert torch.backends.cuda.matmul.fp32_precision == ("tf32" if enabled else "ieee")


def test_fp32_on_a_gpu_says_what_it_means():
    from dlscale.precision import precision_note

    assert "TF32 off" in precision_note("fp32", "cuda") and "--precision tf32" in precision_note("fp32", "cuda")
    assert precision_note("fp32", "cpu") is None and precision_note("tf32", "cuda") is None


def test_amp_on_a_cpu_runs_with_a_warning_and_tf32_there_is_refused_without_advising_amp():
    """README: a mode the device cannot run is refused in one line; one it runs badly (AMP on a CPU: amp_fp16 at
    0.06x fp32 on the development machine) is warned at the start and not advised."""
    from dlscale.precision import precision_note

    for name in ("amp_fp16", "amp_bf16"):
        note = precision_note(name, "cpu")
        assert note.startswith(f"warning: precision {name} on the CPU") and "compare with --precision fp32" in note
        assert precision_note(name, "cuda") is None
    with pytest.raises(DeviceError) as refused:
        build_precision("tf32", CPU)
    assert str(refused.value).endswith("on the CPU use fp32") and "amp" not in str(refused.value)


def test_fused_sgd_is_the_gpu_default_and_explicit_choices_stay():
    """GradScaler steps a fused SGD without reading the overflow flag on the host every step."""
    assert SpeedOptions().resolved(torch.device("cuda")).fused_optimizer is True
    assert SpeedOptions().resolved(CPU).fused_optimizer is False
    assert SpeedOptions(fused_optimizer=False).resolved(torch.device("cuda")).fused_optimizer is False
    assert SpeedOptions(fused_optimizer=True).resolved(CPU).fused_optimizer is True


def test_compile_modes_are_checked():
    from dlscale.errors import ConfigError

    assert SpeedOptions(compile=True, compile_mode="max-autotune").compile_mode == "max-autotune"
    with pytest.raises(ConfigError, match="compile_mode='fastest'"):
        SpeedOptions(compile_mode="fastest")
