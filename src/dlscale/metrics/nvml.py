"""NVIDIA GPUs through NVML (`nvidia-ml-py`, the optional `gpu` extra): what each GPU is and how it is
set (clocks, power limit, MIG), and the energy a run used. No torch; everything returns None where
NVML, the GPU or the query is missing, so CPU runs and other devices record nulls, never guesses.

Energy: NVML's total-energy counter (millijoules since the driver loaded; Volta and newer) read at the
start and end of the measured span; where the counter is not supported, the power readings a
background thread takes every `interval_s` (milliwatts), integrated by the trapezoid rule. The thread
is the only thing that runs beside training: the training thread never waits for NVML.
"""

from __future__ import annotations

import importlib
import itertools
import threading
import time
from collections.abc import Callable


def load_nvml():
    """The initialised pynvml module, or None (not installed, no driver, no GPU)."""
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, driver errors: all mean "none"
        return None
    return nvml


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _query(call: Callable, *args):
    """One NVML query; None where the device or driver does not support it."""
    try:
        return call(*args)
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends
        return None


def _watts(milliwatts) -> float | None:
    return None if milliwatts is None else milliwatts / 1000.0


def gpu_facts(nvml=None) -> dict | None:
    """Driver version and every visible GPU: name, UUID, PCI bus, memory, SM and memory clocks
    (current, maximum, applications), power (draw, limit, default limit, enforced limit), MIG mode,
    persistence mode. None without NVML."""
    nvml = nvml or load_nvml()
    if nvml is None:
        return None
    count = _query(nvml.nvmlDeviceGetCount) or 0
    return {"driver": _text(_query(nvml.nvmlSystemGetDriverVersion) or "") or None,
            "nvml_devices": [_device_facts(nvml, _query(nvml.nvmlDeviceGetHandleByIndex, i)) for i in range(count)]}


def _device_facts(nvml, handle) -> dict:
    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    pci = _query(nvml.nvmlDeviceGetPciInfo, handle)
    memory = _query(nvml.nvmlDeviceGetMemoryInfo, handle)
    mig = _query(nvml.nvmlDeviceGetMigMode, handle)
    return {
        "name": _text(_query(nvml.nvmlDeviceGetName, handle) or "") or None,
        "uuid": _text(_query(nvml.nvmlDeviceGetUUID, handle) or "") or None,
        "pci_bus_id": _text(pci.busId) if pci is not None else None,
        "memory_total_bytes": memory.total if memory is not None else None,
        "sm_clock_mhz": _query(nvml.nvmlDeviceGetClockInfo, handle, sm),
        "sm_clock_max_mhz": _query(nvml.nvmlDeviceGetMaxClockInfo, handle, sm),
        "sm_clock_applications_mhz": _query(nvml.nvmlDeviceGetApplicationsClock, handle, sm),
        "memory_clock_mhz": _query(nvml.nvmlDeviceGetClockInfo, handle, mem),
        "memory_clock_max_mhz": _query(nvml.nvmlDeviceGetMaxClockInfo, handle, mem),
        "power_draw_w": _watts(_query(nvml.nvmlDeviceGetPowerUsage, handle)),
        "power_limit_w": _watts(_query(nvml.nvmlDeviceGetPowerManagementLimit, handle)),
        "power_limit_default_w": _watts(_query(nvml.nvmlDeviceGetPowerManagementDefaultLimit, handle)),
        "power_limit_enforced_w": _watts(_query(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)),
        "mig_mode": mig[0] if isinstance(mig, list | tuple) else mig,
        "persistence_mode": _query(nvml.nvmlDeviceGetPersistenceMode, handle),
    }


def device_handle(nvml, uuid: str | None, index: int):
    """NVML's handle of a CUDA device: by UUID (CUDA_VISIBLE_DEVICES renumbers devices), else by index."""
    if uuid:
        handle = _query(nvml.nvmlDeviceGetHandleByUUID, uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
        if handle is not None:
            return handle
    return _query(nvml.nvmlDeviceGetHandleByIndex, index)


class EnergyMeter:
    """Energy and power of one GPU over a span: start(), then stop() -> {energy_j, avg_power_w,
    max_power_w, seconds, samples, method}; stop() returns None when NVML could not read the GPU.

    A background thread reads the power draw every interval_s; the energy comes from NVML's energy
    counter where the GPU has one ("energy counter"), else from those readings ("power samples").
    """

    def __init__(self, nvml, handle, *, interval_s: float = 0.1, clock: Callable[[], float] = time.monotonic):
        self.nvml, self.handle, self.interval_s, self.clock = nvml, handle, interval_s, clock
        self.samples: list[tuple[float, float]] = []
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._start: tuple[float, float | None] | None = None

    def _power_w(self) -> float | None:
        return _watts(_query(self.nvml.nvmlDeviceGetPowerUsage, self.handle))

    def _energy_j(self) -> float | None:
        millijoules = _query(self.nvml.nvmlDeviceGetTotalEnergyConsumption, self.handle)
        return None if millijoules is None else millijoules / 1000.0

    def _sample(self) -> None:
        power = self._power_w()
        if power is not None:
            self.samples.append((self.clock(), power))

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            self._sample()

    def start(self) -> EnergyMeter:
        self.samples, self._done = [], threading.Event()
        self._start = (self.clock(), self._energy_j())
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="dlscale-energy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict | None:
        """The energy since start(), and the sampling thread ended; None where it was not running (stopped
        already: a second stop, in a finally after the first, does nothing)."""
        if self._start is None:
            return None
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        (t0, e0), t1, e1 = self._start, self.clock(), self._energy_j()
        self._start = None
        seconds = max(t1 - t0, 1e-9)
        if e0 is not None and e1 is not None and e1 >= e0:
            energy, method = e1 - e0, "energy counter"
        elif len(self.samples) >= 2:
            energy = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(self.samples))
            method = "power samples"
        else:
            return None
        powers = [p for _, p in self.samples]
        return {"energy_j": energy, "avg_power_w": energy / seconds, "max_power_w": max(powers) if powers else None,
                "seconds": seconds, "samples": len(self.samples), "method": method}


def energy_meter(device_index: int | None, uuid: str | None = None, *, nvml=None, interval_s: float = 0.1):
    """An EnergyMeter for a CUDA device, or None (no NVML, not a GPU, unknown device)."""
    if device_index is None:
        return None
    nvml = nvml or load_nvml()
    if nvml is None:
        return None
    handle = device_handle(nvml, uuid, device_index)
    return None if handle is None else EnergyMeter(nvml, handle, interval_s=interval_s)
