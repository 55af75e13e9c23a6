"""`dlscale predict`'s inputs said plainly: a reference named without its series, a strong-scaling reference
kept strong, a published figure that holds its own communication given back at its own device count, a
global batch beyond what the shipped references trained to accuracy, and an --mfu above dlscale's own
measurement. Each expected figure is the published one (references/*.json) or worked out here."""

import json

import pytest

from dlscale.cli import main
from dlscale.predict import caveats, inputs
from dlscale.report.references import load_reference


def _predict(tmp_path, *args) -> dict:
    path = tmp_path / "p.json"
    assert main(["predict", *args, "--json", str(path), "--no-run-dir"]) == 0
    return json.loads(path.read_text())


def _total(result, devices):
    return next(p for p in result["points"] if p["devices"] == devices)["img_per_s_total"]


def test_a_reference_named_alone_takes_its_series_with_images_per_second(tmp_path):
    # BlueFog ships two efficiency series and one sample with img/s: before, "publishes no images/s" (exit 2).
    result = _predict(tmp_path, "--from-reference", "bluefog", "--gpus", "1,16")
    assert "BlueFog sample output, 16 GPUs" in result["inputs"]["compute"]
    assert inputs.reference_figure("bluefog").spec == "bluefog:sample_16"


def test_a_reference_gives_back_its_own_figure_at_its_own_device_count(tmp_path):
    # BlueFog's sample: 4,310.6 img/s on 16 GPUs, its exchange and its waits included. Before, the compute was
    # that step and the model added its communication again: 2,803 at 16 with --dist-optimizer neighbor_allreduce.
    published = load_reference("bluefog").get("sample_16").points[0]["img_per_s"]
    for args in ((), ("--dist-optimizer", "neighbor_allreduce", "--platform", "aws-p3.16xlarge")):
        result = _predict(tmp_path, "--from-reference", "bluefog:sample_16", "--gpus", "1,16,128", *args)
        assert _total(result, 16) == pytest.approx(published, rel=1e-6)
        assert "the reference's own" in result["inputs"]["setting"]
        assert "at 16 devices (batch 64)" in result["inputs"]["anchored"]
    # dlscale's own neighbour exchange after backward is another strategy: said, and predicted as such.
    other = _predict(tmp_path, "--from-reference", "bluefog", "--gpus", "16", "--dist-optimizer",
                     "neighbor_allreduce", "--overlap", "none")
    assert _total(other, 16) < published and "not the reference's" in other["inputs"]["setting"]
    # HAL's May runs publish two batch sizes, at 4 and 8 GPUs, each with its allreduce: both given back.
    may = {p["devices"]: p["img_per_s"] for p in load_reference("hal").get("may").points}
    result = _predict(tmp_path, "--from-reference", "hal:may", "--gpus", "4")
    assert _total(result, 4) == pytest.approx(may[4], rel=1e-6)
    result = _predict(tmp_path, "--from-reference", "hal:may", "--gpus", "8", "--batch-size", "256")
    assert _total(result, 8) == pytest.approx(may[8], rel=1e-6)


def test_a_strong_scaling_reference_stays_strong(tmp_path, capsys):
    # MLPerf's DGX H100 runs kept a global batch of 3,200: 400 per GPU on 8, 50 on 64. Before, weak scaling at
    # 400 per GPU (456,693 img/s at 64 against the published 314,118).
    published = {p["devices"]: p["img_per_s"] for p in load_reference("mlperf").get("h100_strong").points}
    result = _predict(tmp_path, "--from-reference", "mlperf", "--gpus", "8,64")
    assert [p["batch_per_device"] for p in result["points"]] == [400, 50]
    assert result["points"][0]["img_per_s_total"] == pytest.approx(published[8], rel=1e-6)
    assert result["points"][1]["img_per_s_total"] == pytest.approx(published[64], rel=1e-6)
    assert "strong scaling at the reference's global batch 3200" in result["inputs"]["scaling"]
    weak = _predict(tmp_path, "--from-reference", "mlperf", "--gpus", "8,64", "--batch-size", "400")
    assert [p["batch_per_device"] for p in weak["points"]] == [400, 400] and "scaling" not in weak["inputs"]
    capsys.readouterr()
    assert main(["predict", "--from-reference", "mlperf", "--gpus", "8,512", "--no-run-dir"]) == 2
    assert "mlperf kept a global batch of 3200, which does not split over 512 devices" in capsys.readouterr().err


def test_a_global_batch_beyond_what_the_references_trained_to_accuracy_is_said(tmp_path):
    # HAL's May series kept its top-1 within a point up to 8,192 (75.60 against 76.59 at 896) and lost 4.66
    # points at 16,384 (71.93).
    result = _predict(tmp_path, "--from-reference", "hal:may", "--gpus", "4,32,64")
    said = result["inputs"]["accuracy"]
    assert said.startswith("WARNING: global batch 14,336 (from 64 devices) is beyond the largest a shipped reference "
                           "trained to accuracy: 8,192 (hal:may at 32 devices: 75.60% top-1, 0.99 points below")
    assert "hal:may at 64 devices lost 4.66 points at 16,384 (71.93% top-1)" in said
    within = _predict(tmp_path, "--from-reference", "hal:may", "--gpus", "4,32")  # 7,168 at 32
    assert "accuracy" not in within["inputs"]
    assert caveats.accuracy_line("resnet50_cifar", [(16, 1 << 20)]) is None  # no shipped accuracy of that model


def test_an_mfu_above_dlscales_own_measurement_is_warned_with_it(tmp_path):
    # The highest bf16 MFU references/device_mfu.json holds for an H100: 14.83%, the compiled default at batch 512
    # (docs/results/gpu-2026-11-27-h100-run2-part1.json); 0.4 is 2.7 times that.
    result = _predict(tmp_path, "--peak-tflops", "H100", "--mfu", "0.4", "--batch-size", "256", "--gpus", "8",
                      "--platform", "dgx-h100")
    said = result["inputs"]["mfu"]
    assert said.startswith("WARNING: --mfu 0.4 (40.0%) is above what dlscale measured on an H100: 14.8% of its "
                           "bf16 peak (resnet50 at batch 512") and "2026-11-27" in said
    assert "gpu-2026-11-27-h100-run2-part1.json" in said and "2.7x that run's compute rate" in said
    below = _predict(tmp_path, "--peak-tflops", "H100", "--mfu", "0.14", "--batch-size", "256", "--gpus", "8",
                     "--platform", "dgx-h100")
    assert "mfu" not in below["inputs"]
    assert caveats.mfu_line("A100", 0.9, "bf16") is None  # nothing measured there: nothing to say
