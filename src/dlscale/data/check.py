"""What a data set holds before a long run reads it (`dlscale data check DIR`).

An ImageFolder tree (train/<class>/*, val/<class>/*) is surveyed file by file from each file's first
HEAD_BYTES and last TAIL_BYTES: the JPEG header (data.jpeg.jpeg_header: frame, colour, size) or, for
other images, Pillow's lazy open; a JPEG without an end-of-image marker in its tail is read whole and
checked as the loader checks it (jpeg_is_complete). So a check reads a small part of each file and
finds empty, unidentifiable and truncated files; a file corrupt in the middle of its scan data is found
only by decoding it, which the decode sample does (decode_rate). A CIFAR copy is read batch by batch
as the loader reads it (cifar.read_batch). decode_rate times the training path itself (the source's load and
the train transform, one thread) on a sample of the training files: the decode rate per core, from which
cores_line says how many cores keep one GPU fed.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import DataLoader

from dlscale.data import cpu_jpeg as cpu_jpeg_module
from dlscale.data.cifar import CIFAR10, CIFAR100, CifarLayout, cifar_folder, load_pickle, read_batch
from dlscale.data.dataset import ImageDataset, collate_samples, seeded_generator
from dlscale.data.imagefolder import IMAGE_EXTENSIONS, ImageFolderSource, scan
from dlscale.data.jpeg import device_decodable, jpeg_header, jpeg_is_complete
from dlscale.data.loader import seed_worker
from dlscale.data.source import BadSample
from dlscale.data.threads import ThreadLoader
from dlscale.data.transforms import imagenet_train_transform
from dlscale.errors import DataError
from dlscale.metrics.input_bound import cores_for_rate, cores_said
from dlscale.metrics.proc_io import sum_counters

HEAD_BYTES = 16 * 1024
"""Read first: a JPEG's header segments (EXIF included) nearly always end well before 16 KiB; a file whose
frame is not found in them is read whole."""
TAIL_BYTES = 1024
"""Read last: where a complete JPEG's end-of-image marker is (only junk after it would push it further)."""
SPLITS = ("train", "val")
FRAMES = {0xC0: "baseline", 0xC1: "extended", 0xC2: "progressive"}
"""Start-of-frame markers by name; the others (lossless, hierarchical, arithmetic-coded) are "other frame"."""


@dataclass
class FileFacts:
    """One file: its format as the loader meets it, its size in pixels and bytes, or why it cannot be read."""

    format: str
    """e.g. "JPEG baseline YCbCr", "JPEG progressive grayscale", "PNG RGBA", or "unreadable"."""
    width: int = 0
    height: int = 0
    size_bytes: int = 0
    device_decodable: bool = False
    """The device decode path (data.decode=gpu) decodes it; the others go through the CPU path."""
    problem: str | None = None


@dataclass
class SplitSurvey:
    name: str
    images_per_class: dict[str, int]
    """Every class folder with its image count (0 for an empty folder)."""
    surveyed: int = 0
    """Files whose headers were read (all of them, or an even sample with --sample)."""
    formats: Counter = field(default_factory=Counter)
    size_bytes: int = 0
    shorter_sides: list[int] = field(default_factory=list)
    sizes: Counter = field(default_factory=Counter)
    """(width, height) -> files."""
    jpegs: int = 0
    device_decodable: int = 0
    ignored: list[str] = field(default_factory=list)
    """Files the loader skips (not .jpg, .jpeg or .png), relative to the split."""

    @property
    def images(self) -> int:
        return sum(self.images_per_class.values())


@dataclass
class Survey:
    root: str
    kind: str
    """imagefolder, cifar10 or cifar100."""
    splits: list[SplitSurvey]
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    """(path, reason) of every file found unreadable."""
    problems: list[str] = field(default_factory=list)
    """What stops or misleads training, beyond single files (a missing split, a val class train lacks)."""


def _color(header) -> str:
    if header.components == 1:
        return "grayscale"
    if header.components == 4:
        return "YCCK" if header.adobe_transform == 2 else "CMYK"
    if header.components == 3:
        return "RGB" if header.adobe_transform == 0 or header.component_ids == b"RGB" else "YCbCr"
    return f"{header.components} components"


def inspect_file(path: str) -> FileFacts:
    """The format, pixel size and byte size of the file at path, or why the loader could not read it."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            head = file.read(HEAD_BYTES)
            if size == 0:
                return FileFacts("unreadable", problem="empty file")
            if head[:2] == b"\xff\xd8":
                return _jpeg(file, head, size)
    except OSError as error:
        return FileFacts("unreadable", problem=f"cannot read: {error.strerror or error}")
    try:
        with Image.open(path) as image:
            return FileFacts(f"{image.format} {image.mode}", *image.size, size_bytes=size)
    except Exception as error:  # noqa: BLE001 - UnidentifiedImageError, DecompressionBombError, ...
        return FileFacts("unreadable", size_bytes=size, problem=f"not an image ({type(error).__name__}: {error})")


def _jpeg(file, head: bytes, size: int) -> FileFacts:
    header = jpeg_header(head)
    whole = None
    if header is None and size > len(head):
        file.seek(0)
        whole = file.read()
        header = jpeg_header(whole)
    if header is None:
        return FileFacts("unreadable", size_bytes=size, problem="JPEG without a readable frame header")
    if len(head) < size:
        file.seek(max(size - TAIL_BYTES, 0))
        complete = b"\xff\xd9" in file.read()
        if not complete:  # junk after the marker, or really cut: the loader's own check decides
            file.seek(0)
            complete = jpeg_is_complete(whole or file.read())
    else:
        complete = jpeg_is_complete(head)
    facts = FileFacts(f"JPEG {FRAMES.get(header.frame, 'other frame')} {_color(header)}"
                      + ("" if header.precision == 8 else f" {header.precision}-bit"),
                      header.width, header.height, size, device_decodable(header))
    bomb = 2 * Image.MAX_IMAGE_PIXELS if Image.MAX_IMAGE_PIXELS else None  # where Pillow's open refuses
    if not complete:
        facts.problem = "truncated: no end-of-image marker after the scan data"
    elif header.width == 0 or header.height == 0:
        facts.problem = f"JPEG header gives {header.width}x{header.height} pixels"
    elif bomb and header.width * header.height > bomb:
        facts.problem = (f"JPEG header gives {header.width}x{header.height} pixels, more than the {bomb:,} Pillow "
                         "decodes (a decompression bomb): the loader refuses it")
    return facts


def _listing(split_dir: Path) -> tuple[dict[str, list[str]], list[str]]:
    """{class: sorted image file names} of a split, and the files the loader ignores (relative paths)."""
    classes: dict[str, list[str]] = {}
    ignored: list[str] = []
    folders = scan(split_dir, lambda entry: entry.is_dir())
    ignored += [name for name in scan(split_dir, lambda entry: True) if name not in folders]
    for folder in folders:
        names = scan(split_dir / folder, lambda entry: entry.is_file())
        classes[folder] = [n for n in names if n.lower().endswith(IMAGE_EXTENSIONS)]
        ignored += [f"{folder}/{n}" for n in names if not n.lower().endswith(IMAGE_EXTENSIONS)]
    return classes, ignored


def survey_imagefolder(root: Path, *, sample: int | None = None,
                       progress: Callable[[int, int], None] = lambda done, total: None) -> Survey:
    """Every split's classes and files; headers of every file, or of `sample` files per split evenly spread."""
    survey = Survey(str(root), "imagefolder", [])
    listings = {}
    for split in SPLITS:
        if not (root / split).is_dir():
            survey.problems.append(f"no {split}/ folder: dlscale reads {root}/train/<class>/* and {root}/val/<class>/*")
            continue
        listings[split] = _listing(root / split)
    chosen = {split: _sampled([f"{c}/{n}" for c, names in classes.items() for n in names], sample)
              for split, (classes, _) in listings.items()}
    total, done = sum(len(files) for files in chosen.values()), 0
    for split, (classes, ignored) in listings.items():
        part = SplitSurvey(split, {c: len(names) for c, names in classes.items()}, ignored=ignored)
        for relative in chosen[split]:
            _count(part, inspect_file(str(root / split / relative)), f"{split}/{relative}", survey.unreadable)
            done += 1
            progress(done, total)
        survey.splits.append(part)
    _check_classes(survey)
    return survey


def _sampled(files: list[str], sample: int | None) -> list[str]:
    if sample is None or sample >= len(files):
        return files
    step = len(files) / sample
    return [files[int(i * step)] for i in range(sample)]


def _count(part: SplitSurvey, facts: FileFacts, relative: str, unreadable: list[tuple[str, str]]) -> None:
    part.surveyed += 1
    part.size_bytes += facts.size_bytes
    if facts.problem:
        unreadable.append((relative, facts.problem))
        part.formats["unreadable"] += 1
        return
    part.formats[facts.format] += 1
    part.shorter_sides.append(min(facts.width, facts.height))
    part.sizes[(facts.width, facts.height)] += 1
    part.jpegs += facts.format.startswith("JPEG")
    part.device_decodable += facts.device_decodable


def _check_classes(survey: Survey) -> None:
    by_split = {part.name: part for part in survey.splits}
    train, val = by_split.get("train"), by_split.get("val")
    for part in survey.splits:
        if not part.images_per_class:
            survey.problems.append(f"{part.name}/ has no class folders")
        empty = [c for c, n in part.images_per_class.items() if n == 0]
        if empty:
            survey.problems.append(f"{len(empty)} class folder(s) of {part.name}/ hold no .jpg/.jpeg/.png image: "
                                   f"{', '.join(empty[:5])}{' ...' if len(empty) > 5 else ''}")
    if train and val:
        stray = sorted(set(val.images_per_class) - set(train.images_per_class))
        if stray:
            survey.problems.append(f"{len(stray)} class(es) of val/ are not classes of train/ (the loader refuses "
                                   f"them): {', '.join(stray[:5])}{' ...' if len(stray) > 5 else ''}")


def survey_cifar(root: Path) -> Survey:
    """A CIFAR copy read as the loader reads it: images per split and class, the class names, bad batch files."""
    for layout in (CIFAR100, CIFAR10):
        folder = cifar_folder(root, layout)
        if folder is not None:
            return _cifar(folder, layout)
    raise DataError(f"{root} is neither an ImageFolder tree (train/<class>/*, val/<class>/*) nor a CIFAR copy "
                    f"({CIFAR100.folder}/ or {CIFAR10.folder}/, the python version)")


def _cifar(folder: Path, layout: CifarLayout) -> Survey:
    survey = Survey(str(folder), "cifar100" if layout is CIFAR100 else "cifar10", [])
    try:
        names = load_pickle(folder / layout.meta_file).get(layout.names_key)
    except DataError as error:
        names = None
        survey.unreadable.append((layout.meta_file, str(error)))
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names] if isinstance(names, list) else None
    for split, files in (("train", layout.train_files), ("val", layout.val_files)):
        counts: Counter = Counter()
        part = SplitSurvey(split, {})
        for name in files:
            try:
                images, labels = read_batch(folder / name, layout)
            except DataError as error:
                survey.unreadable.append((name, str(error)))
                part.formats["unreadable"] += 1
                continue
            counts.update(labels.tolist())
            part.surveyed += len(labels)
            part.formats["uint8 array RGB"] += len(labels)
            part.size_bytes += images.nbytes
            part.sizes[(32, 32)] += len(labels)
            part.shorter_sides += [32] * len(labels)
        label = (lambda i: names[i]) if names and len(names) == layout.num_classes else str
        part.images_per_class = {label(i): counts.get(i, 0) for i in range(layout.num_classes)}
        survey.splits.append(part)
    _check_classes(survey)
    return survey


def survey(root: str | Path, *, sample: int | None = None,
           progress: Callable[[int, int], None] = lambda done, total: None) -> Survey:
    """The survey of an ImageFolder tree (root has train/) or of a CIFAR copy under root."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root} is not a folder; give the data set's root (the folder holding train/ and val/, "
                        "or cifar-100-python/)")
    if (root / "train").is_dir() or (root / "val").is_dir():
        return survey_imagefolder(root, sample=sample, progress=progress)
    return survey_cifar(root)


def percentile(values: list[int], share: float) -> int:
    """The value below which `share` of the values lie (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))]


def median(values: list[int]) -> float:
    return statistics.median(values) if values else 0.0


@dataclass(frozen=True)
class DecodeRate:
    """The training path on a sample of training files: in this process on one thread, and through each kind of
    loader worker (one of each), as training runs it."""

    decode: str
    image_size: int
    files: int
    """Files tried (the unreadable ones included)."""
    cpu_s: float
    """CPU seconds (user and system) of this process over the timed files, on one thread."""
    per_kind: dict = field(default_factory=dict)
    """Images per CPU-second through one loader thread ("thread") and one worker process ("process"): the files
    batched as training batches them, the CPU time of this process and its worker (/proc)."""

    @property
    def images_per_cpu_s(self) -> float:
        return self.files / self.cpu_s if self.cpu_s > 0 else math.inf


def decode_rate(root: Path, *, files: int, image_size: int = 224, decode: str = "fast",
                warmup: int = 4) -> tuple[DecodeRate | None, list[tuple[str, str]]]:
    """`files` training files spread evenly over root/train, each loaded and transformed as training does
    (decode, random resized crop to image_size, flip) after `warmup` untimed ones; and the files that failed.
    None when there is nothing to time."""
    classes, _ = _listing(root / "train")
    try:
        source = ImageFolderSource(root / "train", {c: i for i, c in enumerate(classes)},
                                   draft_min_side=2 * image_size if decode == "fast" else None,
                                   cpu_jpeg=decode == "fast" and cpu_jpeg_module.resolve("auto"))  # as training
    except DataError:
        return None, []
    indices = [int(i * len(source) / min(files, len(source))) for i in range(min(files, len(source)))]
    if not indices:
        return None, []
    transform = imagenet_train_transform(image_size, decode=decode)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per core: one thread, as in a DataLoader worker
    failed: list[tuple[str, str]] = []

    def one(index: int) -> None:
        try:
            image, _ = source.load(index)
            transform(image, seeded_generator(0, 0, index))
        except BadSample as bad:
            failed.append((os.path.relpath(bad.path, root), f"cannot decode ({bad.reason})"))

    try:
        for index in indices[:warmup]:
            one(index)
        failed.clear()
        start = time.process_time()
        for index in indices:
            one(index)
        cpu_s = time.process_time() - start
    finally:
        torch.set_num_threads(threads)
    per_kind = pipeline_rates(ImageDataset(source, transform), indices, image_size)
    return DecodeRate(decode, image_size, len(indices), cpu_s, per_kind), failed


def pipeline_rates(dataset: ImageDataset, indices: list[int], image_size: int) -> dict[str, float]:
    """Images per CPU-second of the samples at `indices` through one loader thread and through one DataLoader
    worker process (their first batch untimed: the worker's start), CPU time of this process and the worker; a
    kind is left out where the samples could not be made (too many unreadable files in a row)."""
    keys = [(0, index) for index in indices]
    batch = min(16, max(1, len(keys) // 8))  # at least 8 batches: the first is not timed
    rates = {}
    for kind in ("thread", "process"):
        if kind == "thread":
            loader = ThreadLoader(dataset, keys, batch, threads=1, image_shape=(3, image_size, image_size),
                                  drop_last=False)
        else:
            loader = DataLoader(dataset, batch_size=batch, sampler=keys, num_workers=1, collate_fn=collate_samples,
                                worker_init_fn=seed_worker, persistent_workers=True)  # its counters read at the end
        batches = iter(loader)
        try:
            next(batches)
            # this process's CPU time from its clock (ns), the worker's from /proc (clock ticks)
            workers = [worker.pid for worker in getattr(batches, "_workers", [])]
            before, images = time.process_time() + sum_counters(workers)["cpu_s"], 0
            for made in batches:
                images += len(made.labels)
            cpu_s = time.process_time() + sum_counters(workers)["cpu_s"] - before
        except (StopIteration, DataError):
            images = cpu_s = 0
        del batches, loader
        if images and cpu_s > 0:
            rates[kind] = images / cpu_s
    return rates


def cores_line(rate: DecodeRate, gpu_rate: float, cores: int, *, gpu: str) -> str:
    """How many cores decode as fast as one GPU trains with each kind of loader worker, and what this machine's
    cores feed."""
    kinds = {"loader threads": rate.per_kind.get("thread"), "worker processes": rate.per_kind.get("process")}
    kinds = {name: per_core for name, per_core in kinds.items() if per_core} or {"one thread": rate.images_per_cpu_s}
    needs = " and ".join(f"{cores_said(cores_for_rate(1 / per_core, gpu_rate))} with {name}"
                         for name, per_core in kinds.items())
    best = max(kinds.values())
    return (f"cores per GPU: {gpu} at {gpu_rate:,.0f} img/s needs about {needs}; this machine's {cores_said(cores)} "
            f"feed about {cores * best:,.0f} img/s ({cores * best / gpu_rate:.2f} of such a GPU). The device decode "
            "path (data.decode=gpu) leaves the cores only reading files; `dlscale loader` measures the whole "
            "pipeline with its workers")
