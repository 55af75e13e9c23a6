"""sbatch reads every directive of the scripts dlscale writes: `sbatch --test-only` on the one-node cluster (see
conftest.py) accepts them with every job flag given, values with blanks and shell marks included, and refuses one
whose last directive is not an option, which it could not do had it stopped reading before the last line (a
newline inside the `# Written by:` comment made it stop before the first: 0 of 10 directives read)."""

import subprocess

import pytest

from dlscale.cli import main

pytestmark = [pytest.mark.slurm, pytest.mark.filterwarnings("ignore:Unable to enable fault handler")]
BENCH = ["bench", "--model", "resnet18", "--width", "4"]
TRAIN = ["train", "--config", "cpu:digits", "--set", "model.width=4"]
EVERY_FLAG = [  # the one-node cluster has 2 CPUs and 1 MB of memory (its slurm.conf)
    "--cpu-only", "--partition", "debug", "--time", "0-00:10:00", "--cpus-per-task", "1", "--mem", "1",
    "--signal-seconds", "60", "--job-name", "a b $(date) `id`; x", "--sbatch-option=--comment=dlscale test"]


def _test_only(script) -> subprocess.CompletedProcess:
    return subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("program", [BENCH, TRAIN, ["scale", "--nproc", "1", "--", *BENCH]], ids=lambda p: p[0])
@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_sbatch_reads_every_directive(slurm_cluster, tmp_path, capsys, program, launcher):
    for last, accepted in (([], True), (["--sbatch-option=--no-such-option-of-sbatch"], False)):
        script = tmp_path / f"job{len(last)}.sbatch"
        argv = ["slurm", "--gpus-per-node", "1", "--launcher", launcher, *EVERY_FLAG, *last, "--script", str(script),
                *program[:1], "--output-dir", str(tmp_path / "runs with blanks"), *program[1:]]
        assert main(argv) == 0, capsys.readouterr().err
        directives = [line for line in script.read_text().splitlines() if line.startswith("#SBATCH")]
        expected = last[0].split("=", 1)[1] if last else '--comment="dlscale test"'
        assert directives[-1].split("#SBATCH ", 1)[1].startswith(expected)
        done = _test_only(script)
        if accepted:
            assert done.returncode == 0 and "to start at" in done.stderr, done.stderr
        else:  # read up to the last line: sbatch names the option it does not know
            assert done.returncode != 0 and "no-such-option-of-sbatch" in done.stderr, done.stderr
