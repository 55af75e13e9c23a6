"""Every precision and speed option trains a small ResNet on the GPU: the loss falls, nothing is NaN;
fp32 means IEEE fp32 and tf32 means TF32 (checked by the arithmetic, not the flags); fp16's loss
scaler skips a step whose gradients overflowed, with torch's foreach and fused SGD alike."""

import pytest
import torch
from gpu_helpers import assert_learns, tiny_setup, train_losses

from dlscale.config import PRECISIONS
from dlscale.precision import build_precision
from dlscale.speed import SpeedOptions

pytestmark = pytest.mark.gpu

ALL_ON = SpeedOptions(channels_last=True, cudnn_benchmark=True, fused_optimizer=True)
ONE_AT_A_TIME = {
    "channels_last": SpeedOptions(channels_last=True),
    "cudnn_benchmark": SpeedOptions(cudnn_benchmark=True),
    "fused_sgd": SpeedOptions(fused_optimizer=True),
    "foreach_sgd": SpeedOptions(fused_optimizer=False),
}


@pytest.mark.parametrize("speed", [SpeedOptions(), ALL_ON], ids=["plain", "all_speed_options"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_every_precision_learns(precision, speed):
    _, setup = tiny_setup(precision=precision, speed=speed)
    assert_learns(train_losses(setup, 30))


@pytest.mark.parametrize("name", sorted(ONE_AT_A_TIME))
def test_every_speed_option_alone_learns_in_bf16(name):
    _, setup = tiny_setup(precision="amp_bf16", speed=ONE_AT_A_TIME[name])
    assert_learns(train_losses(setup, 30))


def _relative_error(precision: str, cuda: torch.device) -> dict[str, float]:
    """Error against float64 of a 1024^3 matmul and of a 3x3 convolution (16 x 128 x 28 x 28 by
    128 filters, a tensor-core shape), computed in this precision mode."""
    build_precision(precision, cuda)
    generator = torch.Generator(device=cuda).manual_seed(0)
    a, b = (torch.randn(1024, 1024, device=cuda, generator=generator) for _ in range(2))
    x = torch.randn(16, 128, 28, 28, device=cuda, generator=generator)
    w = torch.randn(128, 128, 3, 3, device=cuda, generator=generator)
    errors = {}
    for name, got, want in (("matmul", a @ b, a.double() @ b.double()),
                            ("conv", torch.nn.functional.conv2d(x, w, padding=1),
                             torch.nn.functional.conv2d(x.double(), w.double(), padding=1))):
        errors[name] = ((got.double() - want).norm() / want.norm()).item()
    return errors


def test_fp32_is_ieee_and_tf32_rounds_to_tf32(cuda):
    """fp32 on a GPU is IEEE fp32, TF32 off for matmuls and convolutions: relative errors near 1e-7.
    tf32 rounds matmul operands to 10 mantissa bits: errors near 1e-4. (Whether cuDNN picks a
    TF32 kernel for a convolution is its choice, so only the fp32 side is asserted for convs.)"""
    if torch.cuda.get_device_capability(cuda) < (8, 0):
        pytest.skip("TF32 needs Ampere or newer")
    ieee, tf32 = _relative_error("fp32", cuda), _relative_error("tf32", cuda)
    for op in ("matmul", "conv"):
        assert ieee[op] < 1e-5, f"{op} in fp32 is not IEEE fp32: relative error {ieee[op]:.2e}"
    assert tf32["matmul"] > 2e-5, f"matmul in tf32 did not use TF32: relative error {tf32['matmul']:.2e}"
    again = _relative_error("fp32", cuda)  # switching back turns TF32 off again
    assert again["matmul"] < 1e-5 and again["conv"] < 1e-5, again


def test_fused_sgd_is_the_default_on_cuda():
    """SpeedOptions.fused_optimizer None (the default) means fused SGD on CUDA; False means not."""
    _, default = tiny_setup()
    _, forced = tiny_setup(speed=SpeedOptions(fused_optimizer=True))
    _, off = tiny_setup(speed=SpeedOptions(fused_optimizer=False))
    assert default.parts.optimizer.defaults.get("fused") is True
    assert forced.parts.optimizer.defaults.get("fused") is True
    assert not off.parts.optimizer.defaults.get("fused")


def _snapshot(setup) -> dict[str, torch.Tensor]:
    """Parameters and momentum buffers, copied."""
    params = setup.parts.optimizer.param_groups[0]["params"]
    state = {f"param.{i}": p.detach().clone() for i, p in enumerate(params)}
    for i, p in enumerate(params):
        buffer = setup.parts.optimizer.state.get(p, {}).get("momentum_buffer")
        if buffer is not None:
            state[f"momentum.{i}"] = buffer.clone()
    return state


def _non_finite(state: dict[str, torch.Tensor]) -> list[str]:
    return [key for key, value in state.items() if not torch.isfinite(value).all()]


def _overflow_step(setup, *, poison: bool = False) -> None:
    """A train step whose loss, hence every gradient, is inf. poison: free NaN-filled blocks of the
    parameters' sizes just before the optimizer step, so that memory the step takes with
    empty_like is NaN rather than whatever the allocator last held."""
    parts = setup.parts
    images, labels = setup.pool[0]
    with parts.precision.autocast():
        loss = parts.loss_fn(parts.model(images), labels) * float("inf")
    parts.precision.backward(loss)
    if poison:
        junk = [torch.full_like(p, float("nan")) for p in parts.model.parameters()]
        del junk
    parts.precision.step(parts.optimizer)
    parts.optimizer.zero_grad(set_to_none=True)


@pytest.mark.parametrize("fused", [False, True], ids=["foreach_sgd", "fused_sgd"])
def test_fp16_scaler_skips_the_step_with_an_inf_gradient(fused):
    _, setup = tiny_setup(precision="amp_fp16", speed=SpeedOptions(fused_optimizer=fused))
    train_losses(setup, 3)
    scaler = setup.parts.precision.scaler
    before, scale = _snapshot(setup), scaler.get_scale()
    assert not _non_finite(before), f"non-finite before the overflow step: {_non_finite(before)[:5]}"

    _overflow_step(setup)
    after = _snapshot(setup)
    assert before.keys() == after.keys()
    changed = [key for key in before if not torch.equal(before[key], after[key])]
    assert not changed, f"the overflowed step changed {changed[:5]}"
    assert scaler.get_scale() == scale * scaler.get_backoff_factor()

    assert_learns(train_losses(setup, 30))  # and training goes on


def test_a_skipped_first_step_leaves_fused_sgd_equal_to_foreach_sgd():
    """fp16 training often overflows on its first step (the scaler starts at 2**16). The first
    step is where SGD creates its momentum buffers; a skipped one must leave none behind that the
    next step would read. torch's fused SGD creates them with empty_like before its kernel returns
    on overflow, so the next step reads uninitialised memory (seen with torch 2.13 on the CPU;
    reported with 2.11 on CUDA in LibreYOLO/libreyolo#771); dlscale's build_optimizer starts them
    at zero (tests/unit/test_optim.py checks the same on the CPU)."""
    params = {}
    for fused in (False, True):
        _, setup = tiny_setup(precision="amp_fp16", speed=SpeedOptions(fused_optimizer=fused))
        _overflow_step(setup, poison=True)
        losses = train_losses(setup, 3)
        state = _snapshot(setup)
        assert all(torch.isfinite(torch.tensor(losses))) and not _non_finite(state), \
            f"{'fused' if fused else 'foreach'} SGD after a skipped first step: losses {losses}, " \
            f"non-finite {_non_finite(state)[:5]}"
        params[fused] = {key: value for key, value in state.items() if key.startswith("param.")}
    for key, value in params[False].items():
        torch.testing.assert_close(params[True][key], value, rtol=1e-3, atol=1e-4, msg=lambda m, k=key: f"{k}: {m}")
