"""`dlscale train` on the GPU over a small JPEG ImageFolder tree, with fp16 AMP (its loss scaler is
checkpointed state), channels_last and fused SGD: checkpoints are written, and a run stopped by
a preemption signal in the middle of an epoch and resumed ends with the uninterrupted run's
weights, optimizer state and loss scale.

Exact means bitwise where the device is bitwise reproducible: cuDNN is asked for deterministic
algorithms (torch.backends.cudnn.deterministic; `deterministic=true` would also turn on
torch.use_deterministic_algorithms, which refuses the CUDA backward of AdaptiveAvgPool2d that
ResNet ends with). If two uninterrupted runs already differ, the resumed run must lie within
their spread, and the test passes with a warning that says so.
"""

import json
import warnings
from pathlib import Path

import pytest
import torch

from dlscale import cli
from dlscale.train.checkpoint import CheckpointManager

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Unable to enable fault handler")]

STEPS_PER_EPOCH = 6  # 48 training JPEGs, batch 8, one rank
SETTINGS = ["model.name=resnet18", "model.width=8", "data.image_size=32", "data.num_workers=2", "batch_size=8",
            "schedule.name=cosine", "schedule.epochs=2", "schedule.warmup_epochs=0", "log_every=2",
            "precision=amp_fp16", "speed.channels_last=true", "speed.cudnn_benchmark=false", "device=cuda"]


def _train(tree, out, name: str) -> int:
    flags = [arg for setting in SETTINGS for arg in ("--set", setting)]
    return cli.main(["train", "--config", "imagenet:default", "--data", str(tree), *flags,
                     "--output-dir", str(out), "--name", name])


def _final_state(run_dir) -> dict[str, torch.Tensor]:
    state = CheckpointManager(run_dir / "checkpoints").load_latest()
    flat = {f"model.{k}": v for k, v in state["model"].items()}
    for index, buffers in state["optimizer"]["state"].items():
        flat.update({f"optimizer.{index}.{k}": v for k, v in buffers.items() if isinstance(v, torch.Tensor)})
    flat["scaler.scale"] = torch.tensor(float(state["scaler"]["scale"]))
    flat["scaler.growth_tracker"] = torch.tensor(float(state["scaler"]["_growth_tracker"]))
    return flat


def _max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((x.double() - y.double()).abs().max().item() if x.numel() else 0.0
               for x, y in ((a[k], b[k]) for k in a))


def assert_resumed_as_uninterrupted(expected: dict, actual: dict, train_again, again: Path, misses: str) -> None:
    """The resumed run's final state equals the uninterrupted run's bit for bit, or, where this GPU is not
    bitwise reproducible, differs by at most 10x what a second uninterrupted run (train_again, into `again`)
    differs by."""
    difference = _max_difference(expected, actual)
    if difference == 0.0:
        return
    assert train_again() == 0
    spread = _max_difference(expected, _final_state(again))
    assert spread > 0.0, (f"uninterrupted runs are bitwise equal but the resumed run differs by {difference:.3e}: "
                          f"{misses}")
    assert difference <= 10 * spread, (f"resumed run differs by {difference:.3e}, two uninterrupted runs by "
                                       f"{spread:.3e}")
    warnings.warn(f"this GPU is not bitwise reproducible here (two uninterrupted runs differ by {spread:.3e}); "
                  f"the resumed run is within that ({difference:.3e})", stacklevel=2)


def test_train_checkpoint_and_exact_resume_on_the_gpu(jpeg_tree, tmp_path, signal_at_step):
    torch.backends.cudnn.deterministic = True  # put back by the restore_torch_switches fixture
    assert _train(jpeg_tree, tmp_path, "full") == 0
    full = json.loads((tmp_path / "full" / "summary.json").read_text())
    assert full["device"] == "cuda" and not full["preempted"]
    assert full["steps"] == 2 * STEPS_PER_EPOCH and full["epochs_completed"] == 2
    assert full["history"][-1]["val_count"] == 8 and full["skipped_samples"] == 0
    assert json.loads((tmp_path / "full" / "env.json").read_text())["device_type"] == "cuda"
    assert len(CheckpointManager(tmp_path / "full" / "checkpoints").checkpoints()) == 2  # one per epoch

    disarm = signal_at_step(STEPS_PER_EPOCH + 2)  # in the middle of the second epoch
    assert _train(jpeg_tree, tmp_path, "cut") == 0
    disarm()
    cut = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert cut["preempted"] and cut["steps"] == STEPS_PER_EPOCH + 2
    assert _train(jpeg_tree, tmp_path, "cut") == 0  # the same command resumes
    resumed = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert not resumed["preempted"] and resumed["steps"] == full["steps"]

    expected, actual = _final_state(tmp_path / "full"), _final_state(tmp_path / "cut")
    for name, state in (("uninterrupted", expected), ("resumed", actual)):
        broken = [key for key, value in state.items() if not torch.isfinite(value).all()]
        assert not broken, (f"the {name} run ends with non-finite {broken[:5]} (fp16 AMP with fused SGD: see "
                            "test_gpu_precision.py::test_a_skipped_first_step_leaves_fused_sgd_equal_to_foreach_sgd)")
    assert_resumed_as_uninterrupted(expected, actual, lambda: _train(jpeg_tree, tmp_path, "again"),
                                    tmp_path / "again", "the checkpoint misses state")
