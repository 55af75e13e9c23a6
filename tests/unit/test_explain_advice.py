"""What `dlscale explain` tells a run to change is never what it already does, never AMP on a CPU unless
another run of the same work shows it faster there, and a run no published reference matches is explained
against nothing, with a note, instead of an error."""

import re
from pathlib import Path

import pytest

from dlscale.explain.build import explain_run
from dlscale.rundir import Run

CPU = {"kind": "bench", "model": "resnet18", "world_size": 1, "device": "cpu", "device_name": "x86_64",
       "batch_size": 8, "image_size": 32, "width": 8, "num_iters": 10, "num_batches_per_iter": 2,
       "img_per_sec_total_ci95": 1.0}


def _run(name="r", config=None, env=None, **summary):
    merged = {"kind": "bench", "model": "resnet50", "precision": "fp32", "world_size": 1, "device": "cpu",
              "device_name": "x86_64", "batch_size": 8, "img_per_sec_total_mean": 100.0, "num_iters": 10,
              "num_batches_per_iter": 2, "img_per_sec_total_ci95": 1.0, **summary}
    merged["total_ips"] = merged["img_per_sec_total_mean"]
    return Run(Path(name), merged, config or {}, env or {})


def _advised(change: str) -> dict[str, str]:
    """The settings a change names: --flag value, --set key=value, VARIABLE=value."""
    found = {f"--{k}": v for k, v in re.findall(r"--([a-z][a-z0-9-]*) ([^\s;,)]+)", change) if k != "set"}
    found.update(re.findall(r"--set ([a-z_.]+)=([^\s;,)]+)", change))
    found.update(re.findall(r"\b([A-Z_]+)=(\d+)", change))
    return found


def _never_its_own(run: Run, explanation) -> None:
    own = {"--dist-optimizer": run.summary.get("dist_optimizer"), "--precision": run.precision,
           "--num-iters": str(run.summary.get("num_iters")), "--batch-size": str(run.batch),
           "OMP_NUM_THREADS": str(run.env.get("torch_threads")),
           "data.persistent_workers": str(run.config.get("data", {}).get("persistent_workers")).lower(),
           "--num-steps-per-communication": str(run.config.get("strategy", {}).get("num_steps_per_communication"))}
    for finding in explanation.findings:
        for key, value in _advised(finding.change).items():
            assert own.get(key) != value, f"{finding.cause}: advises {key} {value}, the run's own"


def test_an_allreduce_run_is_not_told_to_use_allreduce():
    # Two ranks of DDP that lost 2x against one rank: before, "overlap (--dist-optimizer allreduce)".
    base = _run("one", world_size=1, dist_optimizer="allreduce")
    ddp = _run("two", world_size=2, img_per_sec_total_mean=100.0, dist_optimizer="allreduce")
    e = explain_run(ddp, "none", baseline=base)
    (loss,) = [f for f in e.findings if f.category == "communication"]
    assert "--dist-optimizer" not in loss.change and "--batch-size 16" in loss.change
    _never_its_own(ddp, e)
    # A run that allreduces after backward is told of DDP's overlap.
    after = _run("two", world_size=2, img_per_sec_total_mean=100.0, dist_optimizer="gradient_allreduce")
    (loss,) = [f for f in explain_run(after, "none", baseline=base).findings if f.category == "communication"]
    assert "--dist-optimizer allreduce" in loss.change


def test_a_neighbour_run_is_told_to_exchange_less_often_than_it_does():
    timed = {"world_size": 2, "dist_optimizer": "neighbor_allreduce", "comm_time_ms_per_step": 40.0,
             "comm_bytes_per_step": 1e6}
    for every, advised in ((None, 2), (2, 4)):
        run = _run(config={"strategy": {"num_steps_per_communication": every}} if every else None, **timed)
        e = explain_run(run, "none")
        (comm,) = [f for f in e.findings if f.category == "communication"]
        assert f"--num-steps-per-communication {advised}" in comm.change
        _never_its_own(run, e)


def test_a_cpu_run_is_not_told_to_use_amp_unless_a_run_shows_it_faster():
    # NVIDIA's V100 figure is AMP; on a CPU its 3.26x is a tensor core's, and amp_fp16 ran at 0.06x fp32 here.
    fp32 = _run("fp32", model="resnet50")
    e = explain_run(fp32, "ngc:v100_16gb_amp")
    assert not [f for f in e.findings if "precision" in f.cause]
    assert not any("--precision amp" in f.change or "amp_bf16" in f.change for f in e.findings)
    assert any(r.evidence.startswith("precision: fp32 on a CPU") for r in e.ruled_out)
    slower = _run("bf16", precision="amp_bf16", img_per_sec_total_mean=6.0)
    e = explain_run(fp32, "ngc:v100_16gb_amp", others=(fp32, slower))
    assert not [f for f in e.findings if "precision" in f.cause]
    # A run of the same work on the same CPU in amp_bf16 that ran faster: then it is advised, with its rate.
    faster = _run("bf16", precision="amp_bf16", img_per_sec_total_mean=150.0)
    e = explain_run(fp32, "ngc:v100_16gb_amp", others=(fp32, faster))
    (found,) = [f for f in e.findings if "precision" in f.cause]
    assert found.change == "--precision amp_bf16" and found.effect.factor == pytest.approx(1.5)
    assert "run bf16: amp_bf16, 150.0 img/s per device" in found.evidence
    # Another batch is other work: no evidence.
    other = _run("bf16", precision="amp_bf16", img_per_sec_total_mean=150.0, batch_size=16)
    assert not [f for f in explain_run(fp32, "ngc:v100_16gb_amp", others=(other,)).findings if "precision" in f.cause]


def test_an_amp_run_on_a_cpu_is_told_of_fp32_only_when_fp32_ran_faster():
    amp = _run("amp", precision="amp_fp16", img_per_sec_total_mean=6.0)
    alone = explain_run(amp, "ngc:v100_16gb_amp")
    assert not [f for f in alone.findings if "precision" in f.cause]  # not "--precision amp_fp16" as before
    fp32 = _run("fp32", img_per_sec_total_mean=100.0)
    (found,) = [f for f in explain_run(amp, "ngc:v100_16gb_amp", others=(fp32,)).findings if "precision" in f.cause]
    assert found.change == "--precision fp32" and found.effect.factor == pytest.approx(100 / 6)
    # With nothing to compare with, the runs beside it still show it.
    (alone,) = [f for f in explain_run(amp, "none", others=(fp32,)).findings if "precision" in f.cause]
    assert alone.change == "--precision fp32"


def test_more_iterations_means_more_than_the_run_had():
    run = _run(num_iters=30, img_per_sec_total_ci95=20.0)  # +-20%
    e = explain_run(run, "none")
    (wide,) = [f for f in e.findings if f.category == "measurement"]
    assert "--num-iters 60" in wide.change
    _never_its_own(run, e)


def test_persistent_workers_are_advised_only_to_a_run_without_them():
    windows = tuple({"record": "train", "epoch": epoch, "throughput_img_per_s": rate, "compute_img_per_s": rate,
                     "window_s": 1.0} for epoch in (0, 1) for rate in (20.0, 100.0))
    summary = {"kind": "train", "model": "resnet18", "precision": "fp32", "world_size": 1, "device": "cpu",
               "device_name": "x86_64", "batch_size": 8, "total_ips": 60.0}
    for persistent in (True, False):
        run = Run(Path("t"), summary, {"data": {"persistent_workers": persistent, "num_workers": 2}}, {}, windows)
        e = explain_run(run, "none")
        (start,) = [f for f in e.findings if f.category == "measurement"]
        assert ("persistent_workers=true" in start.change) is (not persistent)
        _never_its_own(run, e)


def test_a_run_no_reference_matches_is_explained_against_nothing_with_a_note():
    run = _run(model="resnet18")
    e = explain_run(run)  # no shipped reference ran resnet18: before, a ConfigError and exit 2
    assert e.reference is None and e.note.startswith("no published reference ran resnet18 in fp32 on x86_64")
    assert "--reference none" in e.note and e.as_dict()["note"] == e.note
