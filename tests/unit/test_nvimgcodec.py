"""nvImageCodec behind the device path's decoder interface, on its CPU backend (no GPU here): a file's region, a
batch, bad files, and the device path's batches against the Pillow decoder's. Skipped where its wheel does not
install (the test extras install nvidia-nvimgcodec-cu13 where it does: pyproject.toml)."""

import pytest
import torch
from PIL import Image

from dlscale.config import DataConfig
from dlscale.data import build_loaders, seeded_generator
from dlscale.data import transforms as T
from dlscale.data.device import DevicePrefetcher
from dlscale.data.device.decoders import PillowDecoder, decoder_name, resolve_decode
from dlscale.errors import ConfigError
from tests.unit.test_device_decode import SIZE, _jpeg, _smooth, _tree

pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec's wheel (nvidia-nvimgcodec-cu13) is not installed")

from dlscale.data.device.decoders.nvimgcodec import NvimgcodecDecoder, in_turn  # noqa: E402

DEVICE_TOLERANCE = {"max": 12.0, "mean": 0.5}
"""As tests/gpu/test_gpu_decode.py allows nvJPEG against libjpeg, both at full scale with the same crop code."""


def _file(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def test_the_cpu_backend_decodes_what_pillow_decodes_and_a_region_is_that_part_of_the_image():
    data = _jpeg(_smooth(500, 375, seed=3))
    decoder = NvimgcodecDecoder("cpu")
    (whole,) = decoder.decode([_file(data)])
    (pillow,) = PillowDecoder().decode([_file(data)])
    assert whole.shape == pillow.shape == (3, 375, 500) and whole.dtype == torch.uint8
    assert (whole.int() - pillow.int()).abs().max() <= DEVICE_TOLERANCE["max"]
    boxes = [(0, 0, 500, 375), (17, 40, 211, 180), (333, 201, 167, 174), (1, 1, 8, 9)]
    for (left, top, width, height), region in zip(boxes, decoder.decode([_file(data)] * 4, boxes), strict=True):
        assert region.shape == (3, height, width)
        expected = whole[:, top:top + height, left:left + width].int()
        assert (region.int() - expected).abs().max() <= DEVICE_TOLERANCE["max"], (left, top, width, height)


def test_a_file_it_cannot_decode_comes_back_as_none_and_the_others_decode():
    good = _jpeg(_smooth(64, 48))
    files = [_file(good), _file(good[:len(good) // 3]), _file(b"\x00garbage" * 64), _file(good),
             _file(_jpeg(_smooth(64, 48).convert("L")))]
    decoded = NvimgcodecDecoder("cpu").decode(files)
    assert [image is None for image in decoded[:4]] == [False, True, True, False]
    assert decoded[4] is None or decoded[4].shape == (3, 48, 64)  # grayscale: as RGB, or left to the CPU path


def test_the_device_path_decodes_the_region_the_sampler_drew_and_makes_pillows_batches(tmp_path):
    root = _tree(tmp_path)
    regions = []

    class Recording(NvimgcodecDecoder):
        def decode(self, files, regions_asked=None):
            regions.extend(regions_asked or [])
            return super().decode(files, regions_asked)

    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=0)
    train, val, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)
    batches = {}
    for name, decoder in (("nvimgcodec", Recording("cpu")), ("pillow", PillowDecoder())):
        train.sampler.set_epoch(2)
        batches[name] = list(DevicePrefetcher(train, "cpu", decoder=decoder))
        batches[name, "val"] = list(DevicePrefetcher(val, "cpu", decoder=decoder))
    # the crops the sampler drew: each sample's own generator, as RandomResizedCrop draws from it
    keys = list(train.sampler)
    sizes = [Image.open(train.dataset.source.path(index)).size for _, index in keys]
    drawn = [tuple(T.RandomResizedCrop(SIZE).get_params(*size, seeded_generator(7, epoch, index)))
             for (epoch, index), size in zip(keys, sizes, strict=True)]
    assert sorted(map(tuple, regions)) == sorted(drawn) and len(regions) == 16  # each training file its box, val none
    for split in ("train", "val"):
        key = ("nvimgcodec", "pillow") if split == "train" else (("nvimgcodec", "val"), ("pillow", "val"))
        a = torch.cat([b.images for b in batches[key[0]]]).float()
        b = torch.cat([b.images for b in batches[key[1]]]).float()
        difference = (a - b).abs()
        assert difference.max() <= DEVICE_TOLERANCE["max"] and difference.mean() <= DEVICE_TOLERANCE["mean"], split
        assert [x.labels.tolist() for x in batches[key[0]]] == [x.labels.tolist() for x in batches[key[1]]]


def _bogus_sampling(data: bytes) -> bytes:
    """A JPEG whose header the device path accepts (three 8-bit components in a baseline frame, an end marker) but
    whose first component's sampling factors are 0: libjpeg refuses it ("Bogus sampling factors")."""
    broken = bytearray(data)
    broken[broken.index(b"\xff\xc0") + 11] = 0x00
    return bytes(broken)


def test_a_batch_with_a_file_it_refuses_is_completed_by_the_cpu_path_as_pillows(tmp_path):
    broken = _bogus_sampling(_jpeg(_smooth(120, 90, seed=1)))
    assert NvimgcodecDecoder("cpu").decode([_file(broken)]) == [None]
    root = _tree(tmp_path, extra={"broken.JPEG": broken})
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=0)
    train, _, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=17, seed=1)
    made = {}
    for name, decoder in (("nvimgcodec", NvimgcodecDecoder("cpu")), ("pillow", PillowDecoder())):
        prefetcher = DevicePrefetcher(train, "cpu", decoder=decoder)
        made[name] = list(prefetcher)
        counts = prefetcher.stage.counts
        assert (counts.device, counts.refused, counts.workers) == (16, 1, 0), name
    (ours,), (pillows,) = made["nvimgcodec"], made["pillow"]
    assert len(ours.skipped) == 1 and ours.skipped == pillows.skipped and ours.skipped[0].endswith("broken.JPEG")
    assert torch.equal(ours.labels, pillows.labels)


def test_auto_chooses_nvimgcodec_on_cuda_only_where_it_decodes_and_names_both_decoders_when_refused(monkeypatch):
    assert decoder_name("cpu") == "pillow" and decoder_name("cpu", "nvimgcodec") == "nvimgcodec"
    assert "nvImageCodec decodes on a CUDA device, and this run's device is cpu" in \
        NvimgcodecDecoder.unavailable(torch.device("cpu"))
    with pytest.raises(ConfigError) as raised:
        resolve_decode("gpu", "cpu")
    assert "\n" not in str(raised.value) and "nvImageCodec" in str(raised.value) and "torchvision" in str(raised.value)
    # named, its CPU backend decodes on the CPU device (what the GPU campaign's CPU rehearsal runs); auto never
    # takes it there
    assert NvimgcodecDecoder.unavailable_named(torch.device("cpu")) is None
    assert resolve_decode("gpu", "cpu", "nvimgcodec") == "gpu" and resolve_decode("auto", "cpu") == "fast"
    assert "the batches stay on the host" in NvimgcodecDecoder.unavailable_named(None)
    monkeypatch.setattr(NvimgcodecDecoder, "unavailable", staticmethod(lambda device: None))
    assert resolve_decode("gpu", "cpu") == "gpu" and resolve_decode("auto", "cpu") == "gpu"
    with pytest.raises(ConfigError, match="data.decoder='nvimg'"):
        DataConfig(decoder="nvimg")


def test_each_backend_in_turn_takes_what_the_ones_before_it_refused_and_is_counted():
    """Hardware first, then CUDA, then the hybrid decode: each gets only the files those before it returned None
    for, in their order; a file none decodes is None; a decoded image the device path cannot use (not three
    channels) is no result and is not counted."""
    asked = {}

    def backend(name, takes):
        def decode(items):
            asked[name] = list(items)
            return [f"{name}:{item}" if item in takes else None for item in items]
        return name, decode

    counts = {"hw_gpu_only": 0, "gpu_only": 0, "hybrid_cpu_gpu": 0}
    got = in_turn([backend("hw_gpu_only", {"a", "c", "e"}), backend("gpu_only", {"b", "grey"}),
                   backend("hybrid_cpu_gpu", {"d"})], ["a", "b", "c", "d", "e", "junk", "grey"], counts,
                  lambda image: None if image.endswith("grey") else image.upper())
    assert got == ["HW_GPU_ONLY:A", "GPU_ONLY:B", "HW_GPU_ONLY:C", "HYBRID_CPU_GPU:D", "HW_GPU_ONLY:E", None, None]
    assert asked == {"hw_gpu_only": ["a", "b", "c", "d", "e", "junk", "grey"], "gpu_only": ["b", "d", "junk", "grey"],
                     "hybrid_cpu_gpu": ["d", "junk"]}
    assert counts == {"hw_gpu_only": 3, "gpu_only": 1, "hybrid_cpu_gpu": 1}
    done = {"x": 0, "y": 0}
    assert in_turn([("x", lambda items: list(items)), ("y", lambda items: 1 / 0)], [1, 2], done, str) == ["1", "2"]
    assert done == {"x": 2, "y": 0}  # nothing left for the second: not called


def test_the_decoder_counts_the_files_its_cpu_backend_decoded():
    data = _jpeg(_smooth(64, 48))
    decoder = NvimgcodecDecoder("cpu")
    assert decoder.decoded_by == {"cpu_only": 0}
    decoder.decode([_file(data), _file(b"\x00junk" * 32), _file(data)], [(0, 0, 64, 48), (0, 0, 8, 8), (4, 4, 8, 8)])
    assert decoder.decoded_by == {"cpu_only": 2}
