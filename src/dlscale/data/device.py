"""The device side of the input pipeline: copy uint8 batches over, normalise them there.

Batches cross the host-device link as uint8 (a quarter of the bytes of float32) and become float
on the device, as in the HAL/apex `fast_collate` + `data_prefetcher` pattern. On the device decode
path (data.decode=gpu) the loader yields files, and the prefetcher decodes them on its device first
(data.device_decode), with the decoder of that device (nvJPEG on CUDA; Pillow on the CPU).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator, Sequence

import torch

from dlscale.data.dataset import Batch
from dlscale.data.decode_process import DecodeProcess
from dlscale.data.decoders import ImageDecoder, build_decoder
from dlscale.data.device_decode import DeviceDecodeStage
from dlscale.data.encoded import EncodedBatch
from dlscale.metrics.timing import DeviceTimer


class DeviceNormalizer:
    """uint8 NCHW images on the device -> float (x - 255 mean) / (255 std), optionally channels_last.

    mean and std are per channel in 0..1 units (DatasetInfo.mean / .std); they are scaled by 255
    here because the images are still bytes.
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        device: torch.device | str = "cpu",
        *,
        channels_last: bool = False,
        dtype: torch.dtype = torch.float32,
    ):
        self.mean = torch.tensor(mean, dtype=dtype, device=device).mul(255).view(1, -1, 1, 1)
        self.inv_std = torch.tensor(std, dtype=dtype, device=device).mul(255).reciprocal().view(1, -1, 1, 1)
        self.channels_last = channels_last
        self.dtype = dtype

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            # Reorder the bytes, not the floats; elementwise ops keep the memory format.
            images = images.contiguous(memory_format=torch.channels_last)
        return (images.to(self.dtype) - self.mean) * self.inv_std


def normalize(images: torch.Tensor, mean: Sequence[float], std: Sequence[float], *,
              channels_last: bool = False) -> torch.Tensor:
    """One-off form of DeviceNormalizer (builds the constants each call)."""
    return DeviceNormalizer(mean, std, images.device, channels_last=channels_last)(images)


class DevicePrefetcher:
    """Iterate a loader of Batch, yielding Batch with tensors on `device` (images normalised if a
    normalizer is given). On CUDA the next batch is copied (non_blocking, from pinned memory) and
    normalised on a side stream while the current one is used; elsewhere it is a plain copy.

    A loader of EncodedBatch (its data set has a device_plan) is decoded on `device` by `decoder`
    (default: the device's own, data.decoders.build_decoder) in the same place. timer, if given,
    sums the device time of that work per batch: copy, decode, crop, normalise (`dlscale loader`).

    ahead (data.device_ahead): 0 does that work in the calling thread, one batch ahead, between two
    steps; n > 0 does it in a background thread of this process (on a CUDA stream of its own): n
    batches wait ready while one more is made, so that the caller enqueues its next step while a batch
    is decoded (the host waits inside nvJPEG's calls until their decode ends). The batches and their
    order are the same. Close the iterator where the caller may stop early or fail (the thread ends
    with it; contextlib.closing).

    process (data.device_decode_process): a DecodeProcess that decodes the encoded batches in a process
    of its own; the background thread (at least one batch ahead) sends it the loader's batches and
    receives them decoded, then copies the labels over and normalises there.
    """

    def __init__(self, loader: Iterable[Batch], device: torch.device | str,
                 normalizer: DeviceNormalizer | None = None, *, decoder: ImageDecoder | None = None,
                 timer: DeviceTimer | None = None, ahead: int = 0, process: DecodeProcess | None = None):
        self.loader = loader
        self.device = torch.device(device)
        self.normalizer = normalizer
        self.timer = timer
        self.process = process
        self.ahead = max(ahead, 1) if process is not None else ahead
        plan = getattr(getattr(loader, "dataset", None), "device_plan", None)
        self.stage = None if plan is None or process is not None else \
            DeviceDecodeStage(plan, decoder or build_decoder(self.device, plan.decoder))

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def _to_device(self, batch: Batch | EncodedBatch) -> Batch:
        if self.timer is not None:
            self.timer.start()
        if isinstance(batch, EncodedBatch):
            if self.stage is None:
                raise TypeError("a loader of encoded batches needs a data set with a device_plan (data.decode=gpu)")
            batch = self.stage(batch)
        images = batch.images.to(self.device, non_blocking=True)
        labels = batch.labels.to(self.device, non_blocking=True)
        if self.normalizer is not None:
            images = self.normalizer(images)
        if self.timer is not None:
            self.timer.stop()
        return Batch(images, labels, batch.skipped)

    def __iter__(self) -> Iterator[Batch]:
        if self.ahead > 0:
            yield from self._from_thread()
            return
        if self.device.type != "cuda":
            for batch in self.loader:
                yield self._to_device(batch)
            return
        stream = torch.cuda.Stream(self.device)
        batches = iter(self.loader)
        upcoming = self._load_on(stream, batches)
        while upcoming is not None:
            current_stream = torch.cuda.current_stream(self.device)
            current_stream.wait_stream(stream)
            # The tensors were made on the side stream: tell the allocator they are used here.
            upcoming.images.record_stream(current_stream)
            upcoming.labels.record_stream(current_stream)
            batch, upcoming = upcoming, self._load_on(stream, batches)
            yield batch

    def _load_on(self, stream: torch.cuda.Stream, batches: Iterator[Batch]) -> Batch | None:
        batch = next(batches, None)
        if batch is None:
            return None
        with torch.cuda.stream(stream):
            return self._to_device(batch)

    def _from_thread(self) -> Iterator[Batch]:
        """The batches as a background thread loads them (see ahead), each handed to the caller's stream."""
        cuda = self.device.type == "cuda"
        ready: queue.Queue = queue.Queue(maxsize=self.ahead)
        stop = threading.Event()
        thread = threading.Thread(target=self._load_ahead, args=(ready, stop, cuda), name="dlscale-prefetch",
                                  daemon=True)
        thread.start()
        try:
            while (item := ready.get()) is not _END:
                if isinstance(item, _Raised):
                    raise item.error
                batch, done = item
                if done is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(done)
                    batch.images.record_stream(current)
                    batch.labels.record_stream(current)
                yield batch
        finally:  # also where the caller stops early: the thread ends before the loader is iterated again
            stop.set()
            while thread.is_alive():
                _drain(ready)
                thread.join(0.05)

    def _load_ahead(self, ready: queue.Queue, stop: threading.Event, cuda: bool) -> None:
        try:
            if cuda and self.device.index is not None:  # a new thread's current device is 0: this rank's, for
                torch.cuda.set_device(self.device)         # the loader's pinning thread too
            stream = torch.cuda.Stream(self.device) if cuda else None
            batches = iter(self.loader) if self.process is None else \
                self.process.map(iter(self.loader), stream=stream, stop=stop)
            for batch in batches:
                if stop.is_set():
                    return
                if stream is None:
                    item = (self._to_device(batch), None)
                else:
                    with torch.cuda.stream(stream):
                        loaded = self._to_device(batch)
                        done = torch.cuda.Event()
                        done.record(stream)
                    item = (loaded, done)
                if not _put(ready, item, stop):
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
