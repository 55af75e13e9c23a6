"""Device peaks for MFU against the datasheet figures (docs/references.md#nvidia-peak-tflops)."""

import pytest

from dlscale.metrics.hardware import mfu, peak_flops


@pytest.mark.parametrize("name,dtype,tflops", [
    ("NVIDIA H200 NVL", "bf16", 835.5),        # not the SXM part's 989.4
    ("NVIDIA H200", "bf16", 989.4),
    ("NVIDIA H100 NVL", "tf32", 417.5),
    ("NVIDIA H100 PCIe", "fp16", 756.0),
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
    ("NVIDIA A100-SXM4-80GB", "tf32", 156.0),
    ("Tesla V100-SXM2-16GB", "fp16", 125.0),
    ("Tesla V100-PCIE-32GB", "fp32", 14.0),
])
def test_whole_gpus(name, dtype, tflops):
    assert peak_flops(name, dtype) == pytest.approx(tflops * 1e12)


def test_unknown_devices_and_dtypes_have_no_peak():
    assert peak_flops("NVIDIA GeForce RTX 4090", "bf16") is None
    assert peak_flops("Tesla V100-SXM2-16GB", "bf16") is None  # Volta has no bf16 tensor cores
    assert mfu(1000.0, 1e10, "cpu", "fp32") is None


def test_mig_instances_have_their_share_of_the_sms():
    # H100 1g.10gb: 16 of 132 SMs (not 1/7); A100 7g.40gb: 98 of 108 (not the whole GPU).
    assert peak_flops("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16", sm_count=16) == pytest.approx(989.4e12 * 16 / 132)
    assert peak_flops("NVIDIA A100-SXM4-40GB MIG 7g.40gb", "bf16", sm_count=98) == pytest.approx(312e12 * 98 / 108)
    # Without the instance's SM count: the profile's g/7.
    assert peak_flops("NVIDIA A100-PCIE-40GB MIG 3G.20GB", "fp16") == pytest.approx(312e12 * 3 / 7)
    # MFU of a 1g slice is computed against the slice's peak.
    assert mfu(100.0, 1.2e10, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16", 16) == pytest.approx(
        100.0 * 1.2e10 / (989.4e12 * 16 / 132))
