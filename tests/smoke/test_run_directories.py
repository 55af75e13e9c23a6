"""No output takes over what is not its own: every command's run directory pointed at another command's run (a
copy of each kind in tests/fixtures) and at a second run of its own kind, at `..` and `/`, every file output at a
character device made with mknod and at a FIFO: one line each, and what was there is left byte for byte. A run
refused after its directory was claimed leaves no folder behind. In this process, through dlscale.cli.main."""

import os
import shutil
import stat

import pytest
from cli_fuzz import FIXTURES
from faults import device

from dlscale.cli import main
from dlscale.rundir import RunDir
from dlscale.rundir.writer import MARKER

TINY_BENCH = ["--model", "resnet18_cifar", "--width", "4", "--image-size", "16", "--batch-size", "2",
              "--num-classes", "4", "--device", "cpu", "--num-warmup-batches", "0", "--num-batches-per-iter", "1",
              "--num-iters", "1"]
TINY_TRAIN = ["--config", "cpu:synthetic", "--set", "model.width=4", "--set", "data.synthetic_size=16", "--set",
              "global_batch_size=4", "--set", "schedule.epochs=2", "--set", "max_steps_per_epoch=1", "--device", "cpu"]
KINDS = ("bench", "train", "comm", "loader", "profile", "predict", "sweep")
"""The runs of tests/fixtures that each output is pointed at."""


def _by_name(name: str) -> dict[str, list[str]]:
    """Each command's line that writes its run directory runs/<name> (or a folder of that path)."""
    return {
        "bench": ["bench", *TINY_BENCH, "--output-dir", "runs", "--name", name],
        "train": ["train", *TINY_TRAIN, "--output-dir", "runs", "--name", name],
        "comm": ["comm", "--min-bytes", "8", "--max-bytes", "8", "--device", "cpu", "--output-dir", "runs", "--name",
                 name],
        "profile": ["profile", "bench", *TINY_BENCH[:-6], "--warmup", "0", "--steps", "1", "--trace-steps", "0",
                    "--out", f"runs/{name}"],
        "loader": ["loader", "--dataset", "synthetic", "--workers", "0", "--batch-size", "2", "--batches", "1",
                   "--warmup-batches", "0", "--image-size", "16", "--out", f"runs/{name}"],
        "predict": ["predict", "--gpus", "1,8", "--from-run", str(FIXTURES / "bench"), "--platform", "dgx1-v100",
                    "--output-dir", "runs", "--name", name],
        "scale": ["scale", "--nproc", "1", "--output-dir", "runs", "--name", name, "--", "bench", *TINY_BENCH],
        "slurm": ["slurm", "--gpus-per-node", "1", "bench", *TINY_BENCH, "--output-dir", "runs", "--name", name],
        "report": ["report", str(FIXTURES / "bench"), "--no-explain", "-o", f"runs/{name}"],
        "make-jpegs": ["data", "make-jpegs", f"runs/{name}", "--train", "1", "--val", "1", "--classes", "1", "--size",
                       "16x16", "--processes", "1"],
    }


def _snapshot(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"" for p in sorted(folder.rglob("*"))}


def _refused(capsys, argv) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("command", list(_by_name("x")))
def test_no_command_writes_into_another_commands_run(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    for kind in KINDS:
        if (command, kind) == ("train", "train"):
            continue  # a training run resumes in its own directory (tests/smoke/test_cli_robustness.py)
        run = shutil.copytree(FIXTURES / kind, tmp_path / "runs" / kind)
        before = _snapshot(run)
        err = _refused(capsys, _by_name(kind)[command])
        assert f"holds a {kind} run" in err or f"holds a dlscale run ({kind})" in err, err
        assert _snapshot(run) == before, f"{command} changed the {kind} run"


@pytest.mark.parametrize("command", ["bench", "predict", "loader", "profile"])
def test_a_second_run_of_one_name_is_refused_and_the_first_is_kept(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    argv = _by_name("one")[command]
    assert main(argv) == 0, capsys.readouterr().err
    first = _snapshot(tmp_path / "runs" / "one")
    capsys.readouterr()
    assert "holds a" in _refused(capsys, argv)
    assert _snapshot(tmp_path / "runs" / "one") == first
    marker = (tmp_path / "runs" / "one" / MARKER).read_text()
    assert f'"kind": "{command}"' in marker and '"command": "dlscale' in marker  # the directory says what it is


@pytest.mark.parametrize("name", ["..", ".", "/", "a/b", "x\ny"])
@pytest.mark.parametrize("command", ["bench", "train", "comm", "predict", "scale", "slurm"])
def test_a_run_name_is_one_folder_name(tmp_path, monkeypatch, capsys, command, name):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    (tmp_path / "kept.txt").write_text("a project's file")
    err = _refused(capsys, _by_name(name)[command])
    assert "a run's name is one folder name" in err or "holds a control character" in err, err
    assert sorted(os.listdir(tmp_path)) == ["kept.txt", "work"] and os.listdir(tmp_path / "work") == []


@pytest.mark.parametrize("command", ["profile", "loader", "report", "make-jpegs"])
def test_a_folder_holding_other_files_is_no_run_directory(tmp_path, monkeypatch, capsys, command):
    """`--out ..` (a project's folder): its files are not replaced and nothing is added to it."""
    (tmp_path / "project" / "work").mkdir(parents=True)
    (tmp_path / "project" / "config.json").write_text('{"theirs": true}')
    monkeypatch.chdir(tmp_path / "project" / "work")
    argv = [word.replace("runs/..", "..") for word in _by_name("..")[command]]
    before = _snapshot(tmp_path / "project")
    if command in ("report", "make-jpegs"):  # they fill a folder of their own: another's run is what they refuse
        shutil.copytree(FIXTURES / "train", tmp_path / "project" / "run")
        argv = [word.replace("..", "../run") for word in argv]
        before = _snapshot(tmp_path / "project")
    err = _refused(capsys, argv)
    assert "holds" in err, err
    assert _snapshot(tmp_path / "project") == before


FILE_OUTPUTS = {
    "bench --json": ["bench", *TINY_BENCH, "--output-dir", "runs", "--json", "{out}"],
    "train --raport-file": ["train", *TINY_TRAIN, "--output-dir", "runs", "--raport-file", "{out}"],
    "slurm --script": ["slurm", "--gpus-per-node", "1", "--script", "{out}", "bench", "--output-dir", "runs"],
    "predict --json": ["predict", "--gpus", "8", "--from-run", str(FIXTURES / "bench"), "--platform", "dgx1-v100",
                       "--no-run-dir", "--json", "{out}"],
    "explain --json": ["explain", str(FIXTURES / "bench"), "--reference", "none", "--json", "{out}"],
    "comm --json": ["comm", "--device", "cpu", "--output-dir", "runs", "--json", "{out}"],
    "data check --json": ["data", "check", str(FIXTURES), "--json", "{out}"],
}


@pytest.mark.parametrize("what", ["device", "fifo"])
@pytest.mark.parametrize("output", list(FILE_OUTPUTS))
def test_a_file_output_is_a_new_file_or_a_regular_one(tmp_path, monkeypatch, capsys, output, what):
    """As root, --json /dev/null replaced /dev/null with a regular file and --script chmodded it: a device or a
    FIFO of that name is refused before the work, and left as it was."""
    monkeypatch.chdir(tmp_path)
    target = device(tmp_path / "out") if what == "device" else tmp_path / "out"
    if what == "fifo":
        os.mkfifo(target)
    mode = os.stat(target).st_mode
    err = _refused(capsys, [word.format(out=target) for word in FILE_OUTPUTS[output]])
    assert str(target) in err and "not a file" in err, err
    assert os.stat(target).st_mode == mode and not stat.S_ISREG(mode)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["bench", "profile", "loader", "predict", "report"])
def test_a_folder_output_at_a_device_is_one_line(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    target = device(tmp_path / "runs" / "dev")
    mode = os.stat(target).st_mode
    _refused(capsys, _by_name("dev")[command])
    assert os.stat(target).st_mode == mode


def test_a_run_refused_after_its_claim_leaves_no_folder(tmp_path, monkeypatch, capsys):
    """The checks after the claim (the model against the memory, the last batch) refuse a run whose directory was
    made for it: the directory, its lock and the runs/ folder made for it are removed again."""
    monkeypatch.chdir(tmp_path)
    last_batch_of_one = ["--set", "model.name=resnet18", "--set", "data.image_size=8", "--set",
                         "data.synthetic_size=17", "--set", "data.drop_last=false", "--set", "max_steps_per_epoch=null"]
    err = _refused(capsys, ["train", *TINY_TRAIN, *last_batch_of_one, "--name", "refused"])
    assert "the last batch of every epoch holds 1 image per rank" in err
    err = _refused(capsys, ["profile", "train", *TINY_TRAIN, *last_batch_of_one, "--out", "prof"])
    assert "the last batch of every epoch holds 1 image per rank" in err
    assert os.listdir(tmp_path) == []


def test_a_claim_takes_an_empty_folder_a_prepared_job_and_its_own_restart(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    RunDir(empty).claim("bench").release()
    assert empty.is_dir()  # a folder the user made stays
    prepared = RunDir.prepare(tmp_path / "job", "bench", "dlscale slurm ... bench")
    (prepared.path / "job.sbatch").write_text("#!/bin/bash\n")
    (prepared.path / "slurm-7.log").write_text("started\n")
    with RunDir(prepared.path).claim("bench") as run:
        run.write_setup({"kind": "bench"}, {})
    with pytest.raises(Exception, match="holds a bench run"):  # once it ran, the job's directory is its run's
        RunDir(prepared.path).claim("bench")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-1")
    with RunDir(tmp_path / "restarted").claim("bench") as run:
        run.write_setup({"kind": "bench"}, {})
    RunDir(tmp_path / "restarted").claim("bench").release()  # torchrun restarted the same job's workers
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-2")
    with pytest.raises(Exception, match="holds a bench run"):
        RunDir(tmp_path / "restarted").claim("bench")
