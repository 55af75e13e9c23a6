"""`dlscale profile` as a user runs it: a trace that loads as JSON, a breakdown whose parts sum to
the step time, the nsys line, the input-bound warning, per-rank rows under torchrun."""

import json

import pytest
from commands import dlscale_here, run_process, torchrun

from dlscale import cli
from dlscale.cli import profile as profile_cli

TINY = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4", "--num-classes", "10"]
WINDOW = ["--warmup", "2", "--steps", "3", "--trace-steps", "1"]
PARTS = ("data_ms", "forward_ms", "backward_ms", "optimizer_ms", "other_ms")


def _check_breakdown(summary, world):
    assert summary["kind"] == "profile" and len(summary["breakdown"]) == world
    for row in summary["breakdown"]:
        assert row["step_ms"] > 0 and row["other_ms"] >= 0
        assert sum(row[part] for part in PARTS) == pytest.approx(row["step_ms"], rel=1e-6)
    slowest = max(summary["breakdown"], key=lambda row: row["step_ms"])
    assert summary["slowest_rank"] == slowest["rank"] and summary["step_ms"] == slowest["step_ms"]


def test_profile_bench_writes_trace_breakdown_and_nsys_line(tmp_path):
    out = dlscale_here("profile", "bench", *TINY, *WINDOW, "--out", "prof", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    run = tmp_path / "prof"
    summary = json.loads((run / "summary.json").read_text())
    _check_breakdown(summary, 1)
    assert summary["mode"] == "bench" and summary["model"] == "resnet18" and summary["input_bound"] is None
    trace = json.loads((run / summary["trace"]).read_text())  # Chrome trace JSON
    assert any(event.get("name") == "forward/loss/backward" for event in trace["traceEvents"])
    assert (run / "breakdown.txt").read_text().splitlines()[0].startswith("Step-time breakdown")
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3  # one record per timed step
    assert json.loads((run / "config.json").read_text())["kind"] == "profile"
    assert "slowest=0" in out.stdout
    nsys = out.stdout.split("capturing only PROFILE:\n", 1)[1].splitlines()[0].strip()
    assert nsys == summary["nsys_command"]
    assert nsys.startswith("NSYS_NVTX_PROFILER_REGISTER_ONLY=0 nsys profile ")
    assert "--capture-range=nvtx --nvtx-capture=PROFILE" in nsys
    # into a run directory of its own (a run directory holds one run), in the nsys folder beside the report
    rerun = "-m dlscale profile bench " + " ".join(TINY) + " --warmup 2 --steps 3 --out prof/nsys/run --trace-steps 0"
    assert nsys.endswith(rerun)


def test_profile_train_warns_when_the_loader_is_slowed(tmp_path, monkeypatch, capsys):
    fetch = profile_cli.LoaderBatches.__call__

    def slowed(self):
        import time

        time.sleep(0.2)  # far longer than a step of this 4-channel model on 16 images of 16 px
        return fetch(self)

    monkeypatch.setattr(profile_cli.LoaderBatches, "__call__", slowed)
    code = cli.main(["profile", "train", "--config", "cpu:digits", "--set", "model.width=4",
                     "--set", "global_batch_size=16", "--warmup", "1", "--steps", "2", "--trace-steps", "0",
                     "--out", str(tmp_path / "prof")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "WARNING: training is input-bound:" in printed and "data.num_workers=" in printed
    summary = json.loads((tmp_path / "prof" / "summary.json").read_text())
    _check_breakdown(summary, 1)
    assert summary["mode"] == "train" and summary["data"] == "digits" and summary["trace"] is None
    assert summary["input_bound"].startswith("training is input-bound")
    assert summary["breakdown"][0]["data_ms"] >= 200


@pytest.mark.distributed
def test_profile_two_ranks_under_torchrun(tmp_path):
    out = run_process([*torchrun(2), "-m", "dlscale", "profile", "bench", *TINY, *WINDOW, "--pg-timeout", "60",
                       "--out", "prof"], tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "prof" / "summary.json").read_text())
    _check_breakdown(summary, 2)
    assert [row["rank"] for row in summary["breakdown"]] == [0, 1]
    for row in summary["breakdown"]:  # DDP on gloo: the allreduce is measured on each rank
        assert row["comm_ms"] > 0 and row["exposed_comm_ms"] >= 0 and 0 <= row["overlap_pct"] <= 100
    assert (tmp_path / "prof" / "trace" / "rank1.pt.trace.json").is_file()
    assert out.stdout.count("Step-time breakdown") == 1  # rank 0 prints
    assert "torch.distributed.run --standalone --nproc_per_node 2 -m dlscale profile bench" in out.stdout


@pytest.mark.parametrize("args,message", [
    (["bench", *TINY, "--num-iters", "3"], "--num-iters is a `dlscale bench` flag; profile takes --steps"),
    (["bench", *TINY, "--steps", "0"], "argument --steps: '0': give a whole number from 1"),
    (["bench", *TINY, "--cuda-graphs"], "--cuda-graphs is a `dlscale bench` flag"),
    (["train", "--config", "cpu:nope"], "unknown preset 'nope'"),
    ([], "the following arguments are required: MODE"),
])
def test_bad_input_is_one_line(args, message, capsys):
    try:
        code = cli.main(["profile", *args])
    except SystemExit as exit:  # argparse's errors
        code = exit.code
    assert code == 2
    stderr = capsys.readouterr().err
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert message in stderr
