"""Two torchrun agents on this host play two machines of two ranks each.

This checks what the spawned-rank tests cannot: that the machine layout hierarchical
averaging assumes (blocks of LOCAL_WORLD_SIZE consecutive ranks) is the one torchrun's c10d
rendezvous really hands out, node by node.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

SCRIPT = Path(__file__).with_name("two_node_script.py")
TIMEOUT_S = 120  # rendezvous plus four workers on two busy cores takes 6-30 s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _agent(endpoint: str, run_id: str, out_dir: Path, log: Path) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id,
        "--local-addr", "127.0.0.1", "--max-restarts", "0", str(SCRIPT), str(out_dir),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # its own session, so a hung agent can be stopped together with the workers it started
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def test_hierarchical_average_across_two_torchrun_nodes(tmp_path):
    endpoint, run_id = f"127.0.0.1:{_free_port()}", uuid.uuid4().hex
    logs = [tmp_path / f"agent{i}.log" for i in range(2)]
    agents = [_agent(endpoint, run_id, tmp_path, log) for log in logs]
    try:
        codes = [agent.wait(timeout=TIMEOUT_S) for agent in agents]
    except subprocess.TimeoutExpired:
        codes = None
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
    output = "\n".join(log.read_text() for log in logs)
    assert codes == [0, 0], f"torchrun agents exited with {codes}:\n{output}"

    results = sorted((json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1, 2, 3], output
    assert {r["group_rank"] for r in results} == {0, 1}
    for r in results:
        assert r["world_size"] == 4 and r["local_world_size"] == 2
        assert r["rank"] // 2 == r["group_rank"]  # torchrun places ranks in node blocks
        assert r["average"] == [2.0] * 12  # machine means 1 and 3, averaged over ExponentialGraph(2)
        assert r["moved"] == [3.0 - 2.0 * r["group_rank"]] * 12  # each machine takes the other's mean
