"""What the checkpoint's CRC-32 costs a save and a resume, on a ResNet-50-sized state (model + SGD momentum).

    python benchmarks/checkpoint_checksum.py                     # ResNet-50: 205 MB, 5 rounds, in a temp dir
    python benchmarks/checkpoint_checksum.py --dir /scratch/ckpt --rounds 9

Save: CheckpointManager.save as it is (torch.save through the CRC-32 writer, torch's own per-record CRC-32
off) against the same save with a plain torch.save (what dlscale did before: torch's per-record CRC-32 on,
no checksum of the file), alternated (a b a b ...) so drift hits both alike; medians and their ratio.
Load: load_checkpoint (the CRC-32 pass over the file, then torch.load) against torch.load alone, the file
in the page cache (a resume from a cold disk reads it once in the pass; torch.load then finds it cached).
Then what one more pass over the serialized bytes would add to the save with each candidate hash.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import statistics
import tempfile
import time
import zlib
from pathlib import Path

import torch

import dlscale.train.checkpoint as checkpoint
from dlscale.models import build_model

HASHES = {
    "zlib.crc32": lambda data: zlib.crc32(data),
    "zlib.adler32": lambda data: zlib.adler32(data),
    "hashlib.blake2b": lambda data: hashlib.blake2b(data).digest(),
    "hashlib.sha256": lambda data: hashlib.sha256(data).digest(),
}


def resnet50_state() -> dict:
    """What a ResNet-50 checkpoint holds in bulk: the model's state and SGD's momentum buffers."""
    torch.manual_seed(0)
    model = build_model("resnet50")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}


def timed(action, clock=time.perf_counter) -> float:
    start = clock()
    action()
    return clock() - start


def alternate(a, b, rounds: int) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds (this process, all its threads) of a and of b, run a b a b ... after one
    untimed run of each. CPU time is what the checksum adds; wall time also holds the disk's fsync."""
    a(), b()
    times: dict[str, tuple[list, list]] = {"wall": ([], []), "cpu": ([], [])}
    for _ in range(rounds):
        for index, action in enumerate((a, b)):
            wall, cpu = time.perf_counter(), time.process_time()
            action()
            times["wall"][index].append(time.perf_counter() - wall)
            times["cpu"][index].append(time.process_time() - cpu)
    return {clock: (statistics.median(first), statistics.median(second)) for clock, (first, second) in times.items()}


def report(what: str, before: str, after: str, medians: dict[str, tuple[float, float]]) -> None:
    for clock, (old, new) in medians.items():
        print(f"{what} {clock:4s}  {before}: {old * 1e3:6.1f} ms   {after}: {new * 1e3:6.1f} ms   "
              f"ratio {new / old:.3f}")


def plain_torch_save(payload, file) -> None:
    torch.save(payload, file)


def measure(directory: Path, rounds: int) -> None:
    state = resnet50_state()
    with_checksum = checkpoint.CheckpointManager(directory / "with", keep_last=1)
    without = checkpoint.CheckpointManager(directory / "without", keep_last=1)
    step = iter(range(1, 10**6))

    def save_without():
        checkpoint.save_with_checksum, saved = plain_torch_save, checkpoint.save_with_checksum
        try:
            without.save(state, epoch=0, step=next(step))
        finally:
            checkpoint.save_with_checksum = saved

    saves = alternate(save_without, lambda: with_checksum.save(state, epoch=0, step=next(step)), rounds)
    size = with_checksum.latest_path().stat().st_size
    print(f"checkpoint: {size / 1e6:.1f} MB (ResNet-50 model + SGD momentum), medians of {rounds} alternated rounds")
    print("save (CheckpointManager.save: write, fsync, weights_only check, rename, pointer, rotation)")
    report("save", "torch.save before", "with the file's CRC-32", saves)
    path = with_checksum.latest_path()
    loads = alternate(lambda: torch.load(path, weights_only=True), lambda: checkpoint.load_checkpoint(path), rounds)
    print("load (the file in the page cache)")
    report("load", "torch.load alone ", "CRC-32 pass + load  ", loads)
    save_old = saves["wall"][0]

    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = memoryview(buffer.getvalue())
    print("one more pass over the serialized bytes, as a share of the save before:")
    for name, digest in HASHES.items():
        seconds = min(timed(lambda digest=digest: digest(data)) for _ in range(rounds))
        print(f"  {name:16s} {len(data) / seconds / 1e9:5.2f} GB/s  {seconds * 1e3:6.1f} ms  "
              f"+{seconds / save_old * 100:4.0f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the checkpoints are written (default: a temporary directory)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        measure(Path(directory), args.rounds)


if __name__ == "__main__":
    main()
