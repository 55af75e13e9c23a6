"""Preemption signals sent to torchrun's agent, not to the workers: no worker outlives the agent,
every worker checkpoints at a step boundary, and the resumed run ends with the uninterrupted
run's weights. A failing rank's one-line error is what the job reports as its cause."""

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from commands import DLSCALE, HANG_S, run_process, start_process, torchrun

from dlscale.launch.local import descendants

pytestmark = pytest.mark.distributed
TORCHRUN = torchrun(2)
DLSCALE_TORCHRUN = [*DLSCALE, "torchrun", "--standalone", "--nproc_per_node", "2"]
TRAIN = ["-m", "dlscale", "train", "--config", "cpu:digits", "--set", "model.width=8", "--set", "schedule.epochs=2",
         "--set", "max_steps_per_epoch=8", "--set", "log_every=2", "--set", "checkpoint.keep_last=10",
         "--pg-timeout", "60"]
UNBUFFERED = {"PYTHONUNBUFFERED": "1"}


def _weights(run_dir: Path) -> dict:
    from dlscale.train.checkpoint import CheckpointManager

    return CheckpointManager(run_dir / "checkpoints").load_latest()["model"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead: it only waits for its parent to reap it
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _interrupt(launcher: list[str], out: Path, sig: int) -> tuple[subprocess.CompletedProcess, list[int]]:
    """Start training, send sig to the agent once training has logged, wait for the agent to end."""
    proc = start_process([*launcher, *TRAIN, "--output-dir", out], env=UNBUFFERED)
    metrics = out / "cpu-digits" / "metrics.jsonl"
    deadline = time.monotonic() + HANG_S
    while not (metrics.is_file() and '"train"' in metrics.read_text()):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "training never logged"
        time.sleep(0.2)
    workers = [pid for pid in descendants(proc.pid) if "dlscale" in Path(f"/proc/{pid}/cmdline").read_text()]
    os.kill(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=HANG_S)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), workers


def _no_worker_left(workers: list[int], within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(_alive(pid) for pid in workers):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("clean")
    done = run_process([*TORCHRUN, *TRAIN, "--output-dir", out], env=UNBUFFERED)
    assert done.returncode == 0, done.stderr[-3000:]
    return _weights(out / "cpu-digits")


def _resume_and_compare(launcher: list[str], out: Path, expected: dict) -> None:
    done = run_process([*launcher, *TRAIN, "--output-dir", out], env=UNBUFFERED)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resumed at epoch" in done.stdout
    actual = _weights(out / "cpu-digits")
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


def test_sigusr1_to_plain_torchrun_leaves_no_orphan_and_a_resumable_checkpoint(tmp_path, uninterrupted):
    """torchrun's agent dies of SIGUSR1; its workers, asked to be signalled when their parent dies,
    checkpoint at the next step boundary and stop instead of training on as orphans."""
    out = tmp_path / "usr1"
    ended, workers = _interrupt(TORCHRUN, out, signal.SIGUSR1)
    assert len(workers) == 2 and ended.returncode == -signal.SIGUSR1
    assert _no_worker_left(workers), "a worker outlived its agent"
    log = (out / "cpu-digits" / "metrics.jsonl").read_text()
    assert (out / "cpu-digits" / "checkpoints").is_dir() and log
    _resume_and_compare(TORCHRUN, out, uninterrupted)


def test_sigterm_to_dlscale_torchrun_checkpoints_and_exits_0_with_one_line(tmp_path, uninterrupted):
    out = tmp_path / "term"
    ended, workers = _interrupt(DLSCALE_TORCHRUN, out, signal.SIGTERM)
    assert ended.returncode == 0, ended.stderr[-3000:]
    assert _no_worker_left(workers)
    last = ended.stdout.strip().splitlines()[-1]
    assert last.startswith("dlscale torchrun: stopped by SIGTERM") and "run the same command to resume" in last
    assert "Traceback" not in ended.stderr
    checkpoints = sorted((out / "cpu-digits" / "checkpoints").glob("checkpoint-*.pt"))
    assert checkpoints and "checkpoint (preemption)" in ended.stdout
    _resume_and_compare(DLSCALE_TORCHRUN, out, uninterrupted)


def test_a_failing_rank_is_the_jobs_cause_and_the_last_line(tmp_path):
    """With --on-bad-sample error the rank that meets the bad file fails with one line; the other
    rank stops with one line too; the job's last line is the failing rank's line."""
    from PIL import Image

    data = tmp_path / "data"
    for split in ("train", "val"):
        for label in ("a", "b"):
            (data / split / label).mkdir(parents=True)
            for i in range(8):
                Image.new("RGB", (24, 20), (i * 20, 40, 90)).save(data / split / label / f"{i}.JPEG")
    (data / "train" / "a" / "0.JPEG").write_bytes(b"not a jpeg")
    args = ["-m", "dlscale", "train", "--config", "cpu:digits", "--set", "data.name=imagefolder", "--set",
            "data.image_size=16", "--set", "global_batch_size=8", "--set", "model.width=8", "--data", str(data),
            "--on-bad-sample", "error", "--pg-timeout", "30"]
    ours = run_process([*DLSCALE_TORCHRUN, *args, "--output-dir", tmp_path / "a"], env=UNBUFFERED)
    assert ours.returncode != 0
    last = ours.stderr.strip().splitlines()[-1]
    assert last.startswith("dlscale torchrun: rank") and "0.JPEG: cannot decode" in last, ours.stderr[-2000:]


def test_a_workers_one_line_error_is_what_torchrun_reports_as_the_cause(tmp_path, monkeypatch):
    """The error file a failing worker leaves is what torchrun's agent reads into its failure
    summary: our one line, not 'To enable traceback see ...'."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    from dlscale.launch.errors import record_error_for_launcher

    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    line = "dlscale train: error: data/train/a/0.JPEG: cannot decode (...)"
    record_error_for_launcher(line)
    failure = ProcessFailure(local_rank=0, pid=123, exitcode=2, error_file=str(error_file))
    summary = ChildFailedError("dlscale", {0: failure}).format_msg()
    cause = summary[summary.index("Root Cause"):]
    assert line in cause and "To enable traceback" not in cause


def test_a_signal_that_reaches_one_rank_is_named_by_the_job(tmp_path):
    """SIGUSR1 to rank 1 alone: the ranks agree to stop at the next log step, and rank 0, which got
    no signal, names the one that stopped the job (not 'stopped by None')."""
    out = tmp_path / "one"
    proc = start_process([*TORCHRUN, *TRAIN, "--output-dir", out], env=UNBUFFERED)
    metrics = out / "cpu-digits" / "metrics.jsonl"
    deadline = time.monotonic() + HANG_S
    while not (metrics.is_file() and '"train"' in metrics.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    ranks = {}
    for pid in descendants(proc.pid):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        rank = next((e[5:].decode() for e in environ if e.startswith(b"RANK=")), None)
        if rank is not None and "dlscale" in Path(f"/proc/{pid}/cmdline").read_text():
            ranks[rank] = pid
    os.kill(ranks["1"], signal.SIGUSR1)
    stdout, stderr = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, stderr[-3000:]
    assert "stopped by SIGUSR1 at epoch" in stdout and "stopped by None" not in stdout
