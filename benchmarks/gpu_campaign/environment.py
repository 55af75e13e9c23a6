"""Print, as one JSON object, what the campaign ran on: GPU, driver, torch, CUDA, cuDNN, NCCL,
Python, CPU, the peers' versions, nvImageCodec's, nvJPEG's and pynvml's. Run as its own process so that the
campaign itself holds no CUDA context while it measures:

    PYTHONPATH=src python3 benchmarks/gpu_campaign/environment.py
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess

import torch

from dlscale.data.transforms import pillow_build
from dlscale.distributed import DistEnv
from dlscale.metrics.hardware import available_cores
from dlscale.metrics.run import environment_info

SMI_FIELDS = ("name", "driver_version", "memory.total", "clocks.max.sm", "power.limit", "pstate")


def nvidia_smi() -> dict | None:
    """What nvidia-smi reports of GPU 0 (the driver version comes from here), or None."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    values = [v.strip() for v in out.stdout.splitlines()[0].split(",")]
    return dict(zip(SMI_FIELDS, values, strict=False))


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        return None


def main() -> None:
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    info = environment_info(1, device, DistEnv().launcher)
    info.update({
        "cuda_available": cuda,
        "nvidia_smi": nvidia_smi() if cuda else None,
        "gpu_memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30 if cuda else None,
        "cpu_model": cpu_model(),
        "available_cores": available_cores(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "pillow": pillow_build(),
        "torchvision": version("torchvision"),
        "timm": version("timm"),
        "triton": version("triton"),
        # the wheels stage's, first on PYTHONPATH where it installed them
        "nvimgcodec": version("nvidia-nvimgcodec-cu13"),
        "nvjpeg": version("nvidia-nvjpeg"),
        "nvidia_ml_py": version("nvidia-ml-py"),
    })
    info["driver"] = (info["nvidia_smi"] or {}).get("driver_version")
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
