"""dlscale's ReFrame test library run by ReFrame itself on its local scheduler: the bench (2 ranks
through the torchrun launcher wrapper), the scaling sweep and dlscale comm pass, their figures are
the runs' own and land in the perflog; a missing benchmark line fails sanity; a site reference fails performance;
the launchers' command lines; the published references chosen where the hardware matches."""

import json
import re
import sys

import pytest
from commands import run_process

pytest.importorskip("reframe")
from reframe_run import TINY, perf, perflog, run_reframe  # noqa: E402 - after the skip

from dlscale.reframe import CHECKS  # noqa: E402

FAKE = """#!/bin/sh
# Stands in for `python -m dlscale bench`: Horovod's lines, {what}.
echo "Model: resnet18"
echo "Batch size: 4"
echo "Number of CPUs: 1"
echo "Iter #0: 1.0 img/sec per CPU"
echo "Img/sec per CPU: 1.0 +-0.1"
{total}
"""


@pytest.mark.distributed
def test_bench_and_sweep_on_the_local_scheduler(tmp_path):
    references = tmp_path / "references.json"
    references.write_text(json.dumps({"dlscale-ci:local": {
        "resnet18/fp32/bs4/1x2": {"throughput_total": [1.0, -0.5, None, "img/s"]},
        "scale/resnet18/fp32/bs4/weak/1,2/1x2": {"efficiency_w1": [100.0, -0.5, None, "%"]}}}))
    out, cases, prefix = run_reframe(
        tmp_path / "rfm", "dlscale-ci:local", "-n", "^dlscale_(bench|scale|comm)$", *TINY,
        "-S", "dlscale_bench.devices_per_node=2", "-S", "dlscale_scale.devices_per_node=2",
        "-S", "dlscale_comm.devices_per_node=2", "-S", "max_bytes=64K", "-S", "iters=3", "-S", "warmup_iters=1",
        "-S", f"reference_file={references}", "-r", env={"DLSCALE_PROGRESS_EVERY": "0"})
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    bench, scale, comm = cases["dlscale_bench"], cases["dlscale_scale"], cases["dlscale_comm"]
    assert bench["result"] == scale["result"] == comm["result"] == "pass"
    assert bench["num_tasks"] == 1 and bench["num_tasks_per_node"] == 1  # one torchrun agent starting 2 ranks

    # The bench's figures are its own printed lines and summary.json; progress lines (a pipe, every
    # update) sit beside the Horovod lines without disturbing ReFrame's patterns.
    output = prefix / "output" / "dlscale-ci" / "local" / "builtin" / "dlscale_bench"
    printed = (output / "rfm_job.out").read_text()
    assert re.search(r"^progress: benchmark 6/6 steps, [\d.]+ img/s per CPU, ", printed, re.M)
    assert "\x1b" not in printed and "\r" not in printed  # plain lines only in a log file
    total, ci95 = map(float, re.search(r"^Total img/sec on 2 CPU\(s\): (\S+) \+-(\S+)$", printed, re.M).groups())
    summary = json.loads((output / "runs" / "bench" / "summary.json").read_text())
    assert perf(bench, "throughput_total")[:2] == (total, 1.0)  # and the site's reference
    assert perf(bench, "throughput_total_ci95")[0] == ci95
    assert total == pytest.approx(summary["img_per_sec_total_mean"], abs=0.051)
    assert perf(bench, "throughput_iteration")[0] == pytest.approx(summary["img_per_sec_per_rank_mean"], abs=0.051)
    assert "mfu" not in {key.rsplit(":", 1)[1] for key in bench["perfvalues"]}  # no known peak on a CPU
    logged = perflog(prefix, "local", "dlscale_bench")[-1]
    assert f"throughput_total={total} img/s (ref 1.0 -0.5 None)" in logged

    # The sweep: efficiency per world size, as (T_2 / 2) / (T_1 / 1) from its points' summaries.
    sweep = prefix / "output" / "dlscale-ci" / "local" / "builtin" / "dlscale_scale" / "runs" / "sweep"
    rates = {n: json.loads((sweep / f"world{n}" / "summary.json").read_text())["img_per_sec_total_mean"]
             for n in (1, 2)}
    assert perf(scale, "efficiency_w1")[:2] == (100.0, 100.0)  # and the site's reference for 1 node x 2
    assert perf(scale, "efficiency_w2")[0] == pytest.approx(100 * (rates[2] / 2) / rates[1], abs=0.051)
    assert perf(scale, "throughput_w2")[0] == pytest.approx(rates[2], abs=0.051)
    logged = perflog(prefix, "local", "dlscale_scale")[-1]
    assert f"efficiency_w2={perf(scale, 'efficiency_w2')[0]} %" in logged

    # dlscale comm: the bus bandwidth at the largest size (64 KiB), as its summary.json has it.
    output = prefix / "output" / "dlscale-ci" / "local" / "builtin" / "dlscale_comm"
    largest = json.loads((output / "runs" / "comm" / "summary.json").read_text())["results"]["world"]["all_reduce"]
    largest = largest["rows"][-1]
    assert largest["size"] == 65536
    assert perf(comm, "busbw")[:1] == (round(largest["out-of-place"]["busbw_gbs"], 2),)
    assert perf(comm, "time_largest")[0] == round(largest["out-of-place"]["time_us"], 2)
    assert f"busbw={perf(comm, 'busbw')[0]} GB/s" in perflog(prefix, "local", "dlscale_comm")[-1]


def test_missing_benchmark_line_fails_sanity_and_a_missed_reference_fails_performance(tmp_path):
    scripts = []
    for name, what, total in (("no-total", "the total line missing", ""),
                              ("slow", "all of them, slow, with MFU as a GPU run prints it",
                               'echo "Total img/sec on 1 CPU(s): 1.0 +-0.1"\necho "MFU: 41.2% of 989.4 TFLOP/s"')):
        script = tmp_path / name
        script.write_text(FAKE.format(what=what, total=total))
        script.chmod(0o755)
        scripts.append(str(script))
    references = tmp_path / "references.json"
    references.write_text(json.dumps({"dlscale-ci": {
        "resnet18/fp32/bs4/1x1": {"throughput_total": [1000.0, -0.1, None, "img/s"]}}}))
    out, cases, _ = run_reframe(tmp_path / "rfm", "dlscale-ci:local", "-n", "^dlscale_bench$", *TINY,
                                "-P", f"python={','.join(scripts)}", "-S", f"reference_file={references}", "-r")
    assert out.returncode != 0
    (missing,) = [c for name, c in cases.items() if "no-total" in name]
    (slow,) = [c for name, c in cases.items() if "slow" in name]
    assert missing["result"] == "fail" and missing["fail_phase"] == "sanity"
    assert "Total img/sec" in missing["fail_reason"]
    assert slow["result"] == "fail" and slow["fail_phase"] == "performance"
    assert perf(slow, "throughput_total")[:2] == (1.0, 1000.0)
    assert perf(slow, "mfu")[0] == 41.2 and perf(slow, "mfu")[4] == "%"  # where dlscale knows the peak


COMM = """#!/bin/sh
# Stands in for `python -m dlscale comm`: its table (nccl-tests' columns), then a second level's.
cat <<'END'
# dlscale comm: all_reduce, 2 ranks, 1 node(s), gloo on cpu; warm-up 1, iterations 3
#
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
           8             2     float     sum      -1   552.71    0.00    0.00       0   227.96    0.00    0.00       0
        8192          2048     float     sum      -1   545.31    0.02    0.02       0   521.34    0.02    0.02       0
       32768          8192     float     sum      -1   554.25    0.06    0.07       0   523.00    0.06    0.06       0
# Out of bounds values : {wrong}
# Avg bus bandwidth    : 0.0112772
# dlscale comm: all_reduce, inside each node (2 ranks per group), 1 node(s), gloo on cpu
           8             2     float     sum      -1   100.00    0.00    0.00       0   100.00    0.00    0.00       0
       32768          8192     float     sum      -1   100.00    0.33    0.33       0   100.00    0.33    0.33       0
END
"""
SITE_COMM = """import sys
sys.path.insert(0, {folder!r})
import reframe as rfm
from checks import dlscale_comm_check


@rfm.simple_test
class site_comm(dlscale_comm_check):
    pass
"""


def test_comm_check_reads_the_bus_bandwidth_at_the_largest_size(tmp_path):
    scripts = []
    for name, wrong in (("right", "0 OK"), ("wrong", "3 FAILED")):
        script = tmp_path / name
        script.write_text(COMM.format(wrong=wrong))
        script.chmod(0o755)
        scripts.append(str(script))
    site = tmp_path / "site_comm.py"  # a site's test file subclassing the library class
    site.write_text(SITE_COMM.format(folder=str(CHECKS.parent)))
    # Two ranks: the stand-in is also the torchrun that the launcher wrapper starts, and prints once.
    out, cases, _ = run_reframe(tmp_path / "rfm", "dlscale-ci:local", "-c", str(site), "-n", "site_comm",
                                "-S", "devices_per_node=2", "-P", f"python={','.join(scripts)}", "-r")
    (right,) = [c for name, c in cases.items() if name.endswith("/right")]
    (wrong,) = [c for name, c in cases.items() if name.endswith("/wrong")]
    assert right["result"] == "pass", out.stdout[-3000:]
    assert perf(right, "busbw")[0] == 0.07 and perf(right, "algbw")[0] == 0.06  # all ranks' table, not a level's
    assert perf(right, "time_largest")[0] == 554.25
    assert wrong["result"] == "fail" and wrong["fail_phase"] == "sanity"


def test_launchers_command_lines(tmp_path):
    out, cases, prefix = run_reframe(tmp_path / "rfm", "dlscale-ci", "-n", "^dlscale_(bench|scale)$", "-S",
                                     "devices_per_node=2", "-P", "num_nodes=1,2", "-P", "launch=launcher,torchrun",
                                     "--dry-run")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    python = re.escape(sys.executable)
    torchrun = rf"{python} -m torch\.distributed\.run --nnodes (\d) --nproc-per-node 2 (.*) --no-python "
    scripts, sweeps = {}, {}
    for script in (prefix / "stage" / "dlscale-ci").glob("*/builtin/*/rfm_job.sh"):
        command = next(line for line in script.read_text().splitlines() if f"{sys.executable} -m dlscale " in line)
        if " -m dlscale scale " in command:
            sweeps.setdefault(script.parts[-4], []).append((script.read_text(), command))
        else:
            scripts.setdefault(script.parts[-4], []).append((script.read_text(), command))
    # srun: one task per rank; or one torchrun per node, meeting on the first host when there are two.
    slurm = {command.split(f"{sys.executable} -m dlscale")[0]: text for text, command in scripts["slurm"]}
    agent = f"srun {sys.executable} -m torch.distributed.run"
    assert set(slurm) == {"srun ", f"{agent} --nnodes 1 --nproc-per-node 2 --standalone --no-python ",
                          f"{agent} --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "
                          "$MASTER_ADDR:$MASTER_PORT --rdzv-id dlscale --no-python "}
    tasks = sorted(re.search(r"--ntasks=(\d+)\n#SBATCH --ntasks-per-node=(\d+)", text).groups()
                   for text in slurm.values() if "--ntasks=" in text)
    assert ("2", "1") in tasks and ("4", "2") in tasks  # two nodes: 2 torchrun agents, or 4 ranks 2 per node
    assert all("export MASTER_ADDR=" in text for text in slurm.values() if "--nnodes 2" in text)
    # mpirun (on the local scheduler here, so one node): one rank per process, or one torchrun.
    mpirun = sorted(command.split(f" {sys.executable} -m dlscale")[0] for _, command in scripts["mpirun"])
    assert len(mpirun) == 2 and mpirun[1] == "mpirun -np 2"
    assert re.fullmatch(rf"mpirun -np 1 {torchrun}".rstrip(), mpirun[0])
    # The local launcher starts one process: torchrun starts the ranks; two nodes are skipped.
    (local,) = [command for _, command in scripts["local"]]
    assert re.match(torchrun, local) and "--standalone" in local

    # The sweep: one process on one node holding devices_per_node ranks, swept up to them (1,2); on
    # two nodes it is skipped with the reason, never run on one node as if it had two.
    assert sorted(sweeps) == ["local", "mpirun", "slurm"]
    for partition, found in sweeps.items():
        assert len(found) == 2, partition  # launch=launcher and torchrun: the sweep starts its own ranks
        for _, command in found:
            assert command.startswith(f"{sys.executable} -m dlscale scale --nproc 1,2 --mode weak "), command
    assert all("#SBATCH --ntasks=1\n" in text and "--nodes" not in text for text, _ in sweeps["slurm"])
    skipped = re.findall(r"^\[ +SKIP \] .*dlscale_scale %\.num_nodes=2 .*@dlscale-ci:(\w+)\+builtin \[(.*)\]$",
                         out.stdout, re.M)
    assert sorted(partition for partition, _ in skipped) == sorted(["local", "slurm", "mpirun"] * 2)
    assert all(why.startswith("num_nodes=2: dlscale_scale sweeps on one node") for _, why in skipped)
    assert sum(case["result"] == "skip" for case in cases.values()) >= 2

    # World sizes beyond the node's devices fail with what to change.
    out, cases, _ = run_reframe(tmp_path / "rfm-beyond", "dlscale-ci:local", "-n", "^dlscale_scale$", "-S",
                                "devices_per_node=2", "-S", "world_sizes=1,2,4", "--dry-run")
    (beyond,) = cases.values()
    assert out.returncode != 0 and beyond["result"] == "fail"
    assert "world_sizes 4 exceed the 2 device(s) of the node: give devices_per_node=4" in beyond["fail_reason"]


PUBLISHED_DEVICE = """#!/bin/sh
# Stands in for `python -m dlscale bench` and `dlscale scale` on an A100 80GB: the summaries name the
# device, the printed figures (1 img/s, 1% efficiency) are far below any published one.
mkdir -p runs/bench runs/sweep/world1
echo '{"device_name": "NVIDIA A100-SXM4-80GB"}' > runs/bench/summary.json
cp runs/bench/summary.json runs/sweep/world1/summary.json
echo "Model: resnet50"
echo "Batch size: 256"
echo "Img/sec per GPU: 1.0 +-0.1"
echo "Total img/sec on 1 GPU(s): 1.0 +-0.1"
for n in 1 2 4 8; do echo "| resnet50 | $n | 1 | 1.0 ± 0.1 | 1.0 ± 0.1 | 1.00x | 1.0% | - | ok | world$n |"; done
echo "4 of 4 points ok; logs in runs/sweep/logs"
"""


def test_published_references_are_the_defaults_where_the_device_matches(tmp_path):
    script = tmp_path / "a100"
    script.write_text(PUBLISHED_DEVICE)
    script.chmod(0o755)
    out, cases, _ = run_reframe(tmp_path / "rfm", "dlscale-ci:local", "-n", "^dlscale_(bench|scale)$",
                                "-S", f"python={script}", "-S", "model=resnet50", "-S", "precision=amp_fp16",
                                "-S", "batch_size=256", "-S", "dlscale_scale.devices_per_node=8", "-r")
    # The shipped figures for that device, precision and batch (read here, as published).
    series = [s for file in ("ngc.json", "dlperf.json")
              for s in json.loads((CHECKS.parents[1] / "references" / file).read_text())["series"]
              if s["kind"] == "scaling" and s["device"] == "A100 80GB" and s["precision"] == "amp_fp16"
              and s.get("batch_per_device") == 256]
    assert len(series) == 1
    rates = {point["devices"]: point["img_per_s"] for point in series[0]["points"]}
    assert 1 in rates and 8 in rates and 2 not in rates
    bench, scale = cases["dlscale_bench"], cases["dlscale_scale"]
    assert out.returncode != 0  # both far below: the published floors fail them
    assert bench["result"] == scale["result"] == "fail" and bench["fail_phase"] == scale["fail_phase"] == "performance"
    assert perf(bench, "throughput_total")[:4] == (1.0, rates[1], -0.1, None)  # at most 10% below
    assert perf(bench, "throughput_iteration")[:3] == (1.0, rates[1], -0.1)
    # The weak sweep: efficiency at 8 from the published rates at 1 and 8; none where nothing is published.
    assert perf(scale, "efficiency_w8")[1:4] == pytest.approx((100 * (rates[8] / 8) / rates[1], -0.1, None))
    assert perf(scale, "efficiency_w2")[1] == perf(scale, "efficiency_w4")[1] == 0
    assert "efficiency_w8" in scale["fail_reason"]


def test_published_references_where_the_hardware_matches():
    sys.path.insert(0, str(CHECKS.parent))
    try:
        import checks
    finally:
        sys.path.remove(str(CHECKS.parent))
    a100 = checks.published_rates("NVIDIA A100-SXM4-80GB", model="resnet50", precision="amp_fp16", batch_size=256,
                                  image_size=224)
    assert a100 == {1: 2470.0, 8: 16621.0}  # NVIDIA's DeepLearningExamples README (references/ngc.json)
    v100 = checks.published_rates("Tesla V100-SXM2-16GB", model="resnet50", precision="fp32", batch_size=112,
                                  image_size=224)
    assert v100 == {1: 367.0, 8: 2855.0}
    assert checks.published_rates("NVIDIA H100 80GB HBM3", model="resnet50", precision="amp_fp16", batch_size=256,
                                  image_size=224) == {}
    assert checks.published_rates("NVIDIA A100-SXM4-80GB", model="resnet18", precision="amp_fp16", batch_size=256,
                                  image_size=224) == {}


def test_python_m_dlscale_reframe_names_the_checks_file():
    out = run_process([sys.executable, "-m", "dlscale.reframe"])  # what a user's shell runs
    assert out.returncode == 0 and out.stdout.strip() == str(CHECKS) and CHECKS.is_file()
