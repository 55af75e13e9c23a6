"""`dlscale bench --batch-size 8,16,32` on the GPU: each batch size its own benchmark (a CUDA graph captured
per size; under torch.compile a fresh compile per size), the curve in summary.json, and dlscale predict
reading it back."""

import json

import pytest

from dlscale import cli
from dlscale.bench.cuda_graphs import WARMUP_STEPS
from dlscale.predict import inputs

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Unable to enable fault handler")]

SHORT = ["--model", "resnet18", "--width", "16", "--image-size", "32", "--num-warmup-batches", "3",
         "--num-batches-per-iter", "3", "--num-iters", "2"]


def _curve(summary: dict) -> list[dict]:
    curve = summary["batch_curve"]
    for c in curve:
        assert c["step_time_ms"] == pytest.approx(1000.0 * c["batch_size"] / c["img_per_sec"])
        assert c["img_per_sec"] > 0 and c["ci95"] >= 0
    return curve


def test_batch_list_with_cuda_graphs_writes_a_curve_predict_reads(tmp_path, capsys):
    assert cli.main(["bench", *SHORT, "--batch-size", "8,16,32", "--precision", "amp_bf16", "--channels-last",
                     "--cudnn-benchmark", "--cuda-graphs", "--output-dir", str(tmp_path), "--name", "curve"]) == 0
    summary = json.loads((tmp_path / "curve" / "summary.json").read_text())
    curve = _curve(summary)
    assert [c["batch_size"] for c in curve] == [8, 16, 32]
    assert summary["batch_size"] == 32 and summary["cuda_graphs"] is True and summary["device"] == "cuda"
    printed = capsys.readouterr().out
    assert printed.count(f"CUDA graphs: {WARMUP_STEPS} eager steps") == 3 and "Batch curve" in printed
    workload, _ = inputs.workload_from_run(tmp_path / "curve")
    step = workload.step_time
    assert step.fixed_known and step.fixed_s >= 0 and step.per_image_s > 0
    assert workload.compute_s(16) == pytest.approx(curve[1]["step_time_ms"] / 1000)


def test_batch_list_under_compile_compiles_each_size(tmp_path):
    assert cli.main(["bench", *SHORT, "--batch-size", "8,16", "--precision", "amp_bf16", "--compile",
                     "--output-dir", str(tmp_path), "--name", "compiled"]) == 0
    summary = json.loads((tmp_path / "compiled" / "summary.json").read_text())
    assert [c["batch_size"] for c in _curve(summary)] == [8, 16] and summary["compile"] is True
