"""`python -m dlscale models` runs end to end in a fresh process."""

import subprocess
import sys

from dlscale.models import model_names


def run_dlscale(*args):
    return subprocess.run(
        [sys.executable, "-m", "dlscale", "models", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_models_lists_every_model_with_parameters_and_macs():
    result = run_dlscale()
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line}
    assert rows["resnet50"][1] == "25,557,032"
    assert float(rows["resnet50"][2]) == 4.09  # GMACs at 224 px, torchvision's figure
    assert float(rows["resnet50"][3]) == 8.18  # GFLOPs = 2 * GMACs
    for name in model_names():
        assert name in rows


def test_models_bad_image_size_is_a_one_line_error():
    result = run_dlscale("--image-size", "0")
    assert result.returncode == 2
    assert "--image-size" in result.stderr
    assert "Traceback" not in result.stderr
