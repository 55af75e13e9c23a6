"""Run ReFrame on dlscale's test library (src/dlscale/reframe/checks.py) the way a site does, with
tests/reframe_config.py as the site configuration, and read what it reports.

`run_reframe` starts `reframe -C tests/reframe_config.py -c <checks.py> ...` in a temporary prefix
(stage, output, perflogs) with ReFrame's JSON report, and returns the process, the report's test
cases by name and the prefix. TINY makes the benchmark a few seconds of CPU work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from dlscale.reframe import CHECKS

CONFIG = Path(__file__).resolve().with_name("reframe_config.py")
REFRAME = Path(sys.executable).with_name("reframe")
TINY = ["-S", "model=resnet18", "-S", "width=8", "-S", "image_size=32", "-S", "batch_size=4", "-S", "num_classes=10",
        "-S", "num_warmup_batches=2", "-S", "num_batches_per_iter=2", "-S", "num_iters=3", "-S", "device=cpu",
        "-S", "pg_timeout=60", "-S", "time_limit=4m", "-S", "point_timeout=180"]


def run_reframe(prefix: Path, system: str, *args: str, env: dict | None = None,
                timeout_s: float = 420) -> tuple[subprocess.CompletedProcess, dict[str, dict], Path]:
    """(the process, test case name -> its report entry, prefix); ReFrame runs with prefix as its cwd."""
    prefix.mkdir(parents=True, exist_ok=True)
    report = prefix / "report.json"
    environ = {"PATH": f"{REFRAME.parent}:/usr/bin:/bin", "HOME": str(prefix), "OMP_NUM_THREADS": "1",
               **({"SLURM_CONF": os.environ["SLURM_CONF"]} if "SLURM_CONF" in os.environ else {}), **(env or {})}
    out = subprocess.run([str(REFRAME), "-C", str(CONFIG), "--system", system, "-c", str(CHECKS),
                          "--prefix", str(prefix), "--report-file", str(report), "--nocolor", *args],
                         cwd=prefix, capture_output=True, text=True, timeout=timeout_s, env=environ)
    cases = {}
    if report.is_file():
        for run in json.loads(report.read_text())["runs"]:
            for case in run["testcases"]:
                cases[case["display_name"]] = case
    return out, cases, prefix


def perf(case: dict, variable: str) -> tuple:
    """(value, reference, lower, upper, unit, result) of a performance variable in the report."""
    (found,) = [v for key, v in case["perfvalues"].items() if key.rsplit(":", 1)[1] == variable]
    return tuple(found)


def perflog(prefix: Path, partition: str, test: str) -> list[str]:
    """The perflog's lines of a test (its header line first)."""
    return (prefix / "perflogs" / "dlscale-ci" / partition / f"{test}.log").read_text().splitlines()
