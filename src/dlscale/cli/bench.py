"""`dlscale bench`: the synthetic-data benchmark, flag names as in Horovod's and BlueFog's."""

from __future__ import annotations

import argparse
import functools
from dataclasses import replace
from pathlib import Path

from dlscale.cli import DefaultsHelpFormatter, numbers, paths
from dlscale.cli.common import add_strategy_arguments, say_if_not_the_models_speed, strategy_from_args
from dlscale.cli.output import claim_outputs, write_summary_file
from dlscale.cli.tracking import add_tracking_arguments, tracking_from_args
from dlscale.config import PRECISIONS, BenchConfig, StrategyConfig
from dlscale.errors import ConfigError
from dlscale.metrics.tracking import track_finished
from dlscale.speed import COMPILE_MODES, SpeedOptions

# Used when no --model is given on a machine without a GPU: finishes in well under two minutes
# on 2 cores (docs/benchmarks.md has its rate there: "dlscale bench against a bare PyTorch loop").
CPU_QUICK = {"model": "resnet50", "batch_size": 16, "image_size": 128, "num_warmup_batches": 3,
             "num_batches_per_iter": 3, "num_iters": 10}
GPU_FULL = {"model": "resnet50", "batch_size": 256, "image_size": 224}
GPU_LARGE_BATCH = 512
"""The GPU default's batch where the device has LARGE_BATCH_MEMORY_GIB: compiled on an H100, it beat batch 256 in
every alternated window (docs/benchmarks.md, "Why the GPU default is what it is")."""
LARGE_BATCH_MEMORY_GIB = 40.0
"""Device memory from which the default takes GPU_LARGE_BATCH: its peak at batch 512 with room for the allocator and
other processes; below it, batch 256 fits a 16 GB GPU (docs/benchmarks.md has both peaks)."""
GPU_FASTEST = SpeedOptions(channels_last=True, cudnn_benchmark=True, fused_optimizer=True, compile=True,
                           compile_mode="reduce-overhead")
"""The speed options of the GPU default: the fastest measured on an H100 (docs/benchmarks.md, "Why the GPU default
is what it is"). torch.compile's reduce-overhead mode replays the step's forward and backward as two CUDA graphs;
it ran ahead of every eager configuration, the eager step replayed as one CUDA graph (--cuda-graphs) included, and
the stem padded to 4 channels did not help."""
GPU_MULTI_RANK_FASTEST = GPU_FASTEST
"""The speed options of the GPU default when the job has several ranks, so DDP wraps the model: the one-GPU
default. With the DDP wrapper forced on one rank of an H100 (a one-rank NCCL group, --wrap-single-rank),
reduce-overhead replayed its CUDA graphs and ran ahead of compile's default mode and eager fp16, alternated in one
run (docs/benchmarks.md, "DDP and torch.compile on one GPU"). PyTorch's tracker reports BatchNorm + DDP +
reduce-overhead far slower than eager (pytorch/pytorch#139207); that was not seen on one rank. Not measured:
several GPUs, NVLink, several nodes."""


def gpu_default_batch(memory_gib: float | None) -> tuple[int, str]:
    """The GPU default's batch for a device of `memory_gib` (None: unknown), and why."""
    if memory_gib is not None and memory_gib >= LARGE_BATCH_MEMORY_GIB:
        return GPU_LARGE_BATCH, (f"{memory_gib:.0f} GiB of device memory holds it; 1.044x batch 256 compiled on "
                                 "an H100")
    held = "unknown device memory" if memory_gib is None else f"{memory_gib:.0f} GiB of device memory"
    return GPU_FULL["batch_size"], (f"{held}: batch {GPU_LARGE_BATCH} (23.3 GB peak) needs "
                                    f"{LARGE_BATCH_MEMORY_GIB:.0f} GiB")


def device_memory_gib() -> float | None:
    """This process's first CUDA device's memory in GiB, None without CUDA."""
    import torch  # here and below: torch is loaded when the command runs, not for --help

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 2**30


def gpu_amp() -> str:
    """The AMP mode a user would pick on this process's GPU (bf16 where supported, else fp16)."""
    import torch

    from dlscale.precision import default_precision

    return default_precision(torch.device("cuda"))


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "bench", help="synthetic-data training throughput (img/s +- 95%%) on one or many ranks",
        description="Synthetic-data training benchmark. Run under torchrun for several ranks: "
        "torchrun --standalone --nproc_per_node N -m dlscale bench ...",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--model", default=None, help="model name (see `dlscale models`); "
                   "none: a configuration that suits this machine, saying what it chose")
    p.add_argument("--batch-size", type=numbers.BATCH_LIST, default=None, metavar="B[,B...]",
                   help="images per rank per step (32 if --model is given); a list (16,32,64) measures each in turn "
                        "and writes the step time per batch to summary.json's batch_curve")
    p.add_argument("--num-warmup-batches", type=numbers.UNTIMED_STEPS, default=None, help="untimed steps (10)")
    p.add_argument("--num-batches-per-iter", type=numbers.STEPS, default=None, help="steps per timed iteration (10)")
    p.add_argument("--num-iters", type=numbers.STEPS, default=None, help="timed iterations (10)")
    p.add_argument("--num-classes", type=numbers.CLASSES, default=1000,
                   help="classes of the random labels: the width of the model's last layer")
    p.add_argument("--image-size", type=numbers.PIXELS, default=None, help="input size in pixels (224)")
    p.add_argument("--width", type=numbers.WIDTH, default=64,
                   help="base channel count; small values give tiny test models")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="fp32 if --model is given, else the device's best AMP mode")
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    p.add_argument("--fused-optimizer", action=argparse.BooleanOptionalAction, default=None,
                   help="torch's fused SGD (default: fused on GPUs, torch's default SGD on the CPU)")
    p.add_argument("--cudnn-benchmark", action="store_true", help="cuDNN autotuning (GPU)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--compile-mode", choices=COMPILE_MODES, default=None,
                   help="torch.compile's mode (implies --compile): reduce-overhead and max-autotune replay CUDA graphs")
    p.add_argument("--coordinate-descent-tuning", action="store_true",
                   help="with --compile: inductor times neighbouring block sizes of each generated kernel "
                        "(a longer compile)")
    p.add_argument("--cudnn-benchmark-limit", type=numbers.CUDNN_LIMIT, default=None, metavar="N",
                   help="with --cudnn-benchmark: cuDNN algorithms timed per convolution (torch's default 10; 0: all)")
    p.add_argument("--stem-channels", type=numbers.STEM, default=0, metavar="C",
                   help="run the stem convolution on C input channels, zero-padded (MLPerf pads 3 to 4); 0: no padding")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="capture the whole eager train step in one CUDA graph after warm-up and replay it (one GPU; "
                        "not with --compile)")
    add_strategy_arguments(p)
    p.add_argument("--wrap-single-rank", action="store_true",
                   help="wrap the model in DDP even on one rank (a one-rank process group; NCCL on a GPU): "
                        "what the wrapper costs (strategy.wrap_single_rank)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: this rank's GPU when CUDA is visible, else the CPU")
    p.add_argument("--pool-batches", type=numbers.POOL, default=8, help="distinct random batches on the device")
    p.add_argument("--seed", type=numbers.SEED, default=0,
                   help="seed of the weights and the synthetic batches (rank r uses seed + r)")
    p.add_argument("--pg-timeout", type=numbers.PG_TIMEOUT, default=600.0,
                   help="seconds before a stuck collective fails")
    p.add_argument("--price-per-device-hour", type=numbers.PRICE, default=None, metavar="PRICE",
                   help="what one device costs for one hour: prints the cost of an ImageNet epoch at the measured rate")
    p.add_argument("--json", type=paths.PATH, default=None, help="also write the summary object to this file")
    p.add_argument("--output-dir", type=paths.PATH, default=Path("runs"), help="root of run directories")
    p.add_argument("--name", type=paths.TEXT, default=None,
                   help="run directory name (default: from model, precision, time)")
    add_tracking_arguments(p)
    p.set_defaults(run=run)


def config_from_args(args: argparse.Namespace, *, has_gpu: bool, eager: bool = False,
                     world_size: int = 1, memory_gib: float | None = None) -> tuple[BenchConfig, str | None]:
    """The BenchConfig the flags describe, and a note when the machine chose the defaults. eager: the GPU
    default without torch.compile (what `dlscale profile` times part by part); world_size: the job's ranks
    (several take GPU_MULTI_RANK_FASTEST); memory_gib: the device's memory (None: this process's first CUDA
    device's, if any), which sets the default batch (gpu_default_batch)."""
    chosen: dict = {}
    note = None
    if args.model is None:
        if has_gpu:
            batch, why = gpu_default_batch(memory_gib if memory_gib is not None else device_memory_gib())
            chosen = dict(GPU_FULL, batch_size=batch)
            compiled = not (eager or args.cuda_graphs)  # --cuda-graphs is the eager graph path
            fastest = GPU_MULTI_RANK_FASTEST if world_size > 1 else GPU_FASTEST
            speed = fastest if compiled else replace(fastest, compile=False, compile_mode="default")
            amp = args.precision or gpu_amp()
            note = (f"No --model given: on this GPU the default is the fastest configuration measured: resnet50, "
                    f"batch {batch} ({why}), 224 px, {amp}, channels_last, fused SGD, cuDNN autotuning"
                    + (f", torch.compile {speed.compile_mode} (compiling takes about a minute; the eager step: "
                       f"--model resnet50 --batch-size {batch} --image-size 224 --precision {amp} --channels-last "
                       "--cudnn-benchmark)." if compiled else ".")
                    + ("\n" + multi_rank_default_line(world_size) if compiled and world_size > 1 else ""))
        else:
            chosen = dict(CPU_QUICK)
            speed = SpeedOptions()
            note = ("No --model given: this machine has no GPU, so a quick CPU run was chosen "
                    "(resnet50, batch 16, 128 px, 3 warm-up steps, 10 iterations of 3 steps). "
                    "The full-size run: dlscale bench --model resnet50 --batch-size 32 --image-size 224")
    else:
        speed = SpeedOptions()
    speed = replace(
        speed,
        channels_last=speed.channels_last or args.channels_last,
        cudnn_benchmark=speed.cudnn_benchmark or args.cudnn_benchmark,
        fused_optimizer=speed.fused_optimizer if args.fused_optimizer is None else args.fused_optimizer,
        compile=speed.compile or args.compile or args.compile_mode is not None,
        compile_mode=args.compile_mode or speed.compile_mode,
        cuda_graphs=args.cuda_graphs,
        coordinate_descent_tuning=args.coordinate_descent_tuning,
        cudnn_benchmark_limit=args.cudnn_benchmark_limit,
        stem_channels=args.stem_channels or speed.stem_channels,
    )
    given = {
        "model": args.model, "batch_size": single_batch_size(args.batch_size), "image_size": args.image_size,
        "num_warmup_batches": args.num_warmup_batches, "num_batches_per_iter": args.num_batches_per_iter,
        "num_iters": args.num_iters,
    }
    fields = {**chosen, **{k: v for k, v in given.items() if v is not None}}
    precision = args.precision
    if precision is None:
        precision = gpu_amp() if (args.model is None and has_gpu) else "fp32"
    cfg = BenchConfig(
        **fields, num_classes=args.num_classes, width=args.width, precision=precision, speed=speed,
        strategy=strategy_from_args(args, StrategyConfig(wrap_single_rank=getattr(args, "wrap_single_rank", False))),
        device=args.device, pool_batches=args.pool_batches,
        seed=args.seed, pg_timeout_s=args.pg_timeout, price_per_device_hour=args.price_per_device_hour,
    )
    return cfg, note


def multi_rank_default_line(world_size: int) -> str:
    """Which speed options the GPU default takes for several ranks, and why."""
    mode = GPU_MULTI_RANK_FASTEST.compile_mode if GPU_MULTI_RANK_FASTEST.compile else "none (eager)"
    measured = "the fastest under DDP as measured"
    why = ("as on one GPU: the fastest with DDP's wrapper on one H100 (0.977x unwrapped; compile's default mode "
           "0.963x, eager fp16 0.835x)" if GPU_MULTI_RANK_FASTEST == GPU_FASTEST else measured)
    return (f"With {world_size} ranks (DDP) the default compiles in mode {mode}, {why} (docs/benchmarks.md, "
            "\"DDP and torch.compile on one GPU\"); compile's default mode: --compile-mode default.")


def parse_batch_sizes(value: tuple[int, ...] | int | None) -> tuple[int, ...] | None:
    """--batch-size as parsed (numbers.BATCH_LIST: `16,32,64` -> (16, 32, 64), each checked), or one batch
    size -> a 1-tuple; None stays None."""
    if value is None:
        return None
    return (value,) if isinstance(value, int) else tuple(value)


def single_batch_size(value: tuple[int, ...] | int | None) -> int | None:
    """The one batch size of --batch-size; a list is for `dlscale bench` alone (one line otherwise)."""
    sizes = parse_batch_sizes(value)
    if sizes is not None and len(sizes) > 1:
        raise ConfigError(f"--batch-size {','.join(map(str, sizes))}: a list of batch sizes is measured by "
                          "`dlscale bench` alone; give one batch size here")
    return sizes[0] if sizes else None


def _configs(args: argparse.Namespace, has_gpu: bool, world_size: int = 1) -> tuple[list[BenchConfig], str | None]:
    """One BenchConfig per batch size of --batch-size (one when it names one or none)."""
    sizes = parse_batch_sizes(args.batch_size) or (None,)
    made = [config_from_args(argparse.Namespace(**{**vars(args), "batch_size": b}), has_gpu=has_gpu,
                             world_size=world_size) for b in sizes]
    return [cfg for cfg, _ in made], made[0][1]


def run(args: argparse.Namespace) -> int:
    import torch

    from dlscale.bench.curve import curve_lines, run_curve
    from dlscale.bench.synthetic import run_bench, run_name, write_run
    from dlscale.distributed import DistEnv, shutdown

    env = DistEnv.from_env()
    has_gpu = args.device != "cpu" and torch.cuda.is_available()
    cfgs, note = _configs(args, has_gpu, env.world_size)
    tracking = tracking_from_args(args, args.output_dir)
    run_dir = claim_outputs(args.output_dir, args.name or run_name(cfgs[-1], env), args.json, "bench",
                            is_main=env.is_main)
    if note and env.is_main:
        print(note, flush=True)
    say = functools.partial(print, flush=True)
    try:
        summary = run_bench(cfgs[0], env, out=say) if len(cfgs) == 1 else run_curve(cfgs, env, out=say)
        if env.is_main:
            cfg = next(c for c in cfgs if c.batch_size == summary["batch_size"])
            config = write_run(run_dir, cfg, env, summary)
            say_if_not_the_models_speed(run_dir.path, "the img/sec figures above are")
            _print_extras(summary)
            if "batch_curve" in summary:
                say("\n".join([*curve_lines(summary["batch_curve"]), f"The figures above and summary.json's top "
                                f"level are batch {summary['batch_size']}'s, the largest"]))
            print(f"Run directory: {run_dir.path}", flush=True)
            if args.json:
                write_summary_file(args.json, summary)
    finally:
        shutdown()
        if run_dir is not None:
            run_dir.release()
    if env.is_main:  # after the measurement and the process group: MLflow holds up no rank
        track_finished(tracking, run_dir.path, kind="bench", settings=config,
                       steps=iteration_metrics(summary), summary=summary)
    return 0


def iteration_metrics(summary: dict) -> list[tuple[int, dict]]:
    """Each timed iteration's rates, at its index: the total and every rank's (what the +- is over)."""
    per_rank = summary["iterations_per_rank"]
    return [(i, {"iteration/total_img_per_s": total,
                 **{f"iteration/rank{r}_img_per_s": rates[i] for r, rates in enumerate(per_rank)}})
            for i, total in enumerate(summary["iterations"])]


def _print_extras(summary: dict) -> None:
    # A compiled run whose CUDA graphs never replayed printed one line instead of its rate: no rates here either.
    rated = (summary.get("compile_facts") or {}).get("cudagraphs_replayed") is not False
    if rated:
        print(f"Compute img/sec (data wait excluded): {summary['compute_ips']:.1f}", flush=True)
    if summary["world_size"] > 1:
        time_ms = summary["comm_time_ms_per_step"]
        timing = f"{time_ms:.2f} ms per step (slowest rank)" if time_ms is not None else "time overlapped with backward"
        print(f"Communication ({summary['dist_optimizer']}): {timing}, "
              f"{summary['comm_bytes_per_step'] / 1e6:.2f} MB sent per rank per step ({summary['comm_bytes_basis']})",
              flush=True)
    gib = summary["peak_memory_bytes"] / 2**30
    print(f"Peak memory ({summary['peak_memory_kind']}): {gib:.2f} GiB", flush=True)
    if summary["energy_j"] is not None:
        print(f"Energy: {summary['avg_power_w']:.1f} W per GPU, "
              f"{summary['joules_per_image']:.3f} J/img ({summary['energy_method']}, NVML)", flush=True)
    if summary["cost_per_imagenet_epoch"] is not None:
        print(f"Cost: {summary['cost_per_imagenet_epoch']:.2f} per ImageNet epoch (1,281,167 images) at "
              f"{summary['price_per_device_hour']:g} per device-hour", flush=True)
    if summary["mfu"] is not None and rated:
        print(f"MFU: {100 * summary['mfu']:.1f}% of {summary['peak_tflops']:.1f} TFLOP/s "
              f"({summary['train_gflops_per_image']:.2f} GFLOP per image trained)", flush=True)
