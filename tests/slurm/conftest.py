"""A one-node SLURM cluster for the tests in this folder, brought up once per session.

`.ci/run` starts one through scripts/slurm-cluster.sh and exports DLSCALE_SLURM_DIR; then it is
used as it is. Otherwise, where SLURM is installed and we are root, a cluster is started in a
temporary directory on free ports and stopped by its PIDs at the end, also when a test fails.
Where SLURM is missing or cannot start, these tests are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts" / "slurm-cluster.sh"


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _cluster(command: str, directory: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(CLUSTER), command, str(directory)], capture_output=True, text=True,
                          timeout=180, env={**os.environ, **(env or {})})


@pytest.fixture(scope="session")
def slurm_cluster():
    """The directory of a running cluster; SLURM_CONF points at it while the session lasts."""
    given = os.environ.get("DLSCALE_SLURM_DIR")
    if given:
        if _cluster("status", Path(given)).returncode != 0:
            pytest.fail(f"DLSCALE_SLURM_DIR={given} names no running cluster (scripts/slurm-cluster.sh up DIR)")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", str(Path(given) / "slurm.conf"))
            yield Path(given)
        return
    if not (shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()) or not shutil.which("sbatch"):
        pytest.skip("SLURM is not installed (scripts/slurm-cluster.sh up DIR installs it on Debian)")
    if os.geteuid() != 0:
        pytest.skip("the one-node test cluster runs its daemons as root")
    # Not under pytest's temporary folders: they are private (0700), and munged runs as the
    # munge user, which must reach its socket.
    directory = Path(tempfile.mkdtemp(prefix="dlscale-slurm-"))
    directory.chmod(0o755)
    ctld, slurmd = _free_ports(2)
    env = {"SLURMCTLD_PORT": str(ctld), "SLURMD_PORT": str(slurmd), "SLURM_CLUSTER_NO_INSTALL": "1"}
    try:
        up = _cluster("up", directory, env)
        if up.returncode != 0:
            pytest.skip(f"the one-node SLURM cluster did not start: {up.stderr.strip()[-500:]}")
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", str(directory / "slurm.conf"))
            yield directory
    finally:
        _cluster("down", directory)
        shutil.rmtree(directory, ignore_errors=True)
