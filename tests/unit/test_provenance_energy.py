"""The reproducibility record (metrics/provenance.py), NVML facts and energy (metrics/nvml.py, through a
fake NVML: no GPU here), and costs (metrics/cost.py)."""

import types

import pytest

from dlscale.metrics import cost, nvml, provenance


def test_nccl_version_codes_of_old_and_new_releases():
    assert provenance.nccl_version_text(22105) == "2.21.5"  # NCCL_VERSION_CODE since 2.9
    assert provenance.nccl_version_text(2804) == "2.8.4"  # major*1000 + minor*100 + patch before


def test_loaded_libraries_come_from_the_memory_map(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 123 /opt/nccl/lib/libnccl.so.2.21.5\n"
        "7f01-7f02 r--p 00001000 08:01 123 /opt/nccl/lib/libnccl.so.2.21.5\n"
        "7f02-7f03 rw-p 00000000 00:00 0\n"
        "7f03-7f04 r-xp 00000000 08:01 124 /usr/lib/libtorch_cuda.so\n")
    assert provenance.loaded_libraries(r"^libnccl.*\.so", str(maps)) == ["/opt/nccl/lib/libnccl.so.2.21.5"]
    assert provenance.loaded_nccl(str(maps)) is None  # listed, but no such file to ask


def test_the_record_keeps_thread_and_library_variables_and_nothing_else():
    kept = provenance.thread_env({"OMP_NUM_THREADS": "1", "NCCL_DEBUG": "INFO", "HF_TOKEN": "secret",
                                  "AWS_SECRET_ACCESS_KEY": "x", "CUDA_VISIBLE_DEVICES": "0"})
    assert kept == {"CUDA_VISIBLE_DEVICES": "0", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "1"}


def test_host_info_names_the_command_cpu_git_state_and_packages():
    info = provenance.host_info()
    assert info["command"] and info["argv"] and info["cpu_count"] >= 1 and info["cpu_model"]
    assert info["git_dirty"] in (True, False, None)
    assert "torch" in info["packages"] and "dlscale" in info["packages"]


class FakeNVML(types.SimpleNamespace):
    """pynvml's calls that dlscale makes, on one 'GPU' whose energy counter and power can be set."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, *, energy_counter=True):
        super().__init__(energy_mj=1_000_000, power_mw=250_000, energy_counter=energy_counter)

    def nvmlDeviceGetCount(self): return 1  # noqa: E704
    def nvmlSystemGetDriverVersion(self): return b"550.54.15"  # noqa: E704
    def nvmlDeviceGetHandleByIndex(self, i): return "h0"  # noqa: E704
    def nvmlDeviceGetHandleByUUID(self, uuid): return "h0" if uuid == "GPU-abc" else None  # noqa: E704
    def nvmlDeviceGetName(self, h): return "Tesla V100-SXM2-32GB"  # noqa: E704
    def nvmlDeviceGetUUID(self, h): return "GPU-abc"  # noqa: E704
    def nvmlDeviceGetPciInfo(self, h): return types.SimpleNamespace(busId=b"00000000:07:00.0")  # noqa: E704
    def nvmlDeviceGetMemoryInfo(self, h): return types.SimpleNamespace(total=32 * 2**30)  # noqa: E704
    def nvmlDeviceGetClockInfo(self, h, kind): return 1290 if kind == 1 else 877  # noqa: E704
    def nvmlDeviceGetMaxClockInfo(self, h, kind): return 1530 if kind == 1 else 877  # noqa: E704
    def nvmlDeviceGetApplicationsClock(self, h, kind): raise RuntimeError("not supported")  # noqa: E704
    def nvmlDeviceGetPowerManagementLimit(self, h): return 250_000  # noqa: E704
    def nvmlDeviceGetPowerManagementDefaultLimit(self, h): return 300_000  # noqa: E704
    def nvmlDeviceGetEnforcedPowerLimit(self, h): return 250_000  # noqa: E704
    def nvmlDeviceGetMigMode(self, h): raise RuntimeError("not supported")  # noqa: E704
    def nvmlDeviceGetPersistenceMode(self, h): return 1  # noqa: E704
    def nvmlDeviceGetPowerUsage(self, h): return self.power_mw  # noqa: E704

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.energy_counter:
            raise RuntimeError("not supported")
        return self.energy_mj


def test_gpu_facts_read_clocks_and_power_limits_and_leave_unsupported_ones_null():
    facts = nvml.gpu_facts(FakeNVML())
    device = facts["nvml_devices"][0]
    assert facts["driver"] == "550.54.15" and device["name"] == "Tesla V100-SXM2-32GB"
    assert device["sm_clock_mhz"] == 1290 and device["sm_clock_max_mhz"] == 1530
    assert device["power_limit_w"] == 250.0 and device["power_limit_default_w"] == 300.0
    assert device["sm_clock_applications_mhz"] is None and device["mig_mode"] is None
    assert nvml.device_handle(FakeNVML(), "abc", 3) == "h0"


def _meter(fake, times):
    clock = iter(times)
    return nvml.EnergyMeter(fake, "h0", interval_s=3600, clock=lambda: next(clock))


def test_energy_comes_from_the_counter_where_the_gpu_has_one():
    fake = FakeNVML()
    meter = _meter(fake, [0.0, 0.0, 10.0, 10.0]).start()
    fake.energy_mj += 2_500_000  # 2,500 J in 10 s
    result = meter.stop()
    assert result["method"] == "energy counter"
    assert result["energy_j"] == pytest.approx(2500.0) and result["avg_power_w"] == pytest.approx(250.0)
    assert meter.stop() is None and not meter._thread.is_alive()  # a second stop (a run's finally) does nothing


def test_energy_from_power_samples_without_a_counter():
    fake = FakeNVML(energy_counter=False)
    meter = _meter(fake, [0.0, 0.0, 4.0, 4.0]).start()
    fake.power_mw = 350_000
    result = meter.stop()
    assert result["method"] == "power samples"
    assert result["energy_j"] == pytest.approx(4.0 * (250 + 350) / 2) and result["max_power_w"] == 350.0


def test_no_nvml_means_no_meter_and_no_facts(monkeypatch):
    monkeypatch.setattr(nvml, "load_nvml", lambda: None)
    assert nvml.energy_meter(0) is None and nvml.gpu_facts() is None and nvml.energy_meter(None) is None


def test_costs_are_device_hours_at_the_price():
    assert cost.cost(3600, 8, 2.5) == pytest.approx(20.0)
    # one ImageNet epoch at 1,281,167 img/s on 4 devices: 1 s of 4 devices
    assert cost.imagenet_epoch_cost(1_281_167, 4, 3600.0) == pytest.approx(4.0)
    assert cost.imagenet_epoch_cost(1000.0, 4, None) is None
    costs = cost.train_costs([{}, {}], 7200.0, 2, 1.0)
    assert costs == {"price_per_device_hour": 1.0, "cost_per_epoch": pytest.approx(2.0), "cost_per_run": 4.0}
    with pytest.raises(Exception, match="must be > 0"):
        cost.check_price(0.0)
