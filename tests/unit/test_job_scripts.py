"""No shell code from a flag: a control character (a newline above all) in any value that goes into a job script
is refused at the one place scripts are written, whichever flag brought it: every string flag of `dlscale slurm`
and of `scale --launcher slurm` (read from their parsers), the job command's own and a swept command's. What is
not a control character (`;`, `$(...)`, backticks, quotes in the program's words) stays inert: the script, run by
bash with stand-ins for srun and scontrol, hands every word to the program as it was given. sbatch itself reading
every directive: tests/slurm/test_slurm_scripts.py."""

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest
from cli_fuzz import leaves, options

from dlscale.cli import main
from dlscale.errors import ConfigError
from dlscale.launch.slurm import SlurmJob, sbatch_script

pytestmark = pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
CONTROL = ["\n", "\r", "\x1b", "\x00", "\u2028", "\u202e", "\udcff"]
"""A newline, a carriage return, an escape, NUL, Unicode's line separator, a right-to-left override and a byte
that is not UTF-8 (as Python holds it from argv)."""
BENCH = ["bench", "--model", "resnet18", "--width", "4"]


def _text_flags(words: tuple[str, ...], *, skip: tuple[str, ...] = ()) -> list[str]:
    """The options of a command that take free text: no number type, no path type, no choices."""
    found = []
    for action in options(leaves()[words]):
        numeric = getattr(action.type, "numeric", False) or action.type in (int, float)
        if not (numeric or getattr(action.type, "path", False) or action.choices or action.dest in skip):
            found.append(max(action.option_strings, key=len))
    return found


def _refused(capsys, argv: list[str], tmp_path: Path) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not list(tmp_path.rglob("*.sbatch")), "a script was written"
    return err


SLURM_FLAGS = _text_flags(("slurm",), skip=("rest",))
SCALE_FLAGS = [flag for flag in _text_flags(("scale",)) if flag in SLURM_FLAGS]


def test_the_flags_are_the_ones_the_issue_named_and_any_added_since():
    assert {"--job-name", "--partition", "--account", "--sbatch-option", "--python", "--time", "--mem"} <= \
        set(SLURM_FLAGS)
    assert {"--partition", "--account", "--sbatch-option", "--python", "--time"} <= set(SCALE_FLAGS)


@pytest.mark.parametrize("flag", SLURM_FLAGS)
def test_every_string_flag_of_slurm_with_a_control_character_is_refused(tmp_path, monkeypatch, capsys, flag):
    monkeypatch.chdir(tmp_path)
    for char in CONTROL[:4] if flag in ("--job-name", "--partition") else CONTROL[:1] + CONTROL[4:]:
        value = f"ok{char}srun touch {tmp_path}/PWNED"
        err = _refused(capsys, ["slurm", "--gpus-per-node", "1", f"{flag}={value}", *BENCH], tmp_path)
        assert "control character" in err or flag in err, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("flag", SCALE_FLAGS)
def test_every_slurm_flag_of_scale_with_a_newline_is_refused_before_the_sweep(tmp_path, monkeypatch, capsys, flag):
    monkeypatch.chdir(tmp_path)
    err = _refused(capsys, ["scale", "--launcher", "slurm", "--gpus", "1", "--gpus-per-node", "1", "--cpu-only",
                            f"{flag}=x\necho owned", "--", *BENCH], tmp_path)
    assert "control character" in err or flag in err
    assert not (tmp_path / "runs").exists()  # no sweep directory: refused before it started


@pytest.mark.parametrize("words", [
    ["--name", "n\nid"], ["--output-dir", "out\nid"], ["--mlflow-experiment", "e\nid"], ["--set", "data.path=/d\nid"],
    ["--data", "/d\nid"], ["--config", "cpu:digits\nid"], ["--set", "name=n\u2028id"],
])
@pytest.mark.parametrize("command", ["train", "scale"])
def test_the_job_commands_own_flags_with_a_newline_are_refused(tmp_path, monkeypatch, capsys, command, words):
    monkeypatch.chdir(tmp_path)
    if command == "train":
        argv = ["slurm", "--gpus-per-node", "1", "train", "--config", "cpu:digits", *words]
    else:  # the swept command's flags, after --
        argv = ["slurm", "--gpus-per-node", "1", "scale", "--nproc", "1", "--", "train", "--config", "cpu:digits",
                *words]
    _refused(capsys, argv, tmp_path)


@pytest.mark.parametrize("flag,value", [("--time", "10\n"), ("--time", "1:00:00\n"), ("--mem", "4G\n"),
                                        ("--mem-per-gpu", "4G\n"), ("--time", "١٠")])
def test_a_final_newline_or_a_digit_sbatch_does_not_read_is_no_time_or_size(tmp_path, capsys, flag, value):
    _refused(capsys, ["slurm", "--gpus-per-node", "1", f"{flag}={value}", *BENCH, "--output-dir", str(tmp_path)],
             tmp_path)


def test_every_field_of_a_job_is_checked_whatever_its_name():
    """A field added to SlurmJob is checked without a line of its own: SlurmJob.texts walks them all."""
    base = SlurmJob(program=("bench",), run_dir=Path("/r"), log=Path("/r/x.log"))
    for field in dataclasses.fields(SlurmJob):
        value = getattr(base, field.name)
        if isinstance(value, tuple):
            bad = (*value, "x\ny") if value else ("x\ny",)
        elif isinstance(value, str | Path):
            bad = type(value)(f"{value}\nid")
        else:
            continue
        with pytest.raises(ConfigError, match="control character"):
            sbatch_script(dataclasses.replace(base, **{field.name: bad}))


def test_a_quote_in_a_directive_is_refused_and_a_blank_quoted(tmp_path):
    job = SlurmJob(program=("bench",), run_dir=tmp_path / "a b", log=tmp_path / "a b" / "slurm-%j.log",
                   request_gpus=False)
    assert f'#SBATCH --output="{tmp_path}/a b/slurm-%j.log"' in sbatch_script(job)
    with pytest.raises(ConfigError, match="holds a quote, which sbatch reads"):
        sbatch_script(dataclasses.replace(job, job_name="it's"))


@pytest.mark.parametrize("command", ["bench", "train"])
def test_what_is_not_a_control_character_reaches_the_program_as_given(tmp_path, monkeypatch, capsys, command):
    """The script run by bash (srun and scontrol stand-ins record what they are given): `$(...)`, backticks, `;`,
    quotes and a blank in the program's words are words, never commands."""
    monkeypatch.chdir(tmp_path)
    hostile = f"$(touch {tmp_path}/PWNED)`touch {tmp_path}/PWNED`;touch {tmp_path}/PWNED \"'x"
    program = (["train", "--config", "cpu:digits", "--set", f"data.path={hostile}"] if command == "train" else
               [*BENCH, "--seed", "1"])
    assert main(["slurm", "--gpus-per-node", "2", "--cpu-only", "--job-name", "a$(touch PWNED);b", "--script",
                 "job.sbatch", *program, "--output-dir", "runs", "--name", "run"]) == 0, capsys.readouterr().err
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nfor word in "$@"; do printf "%s\\0" "$word"; done > "$RECORD"\n')
    (fake / "scontrol").write_text("#!/bin/bash\necho localhost\n")
    for tool in fake.iterdir():
        tool.chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "RECORD": str(tmp_path / "record"), "SLURM_JOB_NODELIST": "localhost",
           "SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "2", "SLURM_JOB_NUM_NODES": "1"}
    done = subprocess.run(["bash", "job.sbatch"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    words = (tmp_path / "record").read_text().split("\0")[:-1]
    assert not (tmp_path / "PWNED").exists() and not os.path.exists("PWNED")
    tail = words[words.index("dlscale", words.index("-m") + 1) + 1:] if "torchrun" in words else words
    assert (f"data.path={hostile}" in tail) if command == "train" else ("--seed" in tail)


def test_a_written_by_comment_holds_the_command_on_one_line(tmp_path, capsys):
    assert main(["slurm", "--gpus-per-node", "1", "--script", str(tmp_path / "j.sbatch"), "--partition", "p q",
                 *BENCH, "--output-dir", str(tmp_path)]) == 0
    text = (tmp_path / "j.sbatch").read_text()
    comment = next(line for line in text.splitlines() if line.startswith("# Written by: "))
    assert "--partition 'p q'" in comment
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert '#SBATCH --partition="p q"' in directives and len(directives) >= 9
