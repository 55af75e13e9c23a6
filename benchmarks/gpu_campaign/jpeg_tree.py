"""Write an ImageFolder tree of ImageNet-sized JPEGs for the campaign's real-data stage:

    PYTHONPATH=src python3 benchmarks/gpu_campaign/jpeg_tree.py DIR --unique 256 --train 10240 --val 64

`--unique` photo-like JPEGs (dlscale.data.jpeg_tree, the generator of `dlscale data make-jpegs`: 500x375
at quality 90 is about 100 KiB, ImageNet's mean file) are made in parallel; the training split repeats
their bytes under new names up to `--train` files (decoding costs the same for a copy, and writing copies
takes seconds where generating takes minutes). Classes get files in turn; val/ has `--val` unique files.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dlscale.data.jpeg_tree import write_tree


def write(root: Path, *, unique: int, train: int, val: int, classes: int, size: tuple[int, int],
          processes: int) -> dict:
    done = write_tree(root, train=train, val=val, classes=classes, unique=unique, size=size, processes=processes)
    return {"train_files": train, "val_files": val, "unique": unique, "classes": classes,
            "mean_kib": done.mean_kib, "train_gib": done.train_bytes / 2**30, "seconds": done.seconds}


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
