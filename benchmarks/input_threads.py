"""Loader threads against worker processes, and both against one thread in the process: images per CPU-second.

    python benchmarks/input_threads.py                            # dlscale data make-jpegs' tree, made in a temp folder
    python benchmarks/input_threads.py --data TREE --workers 2 --rounds 5 --json threads.json
    python benchmarks/input_threads.py --train-rounds 2           # also dlscale train's data wait per step

Each round measures, in a rotated order (so that drift of a shared machine hits every setting alike), the train
split of a JPEG tree through the fast decode path (FastRandomResizedCrop to --crop px and a flip, per-sample seeded):

    one thread      ImageDataset's samples one after another in this process, on one intra-op thread
    threads         the thread pipeline (data.workers_kind=thread, --workers threads), its batches in pinned-or-not
                    memory as training gets them: dlscale.bench.loader.measure_setting, as `dlscale loader` measures
    processes       the same with DataLoader worker processes (data.workers_kind=process)
    1 thread        the thread pipeline with one thread (the wall-time scaling of --workers threads over it)
    plain threads   --workers plain Python threads taking the samples in turn, no batch or queue: the best threads
                    of one process give on this transform (a gap to one thread is the GIL's, not the pipeline's)
    separate processes
                    --workers processes, each running one thread's loop over its share, all at once: what the
                    machine gives that many decoders together with nothing shared (a gap to one thread is the
                    machine's: its shared caches, memory and host; no pipeline or GIL can do better)
    torchdata       torchdata.nodes' ParallelMapper(method="thread") + Batcher + the same collation, where torchdata
                    imports (a peer: the library the thread pipeline was weighed against)

Images per CPU-second count the CPU time of this process and of its worker processes (/proc), so other load on the
machine counts less than in wall time. Ratios are taken within a round and their median over rounds is reported:
threads / one thread and processes / one thread per CPU-second (goal for threads: >= 0.95), 1 thread / one thread
per CPU-second (what the pipeline costs a single thread), threads / separate processes (what the pipeline and the GIL
cost beyond the machine's own share), and --workers threads / 1 thread in wall time (goal: >= 1.8x with 2 threads on
a quiet machine).

--train-rounds N also runs `dlscale train` (ResNet-18 of width 16 at 64 px, batch 32, one epoch, --workers loader
workers) N times with threads and N times with processes, alternated, and reports the data wait per step (the log
windows' data_time_ms after each epoch's first window) and the steady images per second of each.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import torch
from PIL import Image

from dlscale.bench.loader import measure_setting
from dlscale.config import DataConfig
from dlscale.config.data import CPU_DECODERS
from dlscale.data import build_loaders
from dlscale.data.cpu_jpeg import name as cpu_decoder_name
from dlscale.data.dataset import collate_samples
from dlscale.data.jpeg_tree import write_tree
from dlscale.data.transforms import pillow_build
from dlscale.metrics.proc_io import sum_counters
from dlscale.metrics.provenance import git_dirty, git_sha, package_version

ROOT = Path(__file__).resolve().parents[1]


def one_thread(cfg: DataConfig, *, images: int, seed: int) -> dict:
    """ImageDataset's samples one after another in this process on one intra-op thread: the per-core baseline."""
    loader, _, _ = build_loaders(replace(cfg, num_workers=0), rank=0, world_size=1, batch_size=1, seed=seed)
    keys = [(0, index) for index in range(len(loader.dataset))][:images]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cpu, wall = _timed(loader.dataset, keys)
    finally:
        torch.set_num_threads(threads)
    return {"images_per_cpu_s": len(keys) / cpu, "images_per_s": len(keys) / wall}


def _timed(dataset, keys: list, ready=lambda: None) -> tuple[float, float]:
    """The samples of `keys` one after another, after 8 untimed ones and `ready()`: (CPU seconds of this process,
    wall seconds)."""
    for key in keys[:8]:  # warm
        dataset[key]
    ready()
    cpu, wall = time.process_time(), time.perf_counter()
    for key in keys:
        dataset[key]
    return time.process_time() - cpu, time.perf_counter() - wall


def plain_threads(cfg: DataConfig, *, images: int, workers: int, seed: int) -> dict:
    """`workers` plain Python threads, each taking every workers-th sample of ImageDataset on one intra-op thread, no
    batch, queue or pipeline: what threads of one process give on this transform at best (where they do not reach one
    thread's images per CPU-second, the gap is the GIL's, not the pipeline's)."""
    loader, _, _ = build_loaders(replace(cfg, num_workers=0), rank=0, world_size=1, batch_size=1, seed=seed)
    keys = [(0, index) for index in range(len(loader.dataset))][:images]
    dataset, threads = loader.dataset, torch.get_num_threads()

    def work(share: list) -> None:
        torch.set_num_threads(1)
        for key in share:
            dataset[key]

    for key in keys[:8]:  # warm
        dataset[key]
    cpu, wall = time.process_time(), time.perf_counter()
    running = [threading.Thread(target=work, args=(keys[k::workers],)) for k in range(workers)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    torch.set_num_threads(threads)
    return {"images_per_cpu_s": len(keys) / cpu, "images_per_s": len(keys) / wall}


def separate_processes(cfg: DataConfig, *, images: int, workers: int, seed: int) -> dict:
    """`workers` forked processes, each running one_thread's loop over every workers-th sample, started together:
    images per CPU-second of them all (the machine's ceiling for that many decoders at once, nothing shared). A
    process that fails ends the setting at once with its exit code; none is left behind."""
    loader, _, _ = build_loaders(replace(cfg, num_workers=0), rank=0, world_size=1, batch_size=1, seed=seed)
    keys = [(0, index) for index in range(len(loader.dataset))][:images]
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(workers, timeout=SHARE_TIMEOUT_S), context.Queue()
    running = [context.Process(target=_share, args=(loader.dataset, keys[k::workers], barrier, results), daemon=True)
               for k in range(workers)]
    for process in running:
        process.start()
    figures, deadline = [], time.monotonic() + SHARE_TIMEOUT_S
    try:
        while len(figures) < workers:
            try:
                figures.append(results.get(timeout=1.0))
            except queue.Empty:
                failed = [process.exitcode for process in running if process.exitcode not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    raise SystemExit(f"separate processes: a process exited with {failed[0]}" if failed else
                                     f"separate processes: no result in {SHARE_TIMEOUT_S:.0f} s") from None
    finally:
        for process in running:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()
    return {"images_per_cpu_s": len(keys) / sum(cpu for cpu, _ in figures),
            "images_per_s": len(keys) / max(wall for _, wall in figures)}


SHARE_TIMEOUT_S = 1800.0
"""The longest a separate process may take to warm, wait for the others or measure its share."""


def _share(dataset, keys: list, barrier, results) -> None:
    """One separate process: warm, wait for the others, then its samples on one intra-op thread. On an error the
    barrier is broken, so that the others stop waiting, and the process exits with 1."""
    try:
        torch.set_num_threads(1)
        results.put(_timed(dataset, keys, ready=barrier.wait))
    except BaseException:
        barrier.abort()
        raise


def torchdata_threads(cfg: DataConfig, *, batch_size: int, batches: int, seed: int) -> dict | None:
    """torchdata.nodes' thread mapper over the same samples, batched and collated as the DataLoader does; None
    where torchdata does not import."""
    try:
        from torchdata import nodes
    except ImportError:
        return None
    loader, _, _ = build_loaders(replace(cfg, num_workers=0), rank=0, world_size=1, batch_size=batch_size, seed=seed)
    keys = [(0, index) for index in range(len(loader.dataset))][:batch_size * (batches + 2)]
    node = nodes.ParallelMapper(nodes.IterableWrapper(keys), map_fn=loader.dataset.__getitem__,
                                num_workers=cfg.num_workers, method="thread", in_order=True)
    node = nodes.Mapper(nodes.Batcher(node, batch_size=batch_size), map_fn=collate_samples)
    stream = iter(nodes.Loader(node))
    for _ in range(2):
        next(stream)
    before, wall = sum_counters([os.getpid()]), time.perf_counter()
    count = sum(len(next(stream).labels) for _ in range(batches))
    wall, cpu = time.perf_counter() - wall, sum_counters([os.getpid()])["cpu_s"] - before["cpu_s"]
    del stream
    return {"images_per_cpu_s": count / cpu, "images_per_s": count / wall}


def loader_round(cfg: DataConfig, order: list[str], *, workers: int, batch_size: int, batches: int,
                 seed: int) -> dict[str, dict]:
    figures = {}
    for name in order:
        if name == "one thread":
            figures[name] = one_thread(cfg, images=batch_size * batches, seed=seed)
        elif name == "plain threads":
            figures[name] = plain_threads(cfg, images=batch_size * batches, workers=workers, seed=seed)
        elif name == "separate processes":
            figures[name] = separate_processes(cfg, images=batch_size * batches, workers=workers, seed=seed)
        elif name == "torchdata":
            found = torchdata_threads(replace(cfg, num_workers=workers), batch_size=batch_size, batches=batches,
                                      seed=seed)
            if found is not None:
                figures[name] = found
        else:
            kind, count = {"threads": ("thread", workers), "processes": ("process", workers),
                           "1 thread": ("thread", 1)}[name]
            row = measure_setting(replace(cfg, num_workers=count, workers_kind=kind), batch_size=batch_size,
                                  batches=batches, warmup=2 * count, seed=seed)
            figures[name] = {key: row[key] for key in ("images_per_cpu_s", "images_per_s", "cpu_cores_busy")}
        said = figures.get(name)
        print(f"  {name:>18}: " + (f"{said['images_per_cpu_s']:7.1f} img/CPU-s, {said['images_per_s']:7.1f} img/s"
                                   if said else "torchdata does not import: left out"), flush=True)
    return figures


def ratios(rounds: list[dict[str, dict]]) -> dict[str, float]:
    """Medians over rounds of the ratios taken within each round."""
    def median(top: str, bottom: str, key: str) -> float | None:
        values = [r[top][key] / r[bottom][key] for r in rounds if top in r and bottom in r]
        return statistics.median(values) if values else None

    out = {"threads / one thread, img per CPU-s": median("threads", "one thread", "images_per_cpu_s"),
           "processes / one thread, img per CPU-s": median("processes", "one thread", "images_per_cpu_s"),
           "plain threads / one thread, img per CPU-s": median("plain threads", "one thread", "images_per_cpu_s"),
           "threads / plain threads, img per CPU-s": median("threads", "plain threads", "images_per_cpu_s"),
           "separate processes / one thread, img per CPU-s": median("separate processes", "one thread",
                                                                    "images_per_cpu_s"),
           "threads / separate processes, img per CPU-s": median("threads", "separate processes", "images_per_cpu_s"),
           "threads / processes, img per CPU-s": median("threads", "processes", "images_per_cpu_s"),
           "threads / processes, img/s": median("threads", "processes", "images_per_s"),
           "threads / 1 thread, img/s": median("threads", "1 thread", "images_per_s"),
           "1 thread / one thread, img per CPU-s": median("1 thread", "one thread", "images_per_cpu_s"),
           "torchdata / threads, img per CPU-s": median("torchdata", "threads", "images_per_cpu_s"),
           "torchdata / threads, img/s": median("torchdata", "threads", "images_per_s")}
    return {name: value for name, value in out.items() if value is not None}


def train_once(tree: Path, out: Path, kind: str, workers: int, sets: tuple[str, ...] = ()) -> dict:
    """One epoch of `dlscale train` with `workers` loader workers of `kind` (and `sets`, more --set values after
    the defaults here): the data wait and step per log window."""
    name = f"{kind}-{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "dlscale", "train", "--config", "cpu:default", "--data", str(tree.resolve()),
            "--set", "data.name=imagefolder", "--set", "model.name=resnet18", "--set", "model.width=16",
            "--set", "data.image_size=64", "--set", "global_batch_size=32", "--set", "schedule.epochs=1",
            "--set", "schedule.warmup_epochs=0", "--set", "log_every=5", "--set", "checkpoint.enabled=false",
            "--set", f"data.num_workers={workers}", "--set", f"data.workers_kind={kind}",
            *(word for value in sets for word in ("--set", value)),
            "--output-dir", str(out), "--name", name]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(argv, cwd=out, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"dlscale train with {kind} workers failed:\n{done.stderr[-2000:]}")
    windows = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
    steady = [w for w in windows if w.get("record", "train") == "train" and w.get("iteration", 0) > 5]
    return {"data_ms_per_step": statistics.fmean(w["data_time_ms"] for w in steady),
            "step_ms": statistics.fmean(w["step_time_ms"] for w in steady),
            "img_per_s": statistics.fmean(w["throughput_img_per_s"] for w in steady), "windows": len(steady)}


def loader_arguments(description: str, rounds: int) -> argparse.ArgumentParser:
    """The options this benchmark and cpu_jpeg.py share: the tree, the loader's workers and batches, the rounds."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=None, help="a JPEG tree (default: dlscale data make-jpegs' own)")
    p.add_argument("--workers", type=int, default=2, help="threads and processes (2)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--batches", type=int, default=20, help="timed batches per setting and round (20)")
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--json", type=Path, default=None)
    return p


def jpeg_tree(data: Path | None, scratch: str) -> Path:
    """--data, else dlscale data make-jpegs' tree made in scratch (2,560 training files of 500 x 375)."""
    if data is not None:
        return data
    tree = Path(scratch) / "jpegs"
    write_tree(tree, train=2560, val=256, classes=10, unique=256, processes=os.cpu_count() or 1)
    return tree


def tree_shape(tree: Path) -> dict:
    """The training files' count and mean size, and the first one's pixels: what the figures were measured on."""
    files = sorted((tree / "train").glob("*/*"))
    with Image.open(files[0]) as first:
        return {"files": len(files), "mean_bytes": sum(f.stat().st_size for f in files) / len(files),
                "first_size": list(first.size)}


def short_git_sha() -> str | None:
    """The checkout's short sha, with "-dirty" where tracked files have local changes; None outside a checkout."""
    sha = git_sha()
    return None if sha is None else sha[:7] + ("-dirty" if git_dirty() else "")


def train_rounds(tree: Path, scratch: Path, rounds: int, settings: dict[str, tuple[str, tuple[str, ...]]], *,
                 workers: int, ratio: tuple[str, str, str]) -> dict:
    """`rounds` runs of train_once per setting (name: its workers' kind and more --set values), the first setting
    first in even rounds and last in odd ones; ratio (name, top, bottom): the median of top's img/s over bottom's
    within each round."""
    out = scratch / "train"
    out.mkdir()
    runs: dict[str, list[dict]] = {name: [] for name in settings}
    for k in range(rounds):
        for name in list(settings) if k % 2 == 0 else list(settings)[::-1]:
            kind, sets = settings[name]
            runs[name].append(train_once(tree, out, kind, workers, sets))
            said = runs[name][-1]
            print(f"train, {name}: {said['data_ms_per_step']:.1f} ms data wait of a {said['step_ms']:.1f} ms step, "
                  f"{said['img_per_s']:.1f} img/s", flush=True)
    named, top, bottom = ratio
    within = [t["img_per_s"] / b["img_per_s"] for t, b in zip(runs[top], runs[bottom], strict=True)]
    print(f"train: {named}: {statistics.median(within):.3f}", flush=True)
    return {"runs": runs, named: statistics.median(within)}


def main(argv: list[str] | None = None) -> int:
    p = loader_arguments(__doc__, rounds=5)
    p.add_argument("--train-rounds", type=int, default=0, help="dlscale train runs per kind (0: none)")
    p.add_argument("--cpu-decoder", choices=CPU_DECODERS, default="auto",
                   help="data.cpu_decoder of every setting (auto)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        tree = jpeg_tree(args.data, scratch)
        cfg = DataConfig(name="imagefolder", path=str(tree), image_size=args.crop, decode="fast",
                         cpu_decoder=args.cpu_decoder)
        load_start = os.getloadavg()[0]
        print(f"{tree}: {args.workers} workers, batch {args.batch_size}, {args.batches} batches per setting, "
              f"{args.crop} px, {pillow_build()}, {os.cpu_count()} cores, load {load_start:.1f}", flush=True)
        names = ["one thread", "threads", "processes", "1 thread", "plain threads", "separate processes", "torchdata"]
        rounds = []
        for k in range(args.rounds):
            order = names[k % len(names):] + names[:k % len(names)]
            print(f"round {k + 1} (load {os.getloadavg()[0]:.1f})", flush=True)
            rounds.append(loader_round(cfg, order, workers=args.workers, batch_size=args.batch_size,
                                       batches=args.batches, seed=k))
        result = {"command": " ".join(["python", "benchmarks/input_threads.py", *(argv or sys.argv[1:])]),
                  "date": time.strftime("%Y-%m-%d"), "git_sha": short_git_sha(), "load_start": load_start,
                  "setup": {"workers": args.workers, "batch_size": args.batch_size, "batches": args.batches,
                            "crop": args.crop, "pillow": pillow_build(), "torch": torch.__version__,
                            "cpu_decoder": cpu_decoder_name(args.cpu_decoder),
                            "simplejpeg": package_version("simplejpeg"),
                            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                            "tree": tree_shape(tree)},
                  "rounds": rounds, "ratios": ratios(rounds)}
        for name, value in result["ratios"].items():
            print(f"{name:>48}: {value:.3f}", flush=True)
        if args.train_rounds:
            result["train"] = train_rounds(tree, Path(scratch), args.train_rounds,
                                           {"thread": ("thread", ()), "process": ("process", ())},
                                           workers=args.workers, ratio=("threads / processes, img/s", "thread",
                                                                        "process"))
        result["load_end"] = os.getloadavg()[0]
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
