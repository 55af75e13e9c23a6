"""`.ci/run` with stand-ins for the SLURM cluster script and the Makefile: a cluster that does not
start fails the run on CI (CI=true) before the tests, and leaves the slurm tests to skip elsewhere;
a cluster that starts is handed to the tests (DLSCALE_SLURM_DIR) and stopped at the end."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = """#!/usr/bin/env bash
# Stands in for scripts/slurm-cluster.sh: `up` as STAND_IN_UP says (0 or 1), every call recorded.
echo "$1" >> "$STAND_IN_LOG/cluster"
if [ "$1" = up ]; then
    [ "$STAND_IN_UP" = 0 ] || { echo "slurmctld did not start" >&2; exit 1; }
    touch "$2/slurm.conf"
fi
"""
MAKEFILE = """lint:
\t@echo lint >> "$$STAND_IN_LOG/make"
test:
\t@echo "test DLSCALE_SLURM_DIR=$${DLSCALE_SLURM_DIR:-unset}" >> "$$STAND_IN_LOG/make"
"""


def _ci_run(tmp_path: Path, *, ci: str | None, up: bool) -> tuple[subprocess.CompletedProcess, list[str], list[str]]:
    """(the process, cluster script calls, make targets run) of .ci/run in a copy of the repository's layout."""
    root = tmp_path / f"repo-{ci}-{up}"
    (root / ".ci").mkdir(parents=True)
    (root / "scripts").mkdir()
    shutil.copy(REPO / ".ci" / "run", root / ".ci" / "run")
    (root / "scripts" / "slurm-cluster.sh").write_text(CLUSTER)
    (root / "scripts" / "slurm-cluster.sh").chmod(0o755)
    (root / "Makefile").write_text(MAKEFILE)
    log = root / "log"
    log.mkdir()
    env = {"PATH": os.environ["PATH"], "TMPDIR": str(root), "STAND_IN_LOG": str(log), "STAND_IN_UP": "0" if up else "1",
           **({"CI": ci} if ci is not None else {})}
    out = subprocess.run(["bash", str(root / ".ci" / "run")], capture_output=True, text=True, timeout=60, env=env)
    calls = [(log / name).read_text().splitlines() if (log / name).exists() else [] for name in ("cluster", "make")]
    return out, *calls


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_cluster_that_does_not_start_fails_ci_and_is_skipped_elsewhere(tmp_path):
    out, cluster, make = _ci_run(tmp_path, ci="true", up=False)
    assert out.returncode == 1 and make == ["lint"]  # the tests never ran
    assert "CI=true, so the run fails" in out.stderr and cluster == ["up", "down"]

    for ci in (None, "false"):  # a developer's machine: the slurm tests skip, the rest runs
        out, cluster, make = _ci_run(tmp_path, ci=ci, up=False)
        assert out.returncode == 0, out.stderr
        assert make == ["lint", "test DLSCALE_SLURM_DIR=unset"] and cluster == ["up", "down"]
        assert "the tests in tests/slurm will be skipped" in out.stderr

    out, cluster, make = _ci_run(tmp_path, ci="true", up=True)
    assert out.returncode == 0, out.stderr
    assert make[0] == "lint" and make[1].startswith(f"test DLSCALE_SLURM_DIR={tmp_path}/repo-true-True/dlscale-slurm.")
    assert cluster == ["up", "down"]
