"""The GPU side of the input pipeline: the CUDA prefetcher (side-stream copy of uint8 batches,
normalised on the device) yields the batches the CPU path yields, for synthetic data and for
decoded JPEGs, in both memory formats; `dlscale loader --device cuda` runs."""

import json

import pytest
import torch

from dlscale import cli
from dlscale.config import DataConfig
from dlscale.data import build_loaders
from dlscale.data.device import DeviceNormalizer, DevicePrefetcher

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Unable to enable fault handler")]


def _cfg(name: str, tree) -> DataConfig:
    if name == "synthetic":
        return DataConfig(name="synthetic", synthetic_size=64, image_size=8, num_workers=2)
    return DataConfig(name="imagefolder", path=str(tree), image_size=32, num_workers=2)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("name", ["synthetic", "imagefolder"])
def test_cuda_prefetcher_gives_the_cpu_path_batches(name, channels_last, jpeg_tree, cuda):
    loader, _, info = build_loaders(_cfg(name, jpeg_tree), rank=0, world_size=1, batch_size=8)
    loader.sampler.set_epoch(0)
    on_cpu = list(DevicePrefetcher(loader, "cpu", DeviceNormalizer(info.mean, info.std, "cpu")))
    loader.sampler.set_epoch(0)  # the same epoch again: the same order, crops and flips
    normalizer = DeviceNormalizer(info.mean, info.std, cuda, channels_last=channels_last)
    on_gpu = list(DevicePrefetcher(loader, cuda, normalizer))
    assert len(on_gpu) == len(on_cpu) == len(loader) > 1
    layout = torch.channels_last if channels_last else torch.contiguous_format
    for got, want in zip(on_gpu, on_cpu, strict=True):
        assert got.images.is_cuda and got.images.dtype == torch.float32
        assert got.images.is_contiguous(memory_format=layout)
        # the same arithmetic on two devices: equal up to float rounding
        torch.testing.assert_close(got.images.cpu(), want.images, rtol=1e-6, atol=1e-6)
        assert torch.equal(got.labels.cpu(), want.labels)


def test_loader_command_copies_to_the_gpu(jpeg_tree, tmp_path):
    out = tmp_path / "loader"
    code = cli.main(["loader", "--data", str(jpeg_tree), "--workers", "0,2", "--batch-size", "8", "--batches", "4",
                     "--image-size", "32", "--device", "cuda", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["device"] == "cuda" and [row["workers"] for row in summary["settings"]] == [0, 2]
    assert all(row["images_per_s"] > 0 for row in summary["settings"])
