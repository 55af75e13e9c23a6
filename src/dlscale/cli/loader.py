"""`dlscale loader --data PATH [--workers 0,1,2,4,8,16] [--batch-size 64] ...`: the input pipeline alone."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from dlscale.cli import DefaultsHelpFormatter, numbers, paths
from dlscale.config import DataConfig
from dlscale.config.data import CPU_DECODERS, DATASET_NAMES, DECODE_ALIASES, DECODE_MODES, DECODERS
from dlscale.errors import DataError, DeviceError
from dlscale.metrics.hardware import available_cores, host_memory_bytes
from dlscale.metrics.progress import ProgressDisplay
from dlscale.rundir import RunDir, default_run_name

if TYPE_CHECKING:
    import torch


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "loader", help="input pipeline alone: img/s, GB/s, files/s and CPU per number and kind of workers",
        description="Run a data set's train loader with no model, once per worker count and kind (threads or "
        "processes), and report img/s, speedup, bytes and files read per second (the process's I/O counters) and "
        "CPU use: img per CPU-s compares the kinds' cost per image. "
        "Writes a table, a plot and summary.json (kind: loader) to a run directory.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--data", type=paths.TEXT, default=None, metavar="PATH",
                   help="data set folder (imagefolder: train/<class>/*.JPEG)")
    p.add_argument("--dataset", choices=DATASET_NAMES, default="imagefolder", help="which data set reader")
    p.add_argument("--workers", type=numbers.WORKERS, default="0,1,2,4,8,16",
                   help="worker counts to try, comma-separated (0: the main process decodes, on one thread)")
    p.add_argument("--workers-kind", choices=("both", "thread", "process"), default="both",
                   help="what a worker is (data.workers_kind): loader threads of the process, DataLoader worker "
                        "processes, or each count measured both ways")
    p.add_argument("--batch-size", type=numbers.BATCH, default=64, help="images per batch")
    p.add_argument("--batches", type=numbers.BATCHES, default=50, help="timed batches per setting")
    p.add_argument("--warmup-batches", type=numbers.UNTIMED_BATCHES, default=None,
                   help="untimed batches first (default: 2 per worker, at least 2)")
    p.add_argument("--image-size", type=numbers.PIXELS, default=None,
                   help="training crop side (default: the data set's)")
    p.add_argument("--decode", choices=(*DECODE_MODES, *DECODE_ALIASES), default="fast",
                   help="JPEG decode path (data.decode): fast (also called cpu) and plain decode in the workers; "
                        "gpu decodes on the device (needs --device cuda and torchvision); auto takes gpu where "
                        "it can run, else fast")
    p.add_argument("--decoder", choices=DECODERS, default="auto",
                   help="with --decode gpu: the device's decoder (data.decoder): nvimgcodec, nvjpeg, pillow, or auto "
                        "(nvimgcodec on CUDA where it decodes, else nvjpeg)")
    p.add_argument("--cpu-decoder", choices=CPU_DECODERS, default="auto",
                   help="who decodes the JPEGs the workers decode at full scale (data.cpu_decoder): simplejpeg, "
                        "pillow, or auto (simplejpeg where it imports)")
    p.add_argument("--device-share", type=numbers.SHARE, default=1.0, metavar="SHARE",
                   help="with --decode gpu: the share of the training JPEGs the device decodes, the workers "
                        "the rest (data.device_decode_share; default 1)")
    p.add_argument("--device", choices=("none", "cpu", "cuda"), default="none",
                   help="also copy batches to this device and normalise them there (none: host batches only); "
                        "the device decode path decodes there")
    p.add_argument("--repeats", type=numbers.REPEATS, default=1,
                   help="measure every setting this many times, interleaved, and keep the median run")
    p.add_argument("--prewarm", action="store_true",
                   help="read every training file once first, so that every setting reads from the page cache")
    p.add_argument("--seed", type=numbers.SEED, default=0,
                   help="the seed of the samples' crops and flips and of their order (each setting the same samples)")
    p.add_argument("--out", type=paths.PATH, default=None, metavar="DIR",
                   help="run directory (default: runs/loader-<dataset>-<time>)")
    p.set_defaults(run=run)


def _check(args: argparse.Namespace) -> torch.device | None:
    import torch  # torch and what runs on it: loaded when the command runs, not for --help

    from dlscale.data import cpu_jpeg

    cpu_jpeg.resolve(args.cpu_decoder, "--cpu-decoder")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda but no CUDA device is visible; use --device cpu or none")
    _check_memory(args)
    return None if args.device == "none" else torch.device(args.device)


def _check_memory(args: argparse.Namespace) -> None:
    """The batches in flight against the host's memory: each worker holds DataConfig.prefetch_factor batches of
    3 bytes per pixel, the main process one more and its pinned or device copy (4 bytes per value once
    normalised). One line naming the flags rather than an allocation that cannot succeed."""
    side = args.image_size or (224 if args.dataset == "imagefolder" else 32)  # the data sets' own sizes
    batch_bytes = args.batch_size * 3 * side * side
    in_flight = (max(args.workers) * DataConfig().prefetch_factor + 1) * batch_bytes + 4 * batch_bytes
    host = host_memory_bytes()
    if host is not None and in_flight > host:
        raise DeviceError(f"--batch-size {args.batch_size} at {side} px with up to {max(args.workers)} workers "
                          f"holds {in_flight / 2**30:.1f} GiB of batches in flight; this host has "
                          f"{host / 2**30:.1f} GiB: lower --batch-size, --image-size or --workers")


def run(args: argparse.Namespace) -> int:
    from dlscale.data.device import resolve_decode  # torch: loaded when the command runs, not for --help

    workers = list(args.workers)
    device = _check(args)
    cfg = DataConfig(name=args.dataset, path=args.data, image_size=args.image_size, decode=args.decode,
                     decoder=args.decoder, device_decode_share=args.device_share, cpu_decoder=args.cpu_decoder)
    if args.dataset == "imagefolder":  # refused here, in one line, where the device decoder cannot run
        cfg = cfg.on_path(resolve_decode(cfg.decode, device, cfg.decoder))
    out = RunDir(args.out) if args.out else RunDir(Path("runs") / default_run_name("loader", args.dataset))
    with out.claim("loader", "--out"):  # before the work: a run directory that cannot be written is one line now
        rows, table = _measure(args, cfg, workers, device)
        _write(out, args, cfg, device, rows, table)
    best = max(rows, key=lambda row: row["images_per_s"])
    device_ms = best["device_ms_per_batch"]
    for line in kinds_compared(rows):
        print(line, flush=True)
    print(f"fastest: {loader_bench_label(best)}, {best['images_per_s']:.1f} img/s ({best['speedup']:.2f}x), "
          f"{best['cpu_ms_per_image'] or 0:.3f} CPU-ms per image (main process and workers)"
          + (f", {device_ms:.2f} device-ms per batch" if device_ms is not None else "")
          + "; rchar counts page-cache hits and worker pipes, disk GB/s only storage reads", flush=True)
    print(f"Run directory: {out.path}", flush=True)
    return 0


def _kinds(args: argparse.Namespace) -> list[str]:
    return ["thread", "process"] if args.workers_kind == "both" else [args.workers_kind]


def loader_bench_label(row: dict) -> str:
    kind = row.get("workers_kind", "process")
    return "0 workers (the main process)" if kind == "main" else f"{row['workers']} worker {kind}" + \
        ("es" if kind == "process" and row["workers"] != 1 else "s" if row["workers"] != 1 else "")


def kinds_compared(rows: list[dict]) -> list[str]:
    """Per worker count measured both ways: the threads' images per CPU-second and per second over the processes'
    (the CPU time of a few batches can be too short for /proc's clock ticks: then only the images per second)."""
    lines = []
    for count in sorted({row["workers"] for row in rows if row["workers"] > 0}):
        kinds = {row["workers_kind"]: row for row in rows if row["workers"] == count}
        thread, process = kinds.get("thread"), kinds.get("process")
        if not thread or not process:
            continue
        per_cpu = ("too little CPU time to compare per CPU-second" if not thread["images_per_cpu_s"]
                   or not process["images_per_cpu_s"] else
                   f"{thread['images_per_cpu_s'] / process['images_per_cpu_s']:.2f}x the processes' images per "
                   "CPU-second")
        lines.append(f"{count} workers: threads {per_cpu}, {thread['images_per_s'] / process['images_per_s']:.2f}x "
                     "their images per second")
    return lines


def _measure(args: argparse.Namespace, cfg: DataConfig, workers: list[int],
             device: torch.device | None) -> tuple[list[dict], str]:
    """Every worker count's row, and the table of them."""
    from dlscale.bench import loader as loader_bench
    from dlscale.data import cpu_jpeg
    from dlscale.data.transforms import pillow_build

    if args.prewarm and args.data:
        _prewarm(Path(args.data) / "train" if args.dataset == "imagefolder" else Path(args.data))
    cores = available_cores()
    print(f"{args.dataset} {args.data or ''}: batch {args.batch_size}, {args.batches} timed batches per setting, "
          f"workers as {' and '.join('processes' if k == 'process' else 'threads' for k in _kinds(args))}, "
          f"decode {_said(cfg.decode, device, cfg.device_decode_share, cfg.decoder)}, "
          f"{f'full-scale JPEGs by {cpu_jpeg.name(cfg.cpu_decoder)}, ' if _draft_path(args, cfg) else ''}"
          f"{pillow_build()}, {cores} cores",
          flush=True)
    if max(workers) > cores:
        print(f"note: settings of more than {cores} workers oversubscribe this machine's {cores} cores", flush=True)
    in_flight = max(workers) * cfg.prefetch_factor
    if args.batches < 4 * in_flight:
        print(f"note: {max(workers)} workers hold up to {in_flight} batches in flight, decoded partly before the "
              f"timer starts; with {args.batches} timed batches that setting's rate can read high "
              f"(--batches {4 * in_flight} or more keeps the error under a quarter)", flush=True)
    print(loader_bench.format_header(), flush=True)

    def measured(row: dict) -> None:
        print(loader_bench.format_row(row), flush=True)
        bar.update(advance=1, status=f"{loader_bench_label(row)}: {row['images_per_s']:.1f} img/s", redraw=True)

    # No drawing thread: the process's CPU time is part of what is measured.
    with ProgressDisplay() as bar:
        settings = loader_bench.settings_of(workers, _kinds(args))
        bar.start("loader", len(settings) * args.repeats, unit="settings")
        rows = loader_bench.sweep(cfg, workers, batch_size=args.batch_size, batches=args.batches,
                                  warmup=args.warmup_batches, device=device, seed=args.seed, repeats=args.repeats,
                                  kinds=_kinds(args), on_row=measured)
    table = "\n".join([loader_bench.format_header(), *map(loader_bench.format_row, rows)])
    if args.repeats > 1:
        print(f"median of {args.repeats} runs per setting:\n{table}", flush=True)
    return rows, table


def _draft_path(args: argparse.Namespace, cfg: DataConfig) -> bool:
    """Whether the workers decode JPEGs at reduced scale where they can, and so data.cpu_decoder's at full scale."""
    return args.dataset == "imagefolder" and cfg.decode != "plain"


def _prewarm(root: Path) -> None:
    try:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                with open(path, "rb") as file:
                    while file.read(1 << 20):
                        pass
    except OSError as error:
        raise DataError(f"--prewarm: {error.filename or root} cannot be read ({error.strerror or error})") from None


def _said(decode: str, device: torch.device | None, share: float = 1.0, decoder: str = "auto") -> str:
    from dlscale.data.device import decoder_name

    if decode != "gpu" or device is None:
        return decode
    shared = f", {share:.0%} of the training JPEGs, the workers the rest" if share < 1 else ""
    return f"gpu ({decoder_name(device, decoder)} on {device}{shared})"


def _write(out: RunDir, args, cfg: DataConfig, device, rows: list[dict], table: str) -> None:
    import torch

    from dlscale.bench import loader as loader_bench
    from dlscale.data.transforms import pillow_build
    from dlscale.distributed import DistEnv
    from dlscale.metrics.run import environment_info

    settings = {"dataset": args.dataset, "data": args.data, "batch_size": args.batch_size, "batches": args.batches,
                "repeats": args.repeats, "warmup_batches": args.warmup_batches, "image_size": args.image_size,
                "decode": cfg.decode, "decode_asked": args.decode, "decoder": args.decoder,
                "cpu_decoder": args.cpu_decoder,
                "device_decode_share": cfg.device_decode_share,
                "device": args.device, "prewarm": args.prewarm, "workers": [row["workers"] for row in rows],
                "workers_kinds": _kinds(args)}
    out.write_setup({"kind": "loader", **settings}, environment_info(1, device or torch.device("cpu"),
                                                                      DistEnv().launcher))
    out.finish({"kind": "loader", **settings, "world_size": 1, "pillow": pillow_build(), "cores": available_cores(),
                "settings": rows, "columns": [key for _, key, _ in loader_bench.COLUMNS]})
    out.write_text("loader.txt", table + "\n")
    loader_bench.plot(rows, out.path / "loader.png", f"{args.dataset}: batch {args.batch_size}, decode {cfg.decode}")
