"""Job scripts, the mpirun line and the SLURM helpers, without a cluster (tests/slurm has one)."""

import dataclasses
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dlscale.cli import main
from dlscale.distributed.env import DistEnv
from dlscale.errors import ConfigError
from dlscale.launch import slurm as launch
from dlscale.launch import slurm_jobs as jobs
from dlscale.launch.slurm import SlurmJob, mpirun_command, sbatch_script, time_limit_s
from dlscale.launch.slurm_jobs import node_layout

TRAIN = SlurmJob(program=("train", "--config", "cpu:digits", "--output-dir", "/shared/runs", "--name", "r"),
                 run_dir=Path("/shared/runs/r"), log=Path("/shared/runs/r/slurm-%j.log"), nodes=2, procs_per_node=4,
                 partition="gpu", time="04:00:00", account="proj", python="/venv/bin/python",
                 workdir=Path("/home/me"))


def _directives(script: str) -> list[str]:
    return [line.split("#", 2)[1].split()[1] for line in script.splitlines() if line.startswith("#SBATCH")]


def test_torchrun_script_has_every_directive_and_line():
    script = sbatch_script(TRAIN)
    assert _directives(script) == [
        "--job-name=dlscale", "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=4", "--cpus-per-task=4",
        "--partition=gpu", "--time=04:00:00", "--account=proj", "--chdir=/home/me",
        "--output=/shared/runs/r/slurm-%j.log", "--open-mode=append", "--requeue", "--signal=B:USR1@120"]
    for line in ['MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
                 f"MASTER_PORT=$({launch.FREE_PORT})", "trap on_usr1 USR1", "trap on_term TERM",
                 'kill -USR1 "$step_pid"', 'scontrol requeue "$SLURM_JOB_ID"',
                 """srun --kill-on-bad-exit=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" bash -c 'trap "" USR1; """
                 """exec "$@"' torchrun""",
                 '"$PYTHON" -m dlscale torchrun --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node=4',
                 '--rdzv-id="$SLURM_JOB_ID" --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT"',
                 "--max-restarts=0", "-m dlscale train --config cpu:digits", "PYTHON=/venv/bin/python"]:
        assert line in script, line
    # NCCL settings are offered, commented out; the restart workaround only with restarts.
    nccl = [line for line in script.splitlines() if "NCCL_" in line]
    assert len(nccl) >= 4 and all(line.startswith("# export") for line in nccl)
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in script
    restarts = sbatch_script(dataclasses.replace(TRAIN, max_restarts=3))
    assert "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in restarts and "--max-restarts=3" in restarts


def test_srun_variant_has_one_task_per_gpu_and_no_torchrun():
    script = sbatch_script(dataclasses.replace(TRAIN, launcher="srun"))
    assert "--ntasks-per-node=4" in _directives(script) and "--gpus-per-node=4" in _directives(script)
    assert "torch.distributed.run" not in script
    assert re.search(r'exec "\$@"\' srun \\\n    "\$PYTHON" -m dlscale train --config cpu:digits', script)


def test_bench_is_never_requeued_and_cpu_only_requests_no_gpus():
    script = sbatch_script(dataclasses.replace(TRAIN, program=("bench", "--model", "resnet50"), request_gpus=False))
    directives = _directives(script)
    assert "--no-requeue" in directives and "--requeue" not in directives and "--open-mode=append" in directives
    assert not any(d.startswith(("--signal", "--gpus")) for d in directives)
    assert "trap" not in script.replace('trap "" USR1', "") and "NCCL" not in script
    assert "1 CPU rank(s)" not in script and "4 CPU rank(s)" in script


def test_one_node_sweep_runs_dlscale_scale_as_one_task():
    script = sbatch_script(dataclasses.replace(TRAIN, nodes=1, program=("scale", "--nproc", "1,2", "--", "bench")))
    assert "--ntasks-per-node=1" in _directives(script) and "--no-requeue" in _directives(script)
    assert 'srun --ntasks=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" "$PYTHON" -m dlscale scale --nproc 1,2 -- bench' \
        in script
    with pytest.raises(ConfigError, match="--launcher slurm --gpus"):
        sbatch_script(dataclasses.replace(TRAIN, program=("scale", "--nproc", "1")))


@pytest.mark.parametrize("job", [dataclasses.replace(TRAIN, max_restarts=1),
                                 dataclasses.replace(TRAIN, launcher="srun"),
                                 dataclasses.replace(TRAIN, program=("bench",), request_gpus=False)])
def test_scripts_are_valid_bash(job, tmp_path):
    path = tmp_path / "job.sbatch"
    path.write_text(sbatch_script(job))
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True).returncode == 0


def test_rendezvous_block_takes_the_first_host_and_a_port_no_other_job_holds(tmp_path):
    """The script's rendezvous lines with a stand-in scontrol: the first host, and a port that a job holding
    another port on the node is never given, even for job ids 20000 apart (the same port under a port
    derived from the job id)."""
    fake = tmp_path / "scontrol"
    fake.write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames gpu[07-09],cpu1" ] && printf "gpu07\\ngpu08\\n"\n')
    fake.chmod(0o755)
    script = sbatch_script(TRAIN)
    block = script[script.index("MASTER_ADDR=$("):script.index("export MASTER_ADDR MASTER_PORT")]
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PYTHON": sys.executable,
           "SLURM_JOB_NODELIST": "gpu[07-09],cpu1"}

    def rendezvous(job_id):
        out = subprocess.run(["bash", "-c", block + 'echo "$MASTER_ADDR $MASTER_PORT"'], capture_output=True,
                             text=True, env={**env, "SLURM_JOB_ID": job_id})
        host, port = out.stdout.split()
        return host, int(port)

    host, first = rendezvous("123456")
    with socket.socket() as held:  # the first job's rank 0 listens on its port
        held.bind(("", first))
        held.listen()
        assert rendezvous("143456") != (host, first) and host == "gpu07"
    env["SLURM_JOB_NODELIST"] = "unknown"  # scontrol answers nothing: stop, never fall back to localhost
    out = subprocess.run(["bash", "-c", block], capture_output=True, text=True, env=env)
    assert out.returncode == 1 and "cannot name the first host" in out.stderr


def test_srun_without_a_script_still_derives_the_port_from_the_job_id():
    slurm = DistEnv.from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "123456",
                              "SLURM_JOB_NODELIST": "gpu[07-09],cpu1", "SLURM_JOB_NUM_NODES": "4"})
    assert (slurm.master_addr, slurm.master_port) == ("gpu07", 23456)


def test_mpirun_line_for_bluefogs_bfrun_example():
    """bfrun -np 16 -H server1:4,server2:4,server3:4,server4:4 python pytorch_benchmark.py ..."""
    command = mpirun_command("server1:4,server2:4,server3:4,server4:4", ["bench", "--model", "resnet50"],
                             python="python")
    assert command[:5] == ["mpirun", "-np", "16", "-H", "server1:4,server2:4,server3:4,server4:4"]
    assert command[command.index("-x") + 1] == "MASTER_ADDR=server1" and "MASTER_PORT=29500" in command
    assert command[-6:] == ["python", "-m", "dlscale", "bench", "--model", "resnet50"]
    # What each rank then sees: Open MPI's variables plus the exported rendezvous host.
    env = DistEnv.from_env({"OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_SIZE": "16",
                            "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
                            "MASTER_ADDR": "server1", "MASTER_PORT": "29500"})
    assert (env.rank, env.node_rank, env.local_rank, env.num_nodes, env.master_addr) == (9, 2, 1, 4, "server1")
    with pytest.raises(ConfigError, match="HOST:SLOTS"):
        mpirun_command("server1:four", ["bench"])


def test_mpirun_inside_a_slurm_allocation_reads_the_mpi_rank():
    inherited = {"SLURM_PROCID": "0", "SLURM_NTASKS": "16", "SLURM_JOB_NUM_NODES": "4",
                 "SLURM_JOB_NODELIST": "server[1-4]"}
    env = DistEnv.from_env({**inherited, "OMPI_COMM_WORLD_RANK": "9", "OMPI_COMM_WORLD_SIZE": "16",
                            "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
                            "MASTER_ADDR": "server1"})
    assert (env.rank, env.local_rank, env.launcher) == (9, 1, "openmpi")


@pytest.mark.parametrize("gpus,expected", [(1, (1, 1)), (2, (1, 2)), (4, (1, 4)), (8, (2, 4)), (64, (16, 4))])
def test_node_layout_fills_a_node_first(gpus, expected):
    assert node_layout(gpus, 4) == expected


def test_node_layout_refuses_partial_nodes():
    with pytest.raises(ConfigError, match="multiples of 4"):
        node_layout(6, 4)


@pytest.mark.parametrize("text,seconds", [("30", 1800), ("10:00", 600), ("1:00:00", 3600), ("2-0", 172800),
                                          ("1-2:30", 95400), ("1-0:0:5", 86405)])
def test_slurm_time_formats(text, seconds):
    assert time_limit_s(text) == seconds


def test_bad_time_and_signal_after_the_limit_are_refused():
    with pytest.raises(ConfigError, match="not a SLURM time"):
        sbatch_script(dataclasses.replace(TRAIN, time="4h"))
    with pytest.raises(ConfigError, match="--signal-seconds 120 is not below the time limit 2"):
        sbatch_script(dataclasses.replace(TRAIN, time="2"))
    with pytest.raises(ConfigError, match="--max-restarts is torchrun's"):
        sbatch_script(dataclasses.replace(TRAIN, launcher="srun", max_restarts=1))


def test_point_outcome(tmp_path):
    assert jobs.point_outcome("7", "COMPLETED", tmp_path)[0] == "failed"  # no summary.json
    (tmp_path / "summary.json").write_text("{}")
    assert jobs.point_outcome("7", "COMPLETED", tmp_path) == ("ok", "")
    assert jobs.point_outcome("7", "TIMEOUT", tmp_path)[0] == "timeout"
    for state in ("FAILED", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "UNKNOWN"):
        status, why = jobs.point_outcome("7", state, tmp_path)
        assert status == "failed" and state in why


def test_wait_follows_a_requeued_job_to_its_end(monkeypatch):
    # "" is a controller that did not answer this time: the job is asked again, not given up.
    seen = {"1": ["PENDING", "", "RUNNING", "PENDING", "RUNNING", "COMPLETED"], "2": ["RUNNING", "", "CANCELLED"]}
    monkeypatch.setattr(jobs, "job_state", lambda job_id: seen[job_id].pop(0))
    changes = []
    states = jobs.wait(["1", "2"], poll_s=0, on_change=lambda job, state: changes.append((job, state)))
    assert states == {"1": "COMPLETED", "2": "CANCELLED"}
    assert [s for j, s in changes if j == "1"] == ["PENDING", "RUNNING", "PENDING", "RUNNING", "COMPLETED"]


def test_wait_returns_at_the_timeout(monkeypatch):
    monkeypatch.setattr(jobs, "job_state", lambda job_id: "PENDING")
    assert jobs.wait(["1"], poll_s=0, timeout_s=0) == {"1": "PENDING"}


def test_cli_takes_job_flags_after_the_command_and_owns_the_run_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["slurm", "train", "--config", "cpu:digits", "--set", "model.width=8", "--output-dir", "out",
                 "--nodes", "2", "--gpus-per-node", "4", "--time", "1:00:00", "--sbatch-option=--qos=high"]) == 0
    out = capsys.readouterr().out
    script = tmp_path / "out" / "train-2x4" / "job.sbatch"
    assert script.read_text() in out and f"Submit it with: sbatch {script}" in out
    assert "#SBATCH --nodes=2" in out and "#SBATCH --qos=high" in out and "#SBATCH --time=1:00:00" in out
    assert (f"-m dlscale train --config cpu:digits --set model.width=8 --output-dir {tmp_path / 'out'} "
            "--name train-2x4 --resume auto") in " ".join(out.replace("\\\n", " ").split())
    assert f"#SBATCH --output={tmp_path / 'out' / 'train-2x4' / 'slurm-%j.log'}" in out


def test_cli_puts_a_sweeps_own_flags_before_the_swept_command(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["slurm", "--gpus-per-node", "2", "--cpu-only", "scale", "--nproc", "1,2", "--output-dir", "sweeps",
                 "--", "bench", "--model", "resnet18"]) == 0
    out = " ".join(capsys.readouterr().out.replace("\\\n", " ").split())
    assert (f'srun --ntasks=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" "$PYTHON" -m dlscale scale --output-dir '
            f'{tmp_path / "sweeps"} --name scale-1x2 --nproc 1,2 -- bench --model resnet18') in out


@pytest.mark.parametrize("argv,message", [
    (["slurm", "--gpus-per-node", "2"], "name the command"),
    (["slurm", "train", "--config", "cpu:digits"], "give --gpus-per-node"),
    (["slurm", "--gpus-per-node", "2", "train", "--config", "cpu:digits", "--no-such-flag"], "--no-such-flag"),
    (["slurm", "--gpus-per-node", "2", "--nodes", "2", "scale", "--nproc", "2", "--", "bench"], "--nodes 1"),
])
def test_cli_errors_are_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def _fake(tmp_path, name: str, script: str) -> None:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


@pytest.mark.parametrize("scontrol,sacct,state", [
    ('echo "JobId=7 JobName=x JobState=COMPLETED Reason=None"', "exit 1", "COMPLETED"),
    ('echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1', 'echo "CANCELLED by 0"', "CANCELLED"),
    ('echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1', "exit 1", "UNKNOWN"),
    ('echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1', "exit 1", ""),
])
def test_job_state_reads_scontrol_then_sacct(scontrol, sacct, state, tmp_path, monkeypatch):
    _fake(tmp_path, "scontrol", scontrol)
    _fake(tmp_path, "sacct", sacct)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert jobs.job_state("7") == state


def test_submit_returns_the_job_id_and_turns_refusals_into_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    _fake(tmp_path, "sbatch", 'echo "4242;cluster"')
    assert jobs.submit(tmp_path / "job.sbatch") == "4242"
    _fake(tmp_path, "sbatch", 'echo "sbatch: error: invalid partition specified: gpu" >&2; exit 1')
    with pytest.raises(ConfigError, match="sbatch refused .*invalid partition specified: gpu"):
        jobs.submit(tmp_path / "job.sbatch")
    _fake(tmp_path, "sbatch", 'echo "sbatch: error: Batch job submission failed: Requested node configuration is not '
                              'available" >&2; exit 1')
    with pytest.raises(ConfigError, match="not available; .*--cpus-per-node C"):
        jobs.submit(tmp_path / "job.sbatch")
