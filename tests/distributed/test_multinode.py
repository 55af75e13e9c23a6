"""Two torchrun agents on this host with --nnodes 2 form one job, as two machines would.

test_two_nodes.py checks the hierarchical average against torchrun's own variables; this checks
what dlscale reads: DistEnv's node rank, local rank and node count on every rank, and a
`dlscale bench` with the hierarchical strategy recording two nodes.
"""

import json

import pytest
from multiproc import run_torchrun_agents

pytestmark = pytest.mark.distributed

PROBE = '''
import json, os, sys
from pathlib import Path
from dlscale.cli import main
from dlscale.distributed import DistEnv

env = DistEnv.from_env()
out = Path(sys.argv[1])
(out / f"env{env.rank}.json").write_text(json.dumps({
    "rank": env.rank, "world_size": env.world_size, "local_rank": env.local_rank,
    "local_world_size": env.local_world_size, "node_rank": env.node_rank, "num_nodes": env.num_nodes,
    "launcher": env.launcher, "group_rank": int(os.environ["GROUP_RANK"])}))
sys.exit(main(sys.argv[2:]))
'''
BENCH = ["bench", "--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "4", "--num-iters", "2",
         "--num-batches-per-iter", "2", "--num-warmup-batches", "1", "--num-classes", "10",
         "--dist-optimizer", "hierarchical_neighbor_allreduce", "--pg-timeout", "60"]


def test_two_agents_form_one_job_that_dlscale_sees_as_two_nodes(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    program = [str(probe), str(tmp_path), *BENCH, "--output-dir", str(tmp_path), "--name", "bench"]
    codes, output = run_torchrun_agents(program, tmp_path)
    assert codes == [0, 0], f"torchrun agents exited with {codes}:\n{output[-4000:]}"

    seen = sorted((json.loads(p.read_text()) for p in tmp_path.glob("env*.json")), key=lambda r: r["rank"])
    assert [r["rank"] for r in seen] == [0, 1, 2, 3]
    for r in seen:
        assert (r["world_size"], r["num_nodes"], r["local_world_size"], r["launcher"]) == (4, 2, 2, "torchrun")
        assert r["node_rank"] == r["group_rank"] == r["rank"] // 2 and r["local_rank"] == r["rank"] % 2
    summary = json.loads((tmp_path / "bench" / "summary.json").read_text())
    assert (summary["world_size"], summary["num_nodes"]) == (4, 2)
    assert summary["dist_optimizer"] == "hierarchical_neighbor_allreduce"
    assert "Total img/sec on 4 CPU(s)" in output
