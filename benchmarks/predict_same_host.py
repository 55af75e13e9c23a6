"""`dlscale predict` against measured gloo sweeps of this machine, with the same-host compute slowdown.

    PYTHONPATH=src python benchmarks/predict_same_host.py                 # 8 sweeps, resnet18, 64 px, batch 16
    PYTHONPATH=src python benchmarks/predict_same_host.py --sweeps 3 --model resnet50 --image-size 128

Runs one `dlscale comm` (all_reduce, 2 gloo ranks), then `--sweeps` times: `dlscale scale --nproc 1,2`
and, right after it, two 1-rank `dlscale bench` runs at once with the same flags. Each sweep's 2-rank total is
predicted from its 1-rank run, the comm fit and the slowdown of each rank's compute when two ranks share the
host, measured two ways (predict/sweeps.py): the 2-rank run's forward time per step over the 1-rank run's,
and the two concurrent 1-rank runs' step over the sweep's 1-rank step (the whole step, no communication).
It prints the predicted/measured ratio of every sweep and how many fall within 15% (goal: every one).
Ratios only: nothing here is a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from dlscale.predict.sweeps import validate_sweep

WITHIN = 0.15


def _run(cmd: list[str], cwd: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DLSCALE_PROGRESS": "off"}
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)


def concurrent_slowdown(root: Path, name: str, flags: list[str], one_rank_step_ms: float) -> float:
    """Two 1-rank benches at once: their mean step over the 1-rank step alone."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DLSCALE_PROGRESS": "off"}
    procs = [subprocess.Popen([sys.executable, "-m", "dlscale", "bench", *flags, "--output-dir", "runs",
                               "--name", f"{name}-alone{i}"], cwd=root, env=env, stdout=subprocess.DEVNULL)
             for i in range(2)]
    if any(p.wait() for p in procs):
        raise SystemExit("a concurrent bench failed")
    steps = [json.loads((root / "runs" / f"{name}-alone{i}" / "summary.json").read_text())["step_time_ms"]
             for i in range(2)]
    return sum(steps) / len(steps) / one_rank_step_ms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweeps", type=int, default=8)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--keep", type=Path, default=None, help="keep the run directories here")
    args = p.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="predict-same-host-"))
    root.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    _run([python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "dlscale", "comm",
          "--op", "all_reduce", "--output-dir", "runs", "--name", "comm"], root)
    print(f"comm run: {root / 'runs' / 'comm'} (load average {os.getloadavg()[0]:.1f})", flush=True)
    within = {"forward": 0, "concurrent": 0}
    flags = ["--model", args.model, "--batch-size", str(args.batch_size), "--image-size", str(args.image_size)]
    for i in range(args.sweeps):
        load = os.getloadavg()[0]
        name = f"sweep-{i}"
        _run([python, "-m", "dlscale", "scale", "--nproc", "1,2", "--output-dir", "runs", "--name", name, "--",
              *flags], root)
        sweep = root / "runs" / name
        one = next(json.loads(p.read_text()) for p in sweep.glob("*/summary.json")
                   if json.loads(p.read_text())["world_size"] == 1)
        together = concurrent_slowdown(root, name, flags, one["step_time_ms"])
        for how, given in (("forward", None), ("concurrent", {2: together})):
            for row in validate_sweep(sweep, root / "runs" / "comm", given):
                ok = abs(row.error) <= WITHIN
                within[how] += ok
                print(f"sweep {i} (load {load:.1f}), slowdown from {how}: {row.slowdown:.2f}x; 2 ranks measured "
                      f"{row.measured:.1f} img/s, predicted {row.predicted:.1f}, ratio "
                      f"{row.predicted / row.measured:.3f} ({100 * row.error:+.1f}%{', within 15%' if ok else ''}); "
                      f"cores arithmetic instead {row.cores_arithmetic:.1f} "
                      f"({row.cores_arithmetic / row.measured:.3f})", flush=True)
    for how, count in within.items():
        print(f"slowdown from {how}: within 15% in {count} of {args.sweeps} sweeps (goal: {args.sweeps} of "
              f"{args.sweeps})")
    print(f"runs in {root}")


if __name__ == "__main__":
    main()
