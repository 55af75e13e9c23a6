"""The fast JPEG path against the plain Pillow path: img/s per core of decode +
RandomResizedCrop(224) + horizontal flip, on generated ImageNet-sized JPEGs.

    python benchmarks/loader.py                               # 500x375 and 1024x768 JPEGs, 224 px crops
    python benchmarks/loader.py --sizes 500x375 --crop 160    # a lower training resolution
    python benchmarks/loader.py --write-tree /tmp/jpegs --images 512   # an ImageFolder tree (dlscale data make-jpegs)

The JPEGs are dlscale.data.jpeg_tree's (`dlscale data make-jpegs`): photo-like (noise summed over
octaves, 1/f-like, plus grain) and saved at quality 90: a 500x375 one is about 100 KiB, ImageNet's
mean file size (1.28 M files in ~140 GB) at its typical size. Each size is measured through the train split exactly as
training reads it (ImageFolderSource.load + the train transform of ImageDataset, per-sample
seeded), for decode="plain" and decode="fast" in this process on one thread, interleaved
(plain, fast, plain, fast, ...) so that drift of a shared machine hits both alike.

"Per core" is images / CPU seconds of this process (time.process_time): other processes on
the machine do not inflate it the way they inflate wall time; wall-clock rates are printed
too. The ratio is the median over rounds of fast / plain. Goals: >= 1.5x, >= 250 img/s per core.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from PIL import features

from dlscale.data import transforms as T
from dlscale.data.dataset import ImageDataset
from dlscale.data.imagefolder import imagefolder_sources
from dlscale.data.jpeg_tree import write_tree


def rate(dataset: ImageDataset, keys: list[tuple[int, int]]) -> tuple[float, float]:
    """(images per CPU second, images per wall second) of dataset[key] over keys."""
    cpu, wall = time.process_time(), time.perf_counter()
    for key in keys:
        dataset[key]
    return len(keys) / (time.process_time() - cpu), len(keys) / (time.perf_counter() - wall)


def compare(root: Path, crop: int, rounds: int, passes: int) -> dict:
    datasets = {}
    for decode in ("plain", "fast"):
        train, _, _ = imagefolder_sources(root, decode=decode, image_size=crop)
        datasets[decode] = ImageDataset(train, T.imagenet_train_transform(crop, decode=decode), seed=0)
    count = len(datasets["plain"])
    rates: dict[str, list[tuple[float, float]]] = {"plain": [], "fast": []}
    for r in range(rounds + 1):  # round 0 warms the page cache and the allocators; not counted
        keys = [(r, i) for _ in range(passes) for i in range(count)]
        for decode, dataset in datasets.items():
            measured = rate(dataset, keys)
            if r > 0:
                rates[decode].append(measured)
    diffs = [(datasets["plain"][i].image.float() - datasets["fast"][i].image.float()).abs().mean().item()
             for i in range(min(count, 16))]
    return {
        "plain_cpu": statistics.median(c for c, _ in rates["plain"]),
        "fast_cpu": statistics.median(c for c, _ in rates["fast"]),
        "plain_wall": statistics.median(w for _, w in rates["plain"]),
        "fast_wall": statistics.median(w for _, w in rates["fast"]),
        "ratio_cpu": statistics.median(f[0] / p[0] for p, f in zip(rates["plain"], rates["fast"], strict=True)),
        "ratio_wall": statistics.median(f[1] / p[1] for p, f in zip(rates["plain"], rates["fast"], strict=True)),
        "mean_abs_diff": statistics.mean(diffs),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="500x375,1024x768", help="JPEG sizes WxH, comma-separated")
    p.add_argument("--crop", type=int, default=224, help="RandomResizedCrop output side")
    p.add_argument("--images", type=int, default=48, help="JPEGs per size")
    p.add_argument("--grain", type=float, default=20.0,
                   help="pixel noise std in levels (20: ~100 KiB per 500x375 JPEG, like ImageNet's)")
    p.add_argument("--rounds", type=int, default=7, help="timed rounds per path (median)")
    p.add_argument("--passes", type=int, default=2, help="passes over the images per round")
    p.add_argument("--write-tree", type=Path, default=None, metavar="DIR",
                   help="only write an ImageFolder tree of --images JPEGs of the first size to DIR")
    args = p.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    if args.write_tree is not None:
        written = write_tree(args.write_tree, train=args.images, val=4, size=sizes[0], grain=args.grain)
        print(f"wrote {args.images} JPEGs of {sizes[0][0]}x{sizes[0][1]} ({written.train_bytes / 2**20:.1f} MiB) "
              f"under {args.write_tree}/train")
        return
    torch.set_num_threads(1)  # per core: one decode thread, as in a DataLoader worker
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; {T.pillow_build()} "
          f"(libjpeg-turbo {features.version('libjpeg_turbo')}); torch {torch.__version__}; "
          f"python {platform.python_version()}")
    print(f"crop {args.crop} px; grain {args.grain}; "
          f"{args.rounds} rounds x {args.passes} passes x {args.images} images; "
          "medians; per core = images / CPU s of this process")
    for width, height in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            written = write_tree(Path(tmp), train=args.images, val=4, size=(width, height), grain=args.grain)
            result = compare(Path(tmp), args.crop, args.rounds, args.passes)
        print(f"{width}x{height} ({written.train_bytes / args.images / 1024:.0f} KiB/file): "
              f"plain {result['plain_cpu']:.0f} img/s per core ({result['plain_wall']:.0f} wall), "
              f"fast {result['fast_cpu']:.0f} img/s per core ({result['fast_wall']:.0f} wall); "
              f"fast/plain {result['ratio_cpu']:.2f}x per core ({result['ratio_wall']:.2f}x wall); "
              f"mean |fast - plain| {result['mean_abs_diff']:.2f} of 255", flush=True)


if __name__ == "__main__":
    sys.exit(main())
