"""Write an ImageFolder tree of ImageNet-sized JPEGs for the campaign's real-data stage:

    PYTHONPATH=src python3 benchmarks/gpu_campaign/jpeg_tree.py DIR --unique 256 --train 10240 --val 64

`--unique` photo-like JPEGs (benchmarks/loader.py's generator: 500x375 at quality 90 is about
100 KiB, ImageNet's mean file) are made in parallel; the training split repeats their bytes under
new names up to `--train` files (decoding costs the same for a copy, and writing copies takes
seconds where generating takes minutes). Classes get files in turn; val/ has `--val` unique files.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for loader.py

from loader import photo_like  # noqa: E402


def _encode(job: tuple[Path, int, int, int]) -> int:
    path, width, height, seed = job
    photo_like(width, height, seed).save(path, quality=90)
    return path.stat().st_size


def write(root: Path, *, unique: int, train: int, val: int, classes: int, size: tuple[int, int],
          processes: int) -> dict:
    started = time.perf_counter()
    jobs = []
    for split, count, offset in (("train", unique, 0), ("val", val, 10**6)):
        for index in range(count):
            folder = root / split / f"class{index % classes}"
            folder.mkdir(parents=True, exist_ok=True)
            jobs.append((folder / f"{index:07d}.JPEG", *size, offset + index))
    with Pool(processes) as pool:
        sizes = pool.map(_encode, jobs, chunksize=4)
    sources = [path for path, *_ in jobs[:unique]]
    for index in range(unique, train):
        source = sources[index % unique]
        (root / "train" / f"class{index % classes}" / f"{index:07d}.JPEG").write_bytes(source.read_bytes())
    train_bytes = sum(sizes[:unique]) * train / unique
    return {"train_files": train, "val_files": val, "unique": unique, "classes": classes,
            "mean_kib": sum(sizes) / len(sizes) / 1024, "train_gib": train_bytes / 2**30,
            "seconds": time.perf_counter() - started}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("root", type=Path)
    p.add_argument("--unique", type=int, default=256)
    p.add_argument("--train", type=int, default=10240)
    p.add_argument("--val", type=int, default=64)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--size", default="500x375", help="WxH")
    p.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    args = p.parse_args()
    if args.train < args.unique or args.unique < args.classes or args.val < args.classes:
        p.error("need --train >= --unique >= --classes and --val >= --classes")
    width, height = (int(v) for v in args.size.split("x"))
    done = write(args.root, unique=args.unique, train=args.train, val=args.val, classes=args.classes,
                 size=(width, height), processes=args.processes)
    print(f"wrote {done['train_files']} training JPEGs ({done['unique']} distinct, {done['mean_kib']:.0f} KiB "
          f"each, {done['train_gib']:.2f} GiB) and {done['val_files']} validation JPEGs of {width}x{height} "
          f"in {args.classes} classes under {args.root} in {done['seconds']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
