"""`dlscale comm`'s header on a GPU: every rank's line names its CUDA device, PCI bus and the GPU's name, as
nccl-tests' `# Using devices` lines do. Two gloo ranks share the one GPU (NCCL refuses two ranks on one
device; the header's gather is the same collective either way)."""

import pytest
import torch
from multiproc import run_ranks

from dlscale.bench.comm import rank_devices
from dlscale.bench.comm_table import CommConfig, header_lines

pytestmark = pytest.mark.gpu


def _devices(rank, size):
    torch.cuda.set_device(0)
    return rank_devices(torch.device("cuda", 0))


def test_the_header_names_each_ranks_gpu_and_its_bus():
    ranks = run_ranks(_devices, 2, timeout_s=180)[0]
    name = torch.cuda.get_device_name(0)
    bus = getattr(torch.cuda.get_device_properties(0), "pci_bus_id", None)
    assert [r["rank"] for r in ranks] == [0, 1] and len({r["pid"] for r in ranks}) == 2
    assert all((r["device"], r["bus_id"], r["name"]) == (0, bus, name) for r in ranks)
    device = f"device  0{'' if bus is None else f' [0x{bus:02x}]'} {name}"
    rank_lines = [line for line in header_lines(CommConfig(device="cuda"), ranks, "nccl") if line.startswith("#  Rank")]
    assert len(rank_lines) == 2 and all(line.endswith(device) for line in rank_lines), rank_lines
