"""Single-file checkpoints written atomically, rotated, and loaded with weights_only=True.

The protocol follows docs/references.md#checkpoint-protocol and dlscale's rules in docs/references.md#rule-checkpoints:
* the training loop calls `save` on rank 0 only (DDP replicas are identical);
* the file is written to `ckpt.tmp.<pid>`, flushed and fsynced, checked to load with
  `weights_only=True`, renamed with `os.replace` to `checkpoint-<step:09d>.pt`, and the
  directory is fsynced, so a crash leaves either the old or the new complete file;
* the file carries the CRC-32 of its bytes at its end, computed as torch.save writes them (checksum.py);
  a load checks every byte against it first, so a file damaged after it was written (a flipped bit, a
  bad copy) is refused and the previous checkpoint resumed, never trained on;
* the `latest` pointer is then replaced the same way, and old files are rotated away;
* resume is decided from this directory alone, never from TORCHELASTIC_RESTART_COUNT
  or SLURM_RESTART_COUNT (torchrun counts restarts per agent: pytorch#108158).

Callers: after `load_latest` on every rank, `dist.barrier()` before training, so that
rank 0 cannot rotate away a file another rank is still reading (pytorch#84881).
"""

from __future__ import annotations

import logging
import os
import pickle
import random
import re
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from dlscale.errors import ConfigError, one_line
from dlscale.rundir import replace_atomically
from dlscale.rundir.files import read_bounded
from dlscale.train.checksum import DamagedCheckpoint, save_with_checksum, verify_checksum

log = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"checkpoint-([0-9]{9,})\.pt")
TMP_PATTERN = re.compile(r"(ckpt|latest)\.tmp\.[0-9]+")
"""File names, matched whole (fullmatch)."""
LATEST_POINTER = "latest"
POINTER_LIMIT_BYTES = 256
"""The `latest` pointer holds one file name."""


class CheckpointManager:
    """Writes `checkpoint-<step>.pt` files into one directory and finds the newest good one."""

    def __init__(self, directory: str | os.PathLike[str], keep_last: int | None = 3) -> None:
        if keep_last is not None and keep_last < 1:
            raise ConfigError(
                f"keep_last={keep_last}: keep at least 1 checkpoint (or None for all)"
            )
        self.directory = Path(directory)
        self.keep_last = keep_last

    # ------------------------------------------------------------------ write
    def save(self, state: dict[str, Any], *, epoch: int, step: int) -> Path:
        """Atomically write `state` plus `epoch` and `step`; returns the checkpoint's path.

        Raises TypeError (and writes nothing) when `state` holds something that
        `torch.load(weights_only=True)` would refuse, e.g. a numpy array; OSError when the disk refuses
        the write (full, read-only, not permitted), the previous checkpoint left as it was.
        """
        for key, value in (("epoch", epoch), ("step", step)):
            if key in state and state[key] != value:
                raise ValueError(f"state[{key!r}]={state[key]!r} disagrees with {key}={value}")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._remove_leftover_tmp_files()
        payload = {**state, "epoch": int(epoch), "step": int(step)}
        path = self.directory / f"checkpoint-{int(step):09d}.pt"
        self._write_atomically(path, "ckpt", lambda f: save_with_checksum(payload, f), verify=True)
        pointer = (path.name + "\n").encode()
        self._write_atomically(
            self.directory / LATEST_POINTER, "latest", lambda f: f.write(pointer)
        )
        self._rotate(current_step=int(step))
        return path

    def _write_atomically(self, path: Path, tmp_prefix: str, write: Callable[[BinaryIO], object], *,
                          verify: bool = False) -> None:
        """`<prefix>.tmp.<pid>` in the same directory -> flush -> fsync -> checked -> os.replace -> fsync dir
        (rundir's one atomic writer). An OSError (a full disk) is raised as it is: the caller names the
        checkpoint that is intact."""
        replace_atomically(path, write, tmp=self.directory / f"{tmp_prefix}.tmp.{os.getpid()}",
                           verify=_check_weights_only_loadable if verify else None, durable=True)

    def _remove_leftover_tmp_files(self) -> None:
        """A tmp file is a write that crashed before its rename: never read, removed here."""
        for path in self.directory.iterdir():
            if TMP_PATTERN.fullmatch(path.name):
                log.info("removing an unfinished checkpoint write: %s", path)
                path.unlink(missing_ok=True)

    def _rotate(self, *, current_step: int) -> None:
        """Delete all but the `keep_last` newest checkpoints with step <= `current_step`.

        Files with a larger step are left alone: after a fall-back past unreadable files
        they are the unreadable ones, and deleting data is not this class's call. They
        are overwritten or rotated away once training passes their step.
        """
        files = self._checkpoints_newest_first()
        newer = [path.name for step, path in files if step > current_step]
        if newer:
            log.warning("checkpoints newer than step %d remain: %s", current_step, newer)
        if self.keep_last is None:
            return
        older = [path for step, path in files if step <= current_step]
        for path in older[self.keep_last :]:
            if _is_archive(path):  # what dlscale writes; anything else is not this class's to delete
                path.unlink(missing_ok=True)
            else:
                log.warning("left in place, not a checkpoint dlscale wrote: %s", path)

    # ------------------------------------------------------------------- read
    def checkpoints(self) -> list[Path]:
        """Complete-looking checkpoint files, oldest first (tmp files are never listed)."""
        return [path for _, path in reversed(self._checkpoints_newest_first())]

    def _checkpoints_newest_first(self) -> list[tuple[int, Path]]:
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = CHECKPOINT_PATTERN.fullmatch(path.name)
            if match and path.is_file():
                found.append((int(match.group(1)), path))
        return sorted(found, reverse=True)

    def latest_path(self) -> Path | None:
        """The file the `latest` pointer names, else the highest-step file, else None.

        `load_latest` does not trust the pointer alone: a crash between a checkpoint's
        rename and the pointer update leaves a newer complete file that it still uses.
        """
        pointer = self.directory / LATEST_POINTER
        try:
            name = read_bounded(pointer, POINTER_LIMIT_BYTES, "").decode("ascii").strip()
        except (OSError, ConfigError, UnicodeDecodeError):  # missing, damaged or not a file: the files decide
            name = ""
        if CHECKPOINT_PATTERN.fullmatch(name) and (self.directory / name).is_file():
            return self.directory / name
        files = self._checkpoints_newest_first()
        return files[0][1] if files else None

    def load_latest(self, map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
        """The newest checkpoint that loads, or None when there is none (a fresh run).

        A damaged file (truncated by a crash mid-write, garbage, bytes that do not match its CRC-32)
        gives one warning line naming it and the older file resumed instead. ConfigError when every
        file is damaged (never silently start afresh next to them), or when a file was not written
        by dlscale (a plain pickle, or an archive holding objects that `weights_only=True` refuses):
        it is refused, never loaded, and left where it is.
        """
        files = self._checkpoints_newest_first()
        damaged: list[tuple[Path, BaseException]] = []
        for _, path in files:
            state, error = load_checkpoint(path, map_location)
            if state is not None:
                for bad, why in damaged:
                    _warn(f"checkpoint {bad} is {what_is_wrong(why)}; resuming from the previous one, {path}, "
                          "which is intact")
                return state
            damaged.append((path, error))
        for bad, why in damaged:
            _warn(f"checkpoint {bad} is {what_is_wrong(why)}")
        if files:
            raise ConfigError(
                f"none of the {len(files)} checkpoints in {self.directory} can be read (newest: {files[0][1].name}, "
                f"{one_line(damaged[0][1], 200)}); move them away to start afresh"
            )
        return None


PICKLE_HEADERS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
"""A plain pickle (protocol 2 to 5) starts so; dlscale writes zip archives (torch.save's format)."""
ZIP_HEADER = b"PK\x03\x04"


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> tuple[dict | None, BaseException | None]:
    """(state, None) for a dlscale checkpoint; (None, error) for a damaged file (DamagedCheckpoint when its
    CRC-32 disagrees); ConfigError for a file dlscale did not write (a plain pickle, or forbidden objects
    in an archive), which is never loaded. Every byte is checked against the CRC-32 before torch.load."""
    try:
        with open(path, "rb") as file:
            head = file.read(4)
    except OSError as error:
        raise _unreadable(path, error) from None
    if head.startswith(PICKLE_HEADERS):
        raise ConfigError(f"{path} is a plain pickle, not a checkpoint dlscale wrote (those are torch zip archives); "
                          "it is not loaded: move it away, or resume from another file or --name")
    try:
        verified = verify_checksum(path)
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        if head == ZIP_HEADER and zipfile.is_zipfile(path):  # an intact archive, forbidden content
            raise ConfigError(f"{path} holds objects that torch.load(weights_only=True) refuses; it was not "
                              f"written by dlscale and is not loaded: move it out of {path.parent}") from None
        return None, error
    except OSError as error:  # not damaged but not readable now: stop, rather than resume from an older one
        raise _unreadable(path, error) from None
    except Exception as error:  # a damaged file fails in many ways (IndexError included)
        return None, error
    if not isinstance(state, dict) or "step" not in state:
        return None, ValueError("not a dlscale checkpoint (no 'step' key)")
    if not verified:
        _warn(f"checkpoint {path} carries no checksum (dlscale wrote it before it stored them); loaded unverified")
    return state, None


def _unreadable(path: Path, error: OSError) -> ConfigError:
    return ConfigError(f"checkpoint {path} cannot be read ({error.strerror or error}); make it readable and run the "
                       "same command again (it is not skipped: the run would resume from an older checkpoint), or "
                       "move it away")


def what_is_wrong(error: BaseException) -> str:
    """`damaged (...)` or `unreadable (Type: ...)`: how a checkpoint that load_checkpoint refused is described."""
    if isinstance(error, DamagedCheckpoint):
        return f"damaged ({error})"
    return f"unreadable ({type(error).__name__}: {one_line(error, 200)})"


def _is_archive(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            return file.read(4) == ZIP_HEADER
    except OSError:
        return False


def _warn(message: str) -> None:
    """One line on stderr: logging's last-resort handler prints the message alone (a warnings.warn would
    add the file, the line and its source on a second line)."""
    log.warning(message)


def _check_weights_only_loadable(path: Path) -> None:
    """Fail at save time, not at resume time, if weights_only loading would refuse the file.

    mmap=True reads the pickled structure without reading the tensor data.
    """
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:
        raise TypeError(
            "the checkpoint state holds objects that torch.load(weights_only=True) refuses; "
            f"store plain tensors, dicts, lists, numbers and strings ({error})"
        ) from None


# ---------------------------------------------------------------------- RNG state
def capture_rng_state() -> dict[str, Any]:
    """Python, numpy, torch CPU (and CUDA) generator states as weights_only-safe data."""
    version, internal, gauss_next = random.getstate()
    bit_generator, keys, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": {"version": version, "state": list(internal), "gauss_next": gauss_next},
        "numpy": {
            "bit_generator": str(bit_generator),
            "keys": keys.tolist(),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `capture_rng_state`; CUDA states are skipped (with a warning) without CUDA."""
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    npy = state["numpy"]
    np.random.set_state(
        (
            npy["bit_generator"],
            np.asarray(npy["keys"], dtype=np.uint32),
            npy["pos"],
            npy["has_gauss"],
            npy["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"].cpu())
    cuda = state.get("cuda")
    if cuda is None:
        return
    if not torch.cuda.is_available():
        warnings.warn(
            "the checkpoint has CUDA RNG states but CUDA is unavailable; skipped", stacklevel=2
        )
        return
    if len(cuda) != torch.cuda.device_count():
        warnings.warn(
            f"the checkpoint has {len(cuda)} CUDA RNG states for "
            f"{torch.cuda.device_count()} visible devices; restoring the common ones",
            stacklevel=2,
        )
    for index, device_state in enumerate(cuda[: torch.cuda.device_count()]):
        torch.cuda.set_rng_state(device_state.cpu(), index)
