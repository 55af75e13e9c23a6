"""Nothing is read without bound: every reader of what a user or another run hands dlscale, given a FIFO, a link to
/dev/zero, a number of 5,000 digits and a nesting deeper than Python recurses, answers in one line and at once (a
guard fails the test instead of waiting on a FIFO forever): run records through report, explain and predict,
presets, reference files, the checkpoint pointer, the lock's holder, the launchers' variables. What lands in
report.md from a record is escaped. Error messages quote a bounded prefix of a value."""

import json
import shutil

import pytest
from cli_fuzz import FIXTURES, HOSTILE
from cli_fuzz import make_hostile as _hostile
from faults import hang_guard

from dlscale.cli import main
from dlscale.config.presets import load_config, parse_override
from dlscale.distributed.env import DistEnv
from dlscale.errors import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore:Unable to enable fault handler")


def _one_line(capsys, argv) -> str:
    with hang_guard(60):
        code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err[-2000:]
    assert len(err) < 1000, "the message quotes the whole value"
    return err


READERS = {  # (fixture kind, file, command line reading it)
    "report summary.json": ("bench", "summary.json", ["report", "{run}", "--no-explain", "-o", "{tmp}/r"]),
    "report metrics.jsonl": ("train", "metrics.jsonl", ["report", "{run}", "--no-explain", "-o", "{tmp}/r"]),
    "report sweep.json": ("sweep", "sweep.json", ["report", "{run}", "--no-explain", "-o", "{tmp}/r"]),
    "explain config.json": ("bench", "config.json", ["explain", "{run}", "--reference", "none"]),
    "explain env.json": ("bench", "env.json", ["explain", "{run}", "--reference", "none"]),
    "predict --from-run": ("bench", "summary.json", ["predict", "--gpus", "8", "--from-run", "{run}", "--platform",
                                                     "dgx1-v100", "--no-run-dir"]),
    "predict --comm-run": ("comm", "summary.json", ["predict", "--gpus", "8", "--from-run", str(FIXTURES / "bench"),
                                                    "--comm-run", "{run}", "--no-run-dir"]),
}


OPTIONAL = {"explain config.json", "explain env.json", "report sweep.json"}
"""Files a run may lack: one that is not a regular file is not read, as if it were not there (a folder without
sweep.json is read as the runs it holds)."""


@pytest.mark.parametrize("how", HOSTILE)
@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_of_run_records_answers_at_once_in_one_line(tmp_path, capsys, reader, how):
    kind, name, argv = READERS[reader]
    run = shutil.copytree(FIXTURES / kind, tmp_path / kind)
    _hostile(run / name, how)
    argv = [word.format(run=run, tmp=tmp_path) for word in argv]
    if reader in OPTIONAL and how in ("fifo", "zero"):
        with hang_guard(60):
            assert main(argv) == 0, capsys.readouterr().err
        return
    err = _one_line(capsys, argv)
    assert name in err, err


@pytest.mark.parametrize("how", HOSTILE)
def test_a_reference_file_and_a_preset_file_answer_in_one_line(tmp_path, capsys, how):
    _hostile(tmp_path / "ref.json", how)
    _one_line(capsys, ["report", str(FIXTURES / "bench"), "--no-explain", "-o", str(tmp_path / "r"), "--reference",
                       str(tmp_path / "ref.json")])
    _hostile(tmp_path / "preset.yaml", how)
    _one_line(capsys, ["config", f"{tmp_path / 'preset.yaml'}:default"])


def test_an_alias_bomb_is_refused_before_anything_walks_it(tmp_path):
    """Nine aliases of nine make 9**9 values: the error message's repr once took 6 GiB."""
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    lines += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\ndefault:\n  model: *i\n")
    with hang_guard(30), pytest.raises(ConfigError, match="stands for more than 100,000 values"):
        load_config(f"{tmp_path / 'bomb.yaml'}:default")
    bomb = "[&a [1,1,1,1,1,1,1,1,1,1], " + ", ".join(
        f"&{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 10)}]" for i in range(6)) + "]"
    with hang_guard(30), pytest.raises(ConfigError, match="stands for more than"):
        parse_override(f"data.path={bomb}")


def test_a_number_of_5000_digits_is_one_short_line_wherever_it_is_given(tmp_path, capsys):
    digits = "9" * 5000
    err = _one_line(capsys, ["config", "cpu:digits", "--set", f"seed={digits}"])
    assert "seed" in err
    (tmp_path / "p.yaml").write_text(f"default:\n  seed: {digits}\n")
    assert "digits" in _one_line(capsys, ["config", f"{tmp_path / 'p.yaml'}:default"])
    with pytest.raises(ConfigError, match="not a whole number the launcher sets") as raised:
        DistEnv.from_env({"RANK": digits, "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    assert len(str(raised.value)) < 200


def test_a_number_of_more_digits_than_python_converts_reads_the_same_in_json_and_in_yaml(tmp_path):
    import sys

    from dlscale.config.presets import read_yaml
    from dlscale.rundir.files import read_json

    said = f"a number of more than {sys.get_int_max_str_digits():,} digits"
    (tmp_path / "summary.json").write_text('{"seed": ' + "9" * 5000 + "}")
    with hang_guard(30), pytest.raises(ConfigError) as raised:
        read_json(tmp_path / "summary.json")
    assert f"cannot be read as JSON ({said})" in str(raised.value)
    with hang_guard(30), pytest.raises(ConfigError) as raised:
        read_yaml("seed: " + "9" * 5000, "p.yaml")
    assert str(raised.value) == f"p.yaml is not YAML dlscale reads ({said})"
    with pytest.raises(ConfigError, match=r"p.yaml is not YAML dlscale reads \(while scanning"):
        read_yaml("a: 'unclosed\n  b", "p.yaml")  # any other error: its first line


@pytest.mark.parametrize("environ,message", [
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "n[1-999999999]"},
     None),  # the first host is all the rendezvous needs: not written out
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_TASKS_PER_NODE": "1(x999999999)"}, None),
    ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_PORT": "70000"}, "is not a TCP port"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "n[1-" + "9" * 5000 + "]"},
     "is not a number or a range"),
])
def test_the_launchers_variables_are_read_within_bounds(environ, message):
    with hang_guard(30):
        if message is None:
            assert DistEnv.from_env(environ).rank == 0
            return
        with pytest.raises(ConfigError, match=message) as raised:
            DistEnv.from_env(environ)
    assert len(str(raised.value)) < 300


def test_a_host_list_is_expanded_within_a_bound():
    from dlscale.distributed.env import expand_hostlist

    assert expand_hostlist("gpu[07-09],cpu1") == ["gpu07", "gpu08", "gpu09", "cpu1"]  # scontrol show hostnames
    with hang_guard(30), pytest.raises(ConfigError, match="names 999,999,999 hosts, more than 100,000"):
        expand_hostlist("n[1-999999999]")


def test_the_lock_holder_and_the_checkpoint_pointer_are_read_within_bounds(tmp_path):
    from dlscale.rundir import RunDir
    from dlscale.rundir.writer import RunInUse

    first = RunDir(tmp_path / "run").claim("bench")
    (tmp_path / "run" / ".lock.holder").unlink()
    (tmp_path / "run" / ".lock.holder").symlink_to("/dev/zero")
    with hang_guard(30), pytest.raises(RunInUse, match="in use by another process"):
        RunDir(tmp_path / "run").claim("bench")
    first.release()


def test_what_lands_in_report_md_from_a_record_is_escaped(tmp_path, capsys):
    run = shutil.copytree(FIXTURES / "bench", tmp_path / "bench")
    summary = json.loads((run / "summary.json").read_text())
    summary["model"] = "<script>alert(1)</script>"
    summary["device_name"] = "[click](javascript:alert(1)) | `x` **bold**"
    (run / "summary.json").write_text(json.dumps(summary))
    assert main(["report", str(run), "-o", str(tmp_path / "r"), "--explain-reference", "none"]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "[click](javascript" not in text and "\\[click\\](javascript:alert(1))" in text
    assert "**bold**" not in text
