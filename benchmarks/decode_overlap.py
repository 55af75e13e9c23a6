"""Why a training step fed by the device decode path runs slower than the step and the decode would side by side.

On an H100 the device path's loader alone and the compiled default on synthetic data each ran faster than
`dlscale train` with data.decode=gpu did: each step lasted about as long as the step and its batch's decode one
after the other (the figures: docs/benchmarks.md, "History of the GPU runs"). This script tells the possible
causes apart in about a minute of GPU time:

    python benchmarks/decode_overlap.py --data JPEG_TREE --json overlap.json

probe   the host time of the decoder's calls for one batch (inside DeviceDecodeStage on an EncodedBatch; the
        stage's whole time beside it) with the GPU idle, and with a queue of matrix products running (a) on
        torch's default stream, (b) on a stream of their own. A decode that waits for (a) only waits for the
        legacy default stream (a blocking stream or a synchronous copy inside the decoder): the training step on
        a stream of its own (speed.step_stream) lets the two overlap. One that waits for (b) too waits for work
        on every stream of the process: a device-wide synchronisation, or an allocation or free that the driver
        serialises with the queued work; only a decode in another thread (data.device_feed=thread) or process
        (data.device_feed=process) lets the next step be enqueued first. One that waits for neither runs beside
        the step and shares the GPU with it.
calls   torch.profiler's count of the CUDA runtime and driver calls that can make the host or a stream wait
        (synchronisations, allocations and frees, copies, waits on events) made inside the decoder's calls over
        two decodes beside (b): the probe's own calls (its products, its synchronisations) are left out.
steps   a training step (eager, bf16 autocast, channels_last, fused SGD) fed in turns, round after round,
        by a pool of synthetic batches on the device and by the device decode path in each arrangement:
        the decode in the training thread (today's default), the step on a stream of its own, the decode
        in a background thread, both, and the decode in a process of its own (data.device_feed=process:
        its own CUDA context, which a device-wide synchronisation in the decode does not hold up); img/s
        of each and the arrangement to train with ("best").

On the CPU (the rehearsal of benchmarks/gpu.py, and the tests) the probe and the stream arrangements are
skipped: the Pillow decoder stands in for nvJPEG and the step is a tiny model's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.nn import functional as F

from dlscale.config import DataConfig
from dlscale.data import build_loaders
from dlscale.data.device import DecodeProcess, DeviceNormalizer, DevicePrefetcher, for_device
from dlscale.errors import DlscaleError
from dlscale.models import build_model
from dlscale.speed import SpeedOptions

ARRANGEMENTS = {
    "synthetic": None,
    "inline": {},
    "step stream": {"speed.step_stream": "true"},
    "thread": {"data.device_feed": "thread"},
    "thread + step stream": {"data.device_feed": "thread", "speed.step_stream": "true"},
    "process": {"data.device_feed": "process"},
}
"""Each way of feeding the step: the `dlscale train` settings it corresponds to (None: synthetic batches)."""
SYNC_CALLS = ("cudaFree", "cudaFreeHost", "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
              "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpyAsync", "cudaMemset", "cudaMalloc", "cudaMallocAsync",
              "cudaFreeAsync", "cudaHostAlloc", "cudaMallocHost", "cudaStreamWaitEvent", "cuMemFree_v2",
              "cuCtxSynchronize", "cuStreamSynchronize", "cuStreamWaitEvent", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2",
              "cuMemcpyAsync", "cuMemFreeAsync")
"""Runtime and driver calls that can make the host, a stream or the whole device wait (also every call whose name
starts with one of SYNC_PREFIXES)."""
SYNC_PREFIXES = ("cuMemAlloc",)
"""The driver's allocations (cuMemAlloc_v2, cuMemAllocAsync, cuMemAllocHost_v2, cuMemAllocPitch_v2, ...)."""
DECODER_RANGE = "decode_overlap: decoder call"
"""The profiler range around each of the decoder's calls: the calls counted are those inside one."""
WAITS = 0.5
"""A decode 'waits' for the busy queue when it returns at least this share of the queue's time later than idle."""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="an ImageFolder tree of JPEGs (train/<class>/*.JPEG)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--model", default=None, help="default: resnet50 on a GPU, resnet18 of width 8 on the CPU")
    p.add_argument("--batch-size", type=int, default=None, help="default: 256 on a GPU, 8 on the CPU")
    p.add_argument("--image-size", type=int, default=None, help="default: 224 on a GPU, 32 on the CPU")
    p.add_argument("--workers", type=int, default=8, help="loader workers (they only read files and draw crops)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per arrangement and round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them (the workers' restart)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs every arrangement, in a rotated order")
    p.add_argument("--busy-ms", type=float, default=200.0, help="the probe's queue of matrix products, in ms")
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = p.parse_args(argv)
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    setup = {"model": args.model or ("resnet50" if cuda else "resnet18"),
             "batch_size": args.batch_size or (256 if cuda else 8),
             "image_size": args.image_size or (224 if cuda else 32), "workers": args.workers,
             "device": torch.cuda.get_device_name(device) if cuda else "cpu"}
    print(f"decode overlap on {setup['device']}: {setup['model']}, batch {setup['batch_size']}, "
          f"{setup['image_size']} px, {args.workers} workers", flush=True)
    try:
        cfg = DataConfig(name="imagefolder", path=args.data, image_size=setup["image_size"], decode="gpu",
                         num_workers=args.workers)
        # on the CPU the device path runs with the Pillow decoder (no device given: nvJPEG is not asked for)
        loader, _, info = build_loaders(for_device(cfg, device if cuda else None), rank=0, world_size=1,
                                        batch_size=setup["batch_size"], seed=0)
    except DlscaleError as error:
        p.error(str(error))
    normalizer = DeviceNormalizer(info.mean, info.std, device, channels_last=True)
    result = {"setup": setup}
    if cuda:
        result["probe"] = probe(loader, device, args.busy_ms)
        print(describe_probe(result["probe"]), flush=True)
        try:  # the profiler's CUDA activity needs CUPTI; the steps below are measured without it
            result["calls"] = sync_calls(loader, device, args.busy_ms)
            print("synchronising calls (and allocations, copies, event waits) inside the decoder's calls over two "
                  "decodes beside a busy stream: "
                  + (", ".join(f"{name} x{count}" for name, count in result["calls"].items()) or "none seen"),
                  flush=True)
        except Exception as error:  # noqa: BLE001 - recorded; the probe and the steps stand without it
            result["calls_error"] = " ".join(str(error).split())[:300]
            print(f"synchronising calls: not counted ({result['calls_error']})", flush=True)
    step = make_step(setup["model"], info.num_classes, device, width=None if cuda else 8)
    result["failed"] = {}
    result["steps"] = feed_steps(step, loader, normalizer, device, setup["batch_size"], setup["image_size"],
                                 info.num_classes, steps=args.steps, warmup=args.warmup, rounds=args.rounds,
                                 failed=result["failed"])
    if not any(rates for name, rates in result["steps"].items() if ARRANGEMENTS[name] is not None):
        print("every arrangement fed by the decode path failed: " + "; ".join(
            f"{name}: {error}" for name, error in result["failed"].items()), file=sys.stderr)
        return 1
    result["best"] = best(result["steps"])
    for name, rates in result["steps"].items():
        if not rates:
            print(f"{name:>22}: failed ({result['failed'][name]})", flush=True)
            continue
        print(f"{name:>22}: {statistics.median(rates):9.1f} img/s (rounds: {', '.join(f'{r:.1f}' for r in rates)})",
              flush=True)
    print(f"train with: {' '.join(f'--set {k}={v}' for k, v in result['best']['settings'].items()) or 'the defaults'}"
          f" ({result['best']['name']}, {result['best']['of_synthetic']:.3f} of synthetic)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


# ------------------------------------------------------------------------------------------ probe


def _busy(device: torch.device, ms: float) -> tuple[Callable[[], torch.cuda.Event], float]:
    """A function that queues about `ms` of matrix products on the current stream and returns an event recorded
    after them, and their measured time. 8192-square bf16 products (about 1.1 TFLOP each): a hundred or so
    launches, well under the launch queue's depth, so that queueing them returns at once."""
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    products = 4
    for _ in range(2):  # calibrate: ms per product, warm
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(products):
            a @ a
        end.record()
        torch.cuda.synchronize(device)
        per = start.elapsed_time(end) / products
        products = max(int(ms / max(per, 1e-3)), 1)

    def queue_products() -> torch.cuda.Event:
        for _ in range(products):
            a @ a
        done = torch.cuda.Event()
        done.record()
        return done
    return queue_products, products * per


def _decode_host_ms(stage, encoded, side: torch.cuda.Stream) -> float:
    started = time.perf_counter()
    with torch.cuda.stream(side):
        stage(encoded)
    return 1000 * (time.perf_counter() - started)


def _stage_and_batches(loader, device: torch.device, epoch: int) -> tuple:
    """The device path's decode stage (as DevicePrefetcher builds it) and two encoded batches of `epoch`."""
    stage = DevicePrefetcher(loader, device).stage
    loader.sampler.set_epoch(epoch)
    batches = iter(loader)
    return stage, [next(batches) for _ in range(2)]


CASES = ("idle", "beside the default stream", "beside a stream of its own")


def probe(loader, device: torch.device, busy_ms: float) -> dict:
    """The host time of the decoder's calls for a batch, idle and beside a busy default stream and a busy stream of
    its own, and the stage's whole time around them (median of 3 each); idle, when the batch is done too."""
    stage, encoded = _stage_and_batches(loader, device, epoch=0)
    side, own = torch.cuda.Stream(device), torch.cuda.Stream(device)
    busy, measured_busy_ms = _busy(device, busy_ms)
    figures = {"busy_ms": measured_busy_ms}
    timed = stage.decoder = _TimedDecoder(stage.decoder)
    try:
        for where in CASES:
            decoder_ms, stage_ms, done_ms, finished = [], [], [], []
            for k in range(3):
                torch.cuda.synchronize(device)
                queued = None
                if where == "beside the default stream":
                    queued = busy()
                elif where == "beside a stream of its own":
                    with torch.cuda.stream(own):
                        queued = busy()
                timed.queued, timed.seconds, started = queued, 0.0, time.perf_counter()
                stage_ms.append(_decode_host_ms(stage, encoded[k % 2], side))
                decoder_ms.append(1000 * timed.seconds)
                if queued is not None:  # had the products ended when the decoder's calls returned?
                    finished.append(timed.done_at_return)
                else:
                    torch.cuda.synchronize(device)
                    done_ms.append(1000 * (time.perf_counter() - started))
            torch.cuda.synchronize(device)
            figures[where] = statistics.median(decoder_ms)  # the decoder's calls alone: what waits or not
            figures[f"{where}, stage"] = statistics.median(stage_ms)
            if finished:
                figures[f"{where}, products done at its return"] = sum(finished) / len(finished)
            if done_ms:
                figures["idle, batch done"] = statistics.median(done_ms)
    finally:
        stage.decoder = timed.decoder
    return figures


class _TimedDecoder:
    """The stage's decoder, its calls' host time summed, each inside a profiler range (DECODER_RANGE); whether the
    products queued before were done when its last call returned (nvJPEG's call returns when its decode is done)."""

    def __init__(self, decoder):
        self.decoder, self.name, self.device, self.seconds = decoder, decoder.name, decoder.device, 0.0
        self.regions = getattr(decoder, "regions", False)
        self.queued = None
        self.done_at_return = False

    def decode(self, files, *regions):
        from torch.profiler import record_function

        started = time.perf_counter()
        try:
            with record_function(DECODER_RANGE):
                return self.decoder.decode(files, *regions)
        finally:
            self.seconds += time.perf_counter() - started
            self.done_at_return = self.queued is not None and self.queued.query()


def describe_probe(figures: dict) -> str:
    idle, busy = figures["idle"], figures["busy_ms"]  # the decoder's calls alone
    # it waited when it returned that much later and (where recorded) after the products had ended, most times:
    # a decode merely slowed by sharing the multiprocessors with them returns before they end
    waits = {where: figures[where] - idle >= WAITS * busy
             and figures.get(f"{where}, products done at its return", 1.0) >= 0.5
             for where in ("beside the default stream", "beside a stream of its own")}
    split = (f" (the whole stage {figures['idle, stage']:.1f} ms, done after {figures['idle, batch done']:.1f} ms)"
             if "idle, stage" in figures and "idle, batch done" in figures else "")
    said = (f"decode of one batch: the decoder's calls {idle:.1f} ms idle{split}, "
            f"{figures['beside the default stream']:.1f} ms beside {busy:.0f} ms of work on the default stream, "
            f"{figures['beside a stream of its own']:.1f} ms beside it on a stream of its own: ")
    if waits["beside a stream of its own"]:
        return said + ("they return only after the work queued on every stream (a device-wide synchronisation, or "
                       "an allocation or free the driver serialises with it: `calls` counts them)")
    if waits["beside the default stream"]:
        return said + "it waits for torch's default stream (speed.step_stream lets the step overlap it)"
    return said + "it waits for neither (a slower step shares the GPU with it)"


def sync_calls(loader, device: torch.device, busy_ms: float) -> dict[str, int]:
    """The CUDA calls that can make the host or a stream wait, as torch.profiler sees them inside the decoder's calls
    over two decodes beside a busy stream (the probe's own calls, outside those, are not counted)."""
    from torch.profiler import ProfilerActivity, profile

    stage, encoded = _stage_and_batches(loader, device, epoch=1)
    side, own = torch.cuda.Stream(device), torch.cuda.Stream(device)
    busy, _ = _busy(device, busy_ms)
    stage.decoder = _TimedDecoder(stage.decoder)
    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
            for batch in encoded:
                with torch.cuda.stream(own):
                    busy()
                _decode_host_ms(stage, batch, side)
        torch.cuda.synchronize(device)
    finally:
        stage.decoder = stage.decoder.decoder
    return calls_inside(trace.events(), DECODER_RANGE)


def calls_inside(events, range_name: str) -> dict[str, int]:
    """Counts of the waiting calls (SYNC_CALLS, SYNC_PREFIXES) among `events` (torch.profiler's FunctionEvents) that
    start inside a range named range_name on the same thread."""
    ranges = [(e.thread, e.time_range.start, e.time_range.end) for e in events if e.name == range_name]
    counts: dict[str, int] = {}
    for event in events:
        if event.name not in SYNC_CALLS and not event.name.startswith(SYNC_PREFIXES):
            continue
        if any(thread == event.thread and start <= event.time_range.start <= end for thread, start, end in ranges):
            counts[event.name] = counts.get(event.name, 0) + 1
    return dict(sorted(counts.items()))


# ------------------------------------------------------------------------------------------ steps


def make_step(model_name: str, num_classes: int, device: torch.device, *, width: int | None) -> Callable:
    model = build_model(model_name, num_classes=num_classes, **({"width": width} if width else {}))
    model = model.to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **({"fused": True} if
                                                                              device.type == "cuda" else {}))
    torch.backends.cudnn.benchmark = device.type == "cuda"

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def _synthetic(device: torch.device, batch: int, size: int, num_classes: int):
    pool = [(torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=torch.channels_last),
             torch.randint(0, num_classes, (batch,), device=device)) for _ in range(4)]
    while True:
        yield from pool


def _rate(step, batches, device, *, batch: int, steps: int, warmup: int) -> float:
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        step(*next(batches)[:2])
    sync()
    started = time.perf_counter()
    for _ in range(steps):
        step(*next(batches)[:2])
    sync()
    return steps * batch / (time.perf_counter() - started)


def feed_steps(step, loader, normalizer, device: torch.device, batch: int, size: int, num_classes: int, *,
               steps: int, warmup: int, rounds: int, failed: dict[str, str]) -> dict[str, list[float]]:
    """img/s of each arrangement per round; every round a new epoch, the order rotated. An arrangement fed by
    the decode path that raises is left out of the later rounds with no rates, its error in `failed`: the
    others still give the train runs an arrangement (a failing decode process must not take the whole probe
    and leave the train runs the defaults)."""
    names = [n for n, settings in ARRANGEMENTS.items()
             if device.type == "cuda" or settings is None or "speed.step_stream" not in settings]
    rates: dict[str, list[float]] = {name: [] for name in names}
    process = DecodeProcess(loader.dataset.device_plan, device, ahead=2)  # started by its first round, then kept
    with contextlib.closing(process):
        epoch = 0
        for k in range(rounds):
            for name in names[k % len(names):] + names[:k % len(names)]:
                settings = ARRANGEMENTS[name]
                if name in failed:
                    continue
                if settings is None:
                    batches = _synthetic(device, batch, size, num_classes)
                    rates[name].append(_rate(step, batches, device, batch=batch, steps=steps, warmup=warmup))
                    continue
                loader.sampler.set_epoch(epoch)
                epoch += 1
                speed = SpeedOptions(step_stream=settings.get("speed.step_stream") == "true")
                feed = settings.get("data.device_feed", "inline")
                prefetcher = DevicePrefetcher(loader, device, normalizer, feed=feed,
                                              process=process if feed == "process" else None)
                try:
                    with speed.training_stream(device), contextlib.closing(iter(prefetcher)) as batches:
                        rates[name].append(_rate(step, batches, device, batch=batch, steps=steps, warmup=warmup))
                except Exception as error:  # noqa: BLE001 - recorded and named; the other arrangements stand
                    failed[name] = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
                    rates[name].clear()
                    print(f"{name:>22}: failed, left out ({failed[name]})", flush=True)
    return rates


def best(rates: dict[str, list[float]]) -> dict:
    """The fastest arrangement fed by the decode path, its settings and its share of the synthetic rate."""
    fed = {name: statistics.median(values) for name, values in rates.items()
           if ARRANGEMENTS[name] is not None and values}
    name = max(fed, key=fed.get)
    return {"name": name, "settings": ARRANGEMENTS[name], "img_per_s": fed[name],
            "of_synthetic": fed[name] / statistics.median(rates["synthetic"])}


if __name__ == "__main__":
    raise SystemExit(main())
