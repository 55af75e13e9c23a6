"""The fast JPEG path: the same crops as the plain path, decoded at reduced scale where the crop
allows, and unreadable files still caught (skipped while loading, or one clear line)."""

import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dlscale.config import DataConfig
from dlscale.data import transforms as T
from dlscale.data.dataset import BadSampleError, ImageDataset
from dlscale.data.imagefolder import ImageFolderSource, imagefolder_sources
from dlscale.data.jpeg import jpeg_is_complete
from dlscale.data.source import BadSample
from dlscale.errors import ConfigError


def _smooth(width, height, seed=0):
    """A smooth image (bilinear-upsampled noise): rescaling it any way gives close pixels."""
    rng = np.random.default_rng(seed)
    small = Image.fromarray(rng.integers(0, 256, (max(2, height // 32), max(2, width // 32), 3), dtype=np.uint8))
    return small.resize((width, height), Image.Resampling.BILINEAR)


def _jpeg(image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=95, **options)
    return buffer.getvalue()


def _tree(root, files: dict[str, bytes]):
    for split in ("train", "val"):
        folder = root / split / "a"
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
    return root


def _both_paths(root, size):
    """(plain, fast) train data sets of one tree."""
    out = []
    for decode in ("plain", "fast"):
        train, _, _ = imagefolder_sources(root, decode=decode, image_size=size)
        out.append(ImageDataset(train, T.imagenet_train_transform(size, decode=decode), seed=3))
    return out


def test_draft_reduction_keeps_the_crop_at_least_the_output_size():
    assert T.draft_reduction(447, 1000, 224) == 1
    assert T.draft_reduction(448, 448, 224) == 2
    assert T.draft_reduction(900, 1000, 224) == 4
    assert T.draft_reduction(1792, 1800, 224) == 8
    assert T.draft_reduction(5000, 5000, 224) == 8  # libjpeg's scaled DCT stops at 1/8


def test_fast_crop_draws_the_same_box_and_flip_as_plain():
    # A coordinate image (red = x, green = y) that is not a JPEG: no draft, full-scale pixels.
    y, x = np.mgrid[0:100, 0:200]
    image = Image.fromarray(np.stack([x, y, np.full_like(x, 7)], axis=-1).astype(np.uint8))
    plain, fast = T.imagenet_train_transform(24, "plain"), T.imagenet_train_transform(24, "fast")
    for seed in range(20):
        a, b = plain(image, torch.Generator().manual_seed(seed)), fast(image, torch.Generator().manual_seed(seed))
        assert a.dtype == b.dtype == torch.uint8 and a.shape == b.shape == (3, 24, 24)
        # torch's antialiased bilinear kernel is Pillow's BILINEAR filter up to rounding.
        assert (a.int() - b.int()).abs().max() <= 1
        left, top, crop_w, crop_h = T.RandomResizedCrop(24).get_params(200, 100, torch.Generator().manual_seed(seed))
        assert left <= b[0].min() and b[0].max() <= left + crop_w - 1  # the box the plain path uses
        assert top <= b[1].min() and b[1].max() <= top + crop_h - 1


def test_large_jpeg_is_loaded_undecoded_and_decoded_at_reduced_scale(tmp_path, monkeypatch):
    _tree(tmp_path, {"big.JPEG": _jpeg(_smooth(1024, 768)), "small.JPEG": _jpeg(_smooth(300, 200))})
    train = ImageFolderSource(tmp_path / "train", {"a": 0}, draft_min_side=2 * 128)
    big, _ = train.load(0)
    small, _ = train.load(1)
    assert big.tile and big.filename.endswith("big.JPEG")  # header parsed, pixels not decoded yet
    assert not small.tile and small.mode == "RGB"  # 200 px < 256: decoded while loading
    decoded, scale = T.decode_at(big, 4)
    assert scale == 4.0 and decoded.size == (256, 192) and decoded.mode == "RGB"
    reductions = []
    decode_at = T.decode_at
    monkeypatch.setattr(T, "decode_at",
                        lambda img, reduction: (reductions.append(reduction), decode_at(img, reduction))[1])
    crop = T.FastRandomResizedCrop(128)
    for seed in range(30):
        box = crop.get_params(1024, 768, torch.Generator().manual_seed(seed))
        image, _ = train.load(0)
        assert crop(image, torch.Generator().manual_seed(seed)).shape == (3, 128, 128)
        assert reductions[-1] == T.draft_reduction(box[2], box[3], 128)
    assert set(reductions) >= {1, 2}  # some crops allow a half-scale decode, some do not


def test_fast_and_plain_crops_are_close_on_real_jpegs(tmp_path):
    files = {f"{i}.JPEG": _jpeg(_smooth(1024, 768, seed=i)) for i in range(4)}
    files.update({f"s{i}.JPEG": _jpeg(_smooth(320, 240, seed=10 + i)) for i in range(4)})
    plain, fast = _both_paths(_tree(tmp_path, files), 64)
    for index in range(len(plain)):
        a, b = plain[(1, index)].image.float(), fast[(1, index)].image.float()
        assert a.shape == b.shape == (3, 64, 64)
        # Same box and flip; a reduced-scale decode filters differently (DCT scaling, then
        # bilinear), by about one level of 255 on average.
        assert (a - b).abs().mean() < 2.0, index


def test_grayscale_and_cmyk_jpegs_come_out_rgb(tmp_path):
    gray = _jpeg(_smooth(600, 500).convert("L"))
    cmyk = _jpeg(_smooth(600, 500).convert("CMYK"))
    _, fast = _both_paths(_tree(tmp_path, {"g.JPEG": gray, "c.JPEG": cmyk}), 32)
    for index in range(2):
        assert fast[index].image.shape == (3, 32, 32)


def test_truncated_large_jpeg_is_caught_while_loading_and_skipped(tmp_path):
    data = _jpeg(_smooth(1024, 768))
    _tree(tmp_path, {"0.JPEG": data[: len(data) * 2 // 3], "1.JPEG": data})
    train, _, _ = imagefolder_sources(tmp_path, decode="fast", image_size=64)
    with pytest.raises(BadSample, match=r"0\.JPEG: OSError: image file is truncated"):
        train.load(0)
    sample = ImageDataset(train, T.imagenet_train_transform(64, "fast"))[0]
    assert sample.skipped.endswith("0.JPEG") and sample.image.shape == (3, 64, 64)


def test_end_of_image_marker_must_follow_the_scan():
    data = _jpeg(_smooth(200, 100))
    assert jpeg_is_complete(data) and jpeg_is_complete(data + b"trailing bytes")
    assert not jpeg_is_complete(data[:-2])
    # An end-of-image marker inside a header segment (an embedded thumbnail's) does not count.
    segment = b"\xff\xd8thumbnail\xff\xd9"
    with_app9 = data[:2] + b"\xff\xe9" + (len(segment) + 2).to_bytes(2, "big") + segment + data[2:]
    assert Image.open(io.BytesIO(with_app9)).size == (200, 100)
    assert jpeg_is_complete(with_app9) and not jpeg_is_complete(with_app9[: len(with_app9) // 2])


def test_jpeg_corrupt_inside_the_scan_is_skipped_on_both_paths(tmp_path):
    data = bytearray(_jpeg(_smooth(1024, 768)))
    middle = len(data) // 2
    data[middle:middle + 2] = b"\xff\xc0"  # a frame marker inside the scan data: a fatal decode error
    _tree(tmp_path, {"0.JPEG": bytes(data), "1.JPEG": _jpeg(_smooth(1024, 768, seed=1))})
    for dataset in _both_paths(tmp_path, 64):
        sample = dataset[0]  # found while loading (plain) or while cropping (fast): skipped either way
        assert sample.skipped.endswith("0.JPEG") and sample.image.shape == (3, 64, 64)
    train, _, _ = imagefolder_sources(tmp_path, decode="fast", image_size=64)
    strict = ImageDataset(train, T.imagenet_train_transform(64, "fast"), on_bad_sample="error")
    with pytest.raises(BadSampleError) as raised:
        strict[0]
    assert "\n" not in str(raised.value) and "0.JPEG: cannot decode" in str(raised.value)


def test_decode_setting_is_checked():
    assert DataConfig().decode == "fast"
    with pytest.raises(ConfigError, match=r"data\.decode='turbo'; use one of fast, plain"):
        DataConfig(decode="turbo")
    with pytest.raises(ConfigError, match="data.decode"):
        T.imagenet_train_transform(224, decode="turbo")


def test_pillow_build_names_the_decoder():
    assert T.pillow_build().startswith(("Pillow ", "Pillow-SIMD "))


@pytest.mark.parametrize("decode", ["fast", "plain", "gpu"], ids=["fast", "plain", "device-path"])
def test_every_path_says_the_bytes_of_the_file_it_read_and_counting_needs_no_stat_of_its_own(tmp_path, monkeypatch,
                                                                                             decode):
    """ImageFolderSource.load_sized: the image load() gives and the file's size, whichever way the file is opened;
    CountingSource counts those bytes, and stats only a file that could not be read (it has no size to give)."""
    from dlscale.data import counting

    files = {"big.jpg": _jpeg(_smooth(300, 200)), "small.jpg": _jpeg(_smooth(60, 40, seed=1)),
             "gray.jpg": _jpeg(_smooth(60, 40, seed=2).convert("L")), "empty.jpg": b""}
    train, _, _ = imagefolder_sources(_tree(tmp_path, files), decode=decode, image_size=32)
    names = [str(name).split("/")[-1] for name in train.relative_paths.astype(str)]
    source = counting.CountingSource(train, workers=0)
    stats = []
    real_stat = counting.os.stat
    monkeypatch.setattr(counting.os, "stat", lambda path: stats.append(path) or real_stat(path))
    for index, name in enumerate(names):
        if name == "empty.jpg":
            with pytest.raises(BadSample):
                source.load(index)
            continue
        image, label, size = train.load_sized(index)
        assert size == len(files[name])
        again, same_label = source.load(index)
        assert same_label == label and type(again) is type(image)
        if isinstance(image, torch.Tensor):
            assert torch.equal(again, image)
    assert stats == [train.path(names.index("empty.jpg"))]
    assert source.totals() == (len(files), sum(len(data) for data in files.values()))


def test_read_file_gives_every_byte_also_of_an_empty_file_and_reads_nothing_but_files(tmp_path):
    from dlscale.data.imagefolder import read_file

    data = bytes(range(256)) * 4099
    (tmp_path / "a").write_bytes(data)
    (tmp_path / "empty").write_bytes(b"")
    assert read_file(str(tmp_path / "a")) == data and read_file(str(tmp_path / "empty")) == b""
    with pytest.raises(FileNotFoundError):
        read_file(str(tmp_path / "missing"))
    os.mkfifo(tmp_path / "fifo")  # no writer: an open that waited for one would never return
    for other in ("fifo", "."):
        with pytest.raises(OSError, match="not a file"):
            read_file(str(tmp_path / other))


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux's /proc")
def test_read_file_reads_on_past_the_size_fstat_gave():
    """A file longer than fstat said when it was opened (one that grew; /proc's files all say 0) is read to its end."""
    from dlscale.data.imagefolder import read_file

    with open("/proc/self/cmdline", "rb") as file:
        whole = file.read()
    assert os.stat("/proc/self/cmdline").st_size == 0 and len(whole) > 1
    assert read_file("/proc/self/cmdline") == whole


def test_read_file_reads_on_after_a_short_read(tmp_path, monkeypatch):
    """A read may return fewer bytes than asked before the end (Linux gives at most 2 GiB less 4 KiB per read; some
    network file systems less): the file is read on to its end, not cut there."""
    from dlscale.data import imagefolder

    data = bytes(range(256)) * 40
    (tmp_path / "a").write_bytes(data)
    read = os.read
    monkeypatch.setattr(imagefolder.os, "read", lambda fd, count: read(fd, min(count, 1000)))
    assert imagefolder.read_file(str(tmp_path / "a")) == data


def test_an_unreadable_file_is_named_by_its_path_on_every_path(tmp_path):
    """Pillow says it cannot identify a BytesIO at some address; the sample's reason says so of the file, the same
    on every decode path and in every run."""
    files = {"junk.jpg": b"not an image at all", "empty.jpg": b""}
    for decode in ("fast", "plain", "gpu"):
        train, _, _ = imagefolder_sources(_tree(tmp_path / decode, files), decode=decode, image_size=32)
        for index in range(len(train)):
            with pytest.raises(BadSample) as caught:
                train.load(index)
            assert caught.value.reason == "UnidentifiedImageError: cannot identify image file"
            assert str(caught.value).startswith(train.path(index))


def test_a_file_removed_after_the_scan_is_a_bad_sample_counted_with_no_bytes(tmp_path):
    """The data set skips a file gone since the folders were listed; counting it must not raise instead."""
    from dlscale.data.counting import CountingSource

    train, _, _ = imagefolder_sources(_tree(tmp_path, {"a.jpg": _jpeg(_smooth(60, 40))}), image_size=32)
    source = CountingSource(train, workers=0)
    os.remove(train.path(0))
    with pytest.raises(BadSample, match="FileNotFoundError"):
        source.load(0)
    assert source.totals() == (1, 0)
