"""The GPU campaign: one command that tests and measures dlscale on a CUDA machine with no network.

    PYTHONPATH=src python3 benchmarks/gpu.py --out DIR          # on the GPU machine, under 8 minutes
    python benchmarks/gpu.py --dry-run                          # the plan: every command, estimated times
    python benchmarks/gpu.py --device cpu --out DIR             # a tiny rehearsal of the orchestration

Stages, in order (docs/benchmarks.md explains each table):
  env          GPU, driver, torch, CUDA, cuDNN, NCCL, CPU versions
  pytest       the GPU test tier: pytest -m gpu
  peers        dlscale bench against a bare PyTorch loop over torchvision's resnet50 and against timm's
               benchmark.py in train mode: same model, batch, precision and layout, alternated (a b c a b c)
  data         an ImageFolder of ImageNet-sized JPEGs made on the spot: dlscale loader per worker count,
               dlscale train on it against dlscale train on synthetic input, alternated
  progression  the SC20 steps for ResNet-50 at batch 256: fp32, tf32, amp_fp16, amp_bf16, channels_last,
               fused SGD (+ cuDNN autotuning), torch.compile reduce-overhead and max-autotune, CUDA graphs

This process only orchestrates: each measurement is its own subprocess (`python -m dlscale ...`, with
src/ on PYTHONPATH when dlscale is not installed). Every stage has a time budget and the campaign a
deadline (--budget-s); a command that fails or runs out of time is recorded and the rest still runs.
DIR receives three files: gpu.json (environment, every figure with its command), gpu.md (the
tables) and gpu.log (every command's output); gpu.json and gpu.md are rewritten after each stage.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_campaign import plan as P  # noqa: E402
from gpu_campaign import report  # noqa: E402
from gpu_campaign.runner import Context, run_stage  # noqa: E402

BUDGET_S = {"cuda": 450.0, "cpu": 300.0}
"""The deadline: 7.5 minutes on a GPU, so that the whole command, start and outputs included, ends
within the 8 minutes the campaign is meant to take."""


def has_cuda_gpu() -> bool:
    """An NVIDIA GPU is visible (nvidia-smi lists one); no CUDA context is made in this process."""
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def dlscale_importable() -> bool:
    return importlib.util.find_spec("dlscale") is not None


def bench_flags() -> frozenset[str]:
    """The options `dlscale bench` accepts in this checkout (read from its parser, nothing run)."""
    from dlscale.cli import build_parser

    subparsers = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    return frozenset(o for action in subparsers.choices["bench"]._actions for o in action.option_strings)


def features(device: str, timm_script: Path, cores: int) -> P.Features:
    found = lambda name: importlib.util.find_spec(name) is not None  # noqa: E731
    return P.Features(device=device, bench_flags=bench_flags(), torchvision=found("torchvision"), timm=found("timm"),
                      timm_script=str(timm_script), timm_script_found=(ROOT / timm_script).is_file(),
                      xdist=found("xdist"), cores=cores)


def parse_stages(text: str | None) -> dict[str, set[str] | None] | None:
    """"peers,progression:fp32+tf32" -> {"peers": None, "progression": {"fp32", "tf32"}}."""
    if not text:
        return None
    chosen: dict[str, set[str] | None] = {}
    for item in text.split(","):
        name, _, runs = item.partition(":")
        if name not in P.STAGES:
            raise SystemExit(f"--stages: unknown stage {name!r}; choose from {', '.join(P.STAGES)}")
        chosen[name] = set(runs.split("+")) if runs else None
    return chosen


def print_plan(stages: list[P.Stage], budget_s: float, pythonpath: bool) -> None:
    total = 0.0
    for stage in stages:
        estimate = stage.estimate_s()
        total += estimate
        rounds = f", {stage.rounds} rounds, the runs alternated" if stage.rounds > 1 else ""
        budget = f"budget {stage.budget_s:.0f} s" if stage.budget_s < budget_s else "until the deadline"
        print(f"\nstage {stage.name}: {stage.title}; {budget}, estimate {estimate:.0f} s{rounds}")
        if stage.note:
            print(f"  ({stage.note})")
        for kind, runs in (("setup", stage.setup), ("run", stage.runs)):
            for run in runs:
                if run.unavailable:
                    state = f"unavailable: {run.unavailable}"
                elif run.reuse:
                    state = f"figures of {run.reuse} (the same command)"
                else:
                    state = f"~{run.estimate_s:.0f} s" + (" per round" if kind == "run" and stage.rounds > 1 else "")
                print(f"  {kind} {run.name} [{state}]\n    {run.command('python3', pythonpath)}")
    print(f"\nestimated total {total:.0f} s against a deadline of {budget_s:.0f} s; runs that would start after the "
          "deadline are recorded as not run (with the command to run them alone), extra rounds are dropped first.")
    print("With these estimates: " + "; ".join(P.simulate(stages, budget_s)) + ".")
    print("Estimates: a process starts in ~12 s on the GPU machine (3 s on a CPU), then steps x batch / rate with "
          "ResNet-50 at 1,000 (fp32), 2,000 (tf32), 2,500 (AMP) and 3,000 img/s (AMP + channels_last), the low end "
          "of an H100; torch.compile adds "
          + ", ".join(f"{seconds:.0f} s ({mode})" for mode, seconds in P.COMPILE_S.items()) + ".")


def run(stages: list[P.Stage], args, pythonpath: bool, device: str) -> int:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="dlscale-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ, PYTHONUNBUFFERED="1")
    if pythonpath:
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    started = time.monotonic()
    command = ("PYTHONPATH=src " if pythonpath else "") + shlex.join(["python3", "benchmarks/gpu.py", *sys.argv[1:]])
    document = {"schema": 1, "command": command,
                "python_executable": sys.executable, "device": device, "budget_s": args.budget_s,
                "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "wall_s": 0.0,
                "work_dir": str(work), "environment": None, "stages": {}, "goals": []}
    try:
        with open(out / "gpu.log", "w") as log:
            fallback_workers = P.data_shape(P.Features(device=device, cores=args.cores)).workers[-1]
            ctx = Context(python=sys.executable, root=ROOT, work=work, env=child_env, log=log,
                          deadline=started + args.budget_s, pythonpath=pythonpath,
                          values={"workers": str(fallback_workers)})
            for stage in stages:
                try:
                    result = run_stage(stage, ctx)
                except Exception:  # noqa: BLE001 - a broken stage is recorded; the others still run
                    result = {"name": stage.name, "title": stage.title, "note": "", "budget_s": stage.budget_s,
                              "estimate_s": stage.estimate_s(), "setup": [], "medians": {}, "ratios": [],
                              "runs": [{"name": stage.name, "round": 0, "status": "error",
                                        "error": traceback.format_exc()[-1500:]}]}
                    ctx.say(f"stage {stage.name} broke:\n{traceback.format_exc()}")
                ctx.results[stage.name] = result
                if stage.name == "env" and result["runs"] and result["runs"][0].get("status") == "ok":
                    document["environment"] = result["runs"][0]["details"]
                document["stages"] = ctx.results
                document["wall_s"] = time.monotonic() - started
                document["goals"] = report.goals(ctx.results, device)
                report.write_json(out / "gpu.json", document)
                (out / "gpu.md").write_text(_markdown(document, args.compare))
    finally:
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    print("\n" + (out / "gpu.md").read_text())
    return 0


def _markdown(document: dict, compare: Path | None) -> str:
    text = report.markdown(document)
    if compare is not None:
        text += "\n".join(report.comparison(document, json.loads(compare.read_text()), str(compare))) + "\n"
    return text


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="where gpu.json, gpu.md and gpu.log go (at most 3 files)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="cuda: the full campaign; cpu: a tiny rehearsal of everything a CPU can run")
    p.add_argument("--dry-run", action="store_true", help="print every command with its estimated time; run nothing")
    p.add_argument("--stages", default=None,
                   help="only these stages (env always runs), e.g. peers,progression:compile_max_autotune")
    p.add_argument("--rounds", type=int, default=None, help="at most this many rounds per stage (default: the plan's)")
    p.add_argument("--budget-s", type=float, default=None, help="the deadline in seconds (450 on a GPU, 300 on a CPU)")
    p.add_argument("--timm-benchmark", type=Path, default=Path("benchmarks/peers/timm_benchmark.py"),
                   help="timm's benchmark.py, relative to the repository root or absolute")
    p.add_argument("--compare", type=Path, default=None,
                   help="an earlier gpu.json (docs/results/): its figures beside this run's in gpu.md")
    p.add_argument("--cores", type=int, default=None,
                   help="CPU cores to plan the loader sweep for (default: this machine's; 16, the CUDA machine's, "
                        "for a dry run where no GPU is visible)")
    p.add_argument("--work", default=None, help="scratch directory for run directories and the JPEG tree "
                   "(default: a new temporary one, removed at the end)")
    p.add_argument("--keep-work", action="store_true", help="keep the scratch directory")
    args = p.parse_args(argv)
    device = args.device
    if device == "auto":  # a dry run without a GPU shows the GPU machine's plan
        device = "cuda" if has_cuda_gpu() or args.dry_run else None
    if device is None:
        p.error("no NVIDIA GPU is visible: use --device cpu for the tiny rehearsal, or --dry-run for the plan")
    args.budget_s = args.budget_s or BUDGET_S[device]
    pythonpath = not dlscale_importable()
    if pythonpath:
        sys.path.insert(0, str(ROOT / "src"))
    cores = args.cores or (16 if args.dry_run and args.device == "auto" and not has_cuda_gpu() else _cores())
    args.cores = cores
    stages = P.build_plan(features(device, args.timm_benchmark, cores), parse_stages(args.stages), args.rounds)
    if args.dry_run:
        print_plan(stages, args.budget_s, pythonpath)
        return 0
    if args.out is None:
        p.error("--out DIR is required to run (or --dry-run)")
    return run(stages, args, pythonpath, device)


if __name__ == "__main__":
    sys.exit(main())
