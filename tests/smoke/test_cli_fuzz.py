"""Every bad input is one line, by construction: wrong command lines generated for every command from its own
parser (tests/cli_fuzz.py) fail no case with a traceback, and each class of bad input has its example here.

    DLSCALE_FUZZ_CASES=2000 DLSCALE_FUZZ_SEED=7 pytest tests/smoke/test_cli_fuzz.py   # longer (tests/README.md)
"""

import argparse
import contextlib
import json
import os
import random
import resource
import shutil
from pathlib import Path

import pytest
from cli_fuzz import FIXTURES, INPUTS, OUTPUT_DESTS, is_numeric, leaves, options
from cli_fuzz import run as run_fuzz

from dlscale.cli import main

CASES = int(os.environ.get("DLSCALE_FUZZ_CASES", "420"))
"""Cases of the default run: each of the 70 (command, class) pairs six times."""
SEED = os.environ.get("DLSCALE_FUZZ_SEED", "0")
HEADROOM_BYTES = 8 * 2**30
"""Address space the fuzz may take beyond what the process holds: a case that allocates terabytes fails as a
case (MemoryError, a refused allocation) instead of taking the machine's memory."""

pytestmark = pytest.mark.filterwarnings("ignore:Unable to enable fault handler")  # main() under pytest's capture


@contextlib.contextmanager
def _address_space_limit(extra: int):
    """Lower this process's soft address-space limit to what it holds plus `extra`, put back afterwards."""
    with open("/proc/self/status") as status:
        held = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = held + extra if hard == resource.RLIM_INFINITY else min(held + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.timeout(max(300, 3 * CASES))
def test_no_generated_bad_command_line_gives_a_traceback(tmp_path):
    seed = random.randrange(2**31) if SEED == "random" else int(SEED)
    print(f"fuzz: seed {seed}, {CASES} cases (DLSCALE_FUZZ_SEED={seed} DLSCALE_FUZZ_CASES={CASES})")
    with _address_space_limit(HEADROOM_BYTES):
        outcomes = run_fuzz(seed, CASES, tmp_path)
    failed = [o for o in outcomes if o.result == "failed"]
    counts = {r: sum(o.result == r for o in outcomes) for r in ("refused", "started", "done", "failed")}
    print(f"fuzz: seed {seed}: {counts}")
    assert not failed, (f"{len(failed)} of {len(outcomes)} cases gave a traceback; rerun with "
                        f"DLSCALE_FUZZ_SEED={seed} DLSCALE_FUZZ_CASES={CASES}:\n"
                        + "\n\n".join(f"{o.case}\n{o.detail[-1500:]}" for o in failed[:5]))
    assert counts["refused"] > len(outcomes) / 2  # the generator makes bad inputs, not good ones


def test_every_numeric_flag_is_bounded_when_parsed():
    """No command reads a number with a bare int or float: each numeric option's type is one of cli/numbers.py
    (bounds that say why), or it has a fixed list of choices."""
    bare = []
    for words, parser in leaves().items():
        for action in options(parser):
            numeric = action.type in (int, float) or is_numeric(action)
            if numeric and not getattr(action.type, "numeric", False) and not action.choices:
                bare.append(f"dlscale {' '.join(words)} {max(action.option_strings, key=len)}")
    assert not bare, f"numeric flags without a cli/numbers.py type: {', '.join(bare)}"


def test_every_path_flag_is_checked_when_parsed():
    """Every option or argument that names a file or a folder (what the fuzz's output and input classes feed, and
    any DIR, PATH, FILE or RUN) takes a cli/paths.py type: no part of a command meets a name too long to look at."""
    named = set(OUTPUT_DESTS) | {dest for reads in INPUTS.values() for dest in reads}
    bare = []
    for words, parser in leaves().items():
        for action in parser._actions:
            looks = any(word in (action.metavar or "") for word in ("DIR", "PATH", "FILE", "RUN"))
            if (action.dest in named or looks or action.type is Path) and not getattr(action.type, "path", False):
                bare.append(f"dlscale {' '.join(words)} {max(action.option_strings, key=len, default=action.dest)}")
    assert not bare, f"path flags without a cli/paths.py type: {', '.join(bare)}"


def _one_line(capsys, argv, code=2) -> str:
    assert main(argv) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


TINY_BENCH = ["bench", "--model", "resnet18_cifar", "--width", "4", "--image-size", "16", "--batch-size", "2",
              "--device", "cpu"]


@pytest.mark.parametrize("argv,message", [
    (["bench", "--pool-batches", str(2**63)], "argument --pool-batches: '9223372036854775808': give a whole number"),
    (["bench", "--pg-timeout", "nan"], "argument --pg-timeout: 'nan': give a number above 0"),
    (["comm", "--min-bytes", "0"], "argument -b/--min-bytes: '0': give a size from 1"),
    (["comm", "--step-factor", "1"], "argument -f/--step-factor: '1': give a whole number from 2"),
    (["data", "check", "x", "--gpu-rate", "inf"], "argument --gpu-rate: 'inf'"),
    (["models", "--image-size", "1" + "0" * 30], "argument --image-size"),
    (["predict", "--gpus", "1,0"], "argument --gpus: '1,0': give whole numbers from 1"),
    (["train", "--config", "cpu:digits", "--set", "seed=" + "1" + "0" * 30], "seed=1" + "0" * 30 + " is beyond"),
    (["train", "--config", "cpu:digits", "--set", "optim.lr=.nan"], "optim.lr=nan must be a finite number"),
    (["bench", "--width=--"], "argument --width: expected one value, not '--'"),
    (["explain", "n" * 300], "argument RUN_OR_SWEEP_DIR: a name of 300 bytes"),
    (["train", "--config", "cpu:digits", "--output-dir", "d/" * 2100], "argument --output-dir: a path of 4,200 bytes"),
])
def test_numbers_are_refused_when_parsed(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    assert message in _one_line(capsys, argv)
    assert not (tmp_path / "runs").exists()


def test_what_cannot_fit_or_train_is_refused_before_the_model_is_built(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    huge = _one_line(capsys, [*TINY_BENCH, "--model", "resnet152", "--width", "1024"])
    assert "needs at least" in huge and "GiB of weights, gradients and momentum" in huge and "--width 1024" in huge
    one = _one_line(capsys, [*TINY_BENCH, "--model", "resnet18", "--batch-size", "1"])
    assert "cannot train" in one and "BatchNorm needs more than one value per channel" in one
    loader = _one_line(capsys, ["loader", "--dataset", "synthetic", "--batch-size", "65536", "--image-size", "4096"])
    assert "--batch-size 65536 at 4096 px with up to 16 workers holds" in loader


@pytest.mark.parametrize("argv,message", [
    (["slurm", "--nodes", "1", "--gpus-per-node", "1", "--script", "{dir}", "bench"], "--script {dir} is a directory"),
    (["slurm", "--nodes", "1", "--gpus-per-node", "1", "--script", "{file}/job.sbatch", "bench"],
     "cannot create the folder {file} (a file of that name exists); choose another --script"),
    (["report", str(FIXTURES / "bench"), "--no-explain", "-o", "{file}"], "cannot create the report folder"),
    (["data", "make-jpegs", "{file}"], "cannot create the tree's folder"),
    (["data", "check", "{dir}", "--json", "/proc/x/survey.json"], "cannot create the folder /proc/x"),
])
def test_outputs_are_checked_before_the_work(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "a-file").write_text("x")
    places = {"dir": tmp_path / "a-dir", "file": tmp_path / "a-file"}
    err = _one_line(capsys, [word.format(**places) for word in argv])
    assert message.format(**places) in err


def test_a_report_folder_holding_a_folder_of_a_file_name_is_one_line(tmp_path, capsys):
    (tmp_path / "report" / "runs.csv").mkdir(parents=True)
    err = _one_line(capsys, ["report", str(FIXTURES / "bench"), "--no-explain", "-o", str(tmp_path / "report")])
    assert f"--output-dir {tmp_path / 'report' / 'runs.csv'} is a directory; give a file name" in err


def _damaged(tmp_path, kind: str, file: str, change) -> str:
    run = tmp_path / kind
    shutil.copytree(FIXTURES / kind, run)
    data = json.loads((run / file).read_text())
    change(data)
    (run / file).write_text(json.dumps(data))
    return str(run)


def test_inputs_are_checked_at_the_one_reader_naming_the_file_and_field(tmp_path, capsys):
    preset = tmp_path / "preset.yaml"
    preset.write_bytes(b"\x80\xff binary")
    assert "not UTF-8 text" in _one_line(capsys, ["config", f"{preset}:default"])
    reference = tmp_path / "ref.json"
    reference.write_text(json.dumps({"name": "r", "title": "t", "sources": [], "series": [
        {"id": "s", "label": "s", "kind": "scaling", "points": [{"devices": "eight"}]}]}))
    err = _one_line(capsys, ["report", str(FIXTURES / "bench"), "--no-explain", "-o", str(tmp_path / "out"),
                             "--reference", str(reference)])
    assert "ref.json: series[0].points[0].devices is 'eight', not a whole number of 1 or more" in err
    comm = _damaged(tmp_path, "comm", "summary.json",
                    lambda s: s["results"]["world"]["all_reduce"]["fit"].update({"in-place": {"busbw_gbs": "x"}}))
    err = _one_line(capsys, ["explain", str(FIXTURES / "bench"), "--reference", "none", "--comm-run", comm])
    assert ("summary.json: results.world.all_reduce.fit.in-place is {'busbw_gbs': 'x'}, not an object with error "
            "or an object with latency_us, busbw_gbs") in err
    loader = _damaged(tmp_path, "loader", "summary.json", lambda s: s["settings"].append("fast"))
    err = _one_line(capsys, ["predict", "--from-run", str(FIXTURES / "bench"), "--platform", "dgx1-v100",
                             "--no-run-dir", "--loader-run", loader, "--cores-per-device", "4"])
    assert "settings[2] is 'fast', not an object" in err


def test_a_numeric_option_without_bounds_is_found():
    """The structural test above fails for a parser that reads a number with a bare int."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    assert is_numeric(options(parser)[0]) and not getattr(options(parser)[0].type, "numeric", False)
