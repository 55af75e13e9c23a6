"""Shared pieces of the GPU tier (`pytest -m gpu`).

Every module here is marked `gpu`; tests/conftest.py skips the mark where CUDA is not visible
(the one skipping mechanism). Run on the CUDA machine with no install:

    PYTHONPATH=src python3 -m pytest -m gpu tests/gpu

The tests touch process-wide switches (TF32, cudnn.benchmark and .deterministic, torch.compile's
caches); the autouse fixture puts them back so the order of tests does not matter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gpu_helpers import write_jpeg_tree


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda", 0)


def _tf32_state():
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    if hasattr(matmul, "fp32_precision"):
        return ("fp32_precision", matmul.fp32_precision, conv.fp32_precision)
    return ("allow_tf32", matmul.allow_tf32, torch.backends.cudnn.allow_tf32)


def _set_tf32_state(state) -> None:
    kind, matmul, conv = state
    if kind == "fp32_precision":
        torch.backends.cuda.matmul.fp32_precision = matmul
        torch.backends.cudnn.conv.fp32_precision = conv
    else:
        torch.backends.cuda.matmul.allow_tf32 = matmul
        torch.backends.cudnn.allow_tf32 = conv


@pytest.fixture(autouse=True)
def restore_torch_switches():
    """TF32, cuDNN autotuning and determinism as they were before the test."""
    cudnn = torch.backends.cudnn
    saved = (_tf32_state(), cudnn.benchmark, cudnn.deterministic)
    yield
    tf32, cudnn.benchmark, cudnn.deterministic = saved
    _set_tf32_state(tf32)


@pytest.fixture(scope="module")
def jpeg_tree(tmp_path_factory) -> Path:
    """2 classes x 24 training and 4 validation JPEGs of 64 x 48 random pixels."""
    return write_jpeg_tree(tmp_path_factory.mktemp("jpegs"))
