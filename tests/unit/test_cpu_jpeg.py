"""data.cpu_decoder: the fast path's full-scale JPEG decodes through simplejpeg give Pillow's batches bit for bit
(the same pixels, crops, flips and skipped files), only YCbCr JPEGs take that way, and a choice that cannot be
had is one line."""

import io
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from dlscale.config import DataConfig
from dlscale.data import build_loaders, cpu_jpeg
from dlscale.data.source import BadSample
from dlscale.errors import ConfigError

pytest.importorskip("simplejpeg", reason="simplejpeg (a dependency of dlscale) is not installed")


def _photo(seed: int, mode: str = "RGB", **save) -> bytes:
    """Smooth noise (a photo's JPEG, not a noise's) of 40 x 56 pixels, saved as `mode`."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    image = Image.fromarray(small).resize((56, 40), Image.Resampling.BICUBIC).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=88, **save)
    return buffer.getvalue()


def _corrupt(data: bytes) -> bytes:
    """A complete JPEG with an unknown marker in the middle of its scan: Pillow refuses it (broken data stream)."""
    middle = data.index(b"\xff\xda") + (len(data) - data.index(b"\xff\xda")) // 2
    return data[:middle] + b"\xff\x12" * 50 + data[middle:]


def _tree(root):
    """Two classes: 4:2:0, 4:4:4 and progressive YCbCr JPEGs, a grayscale and a CMYK one, a PNG, a truncated, a
    corrupt and a garbage file."""
    files = {
        "a": {"0.JPEG": _photo(0), "1.JPEG": _photo(1, subsampling=0), "2.JPEG": _photo(2, progressive=True),
              "3.JPEG": _photo(3, "L"), "4.JPEG": _photo(4, "CMYK")},
        "b": {"0.JPEG": _photo(5), "1_trunc.JPEG": _photo(6)[:700], "2.JPEG": _photo(7), "3_bad.JPEG": b"\0x" * 99,
              "4.png": b"", "5_corrupt.JPEG": _corrupt(_photo(8))},
    }
    buffer = io.BytesIO()
    Image.new("RGB", (40, 56), (10, 200, 30)).save(buffer, format="PNG")
    files["b"]["4.png"] = buffer.getvalue()
    for split in ("train", "val"):
        for name, members in files.items():
            (root / split / name).mkdir(parents=True)
            for file, data in members.items():
                (root / split / name / file).write_bytes(data)
    return root


def _cfg(root, decoder: str) -> DataConfig:
    # 32 px crops: files under 64 px a side are decoded at full scale, where data.cpu_decoder applies
    return DataConfig(name="imagefolder", path=str(root), image_size=32, num_workers=0, cpu_decoder=decoder)


def test_simplejpeg_makes_pillows_batches_bit_for_bit_with_the_same_files_skipped(tmp_path):
    root = _tree(tmp_path)
    batches = {}
    for decoder in ("pillow", "simplejpeg"):
        train, _, _ = build_loaders(_cfg(root, decoder), rank=0, world_size=1, batch_size=2, seed=6)
        made = []
        for epoch in (0, 1):
            train.sampler.set_epoch(epoch)
            made += list(train)
        batches[decoder] = made
    assert len(batches["pillow"]) == len(batches["simplejpeg"]) == 10  # 11 files in batches of 2, two epochs
    for x, y in zip(batches["pillow"], batches["simplejpeg"], strict=True):
        assert torch.equal(x.images, y.images) and torch.equal(x.labels, y.labels) and x.skipped == y.skipped
    skipped = {path.rsplit("/", 1)[-1] for batch in batches["simplejpeg"] for path in batch.skipped}
    assert skipped <= {"1_trunc.JPEG", "3_bad.JPEG", "5_corrupt.JPEG"} and skipped


def test_only_ycbcr_jpegs_are_decoded_by_simplejpeg(tmp_path):
    root = _tree(tmp_path)
    train, _, _ = build_loaders(_cfg(root, "simplejpeg"), rank=0, world_size=1, batch_size=2, seed=0)
    source = train.dataset.source
    by_simplejpeg = set()
    for index in range(len(source)):
        name = source.path(index).split("/train/", 1)[1]
        try:
            image, _ = source.load(index)
        except Exception:  # noqa: BLE001 - the truncated and the garbage file, skipped by the data set
            continue
        if isinstance(image, torch.Tensor):
            by_simplejpeg.add(name)
            assert image.dtype == torch.uint8 and tuple(image.shape) == (40, 56, 3)
    assert by_simplejpeg == {"a/0.JPEG", "a/1.JPEG", "a/2.JPEG", "b/0.JPEG", "b/2.JPEG"}
    # a file libjpeg-turbo finds fault with is Pillow's to decode or refuse: the corrupt scan is refused by both
    corrupt = next(i for i in range(len(source)) if source.path(i).endswith("5_corrupt.JPEG"))
    pillows, _, _ = build_loaders(_cfg(root, "pillow"), rank=0, world_size=1, batch_size=2, seed=0)
    for either in (source, pillows.dataset.source):
        with pytest.raises(BadSample, match="broken data stream"):
            either.load(corrupt)
    _, val, _ = build_loaders(_cfg(root, "simplejpeg"), rank=0, world_size=1, batch_size=2, seed=0)
    assert isinstance(val.dataset.source.load(0)[0], Image.Image)  # validation stays Pillow's


def test_a_decoder_that_cannot_be_had_is_one_line(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"data.cpu_decoder='?libjpeg'?; use one of auto, simplejpeg, pillow"):
        DataConfig(name="imagefolder", cpu_decoder="libjpeg")
    monkeypatch.setattr(cpu_jpeg, "simplejpeg", None)
    root = _tree(tmp_path)
    with pytest.raises(ConfigError, match="^data.cpu_decoder=simplejpeg: simplejpeg does not import here"):
        build_loaders(_cfg(root, "simplejpeg"), rank=0, world_size=1, batch_size=2, seed=0)
    with pytest.raises(ConfigError, match="^--cpu-decoder simplejpeg: simplejpeg does not import here.* "
                                          "--cpu-decoder auto "):
        cpu_jpeg.resolve("simplejpeg", "--cpu-decoder")
    train, _, info = build_loaders(_cfg(root, "auto"), rank=0, world_size=1, batch_size=2, seed=0)
    assert not train.dataset.source.cpu_jpeg and cpu_jpeg.name("auto") == "pillow"
    assert info.cpu_decoder == "pillow"


def test_the_decoder_that_ran_is_the_one_recorded(tmp_path):
    """DatasetInfo.cpu_decoder (the train summary's and dlscale loader's rows) names the decoder each choice ran, and
    none where the plain path decodes every image with Pillow whole."""
    root = _tree(tmp_path)
    for choice, named in (("pillow", "pillow"), ("simplejpeg", "simplejpeg"), ("auto", "simplejpeg")):
        _, _, info = build_loaders(_cfg(root, choice), rank=0, world_size=1, batch_size=2, seed=0)
        assert info.cpu_decoder == named, choice
    _, _, info = build_loaders(replace(_cfg(root, "simplejpeg"), decode="plain"), rank=0, world_size=1, batch_size=2,
                               seed=0)
    assert info.cpu_decoder is None


def test_an_image_over_pillows_decompression_bomb_limit_is_refused_as_pillow_refuses_it(tmp_path, monkeypatch):
    root = _tree(tmp_path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 56 x 40 = 2,240 pixels: over twice the limit
    for decoder in ("pillow", "simplejpeg"):
        train, _, _ = build_loaders(_cfg(root, decoder), rank=0, world_size=1, batch_size=2, seed=0)
        with pytest.raises(BadSample, match="DecompressionBombError"):
            train.dataset.source.load(0)
