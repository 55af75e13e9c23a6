"""The stages about the compiled GPU default: its baseline from a fresh inductor cache, the speed levers
and the data-parallel wrapper against it in alternated windows (alternate.py), the batch curve that
`dlscale predict` reads, and a profile of the compiled step.

Compiling ResNet-50's training step costs about a minute (COMPILE_S), so the compared configurations of
one stage run as concurrent workers of alternate.py: their compilations overlap, then they take the GPU
in turns. A wave holds what fits in the GPU's memory at once (WAVE_MEMORY_GIB).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from gpu_campaign.alternate import batch_size
from gpu_campaign.plan import (
    COMPILE_S,
    DEFAULT_BATCH,
    RATES,
    STARTUP_S,
    WARM_COMPILE_S,
    Features,
    Run,
    Stage,
    bench_estimate,
)
from gpu_campaign.report import RULE

ALTERNATE = "benchmarks/gpu_campaign/alternate.py"

MEMORY_GIB_PER_IMAGE = 0.05
"""Device memory of the compiled default per image of the batch, its peak rounded up (docs/benchmarks.md, "What the
campaign's estimates rest on")."""

WAVE_MEMORY_GIB = 64.0
"""What one wave of workers may take of the H100's 80 GB: the sum of their batches x MEMORY_GIB_PER_IMAGE
(allocator slack and four CUDA contexts fill the rest)."""

ROUNDS = {"cuda": 8, "cpu": 3}
"""Windows per variant: 8 x 10 steps of the compiled default is 3.6 s per variant."""

READY_S = {"cuda": 150.0, "cpu": 180.0}
"""How long a wave waits for its workers to compile and warm up; a later one is dropped and recorded."""

COORDINATE_DESCENT_S = 300.0
"""Assumed extra compile time of coordinate-descent tuning (it times every generated kernel's block sizes): no
run has seen its compile of ResNet-50's step end, and one stopped after 150 s did not; the wave waits for it
(ready_s)."""


@dataclass(frozen=True)
class Variant:
    name: str
    flags: list[str]
    batch: int = 256
    compile_s: float = COMPILE_S["reduce-overhead"]


CPU_COMMON = ["--model", "resnet18", "--width", "8", "--image-size", "32", "--batch-size", "8",
              "--num-warmup-batches", "2", "--num-batches-per-iter", "2", "--device", "cpu"]
"""The tiny eager stand-in of the CPU rehearsal (the levers' code paths, not their speed)."""

GPU_COMMON = ["--pool-batches", "4"]
"""Four distinct batches per worker instead of eight: 0.6 GB less each at batch 256, the same speed."""


WORKER_WARMUP_S = 12.0
"""A worker's warm-up under the lock: compiling from the cache and its warm-up steps (longer wrapped in DDP)."""


def alternated(name: str, variants: list[Variant], f: Features, *, rounds: int | None = None,
               also: Run | None = None) -> Run:
    """One alternate.py run over `variants`; the first is the baseline. Variants with compile_s <= WARM_COMPILE_S
    are in the cache already (--warm); the others are primed first, all at once, with `also` beside them."""
    device = f.device
    common = GPU_COMMON if device == "cuda" else CPU_COMMON
    rounds = rounds or ROUNDS[device]
    cold = [v.compile_s for v in variants if v.compile_s > WARM_COMPILE_S]
    ready = max(READY_S[device], STARTUP_S[device] + 1.2 * max(cold, default=0.0) + WORKER_WARMUP_S)
    argv = [ALTERNATE, "--json", f"{{work}}/{name}-{{round}}.json", "--logs", f"{{work}}/{name}-logs",
            "--rounds", str(rounds), "--ready-timeout", str(ready), "--memory-gib", str(WAVE_MEMORY_GIB),
            "--common", shlex.join(common)]
    for v in variants:
        argv += ["--variant", f"{v.name}={shlex.join(v.flags)}"]
        argv += ["--warm", v.name] if v.compile_s <= WARM_COMPILE_S else []
    if also is not None:
        argv += ["--also", shlex.join(also.argv),
                 "--also-timeout", str(also.estimate_s * 1.5)]
    if device == "cuda":
        # cold compiles at once (the slowest, stretched by 1.2 for the others sharing the cores), the command
        # beside; then each worker compiles from the cache and warms up alone; then every variant's windows
        prime_s = min(ready, STARTUP_S["cuda"] + 1.2 * max(cold)) if cold else 0.0
        prime_s = max(prime_s, also.estimate_s if also else 0.0)
        warm_up = STARTUP_S["cuda"] + sum(WORKER_WARMUP_S for _ in variants)
        timing = rounds * sum(10 * v.batch / RATES["compiled"] for v in variants)
        estimate = prime_s + warm_up + timing + 5.0
    else:
        estimate = STARTUP_S["cpu"] * 2 + rounds * len(variants) * 0.5 + (also.estimate_s if also else 0.0)
    return Run(name, argv, "alternate", estimate, output=f"{{work}}/{name}-{{round}}.json", also=also,
               settings="; ".join(f"{v.name}: {' '.join(v.flags) or 'the GPU default'}" for v in variants))


def wave_memory_gib(variants: list[Variant]) -> float:
    return sum(v.batch for v in variants) * MEMORY_GIB_PER_IMAGE


def baseline_stage(f: Features) -> Stage:
    """The GPU default alone, first, from an empty inductor cache: its compile seconds and its rate."""
    if f.device != "cuda":
        run = Run("compiled default", [], "bench", 0.0, unavailable="GPU only (the CPU default is another model)")
        return Stage("baseline", "The compiled GPU default from a fresh inductor cache", 60.0, [run])
    run = Run("compiled default", ["-m", "dlscale", "bench", "--json", "{work}/baseline-{round}.json",
                                   "--output-dir", "{work}/runs"], "bench",
              bench_estimate("cuda", 110, 512, RATES["compiled"], COMPILE_S["reduce-overhead"]),
              output="{work}/baseline-{round}.json",
              settings="no flags: resnet50, batch 512 on an 80 GB GPU (256 below 40 GiB), 224 px, bf16 AMP, "
                       "channels_last, fused SGD, cuDNN autotuning, torch.compile reduce-overhead; the campaign's "
                       "inductor cache empty")
    return Stage("baseline", "The compiled GPU default from a fresh inductor cache (ResNet-50, synthetic)",
                 120.0, [run], note="every later compile of the campaign shares this inductor cache, so a "
                                    "configuration compiled before compiles again in seconds")


def _lever_variants(f: Features, wave: str) -> list[Variant]:
    """Wave a: the default's batch 512 against 768 (64 GB at once): a larger batch is the lever the earlier
    levers' figures point to (docs/benchmarks.md). Wave b: coordinate-descent tuning at 256 (its compile times
    every generated kernel: a wave of its own, run alone, the default compiled beside it)."""
    if f.device != "cuda":
        return [Variant("default", []), Variant("stem 4", ["--stem-channels", "4"]),
                Variant("batch 16", ["--batch-size", "16"], batch=16)]
    b256 = ["--batch-size", "256"]
    if wave == "a":  # the baseline compiled batch 512 into the campaign's cache
        return [Variant("default 512", ["--batch-size", "512"], batch=512, compile_s=WARM_COMPILE_S),
                Variant("batch 768", ["--batch-size", "768"], batch=768)]
    return [Variant("default 256", b256),
            Variant("coordinate descent", [*b256, "--coordinate-descent-tuning"],
                    compile_s=COMPILE_S["reduce-overhead"] + COORDINATE_DESCENT_S)]


BESIDE = {
    "levers_a": (("tests/gpu/test_gpu_decode.py", "tests/gpu/test_gpu_ddp.py", "tests/gpu/test_gpu_memory_estimate.py",
                  "tests/gpu/test_gpu_comm_header.py", "tests/gpu/test_gpu_bench_curve.py"),
                 "not compiled and not compile_facts and not under_compile", 110.0),
    "ddp": (("tests/gpu/test_gpu_ddp.py",), "compiled and not compile_facts", 95.0),
}
"""The GPU tests run beside a stage's compilations: (files, -k selection, estimated seconds). Beside levers_a
the device decode tests, the eager DDP equality cases, the memory estimate, comm's header and the batch curve
with CUDA graphs (its compiled case is left to the tier); beside the DDP wave the compiled DDP equality cases.
The bench test of compile facts is left to the tier: the campaign's own runs record the same facts."""


def new_tests_run(f: Features, stage: str = "levers_a") -> Run | None:
    """The GPU tests of the newest work that run beside `stage`'s compilations: each proves a point of its
    issue. None where this checkout has none of them."""
    files, selection, estimate = BESIDE[stage]
    present = [name for name in files if name in f.gpu_test_files]
    if not present:
        return None
    junit = f"{{work}}/junit-{stage}.xml"
    argv = ["-m", "pytest", *present, "-k", selection, "-q", "-p", "no:cacheprovider", "--junitxml", junit,
            "-o", "junit_family=xunit2"]
    return Run(f"GPU tests beside {stage}", argv, "pytest", estimate if f.device == "cuda" else 30.0, output=junit,
               settings=f"{' '.join(present)} -k '{selection}'")


def levers_stage(f: Features, wave: str = "a") -> Stage:
    variants = _lever_variants(f, wave)
    run = alternated(f"levers-{wave}", variants, f, also=new_tests_run(f) if wave == "a" else None)
    missing = [flag for flag in ("--stem-channels", "--coordinate-descent-tuning", "--cudnn-benchmark-limit")
               if flag not in f.bench_flags]
    if missing:
        run.unavailable = f"this dlscale bench has no {', '.join(missing)}"
    title = {"a": "Speed levers against the compiled default at its batch, 512: batch 768",
             "b": "Speed levers against the compiled default at batch 256: coordinate-descent tuning"}[wave]
    return Stage(f"levers_{wave}", title, run.estimate_s * 1.3 + 20.0, [run],
                 variants=[v.name for v in variants], ratios=[(v.name, variants[0].name) for v in variants[1:]],
                 note="alternate.py: the new configurations compiled at once, then each worker warmed up alone, then "
                      "10-step windows in turns, rotated each round"
                      + (f"; about {wave_memory_gib(variants):.0f} GB of device memory at once" if f.device == "cuda"
                         else "") + ("; GPU tests ran beside the compilations" if run.also else "")
                      + f"; a lever helps where its windows {RULE}")


def levers_b_stage(f: Features) -> Stage:
    return levers_stage(f, "b")


def floor_stage(f: Features) -> Stage:
    """The compiled default at its own batch against coordinate-descent tuning and against the levers that helped
    (--after's or --combined's), alternated: the default's own figure for the throughput floor, and what would raise
    it. Coordinate descent compiles for minutes: the wave waits for it (ready_s), the default compiled beside it."""
    if f.device != "cuda":
        return Stage("floor", "The throughput floor: the compiled default against coordinate descent", 60.0,
                     [Run("floor", [], "alternate", 0.0, unavailable="GPU only (coordinate-descent tuning of the tiny "
                                                                       "CPU model measures nothing)")])
    variants = [Variant("default", [], batch=DEFAULT_BATCH),
                Variant("coordinate descent", ["--coordinate-descent-tuning"], batch=DEFAULT_BATCH,
                        compile_s=COMPILE_S["reduce-overhead"] + COORDINATE_DESCENT_S)]
    flags = f.combined_flags or []
    if flags:
        variants.append(Variant("combined", flags, batch=batch_size(flags)))
    run = alternated("floor", variants, f)
    if "--coordinate-descent-tuning" not in f.bench_flags:
        run.unavailable = "this dlscale bench has no --coordinate-descent-tuning"
    combined = (f"the levers that helped, together ({' '.join(flags)})" if flags else
                "no combined levers: no lever helped in the records given (--after GPU_JSON or --combined FLAGS)")
    return Stage("floor", "The throughput floor: the compiled default against coordinate descent and the levers "
                          "that helped", run.estimate_s * 1.3 + 20.0, [run], variants=[v.name for v in variants],
                 ratios=[(v.name, "default") for v in variants[1:]],
                 note=f"alternate.py at the default's own batch; {combined}; about {wave_memory_gib(variants):.0f} GB "
                      f"of device memory at once; a variant helps where its windows {RULE}")


def ddp_stage(f: Features) -> Stage:
    """The DDP wrapper on one rank (a one-rank NCCL group) against the unwrapped compiled default, and the wrapped
    alternatives the multi-GPU default is chosen from."""
    if f.device == "cuda":
        eager = ["--model", "resnet50", "--batch-size", "256", "--image-size", "224", "--precision", "amp_fp16",
                 "--channels-last", "--cudnn-benchmark"]
        # batch 256: four workers of the 512 default would not fit at once; compiled with the others (no stage
        # before it compiles batch 256)
        b256 = ["--batch-size", "256"]
        variants = [Variant("default 256", b256),
                    Variant("DDP", ["--wrap-single-rank", *b256]),
                    Variant("DDP compile default", ["--wrap-single-rank", "--compile-mode", "default", *b256]),
                    Variant("DDP eager fp16", ["--wrap-single-rank", *eager], compile_s=0.0)]
    else:
        variants = [Variant("default", []), Variant("DDP", ["--wrap-single-rank"])]
    run = alternated("ddp", variants, f, also=new_tests_run(f, "ddp"), rounds=6 if f.device == "cuda" else None)
    if "--wrap-single-rank" not in f.bench_flags:
        run.unavailable = "this dlscale bench has no --wrap-single-rank"
    return Stage("ddp", "DistributedDataParallel on one GPU against the compiled default",
                 run.estimate_s * 1.3 + 20.0, [run], variants=[v.name for v in variants],
                 ratios=[(v.name, variants[0].name) for v in variants[1:]],
                 note="each DDP worker a one-rank process group (NCCL on the GPU) with the wrapper forced; several "
                      "GPUs, NVLink and several nodes are not covered by one GPU; the compiled DDP equality tests ran "
                      "beside the compilations")


CURVE = [16, 32, 64, 128, 256]
"""The batch sizes of `dlscale predict`'s per-device step curve t(b)."""


def curve_stage(f: Features) -> Stage:
    """ResNet-50's step time against the batch per device, eager with CUDA graphs (each size compiled anew
    would cost a minute; the compiled default at 256 is in levers_a and at 512 in the baseline, other runs:
    what compiling adds is not a ratio across them)."""
    if f.device == "cuda":
        sizes, flags = [*CURVE, 512], ["--model", "resnet50", "--image-size", "224", "--precision", "amp_bf16",
                               "--channels-last", "--cudnn-benchmark", "--cuda-graphs"]
        # per size: cuDNN's autotuning of the new shapes and the graph capture (~3 s), 35 steps
        estimate = STARTUP_S["cuda"] + sum(3.0 + 35 * b / RATES["channels_last"] for b in sizes)
    else:
        sizes, flags = [4, 8], CPU_COMMON[:6] + ["--device", "cpu", "--num-warmup-batches", "1"]
        estimate = STARTUP_S["cpu"] + 10.0
    argv = ["-m", "dlscale", "bench", *flags, "--batch-size", ",".join(map(str, sizes)),
            "--num-batches-per-iter", "5", "--num-iters", "5", "--json", "{work}/curve-{round}.json",
            "--output-dir", "{work}/runs", "--name", "curve-{round}"]
    run = Run("batch curve", argv, "curve", estimate, output="{work}/curve-{round}.json",
              settings=f"batch {','.join(map(str, sizes))}, " + " ".join(flags))
    if not f.batch_list:
        run.unavailable = "this dlscale bench takes one --batch-size"
    return Stage("curve", "Step time against the batch per device (dlscale predict's t(b))", estimate * 1.5 + 10,
                 [run])


def profile_stage(f: Features) -> Stage:
    """Where the compiled step's time goes: `dlscale profile bench` of the compiled default in compile's
    default mode (a CUDA-graph replay hides its kernels from the profiler; the kernels are the same)."""
    if f.device != "cuda":
        return Stage("profile", "Profile of the compiled step", 30.0,
                     [Run("profile compiled", [], "none", 0.0, unavailable="GPU only")])
    argv = ["-m", "dlscale", "profile", "bench", "--compile-mode", "default", "--steps", "10", "--trace-steps", "3",
            "--out", "{work}/profile-compiled"]
    run = Run("profile compiled", argv, "none", STARTUP_S["cuda"] + COMPILE_S["default"] + 20.0,
              settings="the GPU default, compile's default mode (no CUDA graphs), 10 timed + 3 traced steps")
    return Stage("profile", "Where the compiled step's time goes", run.estimate_s * 1.3, [run],
                 note="the profile's tables are in gpu.log")


def gputests_stage(f: Features) -> Stage:
    """The newest GPU tests alone (in the plans they run beside the compilations of levers_a and ddp)."""
    runs = [run for run in (new_tests_run(f, "levers_a"), new_tests_run(f, "ddp")) if run is not None]
    return Stage("gputests", "The newest GPU tests: device decoding, DDP on one GPU", 300.0,
                 runs or [Run("new GPU tests", [], "pytest", 0.0, unavailable="no new GPU test files here")])
