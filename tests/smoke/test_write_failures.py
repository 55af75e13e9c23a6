"""Every command's every writer, given a write the system refuses (tests/faults.py: ENOSPC from the kernel by
/dev/full, EACCES, EROFS or EDQUOT at the open), ends in one line naming the file or folder and the cause, exit
2: checkpoints, metrics.jsonl, TensorBoard's events, the DLLL --raport-file, config.json and summary.json, --json,
report.md with its tables and plots, the loader's and profile's tables, a job script, a sweep's record, a JPEG
tree."""

import errno
import os

import pytest
from cli_fuzz import FIXTURES
from faults import failing_writes

from dlscale.cli import main

ERRNOS = (errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT)
TRAIN = ["train", "--config", "cpu:synthetic", "--set", "model.width=4", "--set", "data.synthetic_size=16", "--set",
         "data.synthetic_val_size=4", "--set", "global_batch_size=4", "--set", "schedule.epochs=2", "--set",
         "schedule.warmup_epochs=0", "--set", "log_every=1", "--set", "max_steps_per_epoch=2", "--device", "cpu"]
BENCH = ["bench", "--model", "resnet18_cifar", "--width", "4", "--image-size", "16", "--batch-size", "2",
         "--num-classes", "4", "--device", "cpu", "--num-warmup-batches", "0", "--num-batches-per-iter", "1",
         "--num-iters", "2"]
PREDICT = ["predict", "--gpus", "1,8", "--from-run", str(FIXTURES / "bench"), "--platform", "dgx1-v100"]

WRITERS = [
    (TRAIN, "ckpt.tmp.*", "writing a checkpoint into runs/cpu-synthetic/checkpoints failed"),
    (TRAIN, "metrics.jsonl", "cannot write runs/cpu-synthetic/metrics.jsonl"),
    (TRAIN, "events.out.tfevents.*", "cannot write runs/cpu-synthetic/tb/events.out.tfevents."),
    ([*TRAIN, "--raport-file", "raport.json"], "raport.json", "raport.json"),
    (TRAIN, ".config.json.tmp.*", "cannot write runs/cpu-synthetic/config.json"),
    (TRAIN, ".summary.json.tmp.*", "cannot write runs/cpu-synthetic/summary.json"),
    ([*BENCH, "--name", "b"], ".summary.json.tmp.*", "cannot write runs/b/summary.json"),
    ([*BENCH, "--json", "out.json"], ".out.json.tmp.*", "cannot write out.json"),
    ([*PREDICT, "--name", "p"], "predicted.png", "cannot write runs/p/predicted.png"),
    ([*PREDICT, "--no-run-dir", "--json", "p.json"], ".p.json.tmp.*", "cannot write p.json"),
    (["report", str(FIXTURES / "bench"), "--no-explain", "-o", "rep"], "report.md", "cannot write rep/report.md"),
    (["report", str(FIXTURES / "bench"), "--no-explain", "-o", "rep"], "runs.csv", "cannot write rep/runs.csv"),
    (["report", str(FIXTURES / "bench"), "--no-explain", "-o", "rep"], "*.png", "cannot write rep/"),
    (["loader", "--dataset", "synthetic", "--workers", "0", "--batch-size", "2", "--batches", "1", "--warmup-batches",
      "0", "--image-size", "16", "--out", "l"], ".loader.txt.tmp.*", "cannot write l/loader.txt"),
    (["profile", "bench", *BENCH[1:-6], "--warmup", "0", "--steps", "1", "--trace-steps", "0", "--out", "prof"],
     ".breakdown.txt.tmp.*", "cannot write prof/breakdown.txt"),
    (["slurm", "--gpus-per-node", "1", "--script", "job.sbatch", "bench"], ".job.sbatch.tmp.*",
     "job.sbatch ("),
    (["explain", str(FIXTURES / "bench"), "--reference", "none", "--json", "e.json"], ".e.json.tmp.*",
     "cannot write e.json"),
    (["data", "make-jpegs", "tree", "--train", "2", "--val", "1", "--classes", "1", "--size", "16x16", "--processes",
      "1"], "*.JPEG", "cannot write tree/"),
    (["scale", "--nproc", "1", "--name", "s", "--", *BENCH], ".sweep.json.tmp.*", "cannot write runs/s/sweep.json"),
]


@pytest.mark.parametrize("index", range(len(WRITERS)),
                         ids=[f"{argv[0]}-{pattern}" for argv, pattern, _ in WRITERS])
def test_a_refused_write_is_one_line_naming_the_file_and_the_cause(tmp_path, monkeypatch, capsys, index):
    argv, pattern, named = WRITERS[index]
    error = ERRNOS[index % len(ERRNOS)]
    monkeypatch.chdir(tmp_path)
    with failing_writes(pattern, error) as hit:
        code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert hit, f"no write into {pattern}"
    assert code == 2 and len(err.splitlines()) == 1, err[-3000:]
    assert named in err and os.strerror(error) in err, err
    assert "Traceback" not in err
