"""What `dlscale slurm` asks for and passes on: CPUs per task from the ranks and their loader workers (capped by
--cpus-per-node), memory as given, the CPUs handed to srun and each rank's threads, requeue only for train, a
rendezvous port two jobs on one node cannot share, and the note on plain torchrun. The scripts are parsed."""

import os
import re
import subprocess

import pytest

from dlscale.cli import main
from dlscale.cli.scale import add_parser as add_scale_parser
from dlscale.cli.scale import spec_from_args

pytestmark = pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # main() under pytest's capture
HAL = ["train", "--config", "imagenet:hal-rn50", "--data", "/shared/imagenet"]  # 20 loader workers per rank


def script(capsys, tmp_path, *argv):
    """The script of `dlscale slurm ARGV`, the job's run directory in tmp_path: --output-dir goes right after the
    command, where it is the command's own (after a sweep's `--` it would be the swept command's, and the sweep's
    folder would be ./runs of the directory the tests run in)."""
    at = next(i for i, word in enumerate(argv) if word in ("bench", "train", "scale")) + 1
    argv = [*argv[:at], "--output-dir", str(tmp_path), *argv[at:]]
    assert main(["slurm", "--script", str(tmp_path / "job.sbatch"), *argv]) == 0
    capsys.readouterr()
    return (tmp_path / "job.sbatch").read_text()


def directives(text):
    return [line.split("#", 2)[1].split()[1] for line in text.splitlines() if line.startswith("#SBATCH")]


def header(text, what):
    return next(line for line in text.splitlines() if line.startswith(f"# {what}:"))


@pytest.mark.parametrize("layout,cpus_per_node,per_task,derivation", [
    # one torchrun agent per node runs 4 ranks: 4 x (20 + 1)
    ("torchrun", None, 84, "4 rank(s) per task x (20 loader worker(s) + 1 for the rank) = 84; --cpus-per-node caps"),
    ("torchrun", 64, 64, "= 84, capped at 64 by --cpus-per-node 64."),
    ("torchrun", 96, 84, "= 84, within --cpus-per-node 96."),
    # one srun task per rank: 20 + 1 each, 4 tasks sharing a node
    ("srun", None, 21, "1 rank(s) per task x (20 loader worker(s) + 1 for the rank) = 21;"),
    ("srun", 64, 16, "= 21, capped at 16 by --cpus-per-node 64 / 4 tasks per node."),
])
def test_cpus_per_task_give_each_rank_its_loader_workers_and_one(capsys, tmp_path, layout, cpus_per_node, per_task,
                                                                derivation):
    cap = ["--cpus-per-node", str(cpus_per_node)] if cpus_per_node else []
    text = script(capsys, tmp_path, "--nodes", "2", "--gpus-per-node", "4", "--launcher", layout, *cap, *HAL)
    assert f"--cpus-per-task={per_task}" in directives(text)
    assert derivation in header(text, "CPUs per task")


def test_a_given_cpus_per_task_is_kept_and_checked_against_the_node(capsys, tmp_path):
    text = script(capsys, tmp_path, "--gpus-per-node", "4", "--cpus-per-task", "48", *HAL)
    assert "--cpus-per-task=48" in directives(text)
    assert header(text, "CPUs per task") == "# CPUs per task: 48, as given (--cpus-per-task)."
    assert main(["slurm", "--gpus-per-node", "4", "--launcher", "srun", "--cpus-per-task", "20", "--cpus-per-node",
                 "64", *HAL, "--output-dir", str(tmp_path)]) == 2
    assert "--cpus-per-task 20 x 4 task(s) per node is more than --cpus-per-node 64" in capsys.readouterr().err


@pytest.mark.parametrize("layout,command,ranks", [("torchrun", HAL, 4), ("srun", HAL, 1),
                                                  ("torchrun", ["bench", "--model", "resnet18"], 4)])
def test_srun_gets_the_cpus_in_both_layouts(capsys, tmp_path, layout, command, ranks):
    text = script(capsys, tmp_path, "--gpus-per-node", "4", "--launcher", layout, *command)
    assert "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK" in text.splitlines()
    [srun] = [line for line in text.splitlines() if line.startswith("srun ")]
    assert srun.startswith('srun --kill-on-bad-exit=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" ')
    assert f"rank_cpus=$(( SLURM_CPUS_PER_TASK / {ranks} ))" in text.splitlines()


def _threads(text, cpus_per_task):
    """OMP_NUM_THREADS as the script's own lines set it in a job given `cpus_per_task` CPUs per task."""
    lines = text[text.index("export SRUN_CPUS_PER_TASK"):text.index("# Rendezvous")]
    out = subprocess.run(["bash", "-c", lines + 'echo "$OMP_NUM_THREADS $SRUN_CPUS_PER_TASK"'], capture_output=True,
                         text=True, env={**os.environ, "SLURM_CPUS_PER_TASK": str(cpus_per_task)})
    threads, passed_on = out.stdout.split()
    assert passed_on == str(cpus_per_task)
    return int(threads)


def test_each_ranks_threads_are_its_share_of_the_cpus_less_its_loader_workers(capsys, tmp_path):
    torchrun = script(capsys, tmp_path, "--gpus-per-node", "4", *HAL)
    assert _threads(torchrun, 84) == 1      # 84 / 4 ranks = 21 cores: 20 loader workers, 1 for the rank
    assert _threads(torchrun, 128) == 12    # a bigger allocation: 32 per rank, 20 of them for the workers
    assert _threads(torchrun, 64) == 1      # capped below what the workers want: never 0 or less
    bench = script(capsys, tmp_path, "--gpus-per-node", "2", "--cpu-only", "bench", "--model", "resnet18")
    assert "--cpus-per-task=2" in directives(bench)  # no loader workers: one core per rank
    assert _threads(bench, 2) == 1 and _threads(bench, 8) == 4


def test_memory_is_asked_as_given_and_said_in_the_header(capsys, tmp_path):
    text = script(capsys, tmp_path, "--gpus-per-node", "4", "--mem-per-gpu", "32G", *HAL)
    assert "--mem-per-gpu=32G" in directives(text)
    assert header(text, "Memory") == "# Memory: --mem-per-gpu=32G, as given."
    text = script(capsys, tmp_path, "--gpus-per-node", "4", "--mem", "200G", *HAL)
    assert "--mem=200G" in directives(text)
    text = script(capsys, tmp_path, "--gpus-per-node", "4", *HAL)
    assert not any(d.startswith("--mem") for d in directives(text)) and "site's default" in header(text, "Memory")


@pytest.mark.parametrize("flags,message", [
    (["--mem", "200G", "--mem-per-gpu", "32G"], "give --mem or --mem-per-gpu, not both"),
    (["--mem", "12GB"], "--mem '12GB': give a size as sbatch takes it"),
    (["--cpu-only", "--mem-per-gpu", "8G"], "--mem-per-gpu with --cpu-only"),
    (["--cpus-per-node", "2", "--launcher", "srun"], "--cpus-per-node 2 is fewer than the 4 tasks a node runs"),
    (["--cpus-per-task", "0"], "argument --cpus-per-task: '0': give a whole number from 1"),
])
def test_bad_resource_flags_are_one_line(capsys, tmp_path, flags, message):
    assert main(["slurm", "--gpus-per-node", "4", *flags, *HAL, "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_only_train_is_requeued(capsys, tmp_path):
    assert "--requeue" in directives(script(capsys, tmp_path, "--gpus-per-node", "2", *HAL))
    for command in (["bench", "--model", "resnet18"], ["scale", "--nproc", "1,2", "--", "bench"]):
        found = directives(script(capsys, tmp_path, "--gpus-per-node", "2", *command))
        assert "--no-requeue" in found and "--requeue" not in found


def test_one_node_torchrun_lets_torchrun_pick_the_port(capsys, tmp_path):
    text = script(capsys, tmp_path, "--gpus-per-node", "4", *HAL)
    assert "--rdzv-endpoint=localhost:0" in text and "MASTER_PORT" not in text
    two_nodes = script(capsys, tmp_path, "--nodes", "2", "--gpus-per-node", "4", *HAL)
    assert '--rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"' in two_nodes and "SLURM_JOB_ID %" not in two_nodes


def test_the_script_runs_dlscale_torchrun_and_says_why_not_plain_torchrun(capsys, tmp_path):
    text = script(capsys, tmp_path, "--gpus-per-node", "4", *HAL)
    assert '"$PYTHON" -m dlscale torchrun --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node=4' in text
    assert "torch.distributed.run" not in text
    note = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    for words in ("The agent is `dlscale torchrun`", "not plain torchrun", "plain torchrun exits 1 with a traceback",
                  "SIGKILLs its workers 30 s later", "SIGUSR1 kills it", "passes both on to the workers"):
        assert words in note, words
    srun = script(capsys, tmp_path, "--gpus-per-node", "4", "--launcher", "srun", *HAL)
    assert "dlscale torchrun" not in srun


def test_sweep_points_through_slurm_get_the_swept_commands_loader_workers():
    import argparse

    parser = argparse.ArgumentParser()
    add_scale_parser(parser.add_subparsers())
    args = parser.parse_args(["scale", "--launcher", "slurm", "--gpus", "2,4", "--gpus-per-node", "4",
                              "--cpus-per-node", "32", "--", *HAL])
    job = spec_from_args(args).launcher_options["job"]
    assert job["loader_workers"] == 20 and job["cpus_per_node"] == 32


def test_the_header_line_names_the_loader_workers_of_the_command_it_runs(capsys, tmp_path):
    text = script(capsys, tmp_path, "--gpus-per-node", "2", "train", "--config", "cpu:digits",
                  "--set", "data.num_workers=3")
    assert re.search(r"2 rank\(s\) per task x \(3 loader worker\(s\) \+ 1 for the rank\) = 8", text)
