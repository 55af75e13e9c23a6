"""A write the system refuses is one line naming the path and its cause, at every way dlscale writes: the one
atomic writer (JSON, text, scripts, checkpoints), the appends (metrics.jsonl, --raport-file), the blocks that
other libraries fill (a plot, a table, TensorBoard's events, a trace). The faults are the kernel's where it makes
them: writes into /dev/full fail with ENOSPC; EACCES, EROFS and EDQUOT are raised at the open (tests/faults.py).
The commands' writers, each given a failure: tests/smoke/test_write_failures.py."""

import errno
import os

import pytest
import torch
from faults import failing_writes

from dlscale.errors import StorageError
from dlscale.rundir import files
from dlscale.train.checkpoint import CheckpointManager

ERRNOS = (errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT)


def _left(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("error", ERRNOS, ids=errno.errorcode.get)
def test_the_atomic_writer_leaves_the_old_file_and_names_the_cause(tmp_path, error):
    target = tmp_path / "summary.json"
    files.write_json(target, {"kept": True})
    with failing_writes(".summary.json.tmp.*", error), pytest.raises(StorageError) as raised:
        files.write_json(target, {"kept": False})
    message = str(raised.value)
    assert message.startswith(f"cannot write {target} ({os.strerror(error)})") and "\n" not in message
    assert files.STORAGE_ADVICE[error] in message
    assert files.read_json(target) == {"kept": True} and _left(tmp_path) == ["summary.json"]  # no temporary file


@pytest.mark.parametrize("error", ERRNOS, ids=errno.errorcode.get)
def test_an_append_names_the_file_and_the_cause(tmp_path, error):
    records = tmp_path / "metrics.jsonl"
    with failing_writes("metrics.jsonl", error), pytest.raises(StorageError, match=os.strerror(error)) as raised:
        files.append_line(records, '{"step": 1}\n')
    assert str(raised.value).startswith(f"cannot write {records} (")
    with failing_writes("raport.json", error), pytest.raises(StorageError, match="choose another --raport-file"):
        files.open_append(tmp_path / "raport.json", "--raport-file").write("x")


@pytest.mark.parametrize("error", ERRNOS, ids=errno.errorcode.get)
def test_a_block_that_writes_a_file_names_it(tmp_path, error):
    plot = tmp_path / "plot.png"
    with failing_writes("plot.png", error), pytest.raises(StorageError) as raised, files.writing(plot, "--out"), \
            open(plot, "wb") as out:
        out.write(b"png" * 10_000)
    assert str(raised.value).startswith(f"cannot write {plot} ({os.strerror(error)})")
    assert str(raised.value).endswith("choose another --out")


def test_a_checkpoint_on_a_full_disk_fails_with_the_disks_error_and_the_previous_one_stays(tmp_path):
    """ENOSPC inside torch.save's zip writer reached torch as `unexpected pos` (a RuntimeError): the save raises
    the file's own OSError, writes nothing, and the previous checkpoint and the pointer are as they were."""
    manager = CheckpointManager(tmp_path / "checkpoints")
    first = manager.save({"model": {"w": torch.zeros(1000)}}, epoch=0, step=1)
    before = first.read_bytes()
    with failing_writes("ckpt.tmp.*") as hit, pytest.raises(OSError) as raised:
        manager.save({"model": {"w": torch.ones(100_000)}}, epoch=0, step=2)
    assert hit and raised.value.errno == errno.ENOSPC and type(raised.value) is OSError
    assert _left(manager.directory) == ["checkpoint-000000001.pt", "latest"] and first.read_bytes() == before
    assert manager.latest_path() == first and manager.load_latest()["step"] == 1


def test_a_checkpoint_that_cannot_be_read_stops_the_resume_in_one_line(tmp_path, monkeypatch):
    """Not damaged but unreadable now (EACCES, EIO): resuming from the one before would train from an older state
    than the run reached, so the resume stops, naming the file."""
    manager = CheckpointManager(tmp_path)
    manager.save({"model": {"w": torch.zeros(4)}}, epoch=0, step=1)
    newest = manager.save({"model": {"w": torch.zeros(4)}}, epoch=0, step=2)
    real_open = open

    def refused(file, mode="r", *args, **kwargs):
        if str(file) == str(newest):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refused)
    with pytest.raises(Exception, match=f"checkpoint {newest} cannot be read .Permission denied.; make it readable"):
        manager.load_latest()


@pytest.mark.parametrize("pointer", [b"\xff\xfe not a name", b"checkpoint-000000001.pt\n" * 1000, None])
def test_a_latest_pointer_that_is_not_a_name_leaves_the_files_to_decide(tmp_path, pointer):
    manager = CheckpointManager(tmp_path)
    newest = manager.save({"model": {}}, epoch=0, step=3)
    (tmp_path / "latest").unlink()
    if pointer is None:
        os.mkfifo(tmp_path / "latest")  # never opened for reading: it would wait for a writer
    else:
        (tmp_path / "latest").write_bytes(pointer)
    assert manager.latest_path() == newest
