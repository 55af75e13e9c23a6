"""Two torchrun agents on this host play two machines of two ranks each.

This checks what the spawned-rank tests cannot: that the machine layout hierarchical
averaging assumes (blocks of LOCAL_WORLD_SIZE consecutive ranks) is the one torchrun's c10d
rendezvous really hands out, node by node.
"""

import json
from pathlib import Path

import pytest
from multiproc import run_torchrun_agents

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).with_name("two_node_script.py")


def test_hierarchical_average_across_two_torchrun_nodes(tmp_path):
    codes, output = run_torchrun_agents([str(SCRIPT), str(tmp_path)], tmp_path)
    assert codes == [0, 0], f"torchrun agents exited with {codes}:\n{output}"

    results = sorted((json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1, 2, 3], output
    assert {r["group_rank"] for r in results} == {0, 1}
    for r in results:
        assert r["world_size"] == 4 and r["local_world_size"] == 2
        assert r["rank"] // 2 == r["group_rank"]  # torchrun places ranks in node blocks
        assert r["average"] == [2.0] * 12  # machine means 1 and 3, averaged over ExponentialGraph(2)
        assert r["moved"] == [3.0 - 2.0 * r["group_rank"]] * 12  # each machine takes the other's mean
