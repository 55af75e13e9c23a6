"""What a run ran on, for its env.json (dlscale.rundir writes it): the host's facts without torch
(metrics/provenance.py), and torch, CUDA, cuDNN, NCCL and the device's with it.
"""

from __future__ import annotations

import platform
from typing import Any

import torch

from dlscale.metrics.nvml import gpu_facts
from dlscale.metrics.provenance import host_info, loaded_nccl, package_version


def environment_info(world_size: int, device: torch.device, launcher: str = "single") -> dict:
    """Everything needed to rerun the run and to tell two runs' set-ups apart (`dlscale explain
    --against`): the command, dlscale's git state, the host's CPU and thread settings, the installed
    packages (metrics/provenance.py), torch and its CUDA, cuDNN and the NCCL actually loaded, and on
    NVIDIA GPUs the driver, clocks and power limits (metrics/nvml.py)."""
    info: dict[str, Any] = {
        **host_info(),
        "torch": torch.__version__,
        "torchvision": package_version("torchvision"),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl": None,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "world_size": world_size,
        "launcher": launcher,
        "device_type": device.type,
        "device_name": device_name(device),
    }
    if device.type == "cuda":
        built = ".".join(map(str, torch.cuda.nccl.version()))
        loaded = loaded_nccl()
        info.update(nccl=loaded["version"] if loaded else built, nccl_library=loaded["library"] if loaded else None,
                    nccl_built_with=built,
                    nccl_source="loaded library" if loaded else "torch build (no libnccl mapped)")
        properties = torch.cuda.get_device_properties(device)
        info["device_count"] = torch.cuda.device_count()
        info["device_capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        info["device_sm_count"] = properties.multi_processor_count
        info["device_uuid"] = str(getattr(properties, "uuid", "")) or None
        info.update(gpu_facts() or {"driver": None, "nvml_devices": None})
    return info


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"
