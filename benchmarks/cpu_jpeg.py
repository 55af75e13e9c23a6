"""The CPU path's JPEG decoder, simplejpeg against Pillow (data.cpu_decoder): images per CPU-second, alternated.

    python benchmarks/cpu_jpeg.py                                 # dlscale data make-jpegs' tree, made in a temp folder
    python benchmarks/cpu_jpeg.py --data TREE --rounds 6 --json cpu-jpeg.json
    python benchmarks/cpu_jpeg.py --train-rounds 2                # also dlscale train's rate with each decoder

Each round measures, with each decoder and in a rotated order (so that drift of a shared machine hits both alike),
the train split of a JPEG tree through the fast decode path at --crop px (full-scale decodes where the files' shorter
side is under 2 x --crop: all of make-jpegs' 500 x 375 files at 224 px):

    one thread      the data set's samples one after another in this process, on one intra-op thread
    threads         the loader's --workers threads (data.workers_kind=thread), as `dlscale loader` measures
    processes       the loader's --workers worker processes (data.workers_kind=process)

and reports the medians over rounds of simplejpeg / Pillow within each round, in images per CPU-second (the CPU
time of this process and its worker processes) and in wall time. --train-rounds N also runs `dlscale train` (ResNet-18
of width 16 at --train-size px, loader threads, --train-steps steps) N times with each decoder, alternated, and
reports the images per second of each.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from importlib.metadata import version
from pathlib import Path

from input_threads import jpeg_tree, loader_arguments, one_thread, short_git_sha, train_rounds, tree_shape

from dlscale.bench.loader import measure_setting
from dlscale.config import DataConfig
from dlscale.data.transforms import pillow_build

DECODERS = ("pillow", "simplejpeg")
SETTINGS = ("one thread", "threads", "processes")


def measure(cfg: DataConfig, setting: str, *, workers: int, batch_size: int, batches: int, seed: int) -> dict:
    if setting == "one thread":
        return one_thread(cfg, images=batch_size * batches, seed=seed)
    kind = {"threads": "thread", "processes": "process"}[setting]
    row = measure_setting(replace(cfg, num_workers=workers, workers_kind=kind), batch_size=batch_size,
                          batches=batches, warmup=2 * workers, seed=seed)
    return {key: row[key] for key in ("images_per_cpu_s", "images_per_s")}


def one_round(cfg: DataConfig, k: int, *, workers: int, batch_size: int, batches: int) -> dict[str, dict]:
    pairs = [(setting, decoder) for setting in SETTINGS for decoder in DECODERS]
    figures: dict[str, dict] = {}
    for setting, decoder in pairs[k % len(pairs):] + pairs[:k % len(pairs)]:
        said = measure(replace(cfg, cpu_decoder=decoder), setting, workers=workers, batch_size=batch_size,
                       batches=batches, seed=k)
        figures[f"{setting}, {decoder}"] = said
        print(f"  {setting:>10}, {decoder:>10}: {said['images_per_cpu_s']:7.1f} img/CPU-s, "
              f"{said['images_per_s']:7.1f} img/s", flush=True)
    return figures


def ratios(rounds: list[dict[str, dict]]) -> dict[str, float]:
    """simplejpeg / Pillow of each setting: the median over rounds of the ratio within each round."""
    found = {}
    for setting in SETTINGS:
        for key, unit in (("images_per_cpu_s", "img per CPU-s"), ("images_per_s", "img/s")):
            within = [r[f"{setting}, simplejpeg"][key] / r[f"{setting}, pillow"][key] for r in rounds]
            found[f"{setting}: simplejpeg / pillow, {unit}"] = statistics.median(within)
    return found


def main(argv: list[str] | None = None) -> int:
    p = loader_arguments(__doc__, rounds=6)
    p.add_argument("--train-rounds", type=int, default=0, help="dlscale train runs per decoder (0: none)")
    p.add_argument("--train-size", type=int, default=192, help="dlscale train's image size (192: full-scale decodes)")
    p.add_argument("--train-steps", type=int, default=40, help="dlscale train's steps of 32 images (40)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        tree = jpeg_tree(args.data, scratch)
        cfg = DataConfig(name="imagefolder", path=str(tree), image_size=args.crop, decode="fast")
        load_start = os.getloadavg()[0]
        print(f"{tree}: {args.workers} workers, batch {args.batch_size}, {args.batches} batches per setting, "
              f"{args.crop} px, {pillow_build()}, {os.cpu_count()} cores, load {load_start:.1f}", flush=True)
        rounds = []
        for k in range(args.rounds):
            print(f"round {k + 1} (load {os.getloadavg()[0]:.1f})", flush=True)
            rounds.append(one_round(cfg, k, workers=args.workers, batch_size=args.batch_size, batches=args.batches))
        result = {"command": " ".join(["python", "benchmarks/cpu_jpeg.py", *(argv or sys.argv[1:])]),
                  "date": time.strftime("%Y-%m-%d"), "git_sha": short_git_sha(), "load_start": load_start,
                  "setup": {"workers": args.workers, "batch_size": args.batch_size, "batches": args.batches,
                            "crop": args.crop, "pillow": pillow_build(), "simplejpeg": version("simplejpeg"),
                            "torch": version("torch"), "cpu": platform.processor() or platform.machine(),
                            "cores": os.cpu_count(), "tree": tree_shape(tree)},
                  "rounds": rounds, "ratios": ratios(rounds)}
        for name, value in result["ratios"].items():
            print(f"{name:>48}: {value:.3f}", flush=True)
        if args.train_rounds:
            sets = (f"data.image_size={args.train_size}", f"max_steps_per_epoch={args.train_steps}")
            result["train"] = train_rounds(tree, Path(scratch), args.train_rounds,
                                           {d: ("thread", (*sets, f"data.cpu_decoder={d}")) for d in DECODERS},
                                           workers=args.workers, ratio=("simplejpeg / pillow, img/s", "simplejpeg",
                                                                        "pillow"))
        result["load_end"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
