"""channels_last end to end on the GPU: weights, batches, every convolution's output and every weight
gradient stay NHWC through a training step (no silent fall-back to NCHW, which costs transposes),
and the layout changes no result beyond float rounding."""

import pytest
import torch
from gpu_helpers import tiny_setup

from dlscale.speed import SpeedOptions
from dlscale.train.step import train_step

pytestmark = pytest.mark.gpu

NHWC = torch.channels_last


def _conv_outputs_layout(model: torch.nn.Module) -> tuple[list[bool], list]:
    """Hooks recording, for every Conv2d, whether its output is channels_last."""
    seen: list[bool] = []
    hooks = [module.register_forward_hook(lambda m, i, out: seen.append(out.is_contiguous(memory_format=NHWC)))
             for module in model.modules() if isinstance(module, torch.nn.Conv2d)]
    return seen, hooks


@pytest.mark.parametrize("precision", ["fp32", "amp_bf16", "amp_fp16"])
def test_a_channels_last_step_stays_channels_last(precision):
    _, setup = tiny_setup(precision=precision, speed=SpeedOptions(channels_last=True, cudnn_benchmark=True))
    model = setup.parts.model
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(m.weight.is_contiguous(memory_format=NHWC) for m in convs)
    assert all(images.is_contiguous(memory_format=NHWC) for images, _ in setup.pool)

    seen, hooks = _conv_outputs_layout(model)
    images, labels = setup.pool[0]
    with setup.parts.precision.autocast():
        loss = setup.parts.loss_fn(model(images), labels)
    setup.parts.precision.backward(loss)
    for hook in hooks:
        hook.remove()
    nchw = [i for i, ok in enumerate(seen) if not ok]
    assert len(seen) == len(convs) and not nchw, f"NCHW outputs at convolutions {nchw}"
    not_nhwc = [i for i, m in enumerate(convs) if not m.weight.grad.is_contiguous(memory_format=NHWC)]
    assert not not_nhwc, f"weight gradients of convolutions {not_nhwc} are not channels_last"

    setup.parts.precision.step(setup.parts.optimizer)
    setup.parts.optimizer.zero_grad(set_to_none=True)
    train_step(setup.parts, [setup.pool[1]])  # and the full step, twice, keeps the weights NHWC
    assert all(m.weight.is_contiguous(memory_format=NHWC) for m in convs)


def test_channels_last_gives_the_same_logits_and_loss_as_nchw():
    """Same seed, same batch, IEEE fp32: the two layouts agree to float rounding."""
    _, nchw = tiny_setup(precision="fp32")
    _, nhwc = tiny_setup(precision="fp32", speed=SpeedOptions(channels_last=True))
    images, labels = nchw.pool[0]
    assert torch.equal(images, nhwc.pool[0][0])  # the same values in the other layout
    with torch.no_grad():
        a, b = nchw.parts.model(images), nhwc.parts.model(nhwc.pool[0][0])
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    loss_a = train_step(nchw.parts, [(images, labels)])
    loss_b = train_step(nhwc.parts, [nhwc.pool[0]])
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-4, atol=1e-5)
