"""The device decode path (data.decode=gpu) on the CPU: the loader workers only read files, parse their
headers and draw the crops; the Pillow decoder and the device-side crop, resize and flip code then run
on the CPU exactly as nvJPEG and the same code run on a GPU (tests/gpu/test_gpu_decode.py).

What must hold: the crop boxes and flips are the CPU fast path's draws for the same seed; the images
differ from the fast path's by at most the tolerance measured below; files the device cannot take
(CMYK, grayscale, not JPEG) are decoded on the CPU and unreadable ones skipped and counted as the CPU
path skips and counts them, also where the device decoder refuses a file; decoding in chunks gives the
same batches; `decode: gpu` without torchvision is one line naming what to install."""

import io
import threading
from dataclasses import replace

import numpy as np
import pytest
import torch
from PIL import Image

from dlscale.config import DataConfig
from dlscale.data import build_loaders, seeded_generator
from dlscale.data import transforms as T
from dlscale.data.dataset import EXCLUDED_LABEL, BadSampleError
from dlscale.data.device import DeviceFeed, DevicePrefetcher, for_device
from dlscale.data.device.decoders import PillowDecoder, nvjpeg, resolve_decode
from dlscale.data.encoded import Encoded
from dlscale.data.jpeg import device_decodable, jpeg_header
from dlscale.errors import ConfigError
from tests.unit.device_reference import crop_resize, resize_center_crop

SIZE = 64


def _smooth(width, height, seed=0):
    """A smooth image (bilinear-upsampled noise): rescaling it any way gives close pixels."""
    rng = np.random.default_rng(seed)
    small = Image.fromarray(rng.integers(0, 256, (max(2, height // 32), max(2, width // 32), 3), dtype=np.uint8))
    return small.resize((width, height), Image.Resampling.BILINEAR)


def _jpeg(image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=options.pop("quality", 95), **options)
    return buffer.getvalue()


def _png(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


SIZES = [(1024, 768), (768, 1024), (640, 480), (500, 375), (500, 333), (320, 240), (200, 300), (96, 72)]


def _tree(root, extra=None):
    """root/{train,val}/{a,b}/*.JPEG: smooth JPEGs of SIZES (the large ones take the fast path's reduced-scale
    decode), and the `extra` files in train/a and val/a."""
    for split in ("train", "val"):
        for label, offset in (("a", 0), ("b", 100)):
            folder = root / split / label
            folder.mkdir(parents=True)
            for i, (width, height) in enumerate(SIZES):
                (folder / f"{i}.JPEG").write_bytes(_jpeg(_smooth(width, height, seed=offset + i)))
            for name, data in (extra or {}).items() if label == "a" else ():
                (folder / name).write_bytes(data)
    return root


def _epoch(root, decode, *, decoder=None, epoch=1, split="train", feed="inline", **options):
    """Every batch of one epoch of `split` through DevicePrefetcher on the CPU."""
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode=decode, num_workers=0, **options)
    train, val, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)
    loader = train if split == "train" else val
    loader.sampler.set_epoch(epoch) if split == "train" else None
    prefetcher = DevicePrefetcher(loader, "cpu", decoder=decoder, feed=feed)
    return list(prefetcher), prefetcher


def _differences(a_batches, b_batches):
    a = torch.cat([b.images for b in a_batches]).float()
    b = torch.cat([b.images for b in b_batches]).float()
    return (a - b).abs()


# ------------------------------------------------------------------------------------------ headers


def test_the_header_parser_reads_what_pillow_reads_and_routes_what_the_device_cannot_take():
    image = _smooth(300, 200)
    files = {"ycbcr": _jpeg(image), "progressive": _jpeg(image, progressive=True), "gray": _jpeg(image.convert("L")),
             "cmyk": _jpeg(image.convert("CMYK")), "444": _jpeg(image, subsampling=0)}
    for name, data in files.items():
        header, opened = jpeg_header(data), Image.open(io.BytesIO(data))
        assert (header.width, header.height) == opened.size == (300, 200), name
        assert header.components == len(opened.getbands()) and header.precision == 8, name
        assert device_decodable(header) == (name in ("ycbcr", "progressive", "444")), name
    assert jpeg_header(files["progressive"]).frame == 0xC2 and jpeg_header(files["ycbcr"]).frame == 0xC0
    assert jpeg_header(files["cmyk"]).adobe_transform == 0  # Pillow writes CMYK with Adobe's segment, no transform
    assert jpeg_header(_png(image)) is None and jpeg_header(b"not an image") is None
    assert jpeg_header(files["ycbcr"][:20]) is None  # cut before the frame header


# ------------------------------------------------------------------------------- the same draws


def test_crop_boxes_and_flips_are_the_fast_paths_draws_for_the_same_seed(tmp_path, monkeypatch):
    root = _tree(tmp_path)
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=0)
    device_set = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)[0].dataset
    fast_set = build_loaders(replace(cfg, decode="fast"), rank=0, world_size=1, batch_size=4, seed=7)[0].dataset
    drawn = []  # what the fast path draws: its crop box, then its flip
    get_params, draw = T.RandomResizedCrop.get_params, T.RandomHorizontalFlip.draw
    monkeypatch.setattr(T.RandomResizedCrop, "get_params", lambda *a: drawn.append(get_params(*a)) or drawn[-1])
    monkeypatch.setattr(T.RandomHorizontalFlip, "draw", lambda *a: drawn.append(draw(*a)) or drawn[-1])
    flips = []
    for epoch in (0, 3):
        for index in range(len(device_set)):
            drawn.clear()
            fast_set[(epoch, index)]
            sample = device_set[(epoch, index)].image
            assert isinstance(sample, Encoded) and drawn[2:] == [sample.box, sample.flip]
            assert drawn[:2] == [sample.box, sample.flip]  # the fast path drew these
            # and both are torchvision's RandomResizedCrop draw from the sample's own seed
            generator = seeded_generator(7, epoch, index)
            assert sample.box == get_params(T.RandomResizedCrop(SIZE), sample.width, sample.height, generator)
            assert sample.flip == (float(torch.rand((), generator=generator)) < 0.5)
            flips.append(sample.flip)
    assert 0 < sum(flips) < len(flips)


def test_the_device_crop_cuts_the_drawn_box_and_mirrors_it():
    # A coordinate image: red = x, green = 2 y. JPEG at quality 100 without chroma subsampling keeps it
    # to a level or two, and a bilinear resize keeps every value inside the box's range.
    y, x = np.mgrid[0:100, 0:200]
    data = _jpeg(Image.fromarray(np.stack([x, 2 * y, np.full_like(x, 90)], -1).astype(np.uint8)),
                 quality=100, subsampling=0)
    (decoded,) = PillowDecoder().decode([torch.frombuffer(bytearray(data), dtype=torch.uint8)])
    crop = T.RandomResizedCrop(24)
    for seed in range(20):
        left, top, width, height = box = crop.get_params(200, 100, torch.Generator().manual_seed(seed))
        for flip in (False, True):
            out = crop_resize(decoded, list(box), 24, flip).int()
            assert out.shape == (3, 24, 24) and out.dtype == torch.int32
            assert left - 3 <= out[0].min() and out[0].max() <= left + width - 1 + 3, (seed, box)
            assert 2 * top - 3 <= out[1].min() and out[1].max() <= 2 * (top + height - 1) + 3, (seed, box)
            step = out[0, :, -1].float().mean() - out[0, :, 0].float().mean()  # red grows left to right
            assert (step < 0) if flip else (step > 0), (seed, box, flip)


# ---------------------------------------------------------------------------- the same images


def test_device_path_images_differ_from_the_fast_path_by_the_measured_tolerance(tmp_path):
    """Measured here, three epochs of 16 training images (8 sizes, 96 x 72 to 1024 x 768) at 64 px and
    the 16 validation images (Pillow 13, torch 2.13 CPU): training crops the fast path decodes at full
    scale (19 of 96 over 6 epochs) differ by at most 1 level of 255 (the same antialiased bilinear filter,
    computed in float here and in fixed point by torch's uint8 kernel), mean 0.10; crops it decodes at
    1/2, 1/4 or 1/8 scale (libjpeg's scaled DCT) by at most 13, mean 0.52, at most 1.28 averaged over
    one image; all training crops of an epoch 0.39-0.51 on average. Validation (Pillow's resize of the
    whole image against torch's, then the same centre crop): at most 1, mean 0.087."""
    root = _tree(tmp_path)
    for epoch in (0, 1, 2):
        fast, _ = _epoch(root, "fast", epoch=epoch)
        device, prefetcher = _epoch(root, "gpu", epoch=epoch)
        assert [torch.equal(a.labels, b.labels) for a, b in zip(fast, device, strict=True)] == [True] * len(fast)
        difference = _differences(fast, device)
        assert difference.max() <= 16 and difference.mean() <= 0.75, (epoch, difference.max(), difference.mean())
        assert difference.mean(dim=(1, 2, 3)).max() <= 2.0
        assert prefetcher.stage.counts.device == 16 and prefetcher.stage.counts.workers == 0
    fast, _ = _epoch(root, "fast", split="val")
    device, _ = _epoch(root, "gpu", split="val")
    difference = _differences(fast, device)
    assert difference.max() <= 1 and difference.mean() <= 0.15


def test_full_scale_crops_differ_by_at_most_one_level(tmp_path):
    # Images under 2 x 64 px per side: the fast path decodes them at full scale, as the device does.
    root = tmp_path / "small"
    for split in ("train", "val"):
        for label in ("a", "b"):
            (root / split / label).mkdir(parents=True)
            for i in range(4):
                (root / split / label / f"{i}.JPEG").write_bytes(_jpeg(_smooth(120, 90 + 8 * i, seed=i)))
    for epoch in (0, 1):
        difference = _differences(_epoch(root, "fast", epoch=epoch)[0], _epoch(root, "gpu", epoch=epoch)[0])
        assert difference.max() <= 1


def test_chunks_bound_each_decoder_call_and_give_the_same_batches(tmp_path):
    root = _tree(tmp_path)
    calls = []

    class Recording(PillowDecoder):
        def decode(self, files):
            calls.append(len(files))
            return super().decode(files)

    whole, _ = _epoch(root, "gpu", decoder=Recording(), decode_chunk=64)
    assert calls == [4, 4, 4, 4]  # batches of 4: one call each
    calls.clear()
    chunked, _ = _epoch(root, "gpu", decoder=Recording(), decode_chunk=3)
    assert calls == [3, 1] * 4
    for a, b in zip(whole, chunked, strict=True):
        assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)


def test_chunks_gather_images_of_one_shape_so_that_padding_wastes_little(tmp_path):
    """A chunk pads its images to its largest height and width: the stage sorts a batch's rows by their
    header's (height, width) before chunking. With ImageNet's two commonest shapes, 500 x 375 and 375 x 500,
    a chunk of 2 then mixes the two only where a batch holds an odd number of each (a mixed chunk pads both
    to 500 x 500: a third more pixels than two of one shape)."""
    for split in ("train", "val"):
        for label in ("a", "b"):
            folder = tmp_path / split / label
            folder.mkdir(parents=True)
            for i, (width, height) in enumerate([(500, 375), (375, 500)] * 3):
                (folder / f"{i}.JPEG").write_bytes(_jpeg(_smooth(width, height, seed=i)))
    calls = []

    class Recording(PillowDecoder):
        def decode(self, files):
            images = super().decode(files)
            calls.append([tuple(image.shape[1:]) for image in images])
            return images

    by_shape, _ = _epoch(tmp_path, "gpu", decoder=Recording(), decode_chunk=2)
    assert len(calls) == 6 and all(len(call) == 2 for call in calls)  # 3 batches of 4, in calls of 2
    for batch in (calls[0:2], calls[2:4], calls[4:6]):
        shapes = [shape for call in batch for shape in call]
        assert shapes == sorted(shapes)
        mixed = sum(len(set(call)) > 1 for call in batch)
        assert mixed == shapes.count((375, 500)) % 2, batch
    # a chunk of one shape is stacked, a mixed one padded: the same images either way
    padded, _ = _epoch(tmp_path, "gpu", decode_chunk=64)
    for a, b in zip(by_shape, padded, strict=True):
        assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)


# ------------------------------------------------------------------------------------- bad files


def _scan_corrupt() -> bytes:
    """A complete JPEG (its end-of-image marker in place) with a frame marker inside its scan data: only a
    decode finds it (libjpeg stops there: a fatal error)."""
    data = bytearray(_jpeg(_smooth(1024, 768, seed=50)))
    middle = len(data) // 2
    data[middle:middle + 2] = b"\xff\xc0"
    return bytes(data)


def _bad_files() -> dict[str, bytes]:
    image = _smooth(400, 300, seed=60)
    truncated = _jpeg(_smooth(1024, 768, seed=61))
    return {"cmyk.JPEG": _jpeg(image.convert("CMYK")), "gray.JPEG": _jpeg(image.convert("L")), "png.png": _png(image),
            "junk.JPEG": b"not an image", "scan.JPEG": _scan_corrupt(),
            "trunc.JPEG": truncated[:len(truncated) * 2 // 3]}


def test_bad_and_unusual_files_are_handled_and_counted_as_on_the_cpu_path(tmp_path):
    root = _tree(tmp_path, _bad_files())
    for epoch in (0, 1):  # every file once (drop_last=False), in two orders
        fast, _ = _epoch(root, "fast", epoch=epoch, drop_last=False)
        device, prefetcher = _epoch(root, "gpu", epoch=epoch, drop_last=False)
        skipped = [path.rsplit("/", 1)[-1] for batch in device for path in batch.skipped]
        # junk.JPEG and trunc.JPEG are caught by the workers; scan.JPEG by the decoder, then the CPU path
        assert sorted(skipped) == ["junk.JPEG", "scan.JPEG", "trunc.JPEG"]
        assert [b.skipped for b in device] == [b.skipped for b in fast]
        assert torch.equal(torch.cat([b.labels for b in device]), torch.cat([b.labels for b in fast]))
        difference = _differences(fast, device)
        assert difference.max() <= 16 and difference.mean() <= 0.75
        counts = prefetcher.stage.counts
        # CMYK, grayscale and PNG decoded by the workers (the PNG twice: it also stands in for junk.JPEG);
        # scan.JPEG refused by the decoder and replaced on the CPU (by trunc.JPEG's successor, b/0.JPEG)
        assert (counts.workers, counts.refused, counts.device) == (4, 1, 22 - 4 - 1)
    fast, _ = _epoch(root, "fast", split="val")
    device, prefetcher = _epoch(root, "gpu", split="val")
    labels = torch.cat([b.labels for b in device])
    assert torch.equal(labels, torch.cat([b.labels for b in fast])) and (labels == EXCLUDED_LABEL).sum() == 3
    assert [b.skipped for b in device] == [b.skipped for b in fast]
    assert _differences(fast, device).max() <= 1


class RefuseAll(PillowDecoder):
    def decode(self, files):
        return [None] * len(files)


def test_files_the_decoder_refuses_are_the_cpu_paths_samples_exactly(tmp_path):
    root = _tree(tmp_path, _bad_files())
    fast, _ = _epoch(root, "fast", epoch=2, drop_last=False)
    device, prefetcher = _epoch(root, "gpu", epoch=2, decoder=RefuseAll(), drop_last=False)
    for a, b in zip(fast, device, strict=True):
        assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels) and a.skipped == b.skipped
    assert prefetcher.stage.counts.device == 0 and prefetcher.stage.counts.refused == 22 - 4


@pytest.mark.parametrize("feed", ["inline", "thread"])
def test_a_refused_unreadable_file_stops_the_run_in_one_line_with_on_bad_sample_error(tmp_path, feed):
    root = _tree(tmp_path, {"scan.JPEG": _scan_corrupt()})
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=0,
                     on_bad_sample="error")
    train, _, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)
    with pytest.raises(BadSampleError) as raised:
        list(DevicePrefetcher(train, "cpu", feed=feed))  # raised in the caller's thread, not lost in another
    assert "\n" not in str(raised.value) and "scan.JPEG: cannot decode" in str(raised.value)


# ------------------------------------------------------------------------- decoding ahead in a thread


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "dlscale-feed"]


@pytest.mark.parametrize("decode", ["gpu", "fast"], ids=["device-path", "fast-path"])  # "gpu" marks a GPU test
def test_batches_brought_over_by_a_background_thread_are_the_same_batches_in_the_same_order(tmp_path, decode):
    root = _tree(tmp_path, _bad_files())  # skipped files too: their substitutes and counts must not move
    inline, _ = _epoch(root, decode, epoch=3, drop_last=False)
    threads, original = [], DeviceFeed.load

    def recording(self, batch, stage, stream):
        threads.append(threading.current_thread().name)
        return original(self, batch, stage, stream)

    DeviceFeed.load = recording
    try:
        ahead, _ = _epoch(root, decode, epoch=3, drop_last=False, feed="thread")
    finally:
        DeviceFeed.load = original
    assert len(inline) == len(ahead) == 6
    assert set(threads) == {"dlscale-feed"}  # decoded (gpu) or copied (fast) off the caller's thread
    for a, b in zip(inline, ahead, strict=True):
        assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels) and a.skipped == b.skipped
    assert not _prefetch_threads()


def test_a_consumer_that_stops_early_ends_the_thread_and_the_next_epoch_is_whole(tmp_path):
    root = _tree(tmp_path)
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=2)
    train, _, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)  # persistent workers
    train.sampler.set_epoch(0)
    batches = iter(DevicePrefetcher(train, "cpu", feed="thread", depth=1))
    next(batches)
    batches.close()  # a preemption stops the epoch after a step
    assert not _prefetch_threads()
    train.sampler.set_epoch(1)
    again = list(DevicePrefetcher(train, "cpu", feed="thread", depth=1))
    train.sampler.set_epoch(1)
    assert [b.labels.tolist() for b in again] == [b.labels.tolist() for b in DevicePrefetcher(train, "cpu")]
    assert len(again) == 4 and not _prefetch_threads()


def test_an_error_in_a_training_step_ends_the_thread_bringing_batches_ahead(tmp_path, monkeypatch):
    """The error (a CUDA out-of-memory error, say) keeps its traceback, and with it the epoch's frames, alive
    until the process ends: the epoch closes its batches itself, or the thread outlives the run and can abort
    the interpreter's exit."""
    import dlscale.train.loop as loop
    from dlscale.config import load_config
    from dlscale.distributed import DistEnv

    original, calls = loop.train_step, []

    def fails_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("out of memory (a stand-in)")
        return original(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", fails_second)
    cfg, _ = load_config("cpu:digits", ["schedule.epochs=2", "max_steps_per_epoch=6", "model.width=8",
                                        "data.device_feed=thread"])
    with pytest.raises(RuntimeError, match="a stand-in") as raised:
        loop.fit(cfg, DistEnv(), run_name="fails", output_dir=tmp_path)
    assert raised.traceback and not _prefetch_threads()


def test_the_device_feed_and_its_depth_are_checked_in_one_line():
    assert DataConfig(device_feed="thread", device_feed_depth=3).device_feed_depth == 3
    for bad in (0, 65, True, 1.5):
        with pytest.raises(ConfigError, match="data.device_feed_depth"):
            DataConfig(device_feed_depth=bad)
    with pytest.raises(ConfigError, match="^data.device_feed='ahead'; use one of inline, thread, process$"):
        DataConfig(device_feed="ahead")

# ------------------------------------------------------------------------------- choosing the path


def test_decode_gpu_without_torchvision_is_refused_in_one_line(monkeypatch):
    def missing():
        raise ModuleNotFoundError("No module named 'torchvision'")

    monkeypatch.setattr(nvjpeg, "_torchvision_io", missing)
    for device in ("cuda", "cpu", None):
        with pytest.raises(ConfigError) as raised:
            resolve_decode("gpu", device)
        message = str(raised.value)
        assert "\n" not in message and "torchvision is not installed" in message
        assert "pip install 'dlscale[gpu]'" in message
        assert resolve_decode("auto", device) == "fast"
    assert resolve_decode("plain", "cuda") == "plain"


def test_auto_is_fast_without_a_device_and_cpu_names_the_fast_path(tmp_path):
    root = _tree(tmp_path)
    assert DataConfig(decode="cpu").decode == "fast"
    with pytest.raises(ConfigError, match="use one of fast, plain, gpu, auto"):
        DataConfig(decode="nvjpeg")
    with pytest.raises(ConfigError, match="data.decode_chunk=0"):
        DataConfig(decode_chunk=0)
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="auto", num_workers=0)
    assert build_loaders(cfg, rank=0, world_size=1, batch_size=4)[2].decode == "fast"
    assert build_loaders(for_device(cfg, "cpu"), rank=0, world_size=1, batch_size=4)[2].decode == "fast"


def test_the_batched_crops_equal_torchs_own_resize_one_image_at_a_time():
    """The device stage makes a chunk's images as two batched matrix products (resample_weights): the same
    crops, antialiased resizes, mirrors and centre crops as torch's interpolate(antialias=True) on each image
    alone (crop_resize, resize_center_crop): measured on this set, at most 1 level of 255 apart (rounding
    of a value near .5) in 0.2% (crops) and 0.5% (centre crops) of the pixels of random images."""
    from dlscale.data.device import stage as dd

    generator = torch.Generator().manual_seed(3)
    shapes = [(37, 50), (64, 48), (24, 24), (90, 31), (20, 70)]  # (height, width): down- and upscaled crops
    images = [torch.randint(0, 256, (3, h, w), generator=generator, dtype=torch.uint8) for h, w in shapes]
    padded = torch.zeros((len(images), 3, 90, 70), dtype=torch.uint8)
    for k, image in enumerate(images):
        padded[k, :, :image.shape[1], :image.shape[2]] = image
    boxes = torch.tensor([[3, 5, 40, 30], [0, 0, 48, 64], [10, 10, 6, 9], [1, 2, 30, 88], [0, 0, 70, 20]])
    flips = torch.tensor([False, True, False, True, True])
    size = 32
    rows = dd.resample_weights(size, start=boxes[:, 1].double(), length=boxes[:, 3].double(), extent=90)
    cols = dd.resample_weights(size, start=boxes[:, 0].double(), length=boxes[:, 2].double(), extent=70,
                               mirror=flips)
    batched = dd.apply_weights(padded, rows, cols).int()
    single = torch.stack([crop_resize(image, box.tolist(), size, bool(flip)) for image, box, flip
                          in zip(images, boxes, flips, strict=True)]).int()
    diff = (batched - single).abs()
    assert diff.max() <= 1 and (diff > 0).float().mean() < 0.01, (diff > 0).float().mean()
    # validation: the shorter side to 36, the central 32 x 32 (the 20 x 70 image's crop is taller than
    # its resized height: zeros there, as Pillow pads)
    widths, heights = torch.tensor([w for _, w in shapes]), torch.tensor([h for h, _ in shapes])
    geometry = torch.tensor([T.center_crop_geometry(w, h, resize=36, size=size) for w, h in
                             zip(widths.tolist(), heights.tolist(), strict=True)], dtype=torch.float64)
    new_w, new_h, left, top = geometry.unbind(1)
    zero = torch.zeros(len(images), dtype=torch.float64)
    rows = dd.resample_weights(size, start=zero, length=heights.double(), extent=90, offset=top, resized=new_h)
    cols = dd.resample_weights(size, start=zero, length=widths.double(), extent=70, offset=left, resized=new_w)
    batched = dd.apply_weights(padded, rows, cols).int()
    single = torch.stack([resize_center_crop(image, 36, size) for image in images]).int()
    diff = (batched - single).abs()
    assert diff.max() <= 1 and (diff > 0).float().mean() < 0.01, (diff > 0).float().mean()
    assert single[4, :, 0].eq(0).all() == batched[4, :, 0].eq(0).all()  # the padded rows stay zero


def test_the_stage_makes_its_resampling_weights_on_the_device_not_on_the_host(tmp_path, monkeypatch):
    """Every tensor resample_weights gets is on the decoder's device, so its (rows x size x extent) weights
    are made there: made on the host, they held the H200's device loader at 129 img/s (2026-11-27).
    The meta device stands in for CUDA: a host-made tensor shows as "cpu"."""
    from dlscale.data.device import stage as dd

    made_on = []

    def spy(size, **tensors):
        made_on.extend(str(v.device) for v in tensors.values() if isinstance(v, torch.Tensor))
        return resample_weights(size, **tensors)

    resample_weights = dd.resample_weights
    monkeypatch.setattr(dd, "resample_weights", spy)
    root = _tree(tmp_path)
    for split in ("train", "val"):
        cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=0)
        train, val, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)
        loader = train if split == "train" else val
        stage = dd.DeviceDecodeStage(loader.dataset.device_plan, PillowDecoder("meta"))
        made_on.clear()
        out = stage(next(iter(loader)))
        assert out.images.device.type == "meta" and tuple(out.images.shape) == (4, 3, SIZE, SIZE)
        assert len(made_on) >= 4 and set(made_on) == {"meta"}, (split, made_on)


# ------------------------------------------------------------------------------ a shared decode


def test_a_device_share_sends_that_share_of_any_run_of_indices_to_the_device(tmp_path):
    root = _tree(tmp_path)

    def source(share):
        cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=0,
                         device_decode_share=share)
        return build_loaders(cfg, rank=0, world_size=1, batch_size=4)[0].dataset.source

    quarter, third, whole = source(0.25), source(1 / 3), source(1.0)
    assert [quarter.on_device(i) for i in range(8)] == [False, False, False, True] * 2  # the 4th, 8th, ...
    assert sum(quarter.on_device(i) for i in range(1000)) == 250
    assert all(sum(quarter.on_device(i) for i in range(start, start + 4)) == 1 for start in range(100))
    assert sum(third.on_device(i) for i in range(999)) == 333
    assert all(whole.on_device(i) for i in range(1000))


def test_with_a_device_share_the_workers_decode_the_other_files_exactly_as_the_fast_path(tmp_path):
    """Half the files go to the device (the odd indices); the workers decode the others in the same batches,
    and those rows are the fast path's images bit for bit; the device's rows are those of a run that sends
    every file to the device (within a level: the chunks pad to other sizes)."""
    root = _tree(tmp_path)
    for epoch in (0, 1):
        fast, _ = _epoch(root, "fast", epoch=epoch)
        device, _ = _epoch(root, "gpu", epoch=epoch)
        shared, prefetcher = _epoch(root, "gpu", epoch=epoch, device_decode_share=0.5)
        cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=0)
        sampler = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=7)[0].sampler
        sampler.set_epoch(epoch)
        indices = [index for _, index in sampler]
        to_device = [index % 2 == 1 for index in indices]
        rows = torch.cat([b.images for b in shared])
        assert torch.equal(torch.cat([b.labels for b in shared]), torch.cat([b.labels for b in fast]))
        for row, on_device in enumerate(to_device):
            if on_device:
                assert (rows[row].int() - torch.cat([b.images for b in device])[row].int()).abs().max() <= 1
            else:
                assert torch.equal(rows[row], torch.cat([b.images for b in fast])[row]), (epoch, row)
        assert prefetcher.stage.counts.device == sum(to_device) == 8
        assert prefetcher.stage.counts.workers == len(indices) - sum(to_device) == 8


def test_a_device_share_is_refused_in_one_line_where_it_means_nothing(tmp_path):
    for share in (0, -0.5, 1.5, float("nan"), True):
        with pytest.raises(ConfigError, match="data.device_decode_share=.*use a share above 0 and at most 1"):
            DataConfig(decode="gpu", device_decode_share=share)
    for decode in ("fast", "plain"):
        with pytest.raises(ConfigError, match=f"with data.decode={decode} the loader workers decode every file"):
            DataConfig(decode=decode, device_decode_share=0.5)
    # auto keeps the share for the device path and drops it where auto takes the fast path
    cfg = DataConfig(name="imagefolder", path=str(_tree(tmp_path)), image_size=SIZE, decode="auto", num_workers=0,
                     device_decode_share=0.5)
    assert cfg.on_path("gpu").device_decode_share == 0.5 and cfg.on_path("fast").device_decode_share == 1.0
    assert build_loaders(for_device(cfg, "cpu"), rank=0, world_size=1, batch_size=4)[2].decode == "fast"
