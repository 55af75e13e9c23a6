"""dlscale.rundir: run directories written before the schema carried a version still read, the writer's
files read back the same, a damaged file is one line naming it, and every output path is checked first."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from dlscale.errors import ConfigError, DlscaleError, StorageError, line_of, one_line
from dlscale.rundir import (
    FIGURES,
    FILES,
    VERSION,
    RunDir,
    RunInUse,
    check_output_dir,
    check_output_file,
    read_comm_run,
    read_run,
    read_runs,
    read_summary,
    read_sweep,
    write_json_file,
)
from dlscale.rundir.files import NotAFile, open_regular, read_bounded, read_records

FIXTURE = Path(__file__).parent.parent / "fixtures" / "runs-022c5c5"
ROOT = Path(__file__).parent.parent.parent


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


# ------------------------------------------------------------------- today's directories still read


def test_a_bench_run_of_today_reads_with_its_figures_under_the_schemas_names():
    run = read_run(FIXTURE / "bench")
    summary = _json(FIXTURE / "bench" / "summary.json")
    assert run.schema == 1 and "schema" not in summary  # written before the field: version 1
    assert run.kind == "bench" and run.world_size == 1 and run.batch == 4
    assert run.total_ips == summary["img_per_sec_total_mean"]
    assert run.total_ci95 == summary["img_per_sec_total_ci95"]
    assert run.per_rank_ips == summary["img_per_sec_per_rank_mean"]
    assert run.steady_rates() == (summary["img_per_sec_total_mean"], summary["compute_ips"])
    assert run.config["kind"] == "bench" and run.env["world_size"] == 1
    assert run.device_name == summary["device_name"]


def test_a_train_run_of_today_reads_its_windows_and_epochs():
    run = read_run(FIXTURE / "train")
    lines = [json.loads(line) for line in (FIXTURE / "train" / "metrics.jsonl").read_text().splitlines()]
    assert len(run.windows) == sum(r["record"] == "train" for r in lines) == 6
    assert [e["epoch"] for e in run.epochs] == [0, 1]
    summary = _json(FIXTURE / "train" / "summary.json")
    assert run.total_ips == summary["total_ips"]
    assert run.per_rank_ips == summary["total_ips"] / 1  # one rank: the total
    assert run.final_top1 == summary["final_top1_pct"]
    assert run.data == "digits" and run.data_settings["name"] == "digits"
    assert len(run.io_windows()) == 6  # every window carries the reads (io_*)


def test_every_figure_the_schema_names_is_in_todays_summary_of_that_kind():
    for name, keys in FIGURES.items():
        for kind, key in keys.items():
            assert key in _json(FIXTURE / kind / "summary.json"), (name, kind, key)


def test_a_sweep_of_today_reads_with_its_points_and_runs():
    sweep = read_sweep(FIXTURE / "sweep")
    assert sweep.schema == 1 and sweep.header["command"] == "bench" and "points" not in sweep.header
    assert [(p["name"], p["world_size"]) for p in sweep.points] == [("world1", 1), ("world2", 2)]
    assert [path.name for _, path in sweep.finished()] == ["world1", "world2"]
    assert [r.world_size for r in read_runs(FIXTURE / "sweep")] == [1, 2]


def test_comm_predict_loader_and_profile_runs_of_today_read():
    comm = read_comm_run(FIXTURE / "comm")
    assert comm.ranks == 2 and comm.per_node == 2
    size, busbw, column = comm.largest()
    row = next(r for r in comm.summary["results"]["world"]["all_reduce"]["rows"] if r["size"] == 4194304)
    assert size == 4194304 and busbw == max(row["out-of-place"]["busbw_gbs"], row["in-place"]["busbw_gbs"])
    assert read_summary(FIXTURE / "predict", "predict")["max_devices"] == 4
    assert read_summary(FIXTURE / "loader", "loader")["world_size"] == 1
    profile = read_run(FIXTURE / "profile", ("profile",))
    assert profile.summary["breakdown"] and profile.config["mode"] == "bench"


def test_report_explain_and_predict_read_todays_directories(tmp_path):
    from dlscale.explain.build import explain_run
    from dlscale.predict import inputs
    from dlscale.report.load import load

    found = load([FIXTURE])
    assert sorted(r.name for r in found.runs) == ["bench", "bench-curve", "train", "world1", "world2"]
    assert [r.name for r in found.loaders] == ["loader"] and [r.name for r in found.predictions] == ["predict"]
    assert any("comm" in s for s in found.skipped) and not found.failed
    assert explain_run(read_run(FIXTURE / "bench"), "none").run_ips == read_run(FIXTURE / "bench").total_ips
    workload, _ = inputs.workload_from_run(FIXTURE / "bench-curve")
    assert workload.batch_per_device == 8
    assert inputs.network_from_comm_run(FIXTURE / "comm").devices_per_node == 2


# ------------------------------------------------------------------------------ writer and reader


def test_the_writers_files_read_back_as_written_with_the_version(tmp_path):
    run = RunDir.claim_new(tmp_path, "run", "bench")
    run.write_setup({"kind": "bench", "batch_size": 8, "shape": (3, 32)}, {"hostname": "h", "world_size": 2})
    run.append({"record": "train", "epoch": 0, "throughput_img_per_s": float("nan")})
    run.finish({"kind": "bench", "world_size": 2, "img_per_sec_total_mean": 10.0, "batch_size": 8})
    run.release()
    config = _json(tmp_path / "run" / "config.json")
    assert list(config) == ["kind", "schema", "batch_size", "shape"] and config["schema"] == VERSION
    assert config["shape"] == [3, 32]
    text = (tmp_path / "run" / "summary.json").read_text()
    assert text == json.dumps({"kind": "bench", "schema": VERSION, "world_size": 2, "img_per_sec_total_mean": 10.0,
                               "batch_size": 8}, indent=2) + "\n"
    back = read_run(tmp_path / "run")
    assert back.summary == {"kind": "bench", "world_size": 2, "img_per_sec_total_mean": 10.0, "batch_size": 8}
    assert back.config == {"kind": "bench", "batch_size": 8, "shape": [3, 32]} and back.env["hostname"] == "h"
    assert back.windows == ({"record": "train", "epoch": 0, "throughput_img_per_s": None},)  # nan: JSON's null
    assert back.total_ips == 10.0 and back.per_rank_ips is None  # not in this summary: not measured


def test_one_run_per_directory_and_the_lock_dies_with_its_release(tmp_path):
    first = RunDir.claim_new(tmp_path, "run", "bench")
    with pytest.raises(RunInUse, match=r"is in use by `dlscale[^`]*` \(pid \d+"):  # its arguments, if any
        RunDir.claim_new(tmp_path, "run", "bench")
    first.release()
    with RunDir.claim_new(tmp_path, "run", "bench") as again:
        assert again.path == tmp_path / "run"


# ------------------------------------------------------------------------- damaged files, one line


def _copy(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(FIXTURE / name, tmp_path / name))


@pytest.mark.parametrize("file,damage,message", [
    ("summary.json", lambda t: t[: len(t) // 2], "summary.json: cannot be read as JSON"),
    ("summary.json", lambda t: "[1, 2]", "summary.json: not a JSON object"),
    ("env.json", lambda t: t[:100], "env.json: cannot be read as JSON"),
    ("config.json", lambda t: "\x00\x01binary", "config.json: cannot be read as JSON"),
    ("metrics.jsonl", lambda t: "\x00\x01\x02 not records\n\xff\xfe\n", "metrics.jsonl: not JSON lines"),
    ("summary.json", lambda t: t.replace('"world_size": 1', '"world_size": "one"'),
     "world_size 'one' is not a positive whole number"),
    ("summary.json", lambda t: t.replace('"kind": "train",', '"kind": "train", "schema": 99,'),
     "schema 99 is not one this dlscale reads"),
])
def test_a_damaged_file_is_one_line_naming_it(tmp_path, file, damage, message):
    run = _copy(tmp_path, "train")
    (run / file).write_text(damage((run / file).read_text()), errors="surrogateescape")
    with pytest.raises(ConfigError, match=re.escape(message)) as raised:
        read_run(run)
    assert "\n" not in str(raised.value) and str(run) in str(raised.value)


def test_a_log_cut_short_by_a_crash_keeps_its_whole_records(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"record": "train", "step": 1}\n{"record": "train", "st{"record": "train", "step": 2}\n'
                   '{"record": "train", "step": 3}\n{"record": "ep')
    assert [r["step"] for r in read_records(log)] == [1, 3]


@pytest.mark.parametrize("limit,said", [(100, "100 bytes"), (1500, "1 KiB"), (4096, "4 KiB"), (1 << 20, "1 MiB"),
                                        (3 << 20, "3 MiB")])
def test_a_file_over_its_bound_names_the_bound_in_its_largest_unit_and_the_fix_only_when_given(tmp_path, limit, said):
    big = tmp_path / "big.json"
    with open(big, "wb") as file:
        file.truncate(limit + 1)  # sparse: one byte over the bound
    with pytest.raises(ConfigError) as raised:
        read_bounded(big, limit, "")
    assert str(raised.value) == f"{big}: more than {said}, larger than any file dlscale writes"
    with pytest.raises(ConfigError) as raised:
        read_bounded(big, limit, "remove it")
    assert str(raised.value) == f"{big}: more than {said}, larger than any file dlscale writes; remove it"
    assert read_bounded(big, limit + 1, "") == bytes(limit + 1)


def test_a_folder_read_as_a_file_is_one_line_without_a_dangling_separator(tmp_path):
    with pytest.raises(ConfigError) as raised:
        read_bounded(tmp_path, 100, "")
    assert str(raised.value) == f"{tmp_path}: a folder, not a file"


def test_open_regular_opens_files_only_never_waits_for_a_fifo_and_leaves_nothing_open(tmp_path):
    (tmp_path / "file").write_bytes(b"abc")
    os.mkfifo(tmp_path / "fifo")  # no writer: a blocking open would never return
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for name, kind in (("fifo", "a FIFO"), (".", "a folder")):
        with pytest.raises(NotAFile) as raised:
            open_regular(tmp_path / name)
        assert raised.value.kind == kind and str(raised.value) == f"{kind}, not a file"
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before
    fd, facts = open_regular(tmp_path / "file")
    try:
        assert facts.st_size == 3 and os.read(fd, 10) == b"abc"
    finally:
        os.close(fd)


def test_one_line_is_an_errors_text_on_one_line_within_its_limit():
    error = ValueError("first  line\n\tsecond line\n")
    assert one_line(error, 200) == "first line second line"
    assert one_line(error, 10) == "first line"
    assert one_line("  \n ", 50) == ""


def test_line_of_is_the_first_or_last_line_that_is_not_blank():
    said = "\n  \nTraceback (most recent call last):\n  File x\nValueError:  bad   value\n\t\n"
    assert line_of(said, 200) == "Traceback (most recent call last):"
    assert line_of(said, 200, last=True) == "ValueError: bad value" and line_of(said, 10, last=True) == "ValueError"
    assert line_of(OSError(""), 50) == line_of(" \n", 50, last=True) == ""


def test_a_damaged_sweep_is_one_line(tmp_path):
    sweep = _copy(tmp_path, "sweep")
    data = _json(sweep / "sweep.json")
    data["points"][1]["world_size"] = "two"
    (sweep / "sweep.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"sweep.json: points\[1\].world_size is 'two', not a whole number"):
        read_sweep(sweep)
    (sweep / "sweep.json").write_text('{"kind": "sweep", "points": {"a": 1}}')
    with pytest.raises(ConfigError, match="points is {'a': 1}, not a list"):
        read_sweep(sweep)


def test_the_wrong_kind_of_run_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="--comm-run .*bench is a bench run; give a run directory of dlscale comm"):
        read_comm_run(FIXTURE / "bench")
    with pytest.raises(ConfigError, match="is a comm run; give a run directory of dlscale bench or train"):
        read_run(FIXTURE / "comm")
    with pytest.raises(ConfigError, match="holds no summary.json: not a finished run"):
        read_run(tmp_path)


# ------------------------------------------------------------------------ outputs checked first


def test_output_paths_that_cannot_be_written_are_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"--json .* is a directory; give a file name"):
        check_output_file(tmp_path, "--json")
    with pytest.raises(StorageError, match=r"cannot create the folder .*file .a file of that name exists.; choose"):
        check_output_file(tmp_path / "file" / "out.json", "--json")
    with pytest.raises(StorageError, match=r"cannot create the folder .*sub .*/file is a file.; choose another --json"):
        check_output_file(tmp_path / "file" / "sub" / "out.json", "--json")
    with pytest.raises(StorageError, match=r"cannot create the run directory .*a file of that name exists"):
        RunDir.claim_new(tmp_path, "file", "bench")
    with pytest.raises(DlscaleError, match="choose another --out"):
        check_output_dir("/proc/no-such-place/run", "--out")
    with pytest.raises(DlscaleError, match="choose another --json"):
        check_output_file("/proc/no-such-file.json", "--json")
    write_json_file(tmp_path / "new" / "out.json", {"a": (1, 2)})
    assert _json(tmp_path / "new" / "out.json") == {"a": [1, 2]}
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["out.json"]  # no probe or temporary file left


@pytest.mark.parametrize("argv", [
    ["predict", "--peak-tflops", "100", "--mfu", "0.4", "--platform", "dgx1-v100", "--gpus", "8", "--json", "{dir}"],
    ["predict", "--peak-tflops", "100", "--mfu", "0.4", "--platform", "dgx1-v100", "--gpus", "8",
     "--output-dir", "/proc/no-such-place"],
    ["explain", str(FIXTURE / "bench"), "--reference", "none", "--json", "{file}/x.json"],
    ["bench", "--model", "resnet18", "--width", "4", "--json", "{dir}", "--output-dir", "{dir}/runs"],
    ["train", "--config", "cpu:digits", "--raport-file", "{file}/raport.json", "--output-dir", "{dir}/runs"],
])
def test_the_commands_refuse_an_output_they_cannot_write_in_one_line(tmp_path, capsys, monkeypatch, argv):
    from dlscale.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    argv = [a.format(dir=tmp_path, file=tmp_path / "file") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists()  # refused before the work: no run directory either


# ------------------------------------------------------------------------------------- the docs


def test_the_architecture_page_has_every_file_and_figure_of_the_schema():
    page = (ROOT / "docs" / "architecture.md").read_text()
    table = page[page.index("## The run directory"):]
    for name in [*FILES, *FIGURES]:
        assert f"`{name}`" in table, name
