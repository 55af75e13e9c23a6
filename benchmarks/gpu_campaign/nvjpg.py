"""NVML's utilisation of GPU 0's hardware JPEG decoders (NVJPG) while a command runs, sampled from the campaign's own
process (NVML needs no CUDA context, and counts every process's work on the engines): whether the engines, not the
SMs, decoded a run's JPEGs.

Two sources, each recorded as unavailable with NVML's reason where the driver or pynvml lacks it, never as a zero:

  nvmlDeviceGetJpgUtilization   the engines' utilisation over the driver's last sampling period, in percent, read
                                every PERIOD_S by a background thread (nvmlDeviceGetDecoderUtilization is the video
                                decoder, NVDEC: not these)
  GPM NVJPG_<k>_UTIL            each engine's utilisation between two GPU Performance Monitoring samples taken at the
                                command's start and end (Hopper and later)
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time

PERIOD_S = 0.25
"""How often the thread reads nvmlDeviceGetJpgUtilization."""

ENGINES = 8
"""GPM's NVJPG metrics: engines 0 to 7 (an H100 has 7)."""

KEEP = 2400
"""Samples kept per command (10 minutes at PERIOD_S): a longer command keeps its last ones."""


def _why(error: BaseException) -> str:
    return f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"


class JpegEngines:
    """Samples one GPU's JPEG engines between start() and stop(); stop() returns what was measured."""

    def __init__(self, nvml, index: int = 0, period_s: float = PERIOD_S):
        self.nvml, self.period_s = nvml, period_s
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self.samples: list[tuple[float, int]] = []
        self.window_us: int | None = None
        self.failed: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpm: tuple | None = None
        self._gpm_failed: str | None = None

    def start(self) -> None:
        self._gpm = self._gpm_sample()
        self._thread = threading.Thread(target=self._sample, name="nvjpg", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        started = time.monotonic()
        while True:
            try:
                utilisation, window_us = self.nvml.nvmlDeviceGetJpgUtilization(self.handle)
            except Exception as error:  # noqa: BLE001 - not supported by this driver, GPU or pynvml
                self.failed = _why(error)
                return
            self.window_us = window_us
            self.samples = [*self.samples[-(KEEP - 1):], (round(time.monotonic() - started, 2), int(utilisation))]
            if self._stop.wait(self.period_s):
                return

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        return {"jpg_utilization": self._utilisation(), "gpm_nvjpg": self._gpm_figures()}

    def _utilisation(self) -> dict:
        if not self.samples:
            return {"unavailable": f"nvmlDeviceGetJpgUtilization: {self.failed or 'no sample'}"}
        values = [value for _, value in self.samples]
        busy = [value for value in values if value > 0]
        return {"source": "nvmlDeviceGetJpgUtilization", "every_s": self.period_s, "driver_window_us": self.window_us,
                "samples": len(values), "mean_pct": statistics.fmean(values), "max_pct": max(values),
                "busy_samples": len(busy), "mean_busy_pct": statistics.fmean(busy) if busy else 0.0,
                "values": self.samples}

    # ------------------------------------------------------------------------- GPU Performance Monitoring

    def _gpm_sample(self):
        """A GPM sample of the device now, or None (and why in _gpm_failed)."""
        nvml = self.nvml
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice:
                self._gpm_failed = "GPM is not supported on this GPU"
                return None
            sample = nvml.nvmlGpmSampleAlloc()
            nvml.nvmlGpmSampleGet(self.handle, sample)
            return sample
        except Exception as error:  # noqa: BLE001 - an older driver or pynvml
            self._gpm_failed = f"GPM: {_why(error)}"
            return None

    def _gpm_figures(self) -> dict:
        first = self._gpm
        if first is None:
            return {"unavailable": self._gpm_failed or "GPM: no sample"}
        last = self._gpm_sample()
        if last is None:
            self._free(first)
            return {"unavailable": self._gpm_failed or "GPM: no sample"}
        try:
            engines = gpm_engines(self.nvml, first, last)
        except Exception as error:  # noqa: BLE001
            return {"unavailable": f"GPM: {_why(error)}"}
        finally:
            self._free(first, last)
        if not engines:
            return {"unavailable": "GPM reports no NVJPG engine on this GPU"}
        return {"source": "GPM NVJPG_<k>_UTIL, the command's start to its end", "engines_pct": engines,
                "mean_pct": statistics.fmean(engines.values())}

    def _free(self, *samples) -> None:
        for sample in samples:
            with contextlib.suppress(Exception):  # freeing is best effort
                self.nvml.nvmlGpmSampleFree(sample)


def gpm_engines(nvml, first, last) -> dict[str, float]:
    """Each NVJPG engine's utilisation (percent) between two GPM samples, by its index; engines the GPU lacks
    (their metric's status not success) left out."""
    query = nvml.c_nvmlGpmMetricsGet_t()
    query.version = nvml.NVML_GPM_METRICS_GET_VERSION
    query.numMetrics = ENGINES
    query.sample1, query.sample2 = first, last
    for k in range(ENGINES):
        query.metrics[k].metricId = nvml.NVML_GPM_METRIC_NVJPG_0_UTIL + k
    nvml.nvmlGpmMetricsGet(query)
    success = getattr(nvml, "NVML_SUCCESS", 0)
    return {str(k): float(query.metrics[k].value) for k in range(ENGINES) if query.metrics[k].nvmlReturn == success}


def sampler_factory():
    """A function making a JpegEngines for GPU 0 for each command, or the reason none can be made (no pynvml, no
    driver, no GPU), recorded in place of every figure."""
    from dlscale.metrics.nvml import load_nvml

    nvml = load_nvml()
    if nvml is None:
        return "NVML is not available here (no pynvml, no NVIDIA driver or no GPU)"
    try:
        nvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as error:  # noqa: BLE001
        return f"NVML has no GPU 0: {_why(error)}"
    return lambda: JpegEngines(nvml)
