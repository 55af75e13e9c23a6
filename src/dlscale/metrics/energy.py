"""Energy of a run's GPUs over a measured span, summed over ranks: average power per device and joules
per image. NVML does the measuring (metrics/nvml.py); this adds the torch side (which GPU this rank
drives, one all-reduce). On CPUs and without NVML the figures are None.
"""

from __future__ import annotations

import torch

from dlscale.distributed import sum_over_ranks
from dlscale.metrics.nvml import EnergyMeter, energy_meter


def device_energy_meter(device: torch.device) -> EnergyMeter | None:
    """An EnergyMeter of this rank's GPU, or None (CPU, no NVML)."""
    if device.type != "cuda":
        return None
    uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", "")) or None
    return energy_meter(device.index if device.index is not None else torch.cuda.current_device(), uuid)


NO_ENERGY = {"energy_j": None, "avg_power_w": None, "joules_per_image": None, "energy_method": None}


def energy_summary(measured: dict | None, images: int, device: torch.device) -> dict:
    """Every rank's energy over the span, summed (one all-reduce; every rank calls it): energy_j (all
    devices), avg_power_w (per device), joules_per_image (images: over all ranks in the span), and
    how NVML measured it. All None unless every rank measured."""
    energy, seconds = (measured["energy_j"], measured["seconds"]) if measured else (0.0, 0.0)
    summed = sum_over_ranks({"energy_j": energy, "seconds": seconds, "measuring": bool(measured), "ranks": 1}, device)
    total, seconds = summed["energy_j"], summed["seconds"]
    if summed["measuring"] < summed["ranks"] or total <= 0 or seconds <= 0:
        return dict(NO_ENERGY)
    return {"energy_j": total, "avg_power_w": total / seconds, "joules_per_image": total / images if images else None,
            "energy_method": measured["method"]}
