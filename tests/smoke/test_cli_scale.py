"""`dlscale scale`: a real sweep over 1 and 2 CPU ranks, two emulated nodes, and the bookkeeping
of failed and stuck points (with a stand-in launcher, so those tests start no torch process)."""

import json
import re
import sys

import pytest
from commands import dlscale_here

from dlscale.cli import main
from dlscale.cli.scale import command_facts
from dlscale.errors import ConfigError
from dlscale.launch import local
from dlscale.sweep import plan, run

TINY = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4", "--num-classes", "10",
        "--num-warmup-batches", "2", "--num-batches-per-iter", "2", "--num-iters", "3", "--pg-timeout", "60"]


def _scale(tmp_path, *args):
    """`dlscale scale` in this process; the torchrun launches of its points are processes of their own."""
    return dlscale_here("scale", "--output-dir", "runs", "--name", "sw", *args, cwd=tmp_path)


def _table(stdout):
    """world size -> (total img/s, per-rank img/s, efficiency %) as printed."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 11 and cells[1].isdigit():  # report.tables.SCALING_HEADERS
            total = float(cells[3].split("±")[0])
            per_rank = float(cells[4].split("±")[0])
            # an efficiency above 100% carries its mark, "107.5% (!)", and its cause in the status
            rows[int(cells[1])] = (total, per_rank, float(cells[6].split("%")[0]), cells[9])
    return rows


@pytest.mark.distributed
def test_sweep_over_one_and_two_ranks(tmp_path):
    mlflow_tracking = pytest.importorskip("mlflow.tracking")  # a dev dependency: skipped only without it
    out = _scale(tmp_path, "--nproc", "1,2", "--mlflow", "--", "bench", *TINY)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    record = json.loads((tmp_path / "runs/sw/sweep.json").read_text())
    assert record["mode"] == "weak" and [p["world_size"] for p in record["points"]] == [1, 2]
    assert all(p["status"] == "ok" and p["returncode"] == 0 for p in record["points"])
    summaries = {p["world_size"]: json.loads((tmp_path / "runs/sw" / p["run_dir"] / "summary.json").read_text())
                 for p in record["points"]}
    assert summaries[2]["world_size"] == 2 and summaries[2]["batch_size"] == 4  # weak: batch per rank kept
    table = _table(out.stdout)
    assert sorted(table) == [1, 2]
    t1, t2 = (summaries[n]["img_per_sec_total_mean"] for n in (1, 2))
    # The efficiency column, recomputed here: (T_2 / 2) / (T_1 / 1).
    assert table[2][2] == pytest.approx(100 * (t2 / 2) / (t1 / 1), abs=0.051)
    assert table[1][2] == 100.0
    for n in (1, 2):
        assert table[n][0] == pytest.approx(summaries[n]["img_per_sec_total_mean"], abs=0.051)
        assert table[n][1] == pytest.approx(summaries[n]["img_per_sec_per_rank_mean"], abs=0.051)
    assert "dlscale report runs/sw" in out.stdout
    # --mlflow: the sweep as one MLflow run, the table's figures at each world size
    kept = json.loads((tmp_path / "runs/sw/mlflow.json").read_text())
    client = mlflow_tracking.MlflowClient(kept["tracking_uri"])
    efficiency = client.get_metric_history(kept["run_id"], "efficiency_pct")
    assert [(m.step, float(f"{m.value:.1f}")) for m in efficiency] == [(n, table[n][2]) for n in (1, 2)]
    params = client.get_run(kept["run_id"]).data.params
    assert params["mode"] == "weak" and params["nproc"] == "[1, 2]"


@pytest.mark.distributed
def test_two_emulated_nodes(tmp_path):
    out = _scale(tmp_path, "--nproc", "1", "--nnodes", "2", "--", "bench", *TINY)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    point = json.loads((tmp_path / "runs/sw/sweep.json").read_text())["points"][0]
    assert (point["name"], point["nnodes"], len(point["commands"]), len(point["logs"])) == ("world2-nodes2", 2, 2, 2)
    summary = json.loads((tmp_path / "runs/sw/world2-nodes2/summary.json").read_text())
    assert (summary["world_size"], summary["num_nodes"]) == (2, 2)


STAND_IN = """
import json, os, sys, time
args = sys.argv[1:]
value = lambda flag: args[len(args) - 1 - args[::-1].index(flag) + 1]
if value("--precision") == "bad":
    print("Traceback ...", flush=True)
    print("dlscale bench: error: --precision bad is not supported", file=sys.stderr)
    sys.exit(2)
if value("--precision") == "slow":
    time.sleep(60)
run = os.path.join(value("--output-dir"), value("--name"))
os.makedirs(run)
world = int(os.environ["STAND_IN_WORLD"])
total = 100.0 * world ** 0.5
json.dump({"kind": "bench", "model": "resnet18", "precision": value("--precision"), "world_size": world,
           "batch_size": int(value("--batch-size")), "img_per_sec_total_mean": total,
           "img_per_sec_total_ci95": 1.0, "img_per_sec_per_rank_mean": total / world,
           "img_per_sec_per_rank_ci95": 0.5, "dist_optimizer": "allreduce", "image_size": 32},
          open(os.path.join(run, "summary.json"), "w"))
"""


def stand_in_launcher(spec, point, sweep_dir):
    """Like torchrun's launcher, but runs STAND_IN in place of `python -m dlscale`."""
    command = ["env", f"STAND_IN_WORLD={point.world_size}", sys.executable, "-c", STAND_IN,
               *run.program(point, sweep_dir)[2:]]
    return run.run_here([command], point, sweep_dir, spec.timeout_s)


def test_failed_and_stuck_points_are_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(run.SWEEP_LAUNCHERS, "stand-in", run.PointByPoint(stand_in_launcher))
    monkeypatch.setattr(local, "TERM_GRACE_S", 2.0)
    monkeypatch.setenv("DLSCALE_PROGRESS", "plain")  # as in a CI log, with a progress line at every change
    monkeypatch.setenv("DLSCALE_PROGRESS_EVERY", "0")
    spec = plan.SweepSpec(command="bench", args=tuple(TINY), nproc=(1, 2), mode="strong",
                          precisions=("fp32", "bad", "slow"), launcher="stand-in", timeout_s=3.0)
    points = run.run_sweep(spec, plan.plan_points(spec, command_facts("bench", spec.args)), tmp_path / "sw", out=print)
    assert [(p.name, p.status) for p in points] == [
        ("world1-fp32", "ok"), ("world2-fp32", "ok"), ("world1-bad", "failed"), ("world2-bad", "failed"),
        ("world1-slow", "timeout"), ("world2-slow", "timeout")]
    # Strong scaling: the global batch of 1 rank x 4 images is split over 2 ranks.
    assert [(p.per_rank_batch, p.global_batch) for p in points[:2]] == [(4, 4), (2, 4)]
    record = json.loads((tmp_path / "sw/sweep.json").read_text())
    bad = record["points"][2]
    assert bad["returncode"] == 2 and bad["error"] == "dlscale bench: error: --precision bad is not supported"
    assert "Traceback" in bad["error_tail"] and bad["logs"] == ["logs/world1-bad.log"]
    assert record["points"][4]["error"].startswith("stopped after 3 s")
    printed = capsys.readouterr().out
    assert "failed in" in printed and "timeout in" in printed
    progress = [line for line in printed.splitlines() if line.startswith("progress: ")]
    assert progress[0] == "progress: scale: dlscale bench 0/6 points, 0:00:00 elapsed"
    assert progress[1].startswith("progress: scale: dlscale bench 0/6 points, running world1-fp32, ")
    assert progress[-1].startswith("progress: scale: dlscale bench 6/6 points, 2 ok, 2 failed, 2 timeout, ")

    from dlscale.report.load import load
    from dlscale.report.scaling import build_series

    series = {s.label: s for s in build_series(load([tmp_path / "sw"]))}
    assert series["bench resnet18 fp32 allreduce"].rows[1].efficiency == pytest.approx(2 ** 0.5 / 2)
    assert [r.status for r in series["sw bad"].rows] == ["failed", "failed"]


def test_torchrun_command_lines():
    program = ["-m", "dlscale", "bench"]
    (one,) = local.torchrun_commands(4, 1, program)
    assert one[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "4", *program]
    two = local.torchrun_commands(2, 2, program)
    assert len(two) == 2 and two[0] == two[1]
    endpoint = two[0][two[0].index("--rdzv-endpoint") + 1]
    assert re.fullmatch(r"127\.0\.0\.1:\d+", endpoint) and "--nnodes" in two[0]


@pytest.mark.parametrize("args,message", [
    (["--nproc", "0", "--", "bench"], "argument --nproc: '0': give whole numbers from 1 to 1,024"),
    (["--nproc", "one"], "argument --nproc: 'one': give whole numbers from 1 to 1,024 separated by commas"),
    (["--nproc", "1", "--", "bench", "--output-dir", "x"], "remove --output-dir after --"),
    (["--nproc", "1", "--", "bench", "--no-such-flag"], "not valid for dlscale bench: unrecognized arguments"),
    (["--nproc", "1", "--", "fish"], "must be bench or train"),
    (["--nproc", "1,2", "--mode", "strong", "--", "bench", "--model", "resnet18"], "give --batch-size after --"),
    (["--nproc", "1,3", "--mode", "strong", "--", "bench", "--batch-size", "4"], "does not split evenly over [3]"),
    (["--nproc", "1", "--precision", "fp32", "--", "bench", "--precision", "fp32"], "--precision is swept"),
    (["--nproc", "1", "--dist-optimizer", "allreduce", "--", "train", "--config", "cpu:digits", "--set",
      "strategy.dist_optimizer=allreduce"], "--dist-optimizer is swept"),
    (["--nproc", "1", "--timeout", "0"], "argument --timeout: '0': give a number above 0"),
    (["--nproc", "1", "--set-sweep", "data.num_workers", "--", "train"], "--set-sweep 'data.num_workers': give KEY"),
    (["--nproc", "1", "--set-sweep", "data.num_workers=0,2", "--", "bench"], "--set-sweep sweeps a training setting"),
    (["--nproc", "1", "--set-sweep", "data.num_workers=0,2", "--", "train", "--config", "cpu:digits", "--set",
      "data.num_workers=4"], "data.num_workers is swept by --set-sweep"),
    (["--nproc", "1", "--set-sweep", "data.num_workers=0,many", "--", "train", "--config", "cpu:digits"],
     "data.num_workers"),
    (["--nproc", "1", "--set-sweep", "data.num_workers=0,2", "--", "train", "--config", "cpu:digits", "-j", "4"],
     "data.num_workers is swept by --set-sweep; remove -j/--workers after --"),
    (["--nproc", "1,2", "--dist-optimizer", "allreduce,hierarchical_neighbor_allreduce", "--", "bench"],
     "it needs 2 or more nodes of 2 or more ranks, and these points have not: world2-hierarchical_neighbor_allreduce "
     "(1 node(s) x 2 rank(s))"),
    (["--nproc", "1,2", "--", "train", "--config", "cpu:digits", "--dist-optimizer", "hierarchical_neighbor_allreduce"],
     "these points have not: world2 (1 node(s) x 2 rank(s))"),
])
def test_bad_input_is_one_line(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    assert main(["scale", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_a_point_whose_strategy_cannot_run_on_its_nodes_is_refused_before_the_sweep():
    """hierarchical_neighbor_allreduce needs 2 or more nodes of 2 or more ranks (strategies/neighbor_allreduce.py):
    one rank runs anywhere, 2 x 2 runs, 1 x 2 and 2 x 1 do not; a SLURM sweep fills 4-GPU nodes first."""
    facts = plan.CommandFacts(batch_size=4, dist_optimizer="hierarchical_neighbor_allreduce")
    ok = plan.plan_points(plan.SweepSpec("bench", (), nproc=(2,), nnodes=(2,)), facts)
    assert [p.name for p in ok] == ["world4-nodes2"]
    assert plan.plan_points(plan.SweepSpec("bench", (), nproc=(1,)), facts)[0].world_size == 1
    with pytest.raises(ConfigError, match=r"these points have not: world2-nodes2 \(2 node\(s\) x 1 rank\(s\)\);"):
        plan.plan_points(plan.SweepSpec("bench", (), nproc=(1, 2), nnodes=(2,)), facts)
    slurm = plan.SweepSpec("bench", (), nproc=(4, 8), launcher="slurm", launcher_options={"gpus_per_node": 4})
    with pytest.raises(ConfigError, match=r"these points have not: world4 \(1 node\(s\) x 4 rank\(s\)\);"):
        plan.plan_points(slurm, facts)
    assert plan.node_layout(slurm, plan.Point("w8", 8, 1, {}, 4, 32)) == (2, 4)


def test_set_sweep_points_each_get_their_value():
    """--set-sweep data.num_workers=0,2 at 1 and 2 ranks: four points, each training with its own --set."""
    spec = plan.SweepSpec("train", ("--config", "cpu:digits"), nproc=(1, 2), sets=(("data.num_workers", ("0", "2")),))
    points = plan.plan_points(spec, command_facts("train", spec.args, spec.sets))
    assert [p.name for p in points] == ["world1-num_workers0", "world2-num_workers0", "world1-num_workers2",
                                        "world2-num_workers2"]
    assert [p.settings for p in points][2] == {"data.num_workers": "2"}
    assert points[2].argv[-2:] == ["--set", "data.num_workers=2"]
    assert points[2].series == "num_workers2"


def test_train_batches_follow_the_mode():
    facts = command_facts("train", ("--config", "cpu:digits", "--set", "batch_size=16"))
    weak = plan.batch_rule(plan.SweepSpec("train", (), nproc=(1, 2)), facts)
    assert weak(2) == (16, 32, ["--set", "batch_size=16", "--set", "global_batch_size=null"])
    facts = command_facts("train", ("--config", "cpu:digits",))  # the preset: global batch 64
    strong = plan.batch_rule(plan.SweepSpec("train", (), nproc=(1, 2, 4), mode="strong"), facts)
    assert strong(4) == (16, 64, ["--set", "global_batch_size=64", "--set", "batch_size=null"])
    with pytest.raises(ConfigError, match="does not split evenly"):
        plan.batch_rule(plan.SweepSpec("train", (), nproc=(1, 3), mode="strong"), facts)
