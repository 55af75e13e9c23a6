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


def test_models_bad_image_size_is_a_one_line_error():
    result = dlscale_here("models", "--image-size", "0")
    assert result.returncode == 2
    assert "--image-size" in result.stderr
    assert "Traceback" not in result.stderr
