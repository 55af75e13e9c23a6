"""Helpers of the GPU tier: small runs, JPEG trees, the subprocess environment, Nsight Compute.

Imported by the test modules of tests/gpu (fixtures live in conftest.py beside this).
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from dlscale.bench.synthetic import BenchSetup, build_bench
from dlscale.config import BenchConfig
from dlscale.distributed import DistEnv
from dlscale.train.step import train_step

ROOT = Path(__file__).resolve().parents[2]


def subprocess_env(**extra: str) -> dict[str, str]:
    """This environment with src/ on PYTHONPATH: the CUDA machine runs the package uninstalled."""
    paths = [str(ROOT / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1", **extra}


# ---------------------------------------------------------------------------------- small runs

TINY = {"model": "resnet18", "width": 16, "image_size": 32, "batch_size": 32, "num_classes": 10,
        "pool_batches": 2, "lr": 0.02, "device": "cuda"}
"""A small ResNet on 64 random images (2 batches): memorised within 30 steps (calibrated on the
CPU: the loss falls from about 2.5 to under 0.01 in fp32 and bf16)."""


def tiny_setup(**overrides) -> tuple[BenchConfig, BenchSetup]:
    cfg = BenchConfig(**{**TINY, **overrides})
    return cfg, build_bench(cfg, DistEnv(), torch.device("cuda", 0))


def train_losses(setup: BenchSetup, steps: int) -> list[float]:
    """Train on the setup's pool in turn; each step's loss (read every step: a test, not a benchmark)."""
    return [train_step(setup.parts, [setup.pool[i % len(setup.pool)]]).item() for i in range(steps)]


def assert_learns(losses: list[float], *, factor: float = 0.5) -> None:
    """Every loss finite, and the last five average under `factor` x the first three."""
    assert all(np.isfinite(losses)), f"non-finite loss: {losses}"
    first, last = np.mean(losses[:3]), np.mean(losses[-5:])
    assert last < factor * first, f"loss did not fall: first {first:.4f}, last {last:.4f} ({losses})"


# ---------------------------------------------------------------------------------- JPEG trees


def write_jpeg_tree(root: Path, *, classes: int = 2, train: int = 24, val: int = 4,
                    size: tuple[int, int] = (64, 48)) -> Path:
    """root/{train,val}/c<k>/<n>.JPEG of random pixels (quality 90)."""
    rng = np.random.default_rng(0)
    for split, count in (("train", train), ("val", val)):
        for k in range(classes):
            folder = root / split / f"c{k}"
            folder.mkdir(parents=True, exist_ok=True)
            for n in range(count):
                buffer = io.BytesIO()
                pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
                Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
                (folder / f"{n}.JPEG").write_bytes(buffer.getvalue())
    return root


def find_ncu() -> str | None:
    """Nsight Compute's CLI: on PATH, or where the CUDA toolkit and its installers put it."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda-*/bin/ncu"):
        matches = sorted(Path("/").glob(pattern.lstrip("/")))
        if matches:
            return str(matches[-1])
    return None
