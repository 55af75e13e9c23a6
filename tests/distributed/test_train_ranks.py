"""Training on several gloo ranks: the README's digits run, equivalences, torchrun restarts."""

import json
import statistics
import subprocess
from pathlib import Path

import pytest
import torch
from commands import dlscale_process, run_process, torchrun
from multiproc import run_ranks

from dlscale.launch.local import free_port

pytestmark = pytest.mark.distributed
HERE = Path(__file__).parent
TORCHRUN = torchrun(2)


def _weights(run_dir):
    from dlscale.train.checkpoint import CheckpointManager

    return CheckpointManager(Path(run_dir) / "checkpoints").load_latest()["model"]


def test_digits_on_two_ranks_reaches_95_percent(tmp_path):
    """The README's digits run. How long it takes is measured by benchmarks/digits_time.py, not here."""
    out = run_process([*TORCHRUN, "-m", "dlscale", "train", "--config", "cpu:digits", "--target-accuracy", "0.95",
                       "--output-dir", tmp_path, "--raport-file", tmp_path / "raport.json"])
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "cpu-digits" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["best_top1_pct"] >= 95.0
    assert summary["time_to_target_s"] is not None
    assert "### Time to 95.00% top-1:" in out.stdout
    # 359 validation images on 2 ranks with 32 per batch: each counted exactly once.
    assert {h["val_count"] for h in summary["history"]} == {359}
    records = [json.loads(line[5:]) for line in (tmp_path / "raport.json").read_text().splitlines()]
    assert all(line.startswith("DLLL ") for line in (tmp_path / "raport.json").read_text().splitlines())
    final = records[-1]
    assert final["step"] == [] and final["data"]["val.top1"] == pytest.approx(summary["best_top1_pct"])
    assert any(r["type"] == "LOG" and "train.total_ips" in r.get("data", {}) for r in records[:-1])
    assert all("elapsedtime" in r for r in records)  # what DeepLearningExamples' draw_summary.py reads
    parameters = next(r["data"] for r in records if r.get("step") == "PARAMETER")
    assert (parameters["batch_size"], parameters["world_size"]) == (32, 2)  # ConvNets: per GPU
    epochs = [r["data"] for r in records if r["type"] == "LOG" and isinstance(r["step"], list) and len(r["step"]) == 1]
    assert epochs and all(e["val.total_ips"] > 0 and e["val.compute_latency_at99"] > 0 for e in epochs)
    _assert_per_rank_times(tmp_path / "cpu-digits", world_size=2)


def _steady(windows):
    """Log windows after each epoch's first (whose data wait includes the loader workers' start)."""
    seen, steady = set(), []
    for window in windows:
        if window["epoch"] in seen:
            steady.append(window)
        seen.add(window["epoch"])
    return steady


def _assert_per_rank_times(run_dir, world_size):
    """Every log window holds one step, data wait and forward time per rank, names the rank with the
    longest data wait + forward, and summary.json holds each rank's mean over the steady windows."""
    windows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    windows = [w for w in windows if w["record"] == "train"]
    assert len(windows) >= 2
    for w in windows:
        for key in ("rank_step_ms", "rank_data_ms", "rank_forward_ms"):
            assert len(w[key]) == world_size and all(t >= 0 for t in w[key]), (key, w[key])
        assert all(f > 0 for f in w["rank_forward_ms"]) and all(t > 0 for t in w["rank_step_ms"])
        lead = [d + f for d, f in zip(w["rank_data_ms"], w["rank_forward_ms"], strict=True)]
        assert w["slowest_rank"] == max(range(world_size), key=lambda r: lead[r])
        median = statistics.median(t for r, t in enumerate(lead) if r != w["slowest_rank"])
        assert w["slowest_excess_pct"] == pytest.approx(100 * (lead[w["slowest_rank"]] / median - 1))
    summary = json.loads((run_dir / "summary.json").read_text())
    steady = _steady(windows)
    for key in ("rank_step_ms", "rank_data_ms", "rank_forward_ms"):
        mean = [sum(w[key][r] for w in steady) / len(steady) for r in range(world_size)]
        assert summary[key] == pytest.approx(mean), key
    assert summary["stragglers"]["windows"] == len(steady) and summary["stragglers"]["ranks"] == world_size


def _fit_rank(rank, world_size, output_dir, overrides):
    from dlscale.config import load_config
    from dlscale.distributed import DistEnv
    from dlscale.train.loop import fit

    cfg, _ = load_config("cpu:digits", overrides)
    return fit(cfg, DistEnv.from_env(), run_name=f"w{world_size}", output_dir=output_dir)["steps"]


# lr 0.01: at lr 0.1 this tiny model is chaotic and any split of the batch (two ranks, two
# micro-batches, or float summation order alone) drifts by 1e-3 within four steps (measured here).
# At 0.01 the three agree within 1e-5, while a wrong split or a wrong average differs by about
# lr x gradient, 1e-3 or more, from the first step.
EQUIVALENCE = ["model.norm=group", "model.width=8", "data.image_size=32", "global_batch_size=32",
               "schedule.epochs=1", "schedule.warmup_epochs=0", "max_steps_per_epoch=4", "optim.weight_decay=0",
               "optim.lr=0.01"]


def test_two_ranks_equal_one_rank_with_the_doubled_batch(tmp_path):
    """GroupNorm normalises per sample, so splitting a global batch of 32 over two ranks (16 each,
    gradients averaged by DDP) must give the weights of one rank taking all 32."""
    assert run_ranks(_fit_rank, 2, str(tmp_path), EQUIVALENCE) == [4, 4]
    assert run_ranks(_fit_rank, 1, str(tmp_path), EQUIVALENCE) == [4]
    two, one = _weights(tmp_path / "w2"), _weights(tmp_path / "w1")
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=1e-4, atol=5e-5, msg=key)


def test_gradient_accumulation_equals_one_big_batch(tmp_path):
    assert run_ranks(_fit_rank, 1, str(tmp_path / "big"), EQUIVALENCE) == [4]
    assert run_ranks(_fit_rank, 1, str(tmp_path / "acc"), [*EQUIVALENCE, "optim.accumulation_steps=2"]) == [4]
    big, accumulated = _weights(tmp_path / "big" / "w1"), _weights(tmp_path / "acc" / "w1")
    for key in big:
        torch.testing.assert_close(accumulated[key], big[key], rtol=1e-4, atol=5e-5, msg=key)


RESTART_ARGS = ["train", "--config", "cpu:digits", "--set", "schedule.epochs=2", "--set", "max_steps_per_epoch=6",
                "--set", "checkpoint.every_steps=4", "--set", "log_every=3", "--set", "model.width=8",
                "--pg-timeout", "20"]


def _torchrun_restart(tmp_path):
    args = [*TORCHRUN, "--max-restarts", "1", HERE / "crash_train.py", *RESTART_ARGS, "--output-dir", tmp_path]
    try:
        return run_process(args, env={"CRASH_AT_STEP": "10"})
    except subprocess.TimeoutExpired:
        return None


def test_torchrun_restart_after_a_killed_worker_resumes_from_the_checkpoint(tmp_path):
    out = _torchrun_restart(tmp_path / "cut")
    assert out is not None, "hung"
    assert out.returncode == 0, out.stderr[-3000:]
    # Checkpoints at steps 4, 6 (end of epoch 0) and 8; rank 1 dies after step 10.
    assert "resumed at epoch 1 step 8" in out.stdout
    summary = json.loads((tmp_path / "cut" / "cpu-digits" / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["epochs_completed"] == 2
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    events = EventAccumulator(str(tmp_path / "cut" / "cpu-digits" / "tb"), size_guidance={SCALARS: 0})
    events.Reload()
    loss_steps = [e.step for e in events.Scalars("loss/train")]
    assert loss_steps == [3, 6, 9, 12]  # step 9 was logged twice (before the crash and after); one kept
    # The same job without the crash ends with the same weights.
    clean = run_process([*TORCHRUN, "-m", "dlscale", *RESTART_ARGS, "--output-dir", tmp_path / "clean"])
    assert clean.returncode == 0, clean.stderr[-3000:]
    expected, actual = _weights(tmp_path / "clean" / "cpu-digits"), _weights(tmp_path / "cut" / "cpu-digits")
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


def _stale_key_visible(port: int, store_for_attempt) -> bool:
    """Attempt 0 left a key in the agent's store; can attempt 1's process-group store see it?"""
    from datetime import timedelta

    import torch.distributed as dist

    agent = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    agent.set("default_pg/0//cpu//0", "address of a process of attempt 0")
    store = store_for_attempt(timedelta(seconds=10))
    return dist.PrefixStore("default_pg", store).check(["0//cpu//0"])


def test_dlscale_store_hides_keys_of_the_previous_attempt():
    from dlscale.distributed import attempt_store
    from dlscale.distributed.env import DistEnv

    port = free_port()
    env = DistEnv.from_env({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_RESTART_COUNT": "1",
                            "TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert not _stale_key_visible(port, lambda timeout: attempt_store(env, timeout))


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="canary: torch 2.13's env:// rendezvous hands a restarted attempt the "
    "agent's store with the failed attempt's keys (pytorch#135712; here 1 hang in 4 plain "
    "restarts). If this passes, upstream namespaces attempts and dlscale.distributed.attempt_store can go",
)
def test_canary_torch_env_rendezvous_hides_keys_of_the_previous_attempt(monkeypatch):
    import torch.distributed as dist

    port = free_port()
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "TORCHELASTIC_RESTART_COUNT": "1", "TORCHELASTIC_USE_AGENT_STORE": "True"}.items():
        monkeypatch.setenv(key, value)
    visible = _stale_key_visible(port, lambda timeout: next(dist.rendezvous("env://", timeout=timeout))[0])
    assert not visible


def test_neighbor_allreduce_trains_digits_within_a_few_points_of_allreduce(tmp_path):
    top1 = {}
    for optimizer in ("allreduce", "neighbor_allreduce"):
        out = run_process([*torchrun(4), "-m", "dlscale", "train", "--config", "cpu:digits",
                           "--dist-optimizer", optimizer, "--output-dir", tmp_path, "--name", optimizer,
                           "--set", "schedule.epochs=4"])  # 97.5% and 96.7% here, 25 s each
        assert out.returncode == 0, out.stderr[-3000:]
        top1[optimizer] = json.loads((tmp_path / optimizer / "summary.json").read_text())["final_top1_pct"]
    assert top1["allreduce"] >= 90 and abs(top1["neighbor_allreduce"] - top1["allreduce"]) <= 3, top1
    lines = (tmp_path / "neighbor_allreduce" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    distances = [r["consensus_distance"] for r in records if r["record"] == "train"]
    assert distances and all(d > 0 for d in distances)  # replicas differ, and the spread is logged
    # The strategy's own communication timer: summary.json holds rank 0's mean over the steady log windows
    # (what dlscale explain's communication check reads); DDP's allreduce runs inside backward, untimed.
    windows = _steady([r for r in records if r["record"] == "train"])
    summary = json.loads((tmp_path / "neighbor_allreduce" / "summary.json").read_text())
    assert summary["comm_time_ms_per_step"] > 0
    for key in ("comm_time_ms_per_step", "comm_bytes_per_step"):
        assert summary[key] == pytest.approx(sum(w[key] for w in windows) / len(windows)), key
    assert json.loads((tmp_path / "allreduce" / "summary.json").read_text())["comm_time_ms_per_step"] is None


def test_resuming_on_another_number_of_ranks_is_one_line_naming_it(tmp_path):
    """A run checkpointed on one rank and resumed by two is refused before any weight is loaded, in one line
    naming the setting, the last line `dlscale torchrun` prints; the checkpoint is left as it was."""
    run = ["train", "--config", "cpu:synthetic", "--set", "model.width=4", "--set", "data.synthetic_size=32",
           "--set", "data.synthetic_val_size=8", "--set", "schedule.epochs=1", "--set", "schedule.warmup_epochs=0",
           "--set", "global_batch_size=8", "--set", "log_every=2", "--output-dir", str(tmp_path), "--name", "r"]
    one = dlscale_process(*run)
    assert one.returncode == 0, one.stderr[-3000:]
    checkpoints = sorted((tmp_path / "r" / "checkpoints").iterdir())
    two = dlscale_process("torchrun", "--standalone", "--nproc-per-node", "2", "-m", "dlscale", *run,
                          "--pg-timeout", "60")
    assert two.returncode == 2, two.stderr[-3000:]
    last = two.stderr.strip().splitlines()[-1]
    assert last.startswith("dlscale torchrun: rank ") and "other settings (world_size 1 -> 2)" in last, last
    assert sorted((tmp_path / "r" / "checkpoints").iterdir()) == checkpoints
