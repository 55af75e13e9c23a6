"""benchmarks/ddp_equality.py, the check a user with several GPUs runs, run here on two gloo ranks of the
CPU under torchrun: DDP's weights equal those of one process accumulating both ranks' batches."""

import json
from pathlib import Path

import pytest
from commands import run_process, torchrun

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.distributed


def test_the_equality_script_on_two_cpu_ranks(tmp_path):
    out = tmp_path / "equality.json"
    done = run_process([*torchrun(2), ROOT / "benchmarks" / "ddp_equality.py", "--device", "cpu", "--json", out])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    cases = json.loads(out.read_text())
    assert list(cases) == ["eager_fp32", "amp_bf16_channels_last"]  # the CPU's default: no compiled cases
    for name, case in cases.items():
        assert case["world_size"] == 2 and case["device"] == "cpu" and [r["rank"] for r in case["ranks"]] == [0, 1]
        assert case["distance"] <= case["tolerance"], name
        assert case["control_distance"] > 10 * case["tolerance"], name  # the check tells the runs apart
        assert case["ranks_identical"] and case["equal"], name
        assert f"{name}: equal on 2 ranks (cpu)" in done.stdout
