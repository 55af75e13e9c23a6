"""`dlscale data check DIR | make-jpegs DIR | download cifar100 DIR`: a data set before a long run reads it.

    dlscale data check /data/imagenet            # classes, images per split, formats, unreadable files, cores per GPU
    dlscale data make-jpegs /tmp/jpegs           # a synthetic ImageNet-shaped JPEG tree to try the pipeline on
    dlscale data download cifar100 /data/cifar   # the python version, its MD5 checked (as --download does)
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import TYPE_CHECKING

from dlscale.cli import numbers, paths
from dlscale.cli.output import write_json_file
from dlscale.errors import ConfigError, shown
from dlscale.metrics.hardware import available_cores
from dlscale.metrics.progress import ProgressDisplay
from dlscale.rundir import check_output_dir, check_output_file, refuse_a_run, storing

if TYPE_CHECKING:
    from dlscale.data.check import DecodeRate, Survey

SHOWN_UNREADABLE = 20
"""Unreadable files listed on the terminal (--json lists every one)."""
DEFAULT_UNIQUE = 256
"""make-jpegs' distinct training images: enough that a loader's page cache and decoder see varied files."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "data", help="check a data set (formats, unreadable files, cores per GPU), make a JPEG tree, download CIFAR",
        description="What a data set holds before a long run reads it, a synthetic JPEG tree to try the pipeline "
        "on, and CIFAR's download with its checksum.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(p))
    check = actions.add_parser(
        "check", help="classes, images per split, formats and sizes, unreadable files, decode rate and cores per GPU",
        description="Survey an ImageFolder tree (train/<class>/*, val/<class>/*) or a CIFAR copy: classes and "
        "images per split, formats (JPEG frame and colour: CMYK, grayscale, progressive; PNG ...), sizes, every "
        "unreadable file (empty, not an image, truncated JPEG), then decode a sample of training files as "
        "training does and say how many cores keep one GPU fed. Exits 1 when it found unreadable files or a "
        "layout the loader refuses.")
    check.add_argument("path", type=paths.PATH, metavar="DIR", help="the data set's root (holding train/ and val/, or "
                       "cifar-100-python/)")
    check.add_argument("--sample", type=numbers.FILES, default=None, metavar="N",
                       help="read the headers of N files per split, evenly spread (default: every file)")
    check.add_argument("--decode-sample", type=numbers.FILES_OR_NONE, default=256, metavar="N",
                       help="training files decoded to time the decode rate per core (256; 0: none)")
    check.add_argument("--image-size", type=numbers.PIXELS, default=224, help="training crop side in pixels (224)")
    check.add_argument("--decode", choices=("fast", "plain"), default="fast",
                       help="the CPU decode path timed (data.decode): fast (reduced-scale where the crop allows) or "
                            "plain")
    check.add_argument("--gpu-rate", type=numbers.RATE, default=None, metavar="IMG_PER_S",
                       help="one GPU's training rate to size cores for (default: the fastest ResNet-50 rate dlscale "
                            "measured on one GPU, references/device_mfu.json); `dlscale bench` measures yours")
    check.add_argument("--json", type=paths.PATH, default=None, help="also write the survey to this file")
    check.set_defaults(run=run_check)
    make = actions.add_parser(
        "make-jpegs", help="write a synthetic ImageNet-shaped ImageFolder tree of JPEGs (to try the pipeline)",
        description="Write DIR/train/class<k>/*.JPEG and DIR/val/class<k>/*.JPEG: photo-like JPEGs of "
        "ImageNet's commonest size and mean file size (500x375, about 100 KiB at quality 90). The labels carry no "
        "signal: the tree measures speed (`dlscale loader --data DIR`, `dlscale train --data DIR`), not accuracy.")
    make.add_argument("path", type=paths.PATH, metavar="DIR", help="where the tree goes (must not hold train/ or val/)")
    make.add_argument("--train", type=numbers.FILES, default=2560, help="training files (2560)")
    make.add_argument("--val", type=numbers.FILES, default=256, help="validation files, all distinct (256)")
    make.add_argument("--classes", type=numbers.CLASSES, default=10,
                      help="class folders; files go to them in turn (10)")
    make.add_argument("--unique", type=numbers.FILES, default=None,
                      help="distinct training images; the rest repeat their bytes under new names (256, or --train "
                           "if fewer)")
    make.add_argument("--size", default="500x375", metavar="WxH",
                      help="image size in pixels (500x375)")
    make.add_argument("--processes", type=numbers.PROCESSES, default=available_cores(),
                      help="processes generating images")
    make.add_argument("--seed", type=numbers.SEED, default=0,
                      help="seed of the generated images: the same seed writes the same tree")
    make.set_defaults(run=run_make)
    download = actions.add_parser(
        "download", help="download CIFAR-10 or CIFAR-100 (the python version), its MD5 checked",
        description="Download the python version of CIFAR-10 or CIFAR-100 into DIR, check its MD5 against the "
        "published one (torchvision's) and unpack it; nothing to do when DIR holds it already. The same as "
        "--download on train and config.")
    download.add_argument("dataset", choices=("cifar10", "cifar100"))
    download.add_argument("path", type=paths.PATH, metavar="DIR", help="where it goes (then data.path / --data)")
    download.add_argument("--url", default=None, help="a mirror's address of the same archive")
    download.add_argument("--md5", default=None, help="the mirror archive's MD5, if it differs from the published one")
    download.set_defaults(run=run_download)


def run_check(args: argparse.Namespace) -> int:
    from dlscale.data.check import decode_rate, survey  # torch: at run time only
    from dlscale.predict.compute import fastest_measured

    if args.json:  # checked before the survey: one line now, not a traceback after it
        check_output_file(args.json, "--json")
    with ProgressDisplay() as bar:
        bar.start("data check", None, unit="files")
        found = survey(args.path, sample=args.sample, progress=lambda done, total: bar.update(
            done, status=f"of {total:,} files"))
    rate, failed = None, []
    if found.kind == "imagefolder" and args.decode_sample and (args.path / "train").is_dir():
        rate, failed = decode_rate(args.path, files=args.decode_sample, image_size=args.image_size,
                                   decode=args.decode)
        known = {path for path, _ in found.unreadable}
        found.unreadable += [(path, reason) for path, reason in failed if path not in known]
    fastest = fastest_measured("resnet50")
    if args.gpu_rate is None and fastest is None:
        raise ConfigError("no ResNet-50 rate is shipped in references/device_mfu.json: give --gpu-rate IMG_PER_S")
    gpu_rate, gpu = (args.gpu_rate, "one GPU") if args.gpu_rate else fastest
    for line in report_lines(found, rate, gpu_rate=gpu_rate, gpu=gpu):
        print(line, flush=True)
    if args.json:
        write_json_file(args.json, as_json(found, rate))
    return 1 if found.unreadable or found.problems else 0


def report_lines(found: Survey, rate: DecodeRate | None, *, gpu_rate: float, gpu: str) -> list[str]:
    from dlscale.data.check import cores_line

    kind = {"imagefolder": "an ImageFolder tree (train/<class>/*, val/<class>/*)",
            "cifar10": "CIFAR-10, the python version", "cifar100": "CIFAR-100, the python version"}[found.kind]
    lines = [f"{found.root}: {kind}",
             "classes: " + ", ".join(f"{len(p.images_per_class):,} in {p.name}/" for p in found.splits)]
    for part in found.splits:
        counts = sorted(part.images_per_class.values()) or [0]
        spread = (f"{counts[0]:,} per class" if counts[0] == counts[-1] else
                  f"{counts[0]:,} to {counts[-1]:,} per class (median {counts[len(counts) // 2]:,})")
        lines.append(f"{part.name}/: {part.images:,} images, {spread}; {_bytes(part.size_bytes)}"
                     + (f" in the {part.surveyed:,} files surveyed" if part.surveyed < part.images else "")
                     + (f"; {len(part.ignored):,} other files the loader ignores (e.g. {part.ignored[0]})"
                        if part.ignored else ""))
    lines += _format_lines(found) + _size_lines(found, rate)
    if found.unreadable:
        lines.append(f"unreadable files: {len(found.unreadable):,}" + (
            f" (the first {SHOWN_UNREADABLE}; --json lists all)" if len(found.unreadable) > SHOWN_UNREADABLE else ""))
        lines += [f"  {path}: {reason}" for path, reason in found.unreadable[:SHOWN_UNREADABLE]]
    lines += [f"problem: {problem}" for problem in found.problems]
    if rate is not None:
        lines.append(f"decode: {rate.files:,} training files through the {rate.decode} path at {rate.image_size} px "
                     f"(decode, random resized crop, flip) in this process on one thread: "
                     f"{rate.images_per_cpu_s:,.0f} img per CPU-s ({1000 / rate.images_per_cpu_s:.2f} CPU-ms "
                     "per image)")
        if rate.per_kind:
            lines.append("  as training batches them: " + ", ".join(
                f"{per:,.0f} img per CPU-s through a {'loader thread' if kind == 'thread' else 'worker process'}"
                for kind, per in rate.per_kind.items()))
        lines.append(cores_line(rate, gpu_rate, available_cores(), gpu=gpu))
    elif found.kind != "imagefolder":
        lines.append("decode: nothing to decode (32x32 arrays held in memory); a few cores per GPU suffice")
    return lines


def _format_lines(found: Survey) -> list[str]:
    formats = sorted({f for p in found.splits for f in p.formats}, key=lambda f: (f == "unreadable", f))
    width = max([len(f) for f in formats] + [6])
    lines = [f"formats ({', '.join(f'{p.surveyed:,} {p.name}' for p in found.splits)} surveyed):",
             f"  {'':<{width}}" + "".join(f"  {p.name:>10}" for p in found.splits)]
    lines += [f"  {name:<{width}}" + "".join(f"  {p.formats.get(name, 0):>10,}" for p in found.splits)
              for name in formats]
    return lines


def _size_lines(found: Survey, rate: DecodeRate | None) -> list[str]:
    from dlscale.data.check import median, percentile

    sides = [s for p in found.splits for s in p.shorter_sides]
    if not sides or found.kind != "imagefolder":
        return []
    sizes = sum((p.sizes for p in found.splits), start=Counter())
    (width, height), count = sizes.most_common(1)[0]
    files = sum(p.surveyed for p in found.splits)
    lines = [f"sizes: shorter side median {median(sides):.0f} px, 10th percentile {percentile(sides, 0.1)}, "
             f"smallest {min(sides)}, largest {max(sides)}; commonest {width}x{height} "
             f"({100 * count / len(sides):.0f}%); mean file {_bytes(sum(p.size_bytes for p in found.splits) / files)}"]
    train = next((p for p in found.splits if p.name == "train"), None)
    size = rate.image_size if rate else 224
    if train and train.shorter_sides:
        large = sum(s >= 2 * size for s in train.shorter_sides)
        lines.append(f"  {100 * large / len(train.shorter_sides):.0f}% of training images have a shorter side of "
                     f"{2 * size} px or more: the fast path may decode them at reduced scale for {size} px crops")
    jpegs, taken = sum(p.jpegs for p in found.splits), sum(p.device_decodable for p in found.splits)
    lines.append(f"  the device decode path (data.decode=gpu) takes {taken:,} of the {files:,} files surveyed"
                 + ("" if taken == files else
                    f"; the CPU decodes the other {files - taken:,} ({jpegs - taken:,} CMYK, grayscale, RGB-coded or "
                    f"other-frame JPEGs, {files - jpegs:,} other images or unreadable files)"))
    return lines


def _bytes(count: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def as_json(found: Survey, rate: DecodeRate | None) -> dict:
    """The survey for --json: counts per split, every unreadable file, the decode rate."""
    from dlscale.data.check import median

    return {"root": found.root, "kind": found.kind, "problems": found.problems,
            "unreadable": [{"path": p, "reason": r} for p, r in found.unreadable],
            "splits": [{"name": p.name, "classes": len(p.images_per_class), "images": p.images,
                        "images_per_class": p.images_per_class, "surveyed": p.surveyed, "bytes": p.size_bytes,
                        "formats": dict(p.formats), "jpegs": p.jpegs, "device_decodable": p.device_decodable,
                        "shorter_side_median": median(p.shorter_sides), "ignored": p.ignored,
                        "sizes": {f"{w}x{h}": n for (w, h), n in p.sizes.most_common(10)}} for p in found.splits],
            "decode": None if rate is None else {"path": rate.decode, "image_size": rate.image_size,
                                                  "files": rate.files, "cpu_s": rate.cpu_s,
                                                  "images_per_cpu_s": rate.images_per_cpu_s,
                                                  "images_per_cpu_s_by_kind": rate.per_kind}}


def run_make(args: argparse.Namespace) -> int:
    from dlscale.data.jpeg_tree import check_shape, write_tree

    size = parse_size(args.size)
    unique = min(DEFAULT_UNIQUE, args.train) if args.unique is None else args.unique
    check_shape(train=args.train, val=args.val, classes=args.classes, unique=unique, size=size)
    refuse_a_run(args.path, "DIR", "a JPEG tree")
    check_output_dir(args.path, "DIR", "the tree's folder")
    for split in ("train", "val"):
        if (args.path / split).exists():
            raise ConfigError(f"{args.path / split} exists; give an empty or new folder (make-jpegs does not add to a "
                              "tree)")
    with storing(args.path, "DIR"):  # a full disk halfway through the tree: one line
        done = write_tree(args.path, train=args.train, val=args.val, classes=args.classes, unique=unique, size=size,
                          seed=args.seed, processes=args.processes)
    print(f"wrote {done.train_files:,} training JPEGs ({done.unique:,} distinct) and {done.val_files:,} validation "
          f"JPEGs of {size[0]}x{size[1]}, {done.mean_kib:.0f} KiB each on average, in {done.classes} classes under "
          f"{args.path} in {done.seconds:.1f} s. Try it: dlscale loader --data {args.path}", flush=True)
    return 0


def parse_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise ConfigError(f"--size {shown(text)}: give WIDTHxHEIGHT in pixels, e.g. 500x375") from None
    return width, height


def run_download(args: argparse.Namespace) -> int:
    from dlscale.data.cifar import CIFAR10, CIFAR100
    from dlscale.data.download import ensure_cifar

    layout = {"cifar10": CIFAR10, "cifar100": CIFAR100}[args.dataset]
    folder = ensure_cifar(args.path, layout, url=args.url, md5=args.md5, out=lambda line: print(line, flush=True))
    print(f"{args.dataset} is in {folder}: --data {args.path}", flush=True)
    return 0
