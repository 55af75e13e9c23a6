"""The GPU campaign: one command that tests and measures dlscale on a lent CUDA machine with no network.

    scripts/gpu-wheels.sh                                       # here: nvImageCodec's wheels into .whl/, timm's script
    PYTHONPATH=src python3 benchmarks/gpu.py --out DIR          # part 1 there: the loan's one command, under 8 minutes
    PYTHONPATH=src python3 benchmarks/gpu.py --part 2 --out DIR --timm-benchmark PATH    # part 2, a later loan's
    python benchmarks/gpu.py --dry-run                          # both plans: every command, estimated times
    python benchmarks/gpu.py --device cpu --out DIR             # a tiny rehearsal of the orchestration

Part 1, in order (docs/benchmarks.md explains each table):
  wheels       nvImageCodec's and nvJPEG's wheels (--wheels, default .whl) installed into the work directory, first
               on the nvImageCodec runs' PYTHONPATH; whether nvImageCodec decodes on the GPU, and on which backend
  env          GPU, driver, torch, CUDA, cuDNN, NCCL, CPU, Pillow, torchvision, timm, nvImageCodec
  decode       a 30,720-file JPEG tree; `dlscale train` with the compiled default (batch 512) on synthetic input,
               then on JPEGs through nvImageCodec's hardware decoder (region decode), 15 loader threads, the best
               earlier device arrangement (nvJPEG fed by a thread, the decode shared) and 15 worker processes, each
               after its `dlscale loader` run; NVML's JPEG-engine utilisation during each
  floor        the compiled default against coordinate-descent tuning and the levers that helped (--after,
               --combined), alternated: the throughput floor
  pytest       the GPU test tier (`pytest -m gpu`), only where its estimate fits what is left
Part 2, in order:
  env          as in part 1
  baseline     the compiled GPU default (`dlscale bench`, no flags) from an empty inductor cache: its img/s and
               compile facts
  levers_a     batch 768 against the default at its batch, 512, alternated (the newest GPU tests beside its
               compilations)
  ddp          the DDP wrapper on one GPU (one-rank NCCL group) against the unwrapped default, alternated (the
               compiled DDP GPU tests beside its compilations)
  curve        step time against the batch per device (16 to 512), eager with CUDA graphs
  profile      `dlscale profile bench` of the compiled step
  peers        eager against eager: dlscale bench, a bare PyTorch loop and timm's benchmark.py; compiled against
               compiled: the GPU default and timm's benchmark.py --torchcompile at the default's batch
  combined     the levers that beat the default by 1% or more in most rounds (this run's and --after's),
               together, against the default
Other stages (--stages NAME[,NAME]): levers_b (coordinate-descent tuning at batch 256), gputests, choices,
progression.

The campaign's compiles share one inductor cache (--inductor-cache; emptied first where the plan has the baseline),
so a configuration compiled once compiles again in seconds on the same machine.

This process only orchestrates: each measurement is its own subprocess (`python -m dlscale ...`, with
src/ on PYTHONPATH when dlscale is not installed). Every stage has a time budget and the campaign a
deadline (--budget-s); a command that fails or runs out of time is recorded and the rest still runs, and a
command whose estimate does not fit what is left is not started. DIR receives three files: gpu.json (environment,
every figure with its command), gpu.md (the tables) and gpu.log (every command's output); gpu.json and gpu.md are
rewritten after each command, so that a campaign killed part way keeps what ended (SIGTERM also stops the
command that runs and writes them). Every ratio in gpu.md is of two figures of this run; --compare adds an earlier
run of the same machine beside it, its ratios marked as across runs, and is refused for another machine's.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib.util
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_campaign import decode, nvjpg, parts, report  # noqa: E402
from gpu_campaign import plan as P  # noqa: E402
from gpu_campaign.runner import Context, run_stage  # noqa: E402

CPU_BUDGET_S = 300.0
"""The CPU rehearsal's deadline (a GPU part's is parts.BUDGET_S)."""

GPU_TEST_FILES = ("tests/gpu/test_gpu_decode.py", "tests/gpu/test_gpu_ddp.py", "tests/gpu/test_gpu_memory_estimate.py",
                  "tests/gpu/test_gpu_comm_header.py", "tests/gpu/test_gpu_bench_curve.py")
"""The gputests stage: the GPU tests of the newest work, those this checkout has (no GPU has run the last three
yet)."""

WHEELS = ".whl"
"""The wheels stage's folder of wheels (--wheels), git-ignored: scripts/gpu-wheels.sh fills it."""

GPU_MACHINE_PACKAGES = {"torchvision": True, "timm": True, "xdist": True}
"""What the lent GPU machine has installed (the environment of every record in docs/results/: torchvision 0.26, timm
1.0.29, pytest-xdist 3.8): a dry run on a machine without a GPU plans with them."""

CARRY_MIB = 64
"""What the run tool carries to the GPU machine in git-ignored folders (the wheels and timm's script)."""

INDUCTOR_CACHE = Path("/tmp/dlscale-campaign-inductor")
"""The campaign's inductor cache (TORCHINDUCTOR_CACHE_DIR of every command)."""


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


def parses(*argv: str) -> bool:
    """This checkout's dlscale accepts the command line (parsed, nothing run, argparse's complaint hidden)."""
    from dlscale.cli import build_parser

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            build_parser().parse_args(list(argv))
    except SystemExit:
        return False
    return True


def features(device: str, timm_script: Path | None, cores: int, combined: list[str] | None = None,
             wheels: Path = Path(WHEELS)) -> P.Features:
    found = lambda name: importlib.util.find_spec(name) is not None  # noqa: E731
    script = None if timm_script is None else (timm_script if timm_script.is_absolute() else ROOT / timm_script)
    return P.Features(device=device, bench_flags=bench_flags(), torchvision=found("torchvision"), timm=found("timm"),
                      timm_script=None if timm_script is None else str(timm_script),
                      timm_script_found=script is not None and script.is_file(), xdist=found("xdist"), cores=cores,
                      batch_list=parses("bench", "--batch-size", "16,32"),
                      gpu_decode=parses("loader", "--decode", "gpu"),
                      loader_decoder=parses("loader", "--decoder", "nvimgcodec"),
                      gpu_test_files=tuple(f for f in GPU_TEST_FILES if (ROOT / f).is_file()),
                      combined_flags=combined, wheels=tuple(w.name for w in wheel_files(wheels)),
                      wheels_dir=str(wheels))


def wheel_files(folder: Path) -> list[Path]:
    where = folder if folder.is_absolute() else ROOT / folder
    return sorted(where.glob("*.whl")) if where.is_dir() else []


def carry_line(wheels: Path, timm_script: Path | None) -> str:
    """What the run tool sends to the GPU machine (the tree git does not ignore, and the git-ignored folders the
    command names in carry: the wheels and timm's script) against its 64 MiB."""
    sizes = {"the tree": _tree_bytes(), str(wheels): sum(w.stat().st_size for w in wheel_files(wheels))}
    if timm_script is not None:
        script = timm_script if timm_script.is_absolute() else ROOT / timm_script
        sizes[str(timm_script)] = script.stat().st_size if script.is_file() else 0
    total = sum(size or 0 for size in sizes.values())
    listed = ", ".join(f"{name} {'?' if size is None else f'{size / 2**20:.1f}'} MiB" for name, size in sizes.items())
    verdict = "within" if total <= CARRY_MIB * 2**20 else "MORE than"
    return f"Sent to the GPU machine: {listed}: {total / 2**20:.1f} MiB, {verdict} the run tool's {CARRY_MIB} MiB."


def _tree_bytes() -> int | None:
    """The bytes of the files git tracks or would track here (what the run tool sends besides carry), or None."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum((ROOT / name).stat().st_size for name in listed.decode().split("\0") if name and (ROOT / name).is_file())


def parse_stages(text: str | None) -> dict[str, set[str] | None] | None:
    """"peers,progression:fp32+tf32" -> {"peers": None, "progression": {"fp32", "tf32"}}."""
    if not text:
        return None
    chosen: dict[str, set[str] | None] = {}
    for item in text.split(","):
        name, _, runs = item.partition(":")
        if name not in parts.STAGES:
            raise SystemExit(f"--stages: unknown stage {name!r}; choose from {', '.join(parts.STAGES)}")
        chosen[name] = set(runs.split("+")) if runs else None
    return chosen


def print_plan(stages: list[P.Stage], budget_s: float, pythonpath: bool, title: str = "") -> None:
    if title:
        print(f"\n=== {title} ===")
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
                    if run.min_rate:
                        state += f"; not started if {run.min_rate[0]} is under {run.min_rate[1]:.0f} img/s"
                    if run.needs == "simplejpeg":
                        state += "; simplejpeg from the wheels stage where it installs, else Pillow"
                    elif run.needs:
                        state += f"; needs {run.needs} (the wheels stage)"
                    if run.nvjpg:
                        state += "; NVJPG sampled"
                print(f"  {kind} {run.name} [{state}]\n    {run.command('python3', pythonpath)}")
    print(f"\nestimated total {total:.0f} s against a deadline of {budget_s:.0f} s; runs that would start after the "
          "deadline are recorded as not run (with the command to run them alone), extra rounds are dropped first.")
    print("With these estimates: " + "; ".join(P.simulate(stages, budget_s)) + ".")


def estimates_note() -> str:
    return ("Estimates: a process starts in ~12 s on the GPU machine (3 s on a CPU), then steps x batch / rate with "
            "ResNet-50 at 1,000 (fp32), 2,000 (tf32), 2,500 (AMP) and 3,000-5,000 img/s (AMP + channels_last, "
            "eager to compiled), the low end of an H100; torch.compile adds "
            + ", ".join(f"{seconds:.0f} s ({mode})" for mode, seconds in P.COMPILE_S.items())
            + " from an empty cache, about 15 s from the campaign's cache; alternated stages compile their "
            "variants at once (the slowest x 1.2). A compiled train run adds "
            + f"{decode.TRAIN_COMPILE_S['later']:.0f} s to its epochs ({decode.TRAIN_COMPILE_S['first']:.0f} s the "
            "first after its graph was compiled, and that compile more from an empty cache); a loader run times its "
            + f"batches at {decode.LOADER_RATES['fast']:,.0f} (CPU path) or {decode.LOADER_RATES['gpu']:,.0f} img/s "
            "(device path). docs/benchmarks.md has the records each rests on.")


class Stopped(BaseException):
    """The campaign was told to stop (SIGTERM): what ended is kept. Not an Exception, so that no handler of a
    broken stage or command takes it for one."""


def _stop_campaign(signum, frame) -> None:
    raise Stopped(f"stopped by signal {signum}")


def run(stages: list[P.Stage], args, pythonpath: bool, device: str, f: P.Features) -> int:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="dlscale-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    cache = args.inductor_cache
    fresh = any(stage.name == "baseline" for stage in stages)
    if fresh:  # the baseline compiles from an empty cache: its compile seconds are a first run's
        shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    child_env = dict(os.environ, PYTHONUNBUFFERED="1", TORCHINDUCTOR_CACHE_DIR=str(cache))
    if pythonpath:
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    started = time.monotonic()
    command = ("PYTHONPATH=src " if pythonpath else "") + shlex.join(["python3", "benchmarks/gpu.py", *sys.argv[1:]])
    document = {"schema": 2, "command": command, "part": args.part, "inductor_cache": str(cache),
                "inductor_cache_emptied": fresh, "combined_flags": args.combined_flags,
                "python_executable": sys.executable, "device": device, "budget_s": args.budget_s,
                "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "wall_s": 0.0,
                "work_dir": str(work), "stopped": None, "environment": None, "stages": {}, "goals": []}

    def save(stage_so_far: dict | None = None) -> None:
        if stage_so_far is not None:
            document["stages"] = {**ctx.results, stage_so_far["name"]: stage_so_far}
        document["wall_s"] = time.monotonic() - started
        document["goals"] = report.goals(document["stages"], device, (document["environment"] or {}).get("device_name"))
        report.write_json(out / "gpu.json", document)
        (out / "gpu.md").write_text(_markdown(document, args.compared))

    code, previous = 0, signal.signal(signal.SIGTERM, _stop_campaign)
    try:
        with open(out / "gpu.log", "w") as log:
            sampled = any(run.nvjpg for stage in stages for run in stage.setup + stage.runs)
            ctx = Context(python=sys.executable, root=ROOT, work=work, env=child_env, log=log,
                          deadline=started + args.budget_s, pythonpath=pythonpath, on_record=save,
                          nvjpg=nvjpg.sampler_factory() if sampled else None)
            for stage in stages:
                _run_stage(stage, ctx, args, f, document)
                save()
    except (Stopped, KeyboardInterrupt) as why:
        code = 143 if isinstance(why, Stopped) else 130
        document["stopped"] = f"{why or 'interrupted'} after {time.monotonic() - started:.0f} s; what ended is kept"
        save()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    print("\n" + (out / "gpu.md").read_text())
    return code


def _run_stage(stage: P.Stage, ctx: Context, args, f: P.Features, document: dict) -> None:
    """One stage into ctx.results (a stage that breaks is recorded as such; the others still run)."""
    if stage.name == "combined" and args.combined is None:  # the levers measured so far decide
        stage, flags = parts.combined_for_run(f, ctx.results, args.after_stages, args.rounds)
        document["combined_flags"] = flags
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


def _markdown(document: dict, compare: tuple[Path, dict] | None) -> str:
    text = report.markdown(document)
    if compare is not None:
        path, previous = compare
        text += "\n".join(report.comparison(document, previous, str(path))) + "\n"
    return text


def this_gpu() -> dict | None:
    """GPU 0 as nvidia-smi names it (UUID, name, driver: the fields of the campaign's environment), or None."""
    fields = {"uuid": "device_uuid", "name": "device_name", "driver_version": "driver"}
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    values = [value.strip() for value in out.splitlines()[0].split(",")] if out.strip() else []
    return dict(zip(fields.values(), values, strict=False)) or None


def _compared(path: Path | None, device: str, p: argparse.ArgumentParser) -> tuple[Path, dict] | None:
    """--compare's gpu.json, read before the work; refused where it ran on another machine than this one."""
    if path is None:
        return None
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        p.error(f"--compare {path}: {exc}")
    if not isinstance(previous, dict) or "stages" not in previous:
        p.error(f"--compare {path}: not a gpu.json of benchmarks/gpu.py (no stages)")
    why = report.other_machine(this_gpu() if device == "cuda" else None, previous.get("environment"))
    if why:
        p.error(f"--compare {path}: that run is of another machine ({why}); a ratio across machines is refused: "
                "compare runs of this machine")
    return path, previous


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=None, help="where gpu.json, gpu.md and gpu.log go (at most 3 files)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                   help="cuda: the full campaign; cpu: a tiny rehearsal of everything a CPU can run")
    p.add_argument("--part", type=int, choices=sorted(parts.PARTS), default=1,
                   help="which plan: 1 (a loan's one command, under 8 minutes) or 2 (a later loan's)")
    p.add_argument("--dry-run", action="store_true", help="print both plans with estimated times; run nothing")
    p.add_argument("--stages", default=None,
                   help="only these stages instead of a part's plan (env always runs, wheels before "
                        f"{', '.join(parts.NEEDS_WHEELS)}), e.g. levers_a,peers:timm_benchmark.py")
    p.add_argument("--rounds", type=int, default=None, help="at most this many rounds per stage (default: the plan's)")
    p.add_argument("--budget-s", type=float, default=None,
                   help=f"the deadline in seconds (part 1 {parts.BUDGET_S[1]:.0f}, part 2 {parts.BUDGET_S[2]:.0f} on "
                        f"a GPU; {CPU_BUDGET_S:.0f} on a CPU)")
    p.add_argument("--timm-benchmark", type=Path, default=None, metavar="PATH",
                   help="timm's benchmark.py, the peer of the peers stage (not shipped: " + P.TIMM_SCRIPT_HINT + ")")
    p.add_argument("--wheels", type=Path, default=Path(WHEELS), metavar="DIR",
                   help="the wheels stage's *.whl files, relative to the repository root (scripts/gpu-wheels.sh "
                        "downloads nvImageCodec's and nvJPEG's into .whl)")
    p.add_argument("--after", type=Path, default=None, metavar="GPU_JSON",
                   help="an earlier run's gpu.json: the combined and floor stages take the levers that helped there, "
                        "the combined stage with those that helped in this run's levers stages")
    p.add_argument("--combined", default=None, metavar="FLAGS",
                   help="the combined and floor stages' `dlscale bench` flags, instead of reading them from --after")
    p.add_argument("--inductor-cache", type=Path, default=INDUCTOR_CACHE,
                   help="TORCHINDUCTOR_CACHE_DIR of every command (emptied first where the plan has the baseline)")
    p.add_argument("--compare", type=Path, default=None, metavar="GPU_JSON",
                   help="an earlier gpu.json of this machine (the same GPU, driver and CPU): its figures beside this "
                        "run's in gpu.md, each ratio marked as across runs; another machine's is refused")
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
    pythonpath = not dlscale_importable()
    if pythonpath:
        sys.path.insert(0, str(ROOT / "src"))
    args.cores = args.cores or (16 if args.dry_run and args.device == "auto" and not has_cuda_gpu() else _cores())
    args.after_stages = _after_stages(args.after, p)
    args.combined_flags = _combined(args)
    f = features(device, args.timm_benchmark, args.cores, args.combined_flags, args.wheels)
    if args.dry_run and device == "cuda" and not has_cuda_gpu():  # the plan as the GPU machine would run it
        f = dataclasses.replace(f, **GPU_MACHINE_PACKAGES)
    only = parse_stages(args.stages)
    budget = lambda part: args.budget_s or (parts.BUDGET_S[part] if device == "cuda" else CPU_BUDGET_S)  # noqa: E731
    if args.dry_run:
        if only is None:
            for part in sorted(parts.PARTS):
                print_plan(parts.build_plan(f, None, args.rounds, part), budget(part), pythonpath,
                           title=f"part {part} (--part {part}): deadline {budget(part):.0f} s")
        else:
            print_plan(parts.build_plan(f, only, args.rounds), budget(args.part), pythonpath)
        print("\n" + estimates_note())
        print(carry_line(args.wheels, args.timm_benchmark))
        return 0
    if args.out is None:
        p.error("--out DIR is required to run (or --dry-run)")
    args.compared = _compared(args.compare, device, p)
    args.budget_s = budget(args.part)
    return run(parts.build_plan(f, only, args.rounds, args.part), args, pythonpath, device, f)


def _after_stages(after: Path | None, p: argparse.ArgumentParser) -> dict | None:
    """The stages of --after's gpu.json, or None without it."""
    if after is None:
        return None
    try:
        return json.loads(after.read_text()).get("stages", {})
    except (OSError, ValueError) as exc:
        p.error(f"--after {after}: {exc}")


def _combined(args) -> list[str] | None:
    """The combined stage's flags as planned: --combined's, or those of --after's levers (this run's levers,
    measured before it, join them when the stage starts)."""
    if args.combined is not None:
        return shlex.split(args.combined)
    return None if args.after_stages is None else parts.helpful_flags({"stages": args.after_stages})


if __name__ == "__main__":
    sys.exit(main())
