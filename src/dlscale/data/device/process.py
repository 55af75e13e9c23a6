"""The device decode in a process of its own (data.device_feed=process).

On an H100 the device path's decode, called in the training process, returned only after the work queued
before it, whether that work ran on torch's default stream or a stream of its own (benchmarks/decode_overlap.py,
docs/benchmarks.md): a device-wide synchronisation, or allocations and frees that the driver serialises with
the queued work, would both do that. Either waits only for the work of its own process's CUDA context: in a
process of their own, the decodes wait for each other and not for the training step.

DecodeProcess runs the DeviceDecodeStage of a DevicePlan in a spawned process. The training process
sends it the loader's EncodedBatch (its tensors in shared memory, where the loader workers put them)
and receives each batch back in order. The decode process makes batch k's images in slot k % ahead of
a ring of `ahead` uint8 buffers in its device memory, waits for them, and replies with the slot's index
and the batch's labels; the receiver copies the slot's rows into its own memory on its stream and waits
for the copy before it sends the request that reuses the slot (at most `ahead` requests are out at once).
Each slot is sent once, when the decode process makes it (torch.multiprocessing: CUDA IPC), and the
receiver keeps it mapped until close: a batch shares, opens, frees and synchronises nothing in the
training process, and nothing grows with the batches in the decode process (torch wraps a CUDA tensor's
memory anew each time it is sent). On the CPU the same code runs with the Pillow decoder and shared
memory in place of CUDA IPC: what the tests check against the in-process stage. One difference: a shared-memory
slot travels as a file descriptor that the decode process hands over when the receiver reads the message, so a
decode process that stops answering while a slot is on its way holds the receiver (a CUDA IPC handle is opened
without it).

Rows the device decoder refuses are decoded by the CPU path in the decode process, and counted there
as in-process (DecodeCounts come back with each batch). An error there is raised in the receiver; the
decode process ending is noticed within a second and named, and a reply that never comes (within
REPLY_TIMEOUT_S) or comes out of turn (a message the queue could not send) is named too. The decode
process ignores the signals that stop a run (SIGINT, SIGTERM, SIGUSR1, SIGUSR2: SLURM and torchrun send
them to every process of a job or group): the training process decides when to stop, and the decode
process ends when it is told to or when the training process is gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Iterator
from multiprocessing import util

import numpy as np
import torch
import torch.multiprocessing as mp

from dlscale.data.dataset import Batch
from dlscale.data.device.decoders import build_decoder
from dlscale.data.device.stage import DecodeCounts, DeviceDecodeStage
from dlscale.data.encoded import DevicePlan, EncodedBatch
from dlscale.errors import DataError

POLL_S = 1.0
"""How often a waiting side looks whether the other one is still there, or asked to stop."""
REPLY_TIMEOUT_S = 600.0
"""The longest wait for one batch from a live decode process (a batch of full-size ImageNet JPEGs decodes in
well under a second on a GPU; its CPU fallback rows in seconds): longer is a decode process that is stuck."""
IGNORED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2")
                        if hasattr(signal, name))
"""Signals the decode process ignores: they are the training process's to act on (dlscale.train.signals)."""


class DecodeProcess:
    """EncodedBatch in, Batch (uint8 images on `device`) out, decoded in a spawned process (see the module).

    The process starts at the first map() and serves every map() after it (one per epoch) until close().
    counts sums where the rows of every batch received were decoded; slots_received counts the slots the
    decode process sent (each once)."""

    def __init__(self, plan: DevicePlan, device: torch.device | str, *, ahead: int = 2):
        self.plan = plan
        self.device = _indexed(torch.device(device))
        self.ahead = max(int(ahead), 1)
        self.counts = DecodeCounts()
        self.slots_received = 0
        self._process = None
        self._requests = self._replies = None
        self._sent = 0
        self._expected = 0
        self._slots: dict[int, torch.Tensor] = {}
        """The decode process's slots, kept mapped."""
        self._idle = None

    def start(self) -> None:
        if self._process is not None:
            return
        context = mp.get_context("spawn")  # a fresh interpreter: its own CUDA context, none of this one's threads
        self._requests, self._replies = context.Queue(), context.Queue()
        self._process = context.Process(target=_serve, name="dlscale-decode", daemon=True,
                                        args=(self.plan, str(self.device), self.ahead, self._requests, self._replies,
                                              os.getpid()))
        self._process.start()
        # At exit multiprocessing terminates daemonic children and joins them without a limit: this one ignores
        # SIGTERM, so it is killed first wherever close() was not reached.
        util.Finalize(self, _kill, args=(self._process,), exitpriority=10)
        if self.device.type == "cuda":
            self._idle = torch.cuda.Stream(self.device)  # nothing is ever queued on it: see _quiet

    def pids(self) -> list[int]:
        """The decode process's pid while it runs (its CPU time belongs to the input pipeline's)."""
        process = self._process
        return [process.pid] if process is not None and process.is_alive() else []

    def map(self, batches: Iterator[EncodedBatch], *, stream: torch.cuda.Stream | None = None,
            stop: threading.Event | None = None) -> Iterator[Batch]:
        """The batches decoded, in order, `ahead` of them in the decode process at a time. On CUDA the images
        are copied on `stream` (default: the current one) and complete when yielded. It ends early, yielding
        nothing more, once `stop` is set. Closing the iterator early leaves the batches still in flight to be
        discarded by the next map()."""
        self.start()
        self._expected = self._sent  # replies to an earlier map's batches are dropped on arrival
        in_flight, exhausted = 0, False
        while True:
            while not exhausted and in_flight < self.ahead:
                batch = next(batches, None)
                if batch is None:
                    exhausted = True
                    break
                self._requests.put((self._sent, batch))
                self._sent += 1
                in_flight += 1
            if in_flight == 0:
                return
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                decoded = self._receive(stop)
            if decoded is None:
                return
            in_flight -= 1
            yield decoded

    def _receive(self, stop: threading.Event | None) -> Batch | None:
        """The next batch of this map (None once stop is set), copied out of its slot."""
        waited_since = time.monotonic()
        while True:
            process = self._process
            if process is None:
                raise DataError("the decode process (data.device_feed=process) was closed while batches were "
                                "still asked of it")
            try:
                seq, payload = self._replies.get(timeout=POLL_S)
            except (OSError, EOFError) as error:  # a message whose sender is gone cannot be read
                if process.is_alive():
                    raise
                raise self._ended(process) from error
            except queue.Empty:
                if stop is not None and stop.is_set():
                    return None
                if not process.is_alive():
                    raise self._ended(process) from None
                if time.monotonic() - waited_since > REPLY_TIMEOUT_S:
                    raise DataError(f"the decode process (data.device_feed=process) sent no batch for "
                                    f"{REPLY_TIMEOUT_S:.0f} s while batch {self._expected} was in it") from None
                continue
            if isinstance(payload, _Slot):  # a slot made (or made anew, larger): kept mapped from now on
                with self._quiet():
                    self._slots[payload.index] = payload.images
                self.slots_received += 1
                continue
            if seq < self._expected:  # an earlier map's batch, closed before it arrived
                continue
            if seq > self._expected:  # the queue drops a message it cannot send: never take another batch for it
                raise DataError(f"the decode process (data.device_feed=process) sent batch {seq} where batch "
                                f"{self._expected} was due: a reply was lost (its output says why)")
            self._expected = seq + 1
            if isinstance(payload, _Failed):
                raise payload.error
            return self._copy(payload)

    def _ended(self, process) -> DataError:
        return DataError(f"the decode process (data.device_feed=process) ended with exit code {process.exitcode} "
                         f"while batch {self._expected} was in it (its own output says why; a GPU in "
                         "exclusive-process compute mode admits one process: use data.device_feed=thread there)")

    def _copy(self, decoded: _Decoded) -> Batch:
        """The batch's images copied out of their slot on the current stream, the copy complete: the request
        that reuses the slot may go."""
        slot = self._slots.get(decoded.index)
        if slot is None or slot.shape[0] < decoded.rows:  # its _Slot message was lost
            raise DataError(f"the decode process (data.device_feed=process) made batch {self._expected - 1} in "
                            f"slot {decoded.index}, which did not reach this process whole (its output says why)")
        for name, value in decoded.counts.items():
            setattr(self.counts, name, getattr(self.counts, name) + value)
        images = slot[:decoded.rows].clone()
        if self.device.type == "cuda":
            done = torch.cuda.Event()
            done.record()
            done.synchronize()
        return Batch(images, torch.from_numpy(decoded.labels), decoded.skipped)

    def _quiet(self):
        """Where a block shared by the decode process is released: torch's IPC deleter synchronises the current
        stream first, and on this one nothing is queued, so it returns at once (every copy was waited for)."""
        return torch.cuda.stream(self._idle) if self._idle is not None else contextlib.nullcontext()

    def close(self) -> None:
        """End the decode process (asked, then killed after 10 s)."""
        process, self._process = self._process, None
        if process is None:
            return
        with self._quiet():
            self._slots.clear()
        with contextlib.suppress(Exception):
            self._requests.put(None)
        process.join(10)
        if process.is_alive():
            process.kill()  # it ignores SIGTERM (IGNORED_SIGNALS)
            process.join(5)
        for channel in (self._requests, self._replies):
            channel.cancel_join_thread()  # batches nobody will read must not hold this process at exit
            channel.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()


def _kill(process) -> None:
    """The decode process killed if it still runs (at exit, or when its DecodeProcess is collected unclosed)."""
    with contextlib.suppress(Exception):
        if process.is_alive():
            process.kill()
            process.join(5)


def _indexed(device: torch.device) -> torch.device:
    """The device with its index: "cuda" is this process's current device. The decode process is a fresh
    interpreter whose current device is 0, and torch.cuda.set_device refuses a device without an index."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


@dataclasses.dataclass
class _Slot:
    """A slot of the ring, sent once, when the decode process makes it."""

    index: int
    images: torch.Tensor


@dataclasses.dataclass
class _Decoded:
    """A batch made in slot `index`: its first `rows` images."""

    index: int
    rows: int
    labels: np.ndarray
    """By value: a tensor would travel as a file descriptor the decode process must still be there to hand over."""
    skipped: tuple
    counts: dict


@dataclasses.dataclass
class _Failed:
    """An error of the decode process, raised again in the receiver."""

    error: BaseException

    @classmethod
    def of(cls, error: BaseException) -> _Failed:
        try:
            pickle.loads(pickle.dumps(error))
        except Exception:  # noqa: BLE001 - an exception that does not travel is sent as its type and text
            error = RuntimeError(f"{type(error).__name__} in the decode process: {error}")
        return cls(error)


def _serve(plan: DevicePlan, device: str, ahead: int, requests, replies, parent: int) -> None:
    """The decode process: decode each (seq, EncodedBatch) it is sent into slot seq % ahead and reply
    (seq, _Decoded), after (-1, _Slot) for a slot it made, or (seq, _Failed); end at None or when the process
    that started it is gone."""
    for signum in IGNORED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    where = torch.device(device)
    if where.type == "cuda":
        torch.cuda.set_device(where)
    else:
        torch.set_num_threads(1)  # the CPU stand-in: the loader workers and the training have the cores
    stage = DeviceDecodeStage(plan, build_decoder(where, plan.decoder))
    slots: dict[int, torch.Tensor] = {}
    while True:
        try:
            item = requests.get(timeout=POLL_S)
        except queue.Empty:
            if os.getppid() != parent:
                return
            continue
        if item is None:
            return
        seq, batch = item
        before = dataclasses.asdict(stage.counts)
        try:
            index, rows = seq % ahead, len(batch.labels)
            slot = slots.get(index)
            if slot is None or slot.shape[0] < rows:
                slot = torch.empty((rows, 3, plan.size, plan.size), dtype=torch.uint8, device=where)
                slots[index] = slot.share_memory_() if where.type == "cpu" else slot
                replies.put((-1, _Slot(index, slot)))
            decoded = stage(batch, out=slot)
            if where.type == "cuda":
                torch.cuda.current_stream(where).synchronize()  # the slot is complete before the receiver copies it
            counts = {k: v - before[k] for k, v in dataclasses.asdict(stage.counts).items()}
            replies.put((seq, _Decoded(index, rows, decoded.labels.numpy(), decoded.skipped, counts)))
            del decoded
        except Exception as error:  # noqa: BLE001 - raised again in the training process
            replies.put((seq, _Failed.of(error)))
        del batch, item
