"""A checkpoint damaged on disk through the CLI: the run says so in one line, resumes from the previous one and
ends with the uninterrupted run's weights; `--resume` naming the damaged file refuses in one line."""

import logging

import pytest
import torch

from dlscale.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # main() under pytest's capture
TWO_EPOCHS = ["--config", "cpu:synthetic", "--set", "model.width=8", "--set", "max_steps_per_epoch=4", "--set",
              "schedule.epochs=2", "--set", "schedule.warmup_epochs=0", "--set", "log_every=2"]


def test_a_damaged_checkpoint_is_resumed_past_and_refused_by_name(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TWO_EPOCHS, "--name", "r"]) == 0
    checkpoints = tmp_path / "runs" / "r" / "checkpoints"
    last, previous = checkpoints / "checkpoint-000000008.pt", checkpoints / "checkpoint-000000004.pt"
    uninterrupted = torch.load(last, weights_only=True)["model"]
    data = bytearray(last.read_bytes())
    data[len(data) // 2] ^= 0x10  # one bit in the middle of the tensors' bytes
    last.write_bytes(bytes(data))
    capsys.readouterr()

    assert main(["train", *TWO_EPOCHS, "--name", "other", "--resume", str(last)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"dlscale train: error: --resume {last}: the file is damaged (its bytes do not match "
                          "the CRC-32 written with it")
    assert "it is not loaded" in err

    (tmp_path / "runs" / "r" / "summary.json").unlink()  # stopped before its summary: not finished, resumed
    with caplog.at_level(logging.WARNING, logger="dlscale.train.checkpoint"):  # stderr, outside pytest
        assert main(["train", *TWO_EPOCHS, "--name", "r"]) == 0
    damage_lines = [record.getMessage() for record in caplog.records if "damaged" in record.getMessage()]
    assert len(damage_lines) == 1, damage_lines
    assert damage_lines[0].startswith(f"checkpoint {last.relative_to(tmp_path)} is damaged (its bytes do not match "
                                      "the CRC-32 written with it")
    assert damage_lines[0].endswith(f"resuming from the previous one, {previous.relative_to(tmp_path)}, "
                                    "which is intact")
    retrained = torch.load(last, weights_only=True)
    assert retrained["step"] == 8
    for name, tensor in uninterrupted.items():
        assert torch.equal(tensor, retrained["model"][name]), name
