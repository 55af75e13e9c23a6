"""The speed levers of the GPU campaign that a CPU can check: the padded stem computes the same thing as the
plain one (outputs and the real weights' gradients) and keeps checkpoints interchangeable; inductor's
coordinate-descent tuning and cuDNN's benchmark limit reach torch as asked, and are refused where they mean
nothing. Their speed is measured on a GPU (benchmarks/gpu.py, the levers stage)."""

from dataclasses import asdict

import pytest
import torch
from torch import nn

from dlscale.cli import build_parser
from dlscale.cli.bench import config_from_args
from dlscale.config import load_config
from dlscale.errors import ConfigError, DeviceError
from dlscale.models import PaddedStemConv, build_model, pad_stem
from dlscale.speed import SpeedOptions


def _pair(seed: int = 0, **options) -> tuple[nn.Module, nn.Module]:
    """Two copies of one tiny ResNet in float64 (so that equal mathematics gives equal numbers to ~1e-12)."""
    torch.manual_seed(seed)
    plain = build_model("resnet18", num_classes=5, width=8, **options).double()
    padded = build_model("resnet18", num_classes=5, width=8, **options).double()
    padded.load_state_dict(plain.state_dict())
    return plain, pad_stem(padded, 4)


@pytest.mark.parametrize("channels_last", [False, True])
def test_padded_stem_gives_the_same_outputs_and_gradients(channels_last):
    plain, padded = _pair()
    images = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    if channels_last:
        plain, padded = plain.to(memory_format=torch.channels_last), padded.to(memory_format=torch.channels_last)
        images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.tensor([0, 3, 4])
    losses = []
    for model in (plain, padded):
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        losses.append(loss.detach())
    assert torch.allclose(losses[0], losses[1], rtol=0, atol=1e-12)
    assert isinstance(padded.conv1, PaddedStemConv) and padded.conv1.weight.shape == (8, 3, 7, 7)
    for (name, a), (_, b) in zip(plain.named_parameters(), padded.named_parameters(), strict=True):
        assert a.grad.shape == b.grad.shape, name
        assert torch.allclose(a.grad, b.grad, rtol=0, atol=1e-10), name


def test_the_padding_is_zero_channels_with_zero_weights():
    """The convolution the padded stem runs, done by hand: a 4-channel conv over the image plus a zero
    channel, with the 3-channel weights plus a zero slice, equals the 3-channel conv."""
    conv = nn.Conv2d(3, 2, 3, padding=1, bias=False).double()
    padded = PaddedStemConv(conv, 8)
    x = torch.randn(1, 3, 5, 5, dtype=torch.float64)
    by_hand = nn.functional.conv2d(torch.cat([x, torch.zeros(1, 5, 5, 5, dtype=torch.float64)], 1),
                                   torch.cat([conv.weight, torch.zeros(2, 5, 3, 3, dtype=torch.float64)], 1),
                                   padding=1)
    assert torch.equal(padded(x), by_hand)
    assert torch.allclose(padded(x), conv(x), rtol=0, atol=1e-12)
    assert padded.weight is conv.weight  # one parameter, shared: the optimizer steps the real weights


def test_checkpoints_move_between_padded_and_plain_models():
    plain, padded = _pair(seed=1)
    with torch.no_grad():  # the padded model trains on: its weights now differ from plain's
        for p in padded.parameters():
            p.add_(0.01)
    state = padded.state_dict()
    assert set(state) == set(plain.state_dict()) and state["conv1.weight"].shape == (8, 3, 7, 7)
    fresh = build_model("resnet18", num_classes=5, width=8).double()
    fresh.load_state_dict(state, strict=True)  # an unpadded model reads the padded one's checkpoint
    back = pad_stem(build_model("resnet18", num_classes=5, width=8).double(), 4)
    back.load_state_dict(fresh.state_dict(), strict=True)
    images = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    padded.eval(), fresh.eval(), back.eval()
    assert torch.allclose(padded(images), fresh(images), rtol=0, atol=1e-12)
    assert torch.allclose(back(images), fresh(images), rtol=0, atol=1e-12)


def test_pad_stem_refuses_what_it_cannot_pad():
    assert pad_stem(nn.Linear(2, 2), 0) is not None  # 0: nothing to do, whatever the model
    with pytest.raises(ConfigError, match="conv1 stem"):
        pad_stem(nn.Linear(2, 2), 4)
    with pytest.raises(ConfigError, match="fewer than"):
        PaddedStemConv(nn.Conv2d(6, 2, 3), 4)


def _bench(*flags: str):
    return config_from_args(build_parser().parse_args(["bench", "--model", "resnet18", *flags]), has_gpu=False)[0]


def test_bench_flags_reach_the_options_and_the_record():
    cfg = _bench("--stem-channels", "4", "--compile", "--coordinate-descent-tuning", "--cudnn-benchmark",
                 "--cudnn-benchmark-limit", "0")
    speed = asdict(cfg.speed.resolved(torch.device("cuda")))  # what summary.json records
    assert (speed["stem_channels"], speed["coordinate_descent_tuning"], speed["cudnn_benchmark_limit"]) == (4, True, 0)
    plain = asdict(_bench().speed)
    assert (plain["stem_channels"], plain["coordinate_descent_tuning"], plain["cudnn_benchmark_limit"]) == (0, False,
                                                                                                           None)


def test_train_presets_take_the_levers():
    cfg, _ = load_config("cpu:digits", ["speed.stem_channels=4"])
    assert cfg.speed.stem_channels == 4


@pytest.mark.parametrize(("options", "message"), [
    ({"coordinate_descent_tuning": True}, "torch.compile option"),
    ({"cudnn_benchmark_limit": 0}, "needs cuDNN autotuning"),
    ({"cudnn_benchmark": True, "cudnn_benchmark_limit": -1}, "use 0"),
    ({"stem_channels": 3}, "4 to 64"),
])
def test_levers_refused_where_they_mean_nothing(options, message):
    with pytest.raises(ConfigError, match=message):
        SpeedOptions(**options)


def test_coordinate_descent_tuning_is_the_mode_plus_one_option():
    """torch.compile takes a mode or options: with the lever, the options are the mode's own list
    (torch._inductor.list_mode_options) plus coordinate_descent_tuning; without it, the mode alone."""
    assert SpeedOptions(compile=True, compile_mode="reduce-overhead").inductor_options() is None
    options = SpeedOptions(compile=True, compile_mode="reduce-overhead", coordinate_descent_tuning=True)
    assert options.inductor_options() == {"triton.cudagraphs": True, "coordinate_descent_tuning": True}
    default = SpeedOptions(compile=True, coordinate_descent_tuning=True)
    assert default.inductor_options() == {"coordinate_descent_tuning": True}


def test_the_training_stream_is_a_cuda_option_refused_on_the_cpu_in_one_line():
    cfg, _ = load_config("cpu:digits", ["speed.step_stream=true"])
    assert cfg.speed.step_stream and asdict(cfg)["speed"]["step_stream"] is True  # config.json records it
    with pytest.raises(DeviceError, match=r"speed.step_stream runs the training on a CUDA stream.*CPU") as raised:
        cfg.speed.apply_globals(torch.device("cpu"))
    assert "\n" not in str(raised.value)
    with SpeedOptions().training_stream(torch.device("cpu")):  # without it: the run as it is, on any device
        pass
