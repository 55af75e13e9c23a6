"""ResNet family: torchvision-exact parameter counts and names, init, shapes, MACs."""

import io
import math

import pytest
import torch
from torch import nn

from dlscale.errors import ConfigError
from dlscale.models import MODELS, build_model, count_parameters, model_names
from dlscale.models.flops import count_macs, forward_flops, train_flops_per_image
from dlscale.models.resnet import BasicBlock, Bottleneck, ResNet

# torchvision's model pages (docs.pytorch.org/vision/stable/models), 1000 classes.
TORCHVISION_PARAMETERS = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
}
# torchvision's "GFLOPS" column, which counts multiply-accumulates.
TORCHVISION_GMACS = {"resnet18": 1.81, "resnet50": 4.09}


def meta_model(name, num_classes=1000, **options):
    """Shapes and counts without memory or init time."""
    with torch.device("meta"):
        return build_model(name, num_classes=num_classes, **options)


def tiny_model(name, num_classes=10, **options):
    torch.manual_seed(0)
    return build_model(name, num_classes=num_classes, width=8, **options)


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMETERS))
def test_parameter_count_equals_torchvision(name):
    assert count_parameters(meta_model(name)) == TORCHVISION_PARAMETERS[name]


def test_resnet50_cifar_100_classes_parameter_count():
    assert count_parameters(meta_model("resnet50_cifar", num_classes=100)) == 23_712_932


def test_every_depth_has_a_cifar_variant():
    for name in TORCHVISION_PARAMETERS:
        assert f"{name}_cifar" in MODELS
    assert model_names() == list(MODELS)


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "resnet18_cifar", "resnet50_cifar"])
@pytest.mark.parametrize("image_size", [16, 32])
def test_tiny_forward_backward_shapes(name, image_size):
    model = tiny_model(name, num_classes=7)
    images = torch.randn(2, 3, image_size, image_size)
    logits = model(images)
    assert logits.shape == (2, 7)
    logits.sum().backward()
    for parameter_name, parameter in model.named_parameters():
        assert parameter.grad is not None, parameter_name
        assert parameter.grad.shape == parameter.shape


def test_width_scales_every_stage():
    model = tiny_model("resnet50")
    assert model.conv1.out_channels == 8
    stage_outputs = [getattr(model, f"layer{i}")[-1].bn3.num_features for i in range(1, 5)]
    assert stage_outputs == [32, 64, 128, 256]  # 4 * width * 2**i
    assert model.fc.in_features == 256


def test_stems():
    imagenet, cifar = meta_model("resnet18"), meta_model("resnet18_cifar")
    assert imagenet.conv1.stride == (2, 2) and isinstance(imagenet.maxpool, nn.MaxPool2d)
    assert cifar.conv1.kernel_size == (7, 7) and cifar.conv1.stride == (1, 1)
    assert cifar.conv1.padding == (3, 3) and isinstance(cifar.maxpool, nn.Identity)


def test_in_channels_option():
    model = tiny_model("resnet18_cifar", in_channels=1)
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 10)


def test_v1_5_stride_is_on_the_3x3_conv():
    block = meta_model("resnet50").layer2[0]
    assert block.conv1.stride == (1, 1)
    assert block.conv2.stride == (2, 2)
    assert block.downsample[0].stride == (2, 2)


def test_resnet50_state_dict_has_torchvision_names_and_shapes():
    state = meta_model("resnet50").state_dict()
    # torchvision resnet50: 53 convs + 53 BNs (5 entries each) + fc weight and bias.
    assert len(state) == 53 + 53 * 5 + 2
    expected_shapes = {
        "conv1.weight": (64, 3, 7, 7),
        "bn1.running_mean": (64,),
        "layer1.0.downsample.0.weight": (256, 64, 1, 1),
        "layer1.0.downsample.1.num_batches_tracked": (),
        "layer2.0.conv2.weight": (128, 128, 3, 3),
        "layer3.5.conv3.weight": (1024, 256, 1, 1),
        "layer4.2.bn3.running_var": (2048,),
        "fc.weight": (1000, 2048),
        "fc.bias": (1000,),
    }
    for key, shape in expected_shapes.items():
        assert tuple(state[key].shape) == shape, key


def test_state_dict_loads_strict_into_another_build():
    source, target = tiny_model("resnet50"), tiny_model("resnet50")
    nn.init.constant_(source.fc.bias, 0.5)
    buffer = io.BytesIO()
    torch.save(source.state_dict(), buffer)
    buffer.seek(0)
    target.load_state_dict(torch.load(buffer, weights_only=True), strict=True)
    images = torch.randn(2, 3, 16, 16)
    source.eval(), target.eval()
    torch.testing.assert_close(target(images), source(images), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_zero_init_residual_zeroes_exactly_the_last_bn_of_each_block(name):
    model = tiny_model(name, zero_init_residual=True)
    blocks = [m for m in model.modules() if isinstance(m, BasicBlock | Bottleneck)]
    last_bns = {id(block.last_bn()) for block in blocks}
    assert len(last_bns) == len(blocks) == (8 if name == "resnet18" else 16)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            expected = 0.0 if id(module) in last_bns else 1.0
            assert torch.all(module.weight == expected)
            assert torch.all(module.bias == 0.0)


def test_without_zero_init_residual_every_bn_gamma_is_one():
    model = tiny_model("resnet50")
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            assert torch.all(module.weight == 1.0)


def test_conv_init_is_kaiming_normal_fan_out():
    torch.manual_seed(0)
    model = build_model("resnet50")
    # Convs where fan_in != fan_out, so fan_in mode would give a different std.
    for conv in (model.conv1, model.layer4[0].conv3):
        fan_out = conv.out_channels * conv.kernel_size[0] * conv.kernel_size[1]
        expected_std = math.sqrt(2.0 / fan_out)
        assert conv.weight.std().item() == pytest.approx(expected_std, rel=0.03)
        assert conv.weight.mean().item() == pytest.approx(0.0, abs=expected_std * 0.05)


def test_conv_init_fan_in_changes_exactly_the_convs_whose_channels_change():
    """NVIDIA ConvNets' fan_in against torchvision's fan_out, from the same random draws: each conv's weights are
    the same normals times sqrt(2 / fan), so their ratio is sqrt(out / in) (the kernel cancels) and is 1 exactly
    where a conv keeps its channel count. For ResNet-50 that leaves 17 of its 53 convs unchanged and changes 36
    (by hand: the stem 3 -> 64; per bottleneck conv3, conv1 of all but a stage's first block, and a stage's
    downsample; 1 + 6 + 9 + 13 + 7). Every channel count scales with the width except the image's 3, so a
    width-16 ResNet-50 has the same 36."""
    built = {}
    for mode in ("fan_out", "fan_in"):
        torch.manual_seed(0)
        built[mode] = build_model("resnet50", width=16, conv_init=mode)
    convs = [(name, module) for name, module in built["fan_in"].named_modules() if isinstance(module, nn.Conv2d)]
    out_convs = dict(built["fan_out"].named_modules())
    changed = 0
    for name, conv in convs:
        ratio = conv.weight / out_convs[name].weight
        expected = math.sqrt(conv.out_channels / conv.in_channels)
        assert torch.allclose(ratio, torch.full_like(ratio, expected), rtol=1e-5), name
        changed += conv.in_channels != conv.out_channels
    assert (len(convs), changed) == (53, 36)


def test_conv_init_is_a_model_option_and_the_ngc_presets_take_fan_in():
    from dlscale.config import load_config

    assert {load_config(f"imagenet:{p}")[0].model.conv_init for p in ("ngc-rn50-amp", "ngc-rn50-tf32")} == {"fan_in"}
    assert load_config("imagenet:default")[0].model.conv_init == "fan_out"
    with pytest.raises(ConfigError, match="conv_init"):
        build_model("resnet18", width=8, conv_init="fan_avg")
    with pytest.raises(ConfigError, match="model.conv_init"):
        load_config("cpu:digits", ["model.conv_init=fan_avg"])


@pytest.mark.parametrize("name", sorted(TORCHVISION_GMACS))
def test_macs_match_torchvision_within_one_percent(name):
    macs = count_macs(meta_model(name), image_size=224)
    assert macs / 1e9 == pytest.approx(TORCHVISION_GMACS[name], rel=0.01)


def test_macs_by_hand_for_a_small_net():
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),  # out 8x5x5, 3*9 MACs per output
        nn.Conv2d(8, 8, 3, padding=1, groups=4),  # out 8x5x5, 2*9 MACs per output
        nn.Flatten(),
        nn.Linear(200, 10),
    )
    expected = 200 * 27 + 200 * 18 + 200 * 10
    assert count_macs(net, image_size=10) == expected


def test_macs_scale_with_image_area_and_equal_for_real_and_meta_models():
    real = tiny_model("resnet18_cifar")
    macs_32 = count_macs(real, image_size=32)
    assert macs_32 == count_macs(meta_model("resnet18_cifar", num_classes=10, width=8), 32)
    # Every layer but fc scales with the area; fc is width*8 * classes = 640 MACs.
    assert count_macs(real, image_size=64) - 640 == 4 * (macs_32 - 640)


@pytest.mark.parametrize("training", [True, False])
def test_count_macs_restores_training_mode(training):
    model = tiny_model("resnet18").train(training)
    count_macs(model, image_size=16)
    assert model.training is training
    assert all(m.training is training for m in model.modules())


def test_flops_from_macs():
    assert forward_flops(10) == 20
    assert train_flops_per_image(10) == 60


def test_unknown_model_names_the_known_ones():
    with pytest.raises(ConfigError) as error:
        build_model("resnet51")
    message = str(error.value)
    assert "resnet51" in message
    for name in MODELS:
        assert name in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "options",
    [{"num_classes": 0}, {"num_classes": -3}, {"width": 0}, {"width": -8}, {"width": 2.5}],
)
def test_non_positive_sizes_raise_config_error(options):
    num_classes = options.pop("num_classes", 10)
    with pytest.raises(ConfigError, match="positive"):
        build_model("resnet18", num_classes=num_classes, **options)


def test_unknown_option_names_the_known_ones():
    with pytest.raises(ConfigError, match="zero_init_residual"):
        build_model("resnet18", widht=8)


def test_bad_image_size_raises_config_error():
    with pytest.raises(ConfigError, match="image_size"):
        count_macs(tiny_model("resnet18"), image_size=0)


# --------------------------------------------------------------------------- wide and ResNeXt

# torchvision's model pages, num_params and "GFLOPS" (MACs), 1000 classes:
# docs.pytorch.org/vision/stable/models/generated/torchvision.models.<name>.html
TORCHVISION_VARIANT_PARAMETERS = {
    "wide_resnet50_2": 68_883_240,
    "wide_resnet101_2": 126_886_696,
    "resnext50_32x4d": 25_028_904,
    "resnext101_32x8d": 88_791_336,
    "resnext101_64x4d": 83_455_272,
}
TORCHVISION_VARIANT_GMACS = {"wide_resnet50_2": 11.398, "resnext50_32x4d": 4.23, "resnext101_32x8d": 16.41}


@pytest.mark.parametrize("name", sorted(TORCHVISION_VARIANT_PARAMETERS))
def test_wide_and_resnext_parameter_counts_equal_torchvision(name):
    assert count_parameters(meta_model(name)) == TORCHVISION_VARIANT_PARAMETERS[name]


@pytest.mark.parametrize("name", sorted(TORCHVISION_VARIANT_GMACS))
def test_wide_and_resnext_macs_equal_torchvision(name):
    assert count_macs(meta_model(name), image_size=224) / 1e9 == pytest.approx(TORCHVISION_VARIANT_GMACS[name],
                                                                              rel=0.002)


@pytest.mark.parametrize(("name", "shapes"), [
    # torchvision Bottleneck: width = int(planes * base_width / 64) * groups; conv2 has `groups` groups
    ("resnext50_32x4d", {"layer1.0.conv1.weight": (128, 64, 1, 1), "layer1.0.conv2.weight": (128, 4, 3, 3),
                         "layer1.0.conv3.weight": (256, 128, 1, 1), "layer4.2.conv2.weight": (1024, 32, 3, 3),
                         "layer4.0.downsample.0.weight": (2048, 1024, 1, 1)}),
    # "last block in ResNet-50 has 2048-512-2048 channels, and in Wide ResNet-50-2 has 2048-1024-2048"
    ("wide_resnet50_2", {"layer4.2.conv1.weight": (1024, 2048, 1, 1), "layer4.2.conv2.weight": (1024, 1024, 3, 3),
                         "layer4.2.conv3.weight": (2048, 1024, 1, 1), "layer1.0.bn2.running_var": (128,)}),
    ("resnext101_32x8d", {"layer3.22.conv2.weight": (1024, 32, 3, 3), "fc.weight": (1000, 2048)}),
])
def test_variant_state_dict_names_and_shapes(name, shapes):
    state = meta_model(name).state_dict()
    blocks = 3 + 4 + 6 + 3 if "50" in name else 3 + 4 + 23 + 3
    convs = 1 + 3 * blocks + 4
    assert len(state) == convs + convs * 5 + 2  # every conv has one BN (5 entries); fc weight and bias
    for key, shape in shapes.items():
        assert tuple(state[key].shape) == shape, key


def _bn(x, state, prefix):
    return nn.functional.batch_norm(x, state[f"{prefix}.running_mean"], state[f"{prefix}.running_var"],
                                    state[f"{prefix}.weight"], state[f"{prefix}.bias"], training=False)


def torchvision_forward(state, images, blocks_per_stage, groups):
    """torchvision's ResNet.forward and Bottleneck.forward written with torch.nn.functional, reading
    the state_dict by torchvision's names: nothing of dlscale's modules is used."""
    relu = nn.functional.relu
    x = relu(_bn(nn.functional.conv2d(images, state["conv1.weight"], stride=2, padding=3), state, "bn1"))
    x = nn.functional.max_pool2d(x, 3, stride=2, padding=1)
    for stage, count in enumerate(blocks_per_stage, start=1):
        for index in range(count):
            p = f"layer{stage}.{index}"
            stride = 2 if index == 0 and stage > 1 else 1
            out = relu(_bn(nn.functional.conv2d(x, state[f"{p}.conv1.weight"]), state, f"{p}.bn1"))
            out = nn.functional.conv2d(out, state[f"{p}.conv2.weight"], stride=stride, padding=1, groups=groups)
            out = relu(_bn(out, state, f"{p}.bn2"))
            out = _bn(nn.functional.conv2d(out, state[f"{p}.conv3.weight"]), state, f"{p}.bn3")
            identity = x
            if f"{p}.downsample.0.weight" in state:
                identity = nn.functional.conv2d(x, state[f"{p}.downsample.0.weight"], stride=stride)
                identity = _bn(identity, state, f"{p}.downsample.1")
            x = relu(out + identity)
    x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
    return nn.functional.linear(x, state["fc.weight"], state["fc.bias"])


@pytest.mark.parametrize(("name", "groups"), [("resnext50_32x4d", 32), ("wide_resnet50_2", 1)])
def test_variant_output_equals_torchvision_structure(name, groups):
    model = build_model(name, num_classes=5, width=16)  # resnext50_32x4d: 32 groups of 1 channel in layer1
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # non-trivial BN statistics, so a swapped BN would show
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.normal_(0, 0.1, generator=generator)
                module.running_var.uniform_(0.5, 1.5, generator=generator)
                module.weight.uniform_(0.5, 1.5, generator=generator)
                module.bias.normal_(0, 0.1, generator=generator)
    model.eval()
    images = torch.randn(2, 3, 64, 64, generator=generator)
    want = torchvision_forward(model.state_dict(), images, (3, 4, 6, 3), groups)
    torch.testing.assert_close(model(images), want, rtol=1e-5, atol=1e-5)


def test_groups_need_bottlenecks_and_enough_width():
    with pytest.raises(ConfigError, match="bottleneck"):
        ResNet(BasicBlock, (2, 2, 2, 2), groups=32, width_per_group=4)
    with pytest.raises(ConfigError, match="width of at least 16"):
        build_model("resnext50_32x4d", width=8)
