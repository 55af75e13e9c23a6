"""`dlscale models` end to end: the table of every model, and a bad flag in one line."""

from commands import dlscale_here

from dlscale.models import model_names


def test_models_lists_every_model_with_parameters_and_macs():
    result = dlscale_here("models")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line}
    assert rows["resnet50"][1] == "25,557,032"
    assert float(rows["resnet50"][2]) == 4.09  # GMACs at 224 px, torchvision's figure
    assert float(rows["resnet50"][3]) == 8.18  # GFLOPs = 2 * GMACs
    for name in model_names():
        assert name in rows
    # a _cifar model costed at the 32 px it is made for, not at 224 (27.60 GMACs): after its stem (stride 1, no
    # max-pool) every layer sees 32 x 32, as the ImageNet stem's at 128 px; its stem's 7x7 conv is 9,408 x 32^2
    # MACs against 9,408 x 64^2 there: 1.81 x (128 / 224)^2 - 9,408 x (64^2 - 32^2) / 1e9 = 0.56
    assert float(rows["resnet18_cifar"][2]) == 0.56 and float(rows["resnet18"][2]) == 1.81
    assert result.stdout.startswith("forward pass of one image at each model's own size: 224x224, _cifar models 32x32")
    at = {line.split()[0]: line.split() for line in dlscale_here("models", "--image-size", "64").stdout.splitlines()}
    assert float(at["resnet18_cifar"][2]) > float(at["resnet18"][2])  # one size for all, when asked


def test_models_bad_image_size_is_a_one_line_error():
    result = dlscale_here("models", "--image-size", "0")
    assert result.returncode == 2
    assert "--image-size" in result.stderr
    assert "Traceback" not in result.stderr
