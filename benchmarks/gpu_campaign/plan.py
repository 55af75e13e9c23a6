"""What the campaign runs: stages of commands, each with its estimated time.

A stage's compared runs go in rounds (a b c, a b c, ...): the machine's drift hits every program
alike, and each figure is the median over rounds. A stage has a time budget; the campaign a
deadline. Every command is a list of arguments for this Python (sys.executable), run in the
repository root with src/ on PYTHONPATH when dlscale is not installed.

How the times are estimated (the dry run prints them): a process costs STARTUP_S before its
first step (interpreter, torch and dlscale imports, CUDA context, model, batches on the device),
then steps x batch / rate, with the rates of RATES: ResNet-50 at batch 256 on one H100, taken at
the low end of what such a GPU reaches (3,000-7,000 img/s with AMP and channels_last; fp32 and
tf32 by their peak ratios), so that the estimate errs long. torch.compile adds COMPILE_S. The measurements
each estimate rests on, with their records, are in docs/benchmarks.md ("What the campaign's estimates rest on").
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

STARTUP_S = {"cuda": 12.0, "cpu": 3.0}
"""Seconds from process start to the first step: imports, the CUDA context, the model and batch pool, cuDNN's
first calls; rounded up."""

RATES = {"fp32": 1000.0, "tf32": 2000.0, "amp": 2500.0, "channels_last": 3000.0, "compiled": 5000.0}
"""Assumed img/s of ResNet-50, batch 256, on an H100 (the low end; a faster GPU ends sooner)."""

CPU_RATE = 100.0
"""img/s of the tiny CPU models (resnet18 at 32 px) on 2 cores, the low end."""

COMPILE_S = {"default": 55.0, "reduce-overhead": 60.0, "max-autotune": 480.0, "max-autotune-no-cudagraphs": 480.0}
"""Seconds torch.compile adds to ResNet-50's training step from an empty inductor cache with 16 cores (inductor's
compile workers); max-autotune also times Triton templates for every convolution and matmul, so it takes
minutes; default is assumed to cost what reduce-overhead does without recording graphs."""


WARM_COMPILE_S = 15.0
"""torch.compile of a configuration already in the campaign's inductor cache: traced, its compiled code loaded."""

DEFAULT_BATCH = 512
"""The GPU default's batch on the 80 GB GPUs the campaign runs on (`gpu_default_batch` in dlscale/cli/bench.py):
what a run compared with the default takes until the default's own run says otherwise."""


@dataclass
class Run:
    """One command of the campaign and how its figure is read."""

    name: str
    """Its name in tables and in gpu.json (unique within the stage)."""
    argv: list[str]
    """Arguments after the interpreter; "{work}" is the work directory, "{workers}" the loader
    sweep's fastest worker count (filled in when the run starts)."""
    reader: str
    """How its figure is read: one of runner.READERS."""
    estimate_s: float
    output: str | None = None
    """A file the command writes (in the work directory) that the reader reads."""
    unavailable: str | None = None
    """Why it cannot run here; None when it can."""
    settings: str = ""
    """The settings in words, for the tables."""
    reuse: str | None = None
    """"stage/run": take that run's figures instead of running again (the same command)."""
    env: dict[str, str] = field(default_factory=dict)
    sets: str | None = None
    """The placeholder its reader fills for later runs (the loader's fastest worker count: "workers")."""
    also: Run | None = None
    """A command alternate.py runs beside its compilations (a test tier), recorded as a run of its own."""
    min_rate: tuple[str, float] | None = None
    """(key, img/s): not started when an earlier reader set that key below that rate (a loader too slow for
    the run to end within its overrun limit)."""
    needs: str | None = None
    """What an earlier stage decides is there (e.g. "nvimgcodec": the wheels stage): where it is not (a reader set
    "unavailable:<needs>" to why), the run is recorded as unavailable with that reason and not started."""
    nvjpg: bool = False
    """NVML's JPEG-engine utilisation is sampled while it runs (nvjpg.py)."""

    def command(self, python: str = "python3", pythonpath: bool = True) -> str:
        prefix = "PYTHONPATH=src " if pythonpath else ""
        return prefix + shlex.join([python, *self.argv])


@dataclass
class Stage:
    name: str
    title: str
    budget_s: float
    """Seconds this stage may take; rounds after the first start only if one more fits."""
    runs: list[Run]
    rounds: int = 1
    setup: list[Run] = field(default_factory=list)
    """Run once, in order, before the rounds; a failed one fails the rounds."""
    ratios: list[tuple[str, str]] = field(default_factory=list)
    """(numerator, denominator) run names: ratios of their medians."""
    values: dict[str, str] = field(default_factory=dict)
    """Placeholders' values from the stage's start, unless a run before it set them (a reader may set them)."""
    chain: bool = False
    """Also each run against the one before it (the progression's steps)."""
    note: str = ""
    variants: list[str] = field(default_factory=list)
    """The configurations an alternated run (alternate.py) compares: each has a median and ratios as a
    run has, its windows standing for rounds."""

    def estimate_s(self) -> float:
        live = [r for r in self.runs if r.unavailable is None and r.reuse is None]
        return sum(r.estimate_s for r in self.setup) + self.rounds * sum(r.estimate_s for r in live)


@dataclass
class Features:
    """What this machine and this checkout offer; decides which runs are unavailable."""

    device: str
    """"cuda" or "cpu"."""
    bench_flags: frozenset[str] = frozenset()
    """Options `dlscale bench` accepts (compile modes and CUDA graphs arrive in later versions)."""
    torchvision: bool = False
    timm: bool = False
    timm_script: str | None = None
    """timm's benchmark.py (--timm-benchmark PATH): not shipped, see benchmarks/README.md."""
    timm_script_found: bool = False
    xdist: bool = False
    cores: int = 1
    batch_list: bool = False
    """`dlscale bench --batch-size` takes a list (the batch curve)."""
    gpu_decode: bool = False
    """`dlscale loader --decode gpu` and data.decode=gpu exist."""
    loader_decoder: bool = False
    """`dlscale loader --decoder NAME` exists (the device path's decoder named, not auto's choice)."""
    wheels: tuple[str, ...] = ()
    """The wheels the wheels stage installs (--wheels DIR): nvImageCodec's and nvJPEG's."""
    wheels_dir: str = ".whl"
    """Where they are (--wheels)."""
    gpu_test_files: tuple[str, ...] = ()
    """The newest GPU test files (the gputests stage), those present in this checkout."""
    combined_flags: list[str] | None = None
    """The levers that helped in an earlier run (--after) or were named (--combined): the combined stage."""


WHOLE = {"train": 0.9, "alternate": 0.9, "loader": 1.0, "pytest": 1.0}
"""Readers whose figure needs the command's end, and the share of its estimate that must be left for it to
start: a `dlscale train`, alternate.py or `dlscale loader` run stopped before its end has no figure (the train and
alternated runs' estimates are close to what they take), and a test tier stopped part way counts only part of its
tests."""


def may_start(left_s: float, estimate_s: float, reader: str = "") -> bool:
    """A command starts when at least half its estimate (at most a minute) is left before the
    deadline: estimates err long, and one that runs over is stopped and recorded as timed out. One
    whose figure needs its end (WHOLE) starts only when nearly all its estimate is left."""
    if reader in WHOLE:
        return left_s >= WHOLE[reader] * estimate_s
    return left_s >= min(0.5 * estimate_s, 60.0)


OVERRUN = 4.0
"""A command is stopped once it has run this many times its estimate (and OVERRUN_MIN_S at least), so that one
far slower than expected (a device loader at a tenth of its rate) leaves the runs after it their time."""
OVERRUN_MIN_S = 60.0


def run_limit_s(estimate_s: float) -> float:
    """How long a command may run before it is stopped as overrun."""
    return max(OVERRUN * estimate_s, OVERRUN_MIN_S)


def round_fits(left_s: float, round_s: float) -> bool:
    """Rounds after the first start only when a whole one fits the stage's budget."""
    return left_s >= round_s


def simulate(stages: list[Stage], budget_s: float) -> list[str]:
    """What the estimates predict the rules above will do: rounds dropped, runs not started."""
    clock, lines = 0.0, []
    for stage in stages:
        deadline = min(budget_s, clock + stage.budget_s)
        live = [r for r in stage.runs if r.unavailable is None and r.reuse is None]
        for run in stage.setup:
            clock += run.estimate_s if may_start(deadline - clock, run.estimate_s, run.reader) else 0.0
        done = 0
        for k in range(stage.rounds):
            if k > 0 and not round_fits(deadline - clock, sum(r.estimate_s for r in live)):
                break
            for run in live:
                if may_start(deadline - clock, run.estimate_s, run.reader):
                    clock = min(clock + run.estimate_s, deadline)
                else:
                    lines.append(f"{stage.name}: {run.name} would not start ({max(deadline - clock, 0):.0f} s left)")
            done = k + 1
        if live and done < stage.rounds:
            lines.append(f"{stage.name}: {done} of {stage.rounds} rounds")
        lines.append(f"{stage.name} ends at ~{clock:.0f} s")
    return lines


def bench_estimate(device: str, steps: int, batch: int, rate: float, compile_s: float = 0.0) -> float:
    if device == "cpu":
        return STARTUP_S["cpu"] + steps * batch / CPU_RATE
    return STARTUP_S["cuda"] + compile_s + steps * batch / rate


# ------------------------------------------------------------------------------- bench shapes

@dataclass(frozen=True)
class Shape:
    """Model, batch and step counts of the bench runs: ResNet-50 at 256 on a GPU, tiny on the CPU."""

    model: list[str]
    batch: int
    warmup: int
    per_iter: int
    iters: int
    timm_model: list[str]
    bare_model: list[str]

    @property
    def steps(self) -> int:
        return self.warmup + self.per_iter * self.iters

    def bench(self, *, warmup: int | None = None) -> list[str]:
        return [*self.model, "--batch-size", str(self.batch), "--num-warmup-batches", str(warmup or self.warmup),
                "--num-batches-per-iter", str(self.per_iter), "--num-iters", str(self.iters)]


SHAPES = {
    # 10 warm-up steps (cuDNN autotuning, allocator growth), 6 timed iterations of 5 steps.
    "cuda": Shape(model=["--model", "resnet50", "--image-size", "224"], batch=256, warmup=10, per_iter=5, iters=6,
                  timm_model=["--model", "resnet50", "--img-size", "224"],
                  bare_model=["--model", "resnet50", "--image-size", "224"]),
    # resnet18 at 32 px (full width, so that torchvision's and timm's resnet18 are the same model).
    "cpu": Shape(model=["--model", "resnet18", "--image-size", "32", "--device", "cpu"], batch=8, warmup=2,
                 per_iter=2, iters=2, timm_model=["--model", "resnet18", "--img-size", "32", "--device", "cpu"],
                 bare_model=["--model", "resnet18", "--image-size", "32", "--device", "cpu"]),
}

WHAT = {"cuda": "ResNet-50, batch 256, 224 px, synthetic data",
        "cpu": "the tiny CPU rehearsal (resnet18, batch 8, 32 px)"}
"""What the bench runs measure, for the titles."""

TIMM_SCRIPT_HINT = ("pass --timm-benchmark PATH, timm's own benchmark.py (github.com/huggingface/pytorch-image-models, "
                    "the file benchmark.py at its root); on a machine without a network copy it into a git-ignored "
                    "folder of the checkout first")
"""What the peers stage says where timm's benchmark.py was not given (benchmarks/README.md)."""

BEST_EAGER = ["--precision", "amp_bf16", "--channels-last", "--fused-optimizer"]
"""The eager configuration the peers are compared in: bf16 AMP, NHWC, fused SGD (+ cuDNN autotuning on GPUs)."""


# ------------------------------------------------------------------------------------- stages

def env_stage(f: Features) -> Stage:
    run = Run("environment", ["benchmarks/gpu_campaign/environment.py"], "env", 8.0 if f.device == "cuda" else 4.0,
              settings="GPU, driver, torch, CUDA, cuDNN, NCCL, CPU, peers' versions")
    return Stage("env", "Environment", 60.0, [run])


def pytest_stage(f: Features) -> Stage:
    paths = [] if f.device == "cuda" else ["tests/gpu"]  # the whole suite's gpu marks; on the CPU all skip
    workers = ["-n", "4"] if f.xdist and f.device == "cuda" else []
    argv = ["-m", "pytest", "-m", "gpu", *paths, "-k", SLOW_GPU_TESTS, "-q", "-p", "no:cacheprovider", *workers,
            "--junitxml", "{work}/junit.xml", "-o", "junit_family=xunit2"]
    estimate = (TIER_S if workers else 1.8 * TIER_S) if f.device == "cuda" else 15.0
    note = "pytest-xdist: 4 workers share the GPU" if workers else ""
    run = Run("pytest -m gpu", argv, "pytest", estimate, output="{work}/junit.xml", settings="the GPU test tier")
    return Stage("pytest", "GPU test tier (`pytest -m gpu`)", estimate + 30.0, [run], note=note)


SLOW_GPU_TESTS = "not max-autotune"
"""Left out of the tier: max-autotune of even a tiny model, both modes of it, takes longer than the rest of the tier
(the test ids say "max-autotune": the "max_autotune" of earlier runs matched none)."""

TIER_S = 150.0
"""The GPU tier with 4 pytest-xdist workers, max-autotune left out (docs/benchmarks.md, "What the campaign's
estimates rest on"): erring long, as the tier has not run whole since the newest GPU tests."""


def eager_flags(device: str) -> list[str]:
    """The best eager configuration: bf16 AMP, channels_last, fused SGD, cuDNN autotuning; on the
    CPU fp32 (bf16 convolutions are slow there) with channels_last and fused SGD."""
    if device == "cuda":
        return [*BEST_EAGER, "--cudnn-benchmark"]
    return ["--precision", "fp32", "--channels-last", "--fused-optimizer"]


def dlscale_bench(shape: Shape, flags: list[str], tag: str, *, warmup: int | None = None) -> list[str]:
    return ["-m", "dlscale", "bench", *shape.bench(warmup=warmup), *flags, "--json", f"{{work}}/{tag}-{{round}}.json",
            "--output-dir", "{work}/runs"]


def timm_runs(f: Features, shape: Shape, estimate_s: float) -> tuple[Run, Run]:
    """timm's benchmark.py in train mode: eager with the eager runs' settings and batch, and compiled
    (`--torchcompile`, inductor) at the compiled default's batch ({default_batch}, which the default's run sets)."""
    precision = ["--amp", "--amp-dtype", "bfloat16"] if f.device == "cuda" else []
    common = [f.timm_script or "timm_benchmark.py", "--bench", "train", *shape.timm_model, *precision,
              "--channels-last", "--num-warm-iter", str(shape.warmup), "--num-bench-iter",
              str(shape.per_iter * shape.iters)]
    why = None if f.timm else "timm is not installed here (it is on the CUDA machine)"
    if f.timm and f.timm_script is None:
        why = f"timm's benchmark.py is not shipped: {TIMM_SCRIPT_HINT}"
    elif f.timm and not f.timm_script_found:
        why = f"{f.timm_script} is missing (--timm-benchmark PATH)"
    settings = "--bench train, timm's resnet, " + " ".join([*precision, "--channels-last"])
    eager = Run("timm benchmark.py", [*common, "-b", str(shape.batch)], "timm", estimate_s + 3.0, unavailable=why,
                settings=settings)
    compiled_estimate = (STARTUP_S[f.device] + COMPILE_S["default"]
                         + shape.steps * DEFAULT_BATCH / RATES["compiled"] + 3.0)
    compiled = Run("timm benchmark.py compiled", [*common, "-b", "{default_batch}", "--torchcompile"], "timm",
                   compiled_estimate, settings=settings + " --torchcompile (inductor), the default's batch",
                   unavailable=why if f.device == "cuda" else "GPU only (its peer is the GPU default)")
    return eager, compiled


def peers_stage(f: Features) -> Stage:
    shape, device = SHAPES[f.device], f.device
    flags = eager_flags(device)
    est = bench_estimate(device, shape.steps, shape.batch, RATES["channels_last"])
    ours = Run("dlscale bench", dlscale_bench(shape, flags, "peers-dlscale"), "bench", est,
               output="{work}/peers-dlscale-{round}.json", settings=" ".join(flags))
    bare_flags = [*shape.bare_model, "--batch-size", str(shape.batch), *flags,
                  "--num-warmup-batches", str(shape.warmup), "--num-batches-per-iter", str(shape.per_iter),
                  "--num-iters", str(shape.iters)]
    bare = Run("bare loop", ["benchmarks/bare_loop.py", *bare_flags, "--json", "{work}/peers-bare-{round}.json"],
               "bare", est, output="{work}/peers-bare-{round}.json", settings="torchvision resnet, " + " ".join(flags),
               unavailable=None if f.torchvision else "torchvision is not installed here (it is on the CUDA machine)")
    timm, timm_compiled = timm_runs(f, shape, est)
    default = Run("dlscale bench default", ["-m", "dlscale", "bench", "--json", "{work}/peers-default-{round}.json",
                                            "--output-dir", "{work}/runs"], "bench",
                  # compiled from the baseline's inductor cache (WARM_COMPILE_S)
                  bench_estimate(device, 30, shape.batch, RATES["channels_last"], WARM_COMPILE_S) + 10,
                  output="{work}/peers-default-{round}.json", sets="default_batch",
                  settings="no flags: the GPU default (resnet50, batch 512 on a GPU of 40 GiB or more, else 256, "
                           "224 px, bf16 AMP, channels_last, fused SGD, cuDNN autotuning, torch.compile "
                           "reduce-overhead), 10 warm-up steps, 10 x 10 timed",
                  unavailable=None if device == "cuda" else "GPU only (the CPU default is another model and size)")
    return Stage("peers", f"dlscale bench against a bare PyTorch loop and timm's benchmark.py: {WHAT[device]}",
                 PEERS_BUDGET_S[device], [ours, bare, timm, default, timm_compiled],
                 rounds=3 if device == "cuda" else 1, values={"default_batch": str(DEFAULT_BATCH)},
                 ratios=[("dlscale bench", "bare loop"), ("dlscale bench", "timm benchmark.py"),
                         ("dlscale bench default", "timm benchmark.py compiled")],
                 note="eager against eager: dlscale bench, the bare loop and timm with the same model, batch, "
                      "precision and memory layout; compiled against compiled: the GPU default (`dlscale bench` with "
                      "no flags, reduce-overhead) and timm's --torchcompile (inductor's default mode) at the "
                      "default's batch. timm uses its own SGD (foreach, Nesterov), synchronises after every step "
                      "and times the whole loop")


PEERS_BUDGET_S = {"cuda": 360.0, "cpu": 120.0}
"""The peers stage's time: two rounds on a GPU by the estimates (timm's compile from an empty cache in the first)."""


@dataclass(frozen=True)
class Step:
    """One entry of the SC20 progression: what it adds, and its assumed rate and compile time."""

    name: str
    flags: list[str]
    rate: float
    compile_mode: str | None = None
    needs: str | None = None
    """A `dlscale bench` option without which the entry is unavailable."""
    cuda_only: bool = False


def progression_steps(f: Features) -> list[Step]:
    # fused SGD is the default on CUDA: the steps before "fused_sgd" turn it off where bench can.
    off = ["--no-fused-optimizer"] if "--no-fused-optimizer" in f.bench_flags else []
    best = eager_flags(f.device)
    if f.device == "cpu":
        return [Step("fp32", ["--precision", "fp32"], CPU_RATE),
                Step("tf32", [], 0, cuda_only=True), Step("amp_fp16", [], 0, cuda_only=True),
                Step("amp_bf16", [], 0, cuda_only=True),
                Step("channels_last", ["--precision", "fp32", "--channels-last"], CPU_RATE),
                Step("fused_sgd", best, CPU_RATE),
                Step("compile_reduce_overhead", [], 0, cuda_only=True),
                Step("compile_max_autotune", [], 0, cuda_only=True), Step("cuda_graphs", [], 0, cuda_only=True)]
    return [
        Step("fp32", ["--precision", "fp32", *off], RATES["fp32"]),
        Step("tf32", ["--precision", "tf32", *off], RATES["tf32"]),
        Step("amp_fp16", ["--precision", "amp_fp16", *off], RATES["amp"]),
        Step("amp_bf16", ["--precision", "amp_bf16", *off], RATES["amp"]),
        Step("channels_last", ["--precision", "amp_bf16", "--channels-last", *off], RATES["channels_last"]),
        Step("fused_sgd", best, RATES["channels_last"]),
        Step("compile_reduce_overhead", [*best, "--compile", "--compile-mode", "reduce-overhead"],
             RATES["channels_last"], "reduce-overhead", needs="--compile-mode"),
        Step("compile_max_autotune", [*best, "--compile", "--compile-mode", "max-autotune"],
             RATES["channels_last"], "max-autotune", needs="--compile-mode"),
        Step("cuda_graphs", [*best, "--cuda-graphs"], RATES["channels_last"], needs="--cuda-graphs"),
    ]


def progression_stage(f: Features) -> Stage:
    shape, runs = SHAPES[f.device], []
    for step in progression_steps(f):
        warmup = shape.warmup + 5 if step.compile_mode else None  # compilation and graph capture in warm-up
        compile_s = COMPILE_S.get(step.compile_mode or "", 0.0)
        steps = shape.steps + (5 if step.compile_mode else 0)
        run = Run(step.name, dlscale_bench(shape, step.flags, f"progression-{step.name}", warmup=warmup), "bench",
                  bench_estimate(f.device, steps, shape.batch, step.rate or 1.0, compile_s),
                  output=f"{{work}}/progression-{step.name}-{{round}}.json", settings=" ".join(step.flags))
        if step.cuda_only and f.device != "cuda":
            run.unavailable = "GPU only (not in the tiny CPU run)"
        elif step.needs and step.needs not in f.bench_flags:
            run.unavailable = f"this dlscale bench has no {step.needs} yet"
        elif step.flags == eager_flags(f.device):
            run.reuse = "peers/dlscale bench"  # the same command: its figures, not another run
        runs.append(run)
    off = "--no-fused-optimizer" in f.bench_flags
    note = ("each step adds one thing to the one before; the steps before fused_sgd run with --no-fused-optimizer"
            if off else
            "each step adds one thing to the one before; fused_sgd adds --fused-optimizer and --cudnn-benchmark, and "
            "where fused SGD is already dlscale's default on CUDA the steps before it use it too (gpu.json records "
            "each run's fused_optimizer)")
    return Stage("progression", f"The SC20 progression: {WHAT[f.device]}", 10_000.0, runs,
                 chain=True, ratios=[(r.name, runs[0].name) for r in runs[1:]], note=note)


CHOICES = [("bf16", "amp_bf16", 256, []), ("fp16", "amp_fp16", 256, []),
           ("bf16 graphs", "amp_bf16", 256, ["--cuda-graphs"]), ("fp16 graphs", "amp_fp16", 256, ["--cuda-graphs"]),
           ("bf16 b384", "amp_bf16", 384, []), ("bf16 b512", "amp_bf16", 512, []), ("fp16 b512", "amp_fp16", 512, []),
           ("fp16 compile", "amp_fp16", 256, ["--compile-mode", "reduce-overhead"]),
           ("bf16 compile", "amp_bf16", 256, ["--compile-mode", "reduce-overhead"])]
"""(name, precision, batch, extra flags) of the choices stage, each with channels_last, fused SGD and cuDNN
autotuning."""


def choices_stage(f: Features) -> Stage:
    """The measurements behind `dlscale bench`'s GPU default: bf16 against fp16 (cuDNN's NHWC batch
    norm kernels take fp16), eager steps against CUDA-graph replays and torch.compile, batch 256 against
    384 and 512."""
    shape, runs = SHAPES[f.device], []
    if f.device != "cuda":
        return Stage("choices", "What the GPU default is chosen from", 60.0,
                     [Run("bf16", [], "bench", 0.0, unavailable="GPU only (not in the tiny CPU run)")])
    for name, precision, batch, extra in CHOICES:
        flags = ["--precision", precision, "--channels-last", "--fused-optimizer", "--cudnn-benchmark", *extra]
        sized = Shape(shape.model, batch, shape.warmup, shape.per_iter, shape.iters, shape.timm_model,
                      shape.bare_model)
        compiled = "--compile-mode" in extra
        tag = "choices-" + name.replace(" ", "-")
        run = Run(name, dlscale_bench(sized, flags, tag, warmup=shape.warmup + 5 if compiled else None), "bench",
                  bench_estimate("cuda", shape.steps, batch, RATES["channels_last"],
                                 COMPILE_S["reduce-overhead"] if compiled else 0.0),
                  output=f"{{work}}/{tag}-{{round}}.json", settings=" ".join([*flags, "--batch-size", str(batch)]))
        needs = next((flag for flag in ("--cuda-graphs", "--compile-mode") if flag in extra), None)
        if needs and needs not in f.bench_flags:
            run.unavailable = f"this dlscale bench has no {needs} yet"
        elif name == "bf16 compile":
            run.reuse = "peers/dlscale bench default"  # the same configuration: the GPU default
        runs.append(run)
    return Stage("choices", f"What the GPU default is chosen from: {WHAT['cuda']} unless the run says otherwise",
                 300.0, runs, rounds=2, ratios=[(r.name, runs[0].name) for r in runs[1:]],
                 note="not part of the default campaign (--stages peers,choices); every run with channels_last, "
                      "fused SGD and cuDNN autotuning; bf16 compile is the peers stage's dlscale bench default")
