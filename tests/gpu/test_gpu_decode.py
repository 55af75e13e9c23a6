"""The device decode path (data.decode=gpu) on a CUDA device: nvJPEG (torchvision.io.decode_jpeg) decodes
each batch, plain torch crops, resizes and flips it there.

What must hold: the device-decoded batches equal the CPU-decoded ones (the same code with the Pillow
decoder, tests/unit/test_device_decode.py) within a tolerance, and the CPU fast path's within its own;
a corrupt (truncated) and a CMYK file in a device-decoded epoch are handled and counted as on the CPU;
`dlscale train` with data.decode=gpu records the path and resumes exactly; `dlscale loader --decode gpu`
decodes on the device. The tolerances are twice what the first run on an H100 measured (2026-11-27,
docs/benchmarks.md); each test reports what it measures in a warning.
"""

import io
import json
import warnings

import numpy as np
import pytest
import torch
from PIL import Image
from test_gpu_train import SETTINGS, STEPS_PER_EPOCH, _final_state, assert_resumed_as_uninterrupted

from dlscale import cli
from dlscale.config import DataConfig
from dlscale.data import build_loaders
from dlscale.data.device import DeviceNormalizer, DevicePrefetcher, decoder_name, for_device
from dlscale.data.device.decoders import PillowDecoder

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:Unable to enable fault handler")]
pytest.importorskip("torchvision")

SIZE = 64
DEVICE_TOLERANCE = {"max": 12.0, "mean": 0.5}
"""nvJPEG against libjpeg (Pillow), both at full scale, the same crop code: IDCT rounding and chroma
upsampling differ (libjpeg's is triangular). Measured on an H100 (2026-11-27): train max 6, mean 0.22;
validation max 5, mean 0.15 levels of 255."""
FAST_TOLERANCE = {"max": 24.0, "mean": 1.2}
"""Against the CPU fast path, which also decodes large crops at reduced scale (at most 13 levels, mean
0.52 with Pillow on the CPU: tests/unit/test_device_decode.py), plus the decoders' difference. Measured on
an H100 (2026-11-27): train max 11, mean 0.58 (12, 0.59 in the epoch with bad files); validation max 5,
mean 0.19."""


def _smooth_jpeg(width: int, height: int, seed: int, mode: str = "RGB") -> bytes:
    rng = np.random.default_rng(seed)
    small = Image.fromarray(rng.integers(0, 256, (max(2, height // 32), max(2, width // 32), 3), dtype=np.uint8))
    buffer = io.BytesIO()
    small.resize((width, height), Image.Resampling.BILINEAR).convert(mode).save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


SIZES = [(1024, 768), (768, 1024), (640, 480), (500, 375), (500, 333), (320, 240), (200, 300), (96, 72)]


@pytest.fixture(scope="module")
def smooth_tree(tmp_path_factory):
    """2 classes x 8 smooth JPEGs (96 x 72 to 1024 x 768) per split."""
    root = tmp_path_factory.mktemp("smooth")
    for split in ("train", "val"):
        for label, offset in (("a", 0), ("b", 100)):
            (root / split / label).mkdir(parents=True)
            for i, (width, height) in enumerate(SIZES):
                (root / split / label / f"{i}.JPEG").write_bytes(_smooth_jpeg(width, height, offset + i))
    return root


def _loaders(root, decode: str, device, **options):
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode=decode, num_workers=2,
                     drop_last=False, **options)
    return build_loaders(for_device(cfg, device), rank=0, world_size=1, batch_size=8, seed=5)


def _epoch(loader, device, epoch: int = 1, **options):
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)
    prefetcher = DevicePrefetcher(loader, device, **options)
    return [batch._replace(images=batch.images.cpu(), labels=batch.labels.cpu()) for batch in prefetcher], prefetcher


def _compare(name: str, got, want, tolerance: dict) -> dict:
    """Labels and skipped paths equal; images within tolerance; returns what was measured."""
    assert [b.skipped for b in got] == [b.skipped for b in want], name
    assert torch.equal(torch.cat([b.labels for b in got]), torch.cat([b.labels for b in want])), name
    difference = (torch.cat([b.images for b in got]).float() - torch.cat([b.images for b in want]).float()).abs()
    measured = {"max": difference.max().item(), "mean": difference.mean().item()}
    assert measured["max"] <= tolerance["max"] and measured["mean"] <= tolerance["mean"], (name, measured)
    return measured


def test_device_decoded_batches_equal_cpu_decoded_ones_within_the_tolerance(smooth_tree, cuda):
    train, val, info = _loaders(smooth_tree, "gpu", cuda)
    assert info.decode == "gpu"
    fast_train, fast_val, _ = _loaders(smooth_tree, "fast", None)
    measured = {}
    for split, loader, fast in (("train", train, fast_train), ("val", val, fast_val)):
        on_gpu, prefetcher = _epoch(loader, cuda)
        on_cpu, _ = _epoch(loader, "cpu", decoder=PillowDecoder())
        counts = prefetcher.stage.counts
        assert (counts.device, counts.workers, counts.refused) == (16, 0, 0), counts  # nvJPEG took every file
        assert all(b.images.dtype == torch.uint8 and b.images.shape[1:] == (3, SIZE, SIZE) for b in on_gpu)
        measured[f"{split} nvJPEG vs Pillow"] = _compare(split, on_gpu, on_cpu, DEVICE_TOLERANCE)
        measured[f"{split} vs fast path"] = _compare(split, on_gpu, _epoch(fast, "cpu")[0], FAST_TOLERANCE)
    warnings.warn(f"device decode path, measured differences in levels of 255: {measured}", stacklevel=1)


def test_a_shared_decode_takes_the_workers_rows_from_the_fast_path_and_the_rest_from_nvjpeg(smooth_tree, cuda):
    """data.device_decode_share=0.5: nvJPEG decodes the odd indices, the workers the even ones on the fast path;
    every row equals the fast path's (the workers') or the whole device path's (nvJPEG's), and the counts say
    which side decoded how many."""
    shared, _, _ = _loaders(smooth_tree, "gpu", cuda, device_decode_share=0.5)
    device, _, _ = _loaders(smooth_tree, "gpu", cuda)
    fast, _, _ = _loaders(smooth_tree, "fast", None)
    got, prefetcher = _epoch(shared, cuda)
    counts = prefetcher.stage.counts
    assert (counts.device, counts.workers, counts.refused) == (8, 8, 0), counts
    rows, want_device, want_fast = (torch.cat([b.images for b in batches]).int()
                                    for batches in (got, _epoch(device, cuda)[0], _epoch(fast, "cpu")[0]))
    same_as_fast = [torch.equal(row, f) for row, f in zip(rows, want_fast, strict=True)]
    near_device = [(row - d).abs().max().item() <= 1 for row, d in zip(rows, want_device, strict=True)]
    assert sum(same_as_fast) >= 8 and all(f or d for f, d in zip(same_as_fast, near_device, strict=True))


def test_device_decoded_batches_are_normalised_channels_last_on_the_device(smooth_tree, cuda):
    train, _, info = _loaders(smooth_tree, "gpu", cuda)
    normalizer = DeviceNormalizer(info.mean, info.std, cuda, channels_last=True)
    train.sampler.set_epoch(0)
    batches = list(DevicePrefetcher(train, cuda, normalizer))
    assert len(batches) == 2
    for batch in batches:
        assert batch.images.device.type == cuda.type and batch.images.dtype == torch.float32
        assert batch.images.is_contiguous(memory_format=torch.channels_last)
        assert batch.images.abs().max() < 3.0  # (x - mean) / std of 0..255 images


@pytest.fixture(scope="module")
def bad_tree(tmp_path_factory):
    """Smooth JPEGs, and in train/a and val/a a truncated JPEG, a CMYK one, a grayscale one and junk."""
    root = tmp_path_factory.mktemp("bad")
    truncated = _smooth_jpeg(1024, 768, 61)
    extra = {"cmyk.JPEG": _smooth_jpeg(400, 300, 60, "CMYK"), "gray.JPEG": _smooth_jpeg(400, 300, 62, "L"),
             "junk.JPEG": b"not an image", "trunc.JPEG": truncated[:len(truncated) * 2 // 3]}
    for split in ("train", "val"):
        for label, offset in (("a", 0), ("b", 100)):
            (root / split / label).mkdir(parents=True)
            for i, (width, height) in enumerate(SIZES[:4]):
                (root / split / label / f"{i}.JPEG").write_bytes(_smooth_jpeg(width, height, offset + i))
            for name, data in extra.items() if label == "a" else ():
                (root / split / label / name).write_bytes(data)
    return root


def test_a_corrupt_and_a_cmyk_file_in_a_device_decoded_epoch_are_handled_as_on_the_cpu(bad_tree, cuda):
    train, val, _ = _loaders(bad_tree, "gpu", cuda)
    fast_train, fast_val, _ = _loaders(bad_tree, "fast", None)
    measured = {}
    for split, loader, fast in (("train", train, fast_train), ("val", val, fast_val)):
        on_gpu, prefetcher = _epoch(loader, cuda)
        skipped = sorted(path.rsplit("/", 1)[-1] for batch in on_gpu for path in batch.skipped)
        assert skipped == ["junk.JPEG", "trunc.JPEG"], split
        counts = prefetcher.stage.counts
        assert counts.workers >= 2 and counts.refused == 0, counts  # CMYK and grayscale on the CPU
        measured[split] = _compare(split, on_gpu, _epoch(fast, "cpu")[0], FAST_TOLERANCE)
    warnings.warn(f"device decode path with bad files, against the fast path: {measured}", stacklevel=1)


def _train(tree, out, name: str, *settings: str) -> int:
    flags = [arg for setting in [*SETTINGS, "data.decode=gpu", *settings] for arg in ("--set", setting)]
    return cli.main(["train", "--config", "imagenet:default", "--data", str(tree), *flags,
                     "--output-dir", str(out), "--name", name])


def test_train_with_decode_gpu_records_the_path_and_resumes_exactly(jpeg_tree, tmp_path, signal_at_step):
    torch.backends.cudnn.deterministic = True  # put back by the restore_torch_switches fixture
    assert _train(jpeg_tree, tmp_path, "full") == 0
    full = json.loads((tmp_path / "full" / "summary.json").read_text())
    assert full["decode"] == "gpu" and full["steps"] == 2 * STEPS_PER_EPOCH and full["skipped_samples"] == 0
    assert full["history"][-1]["val_count"] == 8
    disarm = signal_at_step(STEPS_PER_EPOCH + 2)  # in the middle of the second epoch
    assert _train(jpeg_tree, tmp_path, "cut") == 0
    disarm()
    assert json.loads((tmp_path / "cut" / "summary.json").read_text())["preempted"]
    assert _train(jpeg_tree, tmp_path, "cut") == 0  # the same command resumes
    resumed = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert not resumed["preempted"] and resumed["steps"] == full["steps"] and resumed["decode"] == "gpu"
    expected, actual = _final_state(tmp_path / "full"), _final_state(tmp_path / "cut")
    assert_resumed_as_uninterrupted(expected, actual, lambda: _train(jpeg_tree, tmp_path, "again"),
                                    tmp_path / "again", "the checkpoint or the device decode path misses state")


def test_batches_decoded_ahead_by_a_thread_are_the_inline_ones(smooth_tree, cuda):
    train, _, _ = _loaders(smooth_tree, "gpu", cuda)
    inline, _ = _epoch(train, cuda)
    ahead, prefetcher = _epoch(train, cuda, feed="thread")
    assert prefetcher.stage.counts.device == 16
    for a, b in zip(inline, ahead, strict=True):
        assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels) and a.skipped == b.skipped


def test_batches_decoded_in_a_process_of_their_own_are_the_inline_ones(smooth_tree, cuda):
    """The decode process's images come through CUDA IPC, are copied, and the shared blocks go back to it."""
    from dlscale.data.device.process import DecodeProcess

    train, _, _ = _loaders(smooth_tree, "gpu", cuda)
    inline, _ = _epoch(train, cuda)
    process = DecodeProcess(train.dataset.device_plan, "cuda", ahead=2)  # no index: the current device
    try:
        for epoch in (1, 1):  # the second epoch reuses the process and its released blocks
            apart, _ = _epoch(train, cuda, epoch=epoch, process=process)
            for a, b in zip(inline, apart, strict=True):
                assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels) and a.skipped == b.skipped
        assert process.counts.device == 32 and process.counts.refused == 0
        assert process.slots_received == 2  # each slot shared once through CUDA IPC, not once per batch
    finally:
        process.close()


def test_training_on_a_stream_of_its_own_from_batches_decoded_ahead_ends_as_the_default_run(jpeg_tree, tmp_path):
    """speed.step_stream and data.device_feed change where the work runs, not what is trained."""
    torch.backends.cudnn.deterministic = True  # put back by the restore_torch_switches fixture
    assert _train(jpeg_tree, tmp_path, "default") == 0
    assert _train(jpeg_tree, tmp_path, "overlapped", "data.device_feed=thread", "speed.step_stream=true") == 0
    summary = json.loads((tmp_path / "overlapped" / "summary.json").read_text())
    assert summary["decode"] == "gpu" and summary["steps"] == 2 * STEPS_PER_EPOCH and summary["skipped_samples"] == 0
    assert_resumed_as_uninterrupted(_final_state(tmp_path / "default"), _final_state(tmp_path / "overlapped"),
                                    lambda: _train(jpeg_tree, tmp_path, "again"), tmp_path / "again",
                                    "the training stream or the decoding thread changes the batches or their order")
    assert _train(jpeg_tree, tmp_path, "apart", "data.device_feed=process") == 0
    apart = json.loads((tmp_path / "apart" / "summary.json").read_text())
    assert apart["decode"] == "gpu" and apart["decode_process"] and not summary["decode_process"]
    assert_resumed_as_uninterrupted(_final_state(tmp_path / "default"), _final_state(tmp_path / "apart"),
                                    lambda: _train(jpeg_tree, tmp_path, "again2"), tmp_path / "again2",
                                    "the decode process changes the batches or their order")


def test_loader_command_decodes_on_the_gpu(smooth_tree, tmp_path, capsys):
    out = tmp_path / "loader"
    code = cli.main(["loader", "--data", str(smooth_tree), "--workers", "0,2", "--batch-size", "8", "--batches", "4",
                     "--image-size", str(SIZE), "--device", "cuda", "--decode", "auto", "--out", str(out)])
    assert code == 0
    # auto takes nvImageCodec where its wheel is installed and decodes, else torchvision's nvJPEG
    assert f"decode gpu ({decoder_name('cuda')} on cuda)" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["decode"] == "gpu" and summary["decode_asked"] == "auto"
    for row in summary["settings"]:
        assert row["images_per_s"] > 0 and row["cpu_ms_per_image"] > 0 and row["device_ms_per_batch"] > 0
        assert row["decoded_on_device"] > 0 and row["refused_by_device"] == 0
