"""A checkpoint damaged on disk is caught by the CRC-32 written at its end, never loaded: the newest intact one
is resumed instead; checkpoints written before the checksum existed load with one note."""

import io
import logging
import struct
import zipfile
import zlib

import pytest
import torch

from dlscale.errors import ConfigError
from dlscale.train.checkpoint import CheckpointManager, load_checkpoint
from dlscale.train.checksum import DamagedCheckpoint, verify_checksum


def state(seed):
    """A small state shaped like a training one: tensors of several sizes, nested plain data."""
    generator = torch.Generator().manual_seed(seed)
    return {"model": {"conv.weight": torch.randn(8, 3, 3, 3, generator=generator),
                      "fc.weight": torch.randn(10, 64, generator=generator),
                      "bn.num_batches_tracked": torch.tensor(seed)},
            "progress": {"epoch": seed, "best_top1_pct": 12.5, "history": [{"val_top1_pct": 10.0}]}}


def same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[key], b[key]) for key in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


def record_bytes(path, name_suffix):
    """(first, end) offsets of the stored bytes of the archive record whose name ends with `name_suffix`,
    from the zip format: a 30-byte local header, then the name and the extra field, then the data."""
    with zipfile.ZipFile(path) as archive:
        record = next(r for r in archive.infolist() if r.filename.endswith(name_suffix))
    name_length, extra_length = struct.unpack_from("<HH", path.read_bytes(), record.header_offset + 26)
    first = record.header_offset + 30 + name_length + extra_length
    return first, first + record.file_size


def largest_tensor_record(path):
    with zipfile.ZipFile(path) as archive:
        return max((r for r in archive.infolist() if "/data/" in r.filename), key=lambda r: r.file_size).filename


def flip_bit(path, offset, bit=3):
    data = bytearray(path.read_bytes())
    data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))


def offsets(path):
    """Where a bit is flipped: the pickle at the head of the file (the keys, the progress, the tensors'
    shapes), the middle of the largest tensor's bytes, the last byte of the last tensor, and the file's last
    byte (the checksum itself)."""
    pickle_first, pickle_end = record_bytes(path, "/data.pkl")
    data_first, data_end = record_bytes(path, largest_tensor_record(path).split("/", 1)[1])
    with zipfile.ZipFile(path) as archive:
        last = [r.filename for r in archive.infolist() if "/data/" in r.filename][-1]
    return {"header (the pickle)": (pickle_first + pickle_end) // 2,
            "middle of the data": (data_first + data_end) // 2,
            "end of the data": record_bytes(path, last.split("/", 1)[1])[1] - 1,
            "last byte (the checksum)": path.stat().st_size - 1}


@pytest.mark.parametrize("where", ["header (the pickle)", "middle of the data", "end of the data",
                                   "last byte (the checksum)"])
def test_a_flipped_bit_falls_back_to_the_previous_checkpoint_in_one_line(tmp_path, caplog, where):
    manager = CheckpointManager(tmp_path, keep_last=3)
    manager.save(state(1), epoch=1, step=10)
    newest = manager.save(state(2), epoch=2, step=20)
    flip_bit(newest, offsets(newest)[where])

    with caplog.at_level(logging.WARNING, logger="dlscale.train.checkpoint"):
        loaded = manager.load_latest()
    assert loaded["step"] == 10 and same({**state(1), "epoch": 1, "step": 10}, loaded)
    [line] = [record.getMessage() for record in caplog.records]
    assert line.startswith(f"checkpoint {newest} is damaged (its bytes do not match the CRC-32 written with it: ")
    assert line.endswith(f"resuming from the previous one, {tmp_path / 'checkpoint-000000010.pt'}, which is intact")
    assert "\n" not in line

    refused, error = load_checkpoint(newest)
    assert refused is None and isinstance(error, DamagedCheckpoint)


def test_every_single_flipped_bit_is_refused(tmp_path):
    """Every byte of a small checkpoint, one bit each (the bit cycling through 0-7): none loads."""
    good = CheckpointManager(tmp_path / "original").save(state(3), epoch=3, step=30).read_bytes()
    damaged = tmp_path / "damaged.pt"
    for offset in range(len(good)):
        data = bytearray(good)
        data[offset] ^= 1 << (offset % 8)
        damaged.write_bytes(bytes(data))
        loaded, error = load_checkpoint(damaged)
        assert loaded is None, f"a flipped bit at byte {offset} of {len(good)} was loaded"


def test_a_damaged_only_checkpoint_is_an_error_not_a_fresh_start(tmp_path):
    manager = CheckpointManager(tmp_path)
    path = manager.save(state(1), epoch=1, step=10)
    flip_bit(path, offsets(path)["middle of the data"])
    with pytest.raises(ConfigError, match=r"none of the 1 checkpoints .* can be read .*CRC-32.* move them away"):
        manager.load_latest()


def test_a_checkpoint_written_before_checksums_loads_with_one_note(tmp_path, caplog):
    """What dlscale wrote before: torch.save's archive as it is, no comment at its end."""
    path = tmp_path / "checkpoint-000000010.pt"
    torch.save({**state(1), "epoch": 1, "step": 10}, path)
    assert verify_checksum(path) is False
    with caplog.at_level(logging.WARNING, logger="dlscale.train.checkpoint"):
        loaded = CheckpointManager(tmp_path).load_latest()
    assert same({**state(1), "epoch": 1, "step": 10}, loaded)
    [line] = [record.getMessage() for record in caplog.records]
    assert line == f"checkpoint {path} carries no checksum (dlscale wrote it before it stored them); loaded unverified"


def test_the_checksum_is_the_crc32_of_the_archive_torch_wrote(tmp_path):
    """Independent of the writer: zlib.crc32 of torch.save's own bytes, read back from the file's zip comment."""
    path = CheckpointManager(tmp_path).save(state(1), epoch=1, step=10)
    with zipfile.ZipFile(path) as archive:
        comment = archive.comment
    archive_as_torch_wrote_it = path.read_bytes()[: -len(comment) - 2] + b"\0\0"
    assert comment == b"dlscale-crc32 %08x" % zlib.crc32(archive_as_torch_wrote_it)
    assert same({**state(1), "epoch": 1, "step": 10}, torch.load(io.BytesIO(archive_as_torch_wrote_it),
                                                                   weights_only=True))
    assert verify_checksum(path) is True


@pytest.mark.skipif(not hasattr(torch.serialization, "get_crc32_options"), reason="torch before 2.6 has no switch")
def test_torchs_own_per_record_crc_setting_is_left_as_the_process_had_it(tmp_path):
    for setting in (True, False):
        torch.serialization.set_crc32_options(setting)
        try:
            path = CheckpointManager(tmp_path / str(setting)).save(state(1), epoch=1, step=10)
            assert torch.serialization.get_crc32_options() is setting
        finally:
            torch.serialization.set_crc32_options(True)
        assert verify_checksum(path) is True
