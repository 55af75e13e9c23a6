"""The input pipeline alone: images/s, bytes and files read, CPU use, per loader setting.

`dlscale loader` runs a data set's train loader (decode, augment, collate and, if asked, the
copy to the device and normalisation there) with no model, once per setting (a worker count and kind:
loader threads or worker processes, data.workers_kind), and reads what the process and its worker
processes did from the kernel's counters:

    /proc/<pid>/io    rchar       bytes returned by read() and friends: page-cache hits and
                                  the pipes between workers and the main process included
                      read_bytes  bytes the process caused to be fetched from storage (page-cache
                                  misses); 0 when the data are cached
                      syscr       read system calls
    /proc/<pid>/stat  utime+stime CPU seconds of the worker processes (this process's, its loader threads
                                  included, from its own clock: time.process_time, finer than /proc's ticks)

summed over the main process and its workers (read while the workers are alive: they are
persistent; dlscale.metrics.proc_io). No kernel counter gives file opens, so the data set counts
them itself, with the bytes of the files it opened (dlscale.data.counting).

With --device, the device's share is timed too: device ms per batch is the time the device spent
from a batch's arrival to its normalised images (the copy, and on the device decode path the
decode, crop and resize; CUDA events on the prefetcher's side stream). CPU ms per image is the CPU
time of the main process and its workers per image: the cores a path needs per image/s.

Every setting decodes with the intra-op threads it has in training: one per loader thread and worker
process (as the thread pipeline and the DataLoader set them), and one in the main process with 0 workers,
so that the baseline is one core decoding rather than torch's threads contending for the cores.

Warm-up batches (worker start-up, first batches) are not timed. Counts in the timed window
include the batches the workers prefetch, which the window's start and end cancel in a steady
state; with warm-up 0 and whole epochs the counts are exact (every file once per epoch).
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace

import torch

from dlscale.config import DataConfig
from dlscale.data import build_loaders
from dlscale.data.counting import count_reads
from dlscale.data.device import DeviceNormalizer, DevicePrefetcher, for_device
from dlscale.metrics.hardware import available_cores
from dlscale.metrics.proc_io import sum_counters
from dlscale.metrics.timing import DeviceTimer, device_synchronizer
from dlscale.report.figure import figure, save


def _epochs(loader, device: torch.device | None, normalizer, timer: DeviceTimer | None,
            prefetchers: list[DevicePrefetcher]) -> Iterator:
    for epoch in itertools.count():
        loader.sampler.set_epoch(epoch)
        if device is None:
            yield from loader
            continue
        prefetchers.append(DevicePrefetcher(loader, device, normalizer, timer=timer))
        yield from prefetchers[-1]


def measure_setting(cfg: DataConfig, *, batch_size: int, batches: int, warmup: int,
                    device: torch.device | None = None, seed: int = 0) -> dict:
    """Run the train loader of cfg (its num_workers and workers_kind) for warmup + batches batches; one table
    row. With 0 workers the main process decodes on one intra-op thread (restored after)."""
    cfg = replace(cfg, persistent_workers=True, pin_memory=device is not None and device.type == "cuda")
    threads = torch.get_num_threads()
    if cfg.num_workers == 0:
        torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():  # more workers than cores is what a sweep asks for; the CLI says so once
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            return _measure(cfg, batch_size=batch_size, batches=batches, warmup=warmup, device=device, seed=seed)
    finally:
        torch.set_num_threads(threads)


def worker_kind(cfg: DataConfig) -> str:
    """What decodes in a setting: "main" (0 workers), "thread" or "process"."""
    return "main" if cfg.num_workers == 0 else "thread" if cfg.worker_threads else "process"


def _measure(cfg: DataConfig, *, batch_size: int, batches: int, warmup: int, device, seed: int) -> dict:
    cfg = for_device(cfg, device)  # data.decode and data.workers_kind as they run on the device
    loader, _, info = build_loaders(cfg, rank=0, world_size=1, batch_size=batch_size, seed=seed)
    counting = count_reads(loader)
    normalizer = DeviceNormalizer(info.mean, info.std, device) if device is not None else None
    timer, prefetchers = (DeviceTimer(device) if device is not None else None), []
    stream = _epochs(loader, device, normalizer, timer, prefetchers)
    for _ in range(warmup):
        next(stream)
    if timer is not None:
        timer.total_s()  # the warm-up's events done
        timer.reset()
    pids = _pids(loader)
    before, counted, start = sum_counters(pids), counting.totals(), time.perf_counter()
    # this process's CPU time (its loader threads' too) from its clock, in ns; /proc's is in 10 ms ticks
    own_cpu, workers_cpu = time.process_time(), sum_counters(pids[1:])["cpu_s"]
    images = skipped = 0
    for _ in range(batches):
        batch = next(stream)
        images += len(batch.labels)
        skipped += len(batch.skipped)
    if device is not None:
        device_synchronizer(device)()
    elapsed = time.perf_counter() - start
    pids = _pids(loader)  # workers start on the first batch when warmup is 0
    after, (files, size) = sum_counters(pids), counting.totals()
    own_cpu, workers_cpu = time.process_time() - own_cpu, sum_counters(pids[1:])["cpu_s"] - workers_cpu
    del stream, loader  # the persistent workers exit with the loader
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    delta["cpu_s"] = own_cpu + workers_cpu
    files, size = files - counted[0], size - counted[1]
    busy = delta["cpu_s"] / elapsed
    return {
        "workers": cfg.num_workers, "workers_kind": worker_kind(cfg), "decode": info.decode, "images": images,
        "cpu_decoder": info.cpu_decoder,
        "seconds": elapsed,
        "images_per_s": images / elapsed,
        "files_opened": files, "file_bytes": size, "skipped": skipped,
        "files_per_s": files / elapsed, "file_read_gb_per_s": size / elapsed / 1e9,
        "rchar_bytes": int(delta["rchar"]), "rchar_gb_per_s": delta["rchar"] / elapsed / 1e9,
        "storage_read_bytes": int(delta["read_bytes"]), "storage_read_gb_per_s": delta["read_bytes"] / elapsed / 1e9,
        "read_calls": int(delta["syscr"]), "read_calls_per_s": delta["syscr"] / elapsed,
        "cpu_s": delta["cpu_s"], "cpu_cores_busy": busy, "cpu_util_pct": 100 * busy / available_cores(),
        "images_per_cpu_s": images / delta["cpu_s"] if delta["cpu_s"] > 0 else None,
        "cpu_ms_per_image": 1000 * delta["cpu_s"] / images if images else None,
        "device_ms_per_batch": 1000 * timer.total_s() / timer.count if timer is not None and timer.count else None,
        "processes": len(pids), **_decoded_where(prefetchers),
    }


def _decoded_where(prefetchers: list[DevicePrefetcher]) -> dict:
    """On the device decode path, where the rows of every batch (warm-up included) were decoded: by the device's
    decoder (named; per backend where it has several, nvImageCodec's), by the workers, or refused by the device."""
    stages = [p.stage for p in prefetchers if p.stage is not None]
    if not stages:
        return {}
    backends: dict[str, int] = {}
    for decoder in {id(s.decoder): s.decoder for s in stages}.values():  # an epoch's prefetcher makes its own
        for backend, count in getattr(decoder, "decoded_by", {}).items():
            backends[backend] = backends.get(backend, 0) + count
    return {"decoded_on_device": sum(s.counts.device for s in stages),
            "decoded_by_workers": sum(s.counts.workers for s in stages),
            "refused_by_device": sum(s.counts.refused for s in stages), "decoder": stages[0].decoder.name,
            **({"decoded_by_backend": backends} if backends else {})}


def _pids(loader) -> list[int]:
    # Loader threads are this process's. DataLoader keeps a persistent iterator in _iterator; its worker Process
    # objects are in _workers (private, stable since torch 1.7): the only way to find the workers' pids.
    iterator = getattr(loader, "_iterator", None)
    workers = getattr(iterator, "_workers", []) if iterator is not None else []
    return [os.getpid(), *(worker.pid for worker in workers)]


def settings_of(workers: list[int], kinds: list[str]) -> list[tuple[int, str]]:
    """(worker count, kind) of every setting: 0 workers once (the main process), each other count in each kind."""
    return [(count, kind) for count in workers for kind in (["main"] if count == 0 else kinds)]


def sweep(cfg: DataConfig, workers: list[int], *, batch_size: int, batches: int, warmup: int | None,
          device: torch.device | None = None, seed: int = 0, repeats: int = 1, kinds: list[str] | None = None,
          on_row=lambda row: None) -> list[dict]:
    """measure_setting for each setting (settings_of: each worker count in each of `kinds`, default the
    configured data.workers_kind), `repeats` times interleaved (0, 1, 2, 0, 1, 2, ...) so that drift of a
    shared machine hits every setting alike; each setting's row is its median run by images/s, with every
    run's rate in images_per_s_runs; speedup is over the first setting. warmup None: 2 batches per worker, at
    least 2 (a worker's first batch carries its start-up)."""
    settings = settings_of(workers, kinds or [cfg.workers_kind])
    runs: dict[tuple[int, str], list[dict]] = {setting: [] for setting in settings}
    for _ in range(repeats):
        for count, kind in settings:
            setting = replace(cfg, num_workers=count, workers_kind=cfg.workers_kind if kind == "main" else kind)
            row = measure_setting(setting, batch_size=batch_size, batches=batches,
                                  warmup=max(2, 2 * count) if warmup is None else warmup, device=device, seed=seed)
            runs[count, kind].append(row)
            row["speedup"] = row["images_per_s"] / runs[settings[0]][-1]["images_per_s"]  # within this repeat
            on_row(row)
    rows = []
    for setting in settings:
        ranked = sorted(runs[setting], key=lambda row: row["images_per_s"])
        row = dict(ranked[(len(ranked) - 1) // 2])  # the median run (the lower one of an even count)
        row["images_per_s_runs"] = [run["images_per_s"] for run in runs[setting]]
        row["images_per_s_median"] = statistics.median(row["images_per_s_runs"])
        row["speedup"] = row["images_per_s"] / rows[0]["images_per_s"] if rows else 1.0
        rows.append(row)
    return rows


COLUMNS = (("workers", "workers", "{:d}"), ("kind", "workers_kind", "{}"), ("img/s", "images_per_s", "{:.1f}"),
           ("speedup", "speedup", "{:.2f}x"),
           ("files/s", "files_per_s", "{:.1f}"), ("file GB/s", "file_read_gb_per_s", "{:.4f}"),
           ("rchar GB/s", "rchar_gb_per_s", "{:.4f}"), ("disk GB/s", "storage_read_gb_per_s", "{:.4f}"),
           ("reads/s", "read_calls_per_s", "{:.0f}"), ("CPU busy", "cpu_cores_busy", "{:.2f}"),
           ("CPU %", "cpu_util_pct", "{:.0f}"), ("img/CPU-s", "images_per_cpu_s", "{:.1f}"),
           ("CPU ms/img", "cpu_ms_per_image", "{:.3f}"), ("dev ms/batch", "device_ms_per_batch", "{:.2f}"))


def format_row(row: dict) -> str:
    return "".join(f"{'-' if row.get(key) is None else fmt.format(row[key]):>13}" for _, key, fmt in COLUMNS)


def format_header() -> str:
    return "".join(f"{title:>13}" for title, _, _ in COLUMNS)


def plot(rows: list[dict], path, title: str) -> None:
    """img/s (with the speedup over the first setting), CPU cores busy and file MB/s against workers."""
    workers = [_label(row) for row in rows]
    fig, (rates, cpu) = figure(title, ncols=2)
    rates.bar(workers, [row["images_per_s"] for row in rows], color="tab:blue")
    for index, row in enumerate(rows):
        rates.annotate(f"{row['speedup']:.2f}x", (index, row["images_per_s"]), ha="center", va="bottom")
    rates.set(xlabel="loader workers", ylabel="images/s", title="throughput (speedup over first)")
    cpu.plot(workers, [row["cpu_cores_busy"] for row in rows], "o-", color="tab:red")
    cpu.set(xlabel="loader workers", ylabel="CPU cores busy", title="CPU use and file reads")
    reads = cpu.twinx()
    reads.plot(workers, [1000 * row["file_read_gb_per_s"] for row in rows], "s--", color="tab:green")
    reads.set_ylabel("file bytes read, MB/s (dashed)")
    save(fig, path, "--out")


def _label(row: dict) -> str:
    """A setting on the plot's axis: "0", "2 threads", "2 processes"."""
    kind = row.get("workers_kind", "process")
    return str(row["workers"]) if kind == "main" else f"{row['workers']} {kind}{'es' if kind == 'process' else 's'}"
