"""Where a DeviceFeed's work runs (data.device_feed): each feed is a generator of Loaded batches, in order.

    inline    in the consumer's thread: on CUDA one batch ahead on a stream of the feed's own, so that the copy
              (and decode) of the next batch is queued before the consumer's step; elsewhere batch by batch
    thread    in a background thread, `depth` batches ready ahead while one more is made: the consumer enqueues
              its next step while a batch is decoded
    process   the training batches' decode in a process of its own (process.DecodeProcess), received by a
              background thread that copies the labels over and normalises there

A feed stays while a GPU run measures it winning (docs/profiling.md, "The device feeds"): the losing ones go
after the next GPU run, with their branches in benchmarks/decode_overlap.py and the campaign.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import NamedTuple, Protocol

import torch

from dlscale.data.dataset import Batch


class Loaded(NamedTuple):
    batch: Batch
    """On the device."""
    ready: torch.cuda.Event | None
    """Recorded on the feed's stream after the batch's work (None: made on the consumer's stream)."""


class DeviceFeed(Protocol):
    """What a feed uses of loop.DeviceFeed: its device, its depth, and load(batch, stage, stream) -> Loaded."""

    device: torch.device
    depth: int

    def load(self, batch, stage, stream: torch.cuda.Stream | None) -> Loaded: ...


def inline(feed: DeviceFeed, loader, stage, process) -> Iterator[Loaded]:
    batches = iter(loader)
    if feed.device.type != "cuda":
        for batch in batches:
            yield feed.load(batch, stage, None)
        return
    stream = torch.cuda.Stream(feed.device)
    upcoming = next(batches, None)
    upcoming = None if upcoming is None else feed.load(upcoming, stage, stream)
    while upcoming is not None:
        following = next(batches, None)
        current, upcoming = upcoming, None if following is None else feed.load(following, stage, stream)
        yield current


def in_thread(feed: DeviceFeed, loader, stage, process) -> Iterator[Loaded]:
    """The batches as a background thread makes them (with `process`: receives them decoded)."""
    ready: queue.Queue = queue.Queue(maxsize=feed.depth)
    stop = threading.Event()
    thread = threading.Thread(target=_make, args=(feed, loader, stage, process, ready, stop), name="dlscale-feed",
                              daemon=True)
    thread.start()
    try:
        while (item := ready.get()) is not _END:
            if isinstance(item, _Raised):
                raise item.error
            yield item
    finally:  # also where the caller stops early: the thread ends before the loader is iterated again
        stop.set()
        while thread.is_alive():
            _drain(ready)
            thread.join(0.05)


FEEDS = {"inline": inline, "thread": in_thread, "process": in_thread}
"""The feeds by name (data.device_feed): the process feed's thread receives from the decode process."""


def _make(feed: DeviceFeed, loader, stage, process, ready: queue.Queue, stop: threading.Event) -> None:
    try:
        cuda = feed.device.type == "cuda"
        if cuda and feed.device.index is not None:  # a new thread's current device is 0: this rank's, for
            torch.cuda.set_device(feed.device)      # the loader's pinning thread too
        stream = torch.cuda.Stream(feed.device) if cuda else None
        batches = iter(loader) if process is None else process.map(iter(loader), stream=stream, stop=stop)
        for batch in batches:
            if stop.is_set() or not _put(ready, feed.load(batch, stage, stream), stop):
                return
        _put(ready, _END, stop)
    except BaseException as error:  # noqa: BLE001 - raised again in the caller's thread
        _put(ready, _Raised(error), stop)


_END = object()
"""The background thread's last item: the loader has no more batches."""


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error


def _put(ready: queue.Queue, item, stop: threading.Event) -> bool:
    """Queue the item unless the consumer stopped; False when it did."""
    while not stop.is_set():
        try:
            ready.put(item, timeout=0.05)
            return True
        except queue.Full:
            continue
    return False


def _drain(ready: queue.Queue) -> None:
    try:
        while True:
            ready.get_nowait()
    except queue.Empty:
        pass
