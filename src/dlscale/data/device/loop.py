"""The one loop that moves a loader's batches to the device, and the feeds that make them (data.device_feed).

DeviceFeed is built once per run (the training and the evaluation both use it). Its batches(loader) brings each
batch of an epoch to the device: the copy, on the device decode path (data.decode=gpu) the decode, crop and resize
(DeviceDecodeStage with the device's decoder), and the normalisation, on a CUDA stream of its own or, elsewhere,
in a null context (timm's PrefetchLoader.__iter__ has the same shape); the consumer's stream waits for each batch
before using it. Where that work runs is the feed (feeds.py): "inline" in the consumer's thread one batch ahead,
"thread" in a background thread `depth` batches ahead, "process" with the training batches' decode in a process of
its own (process.py) and a background thread receiving them. The batches and their order are the same whatever
the feed. Close what batches() returns where the consumer may stop early or fail (contextlib.closing): a feed's
thread ends with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import torch

from dlscale.data.dataset import Batch
from dlscale.data.device.decoders import ImageDecoder, build_decoder
from dlscale.data.device.feeds import FEEDS, Loaded
from dlscale.data.device.normalize import DeviceNormalizer
from dlscale.data.device.process import DecodeProcess
from dlscale.data.device.stage import DeviceDecodeStage
from dlscale.data.encoded import DevicePlan, EncodedBatch
from dlscale.metrics.timing import DeviceTimer


def device_plan(loader) -> DevicePlan | None:
    """What the device does with a loader's files (the device decode path), or None: its batches are images."""
    return getattr(getattr(loader, "dataset", None), "device_plan", None)


class DeviceFeed:
    """A run's batches on `device` (normalised if a normalizer is given), fed as `feed` says ("inline",
    "thread", "process": data.device_feed) `depth` batches ahead (data.device_feed_depth; inline: one).

    decoder: the device decode path's decoder (default: the plan's data.decoder on this device, built once).
    timer, if given, sums the device time of the work per batch: copy, decode, crop, normalise (`dlscale loader`).
    process: a DecodeProcess to use for the "process" feed (default: one made for the first training plan)."""

    def __init__(self, device: torch.device | str, normalizer: DeviceNormalizer | None = None, *,
                 feed: str = "inline", depth: int = 2, decoder: ImageDecoder | None = None,
                 timer: DeviceTimer | None = None, process: DecodeProcess | None = None):
        if feed not in FEEDS:
            raise ValueError(f"feed={feed!r}: one of {', '.join(FEEDS)}")
        self.device = torch.device(device)
        self.normalizer, self.timer = normalizer, timer
        self.feed, self.depth = feed, max(int(depth), 1)
        self.decoder = decoder
        self.process = process
        self._stages: dict[int, DeviceDecodeStage] = {}

    def stage(self, plan: DevicePlan | None) -> DeviceDecodeStage | None:
        """The decode stage of a plan, made at its first use and kept (None without a plan)."""
        if plan is None:
            return None
        if id(plan) not in self._stages:
            if self.decoder is None:
                self.decoder = build_decoder(self.device, plan.decoder)
            self._stages[id(plan)] = DeviceDecodeStage(plan, self.decoder)
        return self._stages[id(plan)]

    def decode_process(self, loader) -> DecodeProcess | None:
        """The process that decodes this loader's batches (the "process" feed, training batches), else None:
        validation, and any loader on the other feeds, decodes in this process."""
        plan = device_plan(loader)
        if self.feed != "process" or plan is None or plan.resize is not None:
            return None
        if self.process is None:
            self.process = DecodeProcess(plan, self.device, ahead=max(self.depth, 2))
        return self.process

    def pids(self) -> list[int]:
        """The decode process's pid while it runs (its CPU time belongs to the input pipeline's)."""
        return self.process.pids() if self.process is not None else []

    def batches(self, loader: Iterable) -> Iterator[Batch]:
        """The loader's batches on the device, each ready on the consumer's current stream when it gets it."""
        process = self.decode_process(loader)
        stage = None if process is not None else self.stage(device_plan(loader))
        feed = FEEDS["thread" if process is None and self.feed == "process" else self.feed]
        made = feed(self, loader, stage, process)
        with contextlib.closing(made):
            for loaded in made:
                if loaded.ready is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(loaded.ready)
                    # The tensors were made on the feed's stream: tell the allocator they are used here.
                    loaded.batch.images.record_stream(current)
                    loaded.batch.labels.record_stream(current)
                yield loaded.batch

    def load(self, batch: Batch | EncodedBatch, stage: DeviceDecodeStage | None,
             stream: torch.cuda.Stream | None) -> Loaded:
        """One batch brought to the device on `stream` (None: in a null context, where the caller runs)."""
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            if self.timer is not None:
                self.timer.start()
            if isinstance(batch, EncodedBatch):
                if stage is None:
                    raise TypeError("a loader of encoded batches needs a data set with a device_plan (data.decode=gpu)")
                batch = stage(batch)
            images = batch.images.to(self.device, non_blocking=True)
            labels = batch.labels.to(self.device, non_blocking=True)
            if self.normalizer is not None:
                images = self.normalizer(images)
            if self.timer is not None:
                self.timer.stop()
            ready = None
            if stream is not None:
                ready = torch.cuda.Event()
                ready.record(stream)
        return Loaded(Batch(images, labels, batch.skipped), ready)

    def close(self) -> None:
        """End the decode process, if one runs."""
        if self.process is not None:
            self.process.close()


class DevicePrefetcher:
    """One loader's batches through a DeviceFeed of their own (`dlscale loader`, profile and the tests): iterate
    it once per epoch. stage: the loader's decode stage in this process (None without one, or with a decode
    process)."""

    def __init__(self, loader: Iterable, device: torch.device | str, normalizer: DeviceNormalizer | None = None,
                 *, feed: str = "inline", depth: int = 2, decoder: ImageDecoder | None = None,
                 timer: DeviceTimer | None = None, process: DecodeProcess | None = None):
        self.loader = loader
        self.feed = DeviceFeed(device, normalizer, feed="process" if process is not None else feed, depth=depth,
                               decoder=decoder, timer=timer, process=process)
        self.stage = None if self.feed.decode_process(loader) is not None else self.feed.stage(device_plan(loader))

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Batch]:
        return self.feed.batches(self.loader)
