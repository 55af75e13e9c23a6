import io
import os
import pickle
import struct
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from dlscale.config import DataConfig
from dlscale.data import ImageDataset, build_loaders
from dlscale.data.cifar import CIFAR10, CIFAR100, cifar_sources
from dlscale.data.dataset import BadSampleError
from dlscale.data.digits import DIGITS_SIZE, digits_sources, digits_split
from dlscale.data.imagefolder import imagefolder_sources, quiet_exif_warnings
from dlscale.data.source import BadSample
from dlscale.data.synthetic import SyntheticSource
from dlscale.errors import DataError

# --- synthetic ---------------------------------------------------------------------------------


def test_synthetic_is_deterministic_and_splits_differ():
    first = SyntheticSource(20, 7, 16, seed=3)
    again = SyntheticSource(20, 7, 16, seed=3)
    other_seed = SyntheticSource(20, 7, 16, seed=4)
    val = SyntheticSource(20, 7, 16, seed=3, split="val")
    image, label = first.load(5)
    assert image.dtype == torch.uint8 and image.shape == (3, 16, 16) and isinstance(label, int)
    assert torch.equal(image, again.load(5)[0]) and label == again.load(5)[1]
    assert not torch.equal(image, other_seed.load(5)[0])
    assert not torch.equal(image, val.load(5)[0])
    assert not torch.equal(image, first.load(6)[0])
    labels = [first.load(i)[1] for i in range(20)]
    assert set(labels) <= set(range(7)) and len(set(labels)) > 1


# --- digits ------------------------------------------------------------------------------------


def test_digits_split_sizes_and_fixed():
    train, val = digits_split()
    assert len(train) + len(val) == DIGITS_SIZE == 1797 and len(val) == 359
    assert not set(train.tolist()) & set(val.tolist())
    again_train, again_val = digits_split()
    assert np.array_equal(train, again_train) and np.array_equal(val, again_val)


def test_digits_images_and_labels():
    train, val, mean, std = digits_sources(32)
    assert len(train) == 1438 and len(val) == 359
    for source in (train, val):
        labels = {source.load(i)[1] for i in range(len(source))}
        assert labels == set(range(10))
    sample = ImageDataset(train)[0]
    assert sample.image.dtype == torch.uint8 and sample.image.shape == (3, 32, 32)
    assert torch.equal(sample.image[0], sample.image[1])  # grey on three channels
    assert sample.image.max() > 200 and sample.image.min() == 0
    assert 0.2 < mean[0] < 0.4 and 0.2 < std[0] < 0.45
    small_train, _, _, _ = digits_sources(16)
    assert ImageDataset(small_train)[0].image.shape == (3, 16, 16)


def test_digits_split_matches_sklearn_order():
    from sklearn.datasets import load_digits

    target = load_digits().target
    train, val, _, _ = digits_sources(8)
    train_indices, val_indices = digits_split()
    assert [train.load(i)[1] for i in range(5)] == target[train_indices[:5]].tolist()
    assert [val.load(i)[1] for i in range(5)] == target[val_indices[:5]].tolist()


# --- CIFAR -------------------------------------------------------------------------------------


def _py2_str(data: bytes) -> bytes:
    return b"U" + bytes([len(data)]) + data  # SHORT_BINSTRING: a Python 2 str


def _py2_int(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)  # BININT


def _py2_array(array: np.ndarray) -> bytes:
    """A uint8 ndarray as numpy 1.x under Python 2 pickles it (protocol 2)."""
    out = b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + _py2_str(b"b") + b"\x87R"
    out += b"(K\x01(" + b"".join(_py2_int(d) for d in array.shape) + b"t"
    out += b"cnumpy\ndtype\n" + _py2_str(b"u1") + b"K\x00K\x01\x87R"
    out += b"(K\x03" + _py2_str(b"|") + b"NNN" + _py2_int(-1) + _py2_int(-1) + b"K\x00tb"
    raw = array.tobytes()
    return out + b"\x89T" + struct.pack("<I", len(raw)) + raw + b"tb"


def _py2_pickle(content: dict) -> bytes:
    """The byte format of the real CIFAR files: a Python 2 protocol-2 pickle of a dict."""
    out = b"\x80\x02}("
    for key, value in content.items():
        out += _py2_str(key.encode())
        if isinstance(value, np.ndarray):
            out += _py2_array(value)
        elif all(isinstance(v, int) for v in value):
            out += b"](" + b"".join(_py2_int(v) for v in value) + b"e"
        else:
            out += b"](" + b"".join(_py2_str(v.encode()) for v in value) + b"e"
    return out + b"u."


def _tiny_cifar(rng, count: int, num_classes: int):
    data = rng.integers(0, 256, (count, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, num_classes, count)]
    return data, labels


def write_cifar10(root, *, per_batch=3, seed=0, py2=True):
    """A cifar-10-batches-py folder with per_batch images in each of the six batches."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data, labels = _tiny_cifar(rng, per_batch, 10)
        written[name] = (data, labels)
        content = {"batch_label": "batch", "labels": labels, "data": data, "filenames": ["a.png"] * per_batch}
        if py2:
            (folder / name).write_bytes(_py2_pickle(content))
        else:
            content = {k.encode(): v for k, v in content.items()}
            (folder / name).write_bytes(pickle.dumps(content, protocol=2))
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    meta = {"num_cases_per_batch": [10000], "label_names": names}
    (folder / "batches.meta").write_bytes(_py2_pickle(meta) if py2 else pickle.dumps(meta, protocol=2))
    return written


def _as_chw(row: np.ndarray) -> np.ndarray:
    return row.reshape(3, 32, 32)


@pytest.mark.parametrize("py2", [True, False])
def test_cifar10_loads_back_exactly(tmp_path, py2):
    written = write_cifar10(tmp_path, py2=py2)
    train, val, class_names = cifar_sources(tmp_path, CIFAR10)
    assert len(train) == 15 and len(val) == 3 and class_names[0] == "airplane" and len(class_names) == 10
    expected = [(d, lab) for name in [f"data_batch_{i}" for i in range(1, 6)]
                for d, lab in zip(*written[name], strict=True)]
    for index, (row, label) in enumerate(expected):
        image, got_label = train.load(index)
        assert np.array_equal(np.asarray(image).transpose(2, 0, 1), _as_chw(row)) and got_label == label
    image, label = val.load(2)
    assert np.array_equal(np.asarray(image).transpose(2, 0, 1), _as_chw(written["test_batch"][0][2]))
    assert label == written["test_batch"][1][2]
    # The folder itself works as data.path too.
    assert len(cifar_sources(tmp_path / "cifar-10-batches-py", CIFAR10)[0]) == 15


@pytest.mark.parametrize("protocol", [2, 5])
def test_cifar100_python3_pickles_load(tmp_path, protocol):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(1)
    written = {}
    for name, count in (("train", 6), ("test", 4)):
        data, labels = written[name] = _tiny_cifar(rng, count, 100)
        content = {b"data": data, b"fine_labels": labels, b"coarse_labels": [0] * count}
        (folder / name).write_bytes(pickle.dumps(content, protocol=protocol))
    names = [f"class{i}".encode() for i in range(100)]
    (folder / "meta").write_bytes(pickle.dumps({b"fine_label_names": names}, protocol=protocol))
    train, val, class_names = cifar_sources(tmp_path, CIFAR100)
    assert len(train) == 6 and len(val) == 4 and class_names[99] == "class99"
    image, label = train.load(5)
    assert np.array_equal(np.asarray(image).transpose(2, 0, 1), _as_chw(written["train"][0][5]))
    assert label == written["train"][1][5]


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_malicious_pickle_is_refused_without_running(tmp_path):
    write_cifar10(tmp_path)
    marker = tmp_path / "pwned"
    evil = pickle.dumps({"data": _Evil(marker), "labels": [0]}, protocol=2)
    (tmp_path / "cifar-10-batches-py" / "test_batch").write_bytes(evil)
    with pytest.raises(DataError, match=r"test_batch.*posix\.system|test_batch.*os\.system") as info:
        cifar_sources(tmp_path, CIFAR10)
    assert "\n" not in str(info.value)
    assert not marker.exists()
    # Control: the payload is live; an ordinary unpickler would have run it.
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(_Evil(control)))
    assert control.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"data": np.zeros((2, 3071), np.uint8), "labels": [0, 1]}, "expected uint8 N x 3072"),
        ({"data": np.zeros((2, 3072), np.float32), "labels": [0, 1]}, "expected uint8 N x 3072"),
        ({"data": np.zeros((2, 3072), np.uint8), "labels": [0]}, "labels for 2 images"),
        ({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 10]}, "expected 0..9"),
        ({"images": np.zeros((2, 3072), np.uint8)}, "has no 'data'"),
        ([1, 2, 3], "not a dict"),
    ],
)
def test_malformed_cifar_files_raise(tmp_path, content, message):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(pickle.dumps(content, protocol=4))
    with pytest.raises(DataError, match=message) as info:
        cifar_sources(tmp_path, CIFAR10)
    assert "data_batch_3" in str(info.value)


def test_truncated_cifar_file_raises(tmp_path):
    write_cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataError, match="data_batch_1"):
        cifar_sources(tmp_path, CIFAR10)


def test_missing_cifar_names_layout(tmp_path):
    with pytest.raises(DataError, match=r"cifar-100-python/\{train,test,meta\}"):
        cifar_sources(tmp_path, CIFAR100)


def test_cifar_through_build_loaders(tmp_path):
    write_cifar10(tmp_path, per_batch=4)
    cfg = DataConfig(name="cifar10", path=str(tmp_path), num_workers=0)
    train_loader, val_loader, info = build_loaders(cfg, rank=0, world_size=1, batch_size=8)
    assert (info.num_classes, info.train_size, info.val_size, info.image_size) == (10, 20, 4, 32)
    images, labels, skipped = next(iter(train_loader))
    assert images.shape == (8, 3, 32, 32) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    assert skipped == ()
    images, labels, _ = next(iter(val_loader))
    assert images.shape == (4, 3, 32, 32)


# --- image folders -----------------------------------------------------------------------------


def _jpeg_bytes(seed, size=(64, 48)) -> bytes:
    """A JPEG of noise: mostly entropy-coded data, so cutting it in half leaves the headers whole
    and only the pixel data truncated, the case that Image.open() and verify() both miss."""
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def make_tree(root, layout):
    """layout: {split: {class: [file names]}}; files named bad*/trunc* are garbage/truncated."""
    for split, classes in layout.items():
        for class_name, files in classes.items():
            folder = root / split / class_name
            folder.mkdir(parents=True, exist_ok=True)
            for index, name in enumerate(files):
                data = _jpeg_bytes(index)
                if name.startswith("trunc"):
                    data = data[: len(data) // 2]
                elif name.startswith("bad"):
                    data = b"this is not an image" * 10
                (folder / name).write_bytes(data)
    return root


def test_imagefolder_classes_sorted_and_shared(tmp_path):
    make_tree(tmp_path, {
        "train": {"zebra": ["a.JPEG", "b.jpg"], "ant": ["c.jpeg", "d.PNG", "notes.txt"], "cat": ["e.Jpeg"]},
        "val": {"zebra": ["v.JPEG"], "cat": ["w.JPEG"]},
    })
    # d.PNG holds JPEG bytes: decoding goes by content, the extension only selects files.
    train, val, classes = imagefolder_sources(tmp_path)
    assert classes == ("ant", "cat", "zebra")
    assert len(train) == 5 and len(val) == 2
    assert [train.load(i)[1] for i in range(5)] == [0, 0, 1, 2, 2]
    assert train.path(0).endswith("ant/c.jpeg")
    assert [val.load(i)[1] for i in range(2)] == [1, 2]
    image, _ = train.load(4)
    assert image.mode == "RGB" and image.size == (64, 48)


def test_imagefolder_val_class_must_exist_in_train(tmp_path):
    make_tree(tmp_path, {"train": {"a": ["x.JPEG"]}, "val": {"b": ["y.JPEG"]}})
    with pytest.raises(DataError, match="not a class of train"):
        imagefolder_sources(tmp_path)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (None, r"train is not a folder; data\.path must hold train/<class>/\*\.JPEG, val/<class>/\*\.JPEG"),
        ({"train": {"a": ["x.JPEG"]}}, r"val is not a folder; .*train/<class>/\*\.JPEG, val/<class>/\*\.JPEG"),
        ({"train": {}, "val": {}}, r"has no class folders; expected train/<class>/\*\.JPEG"),
        ({"train": {"a": ["x.txt"]}, "val": {"a": ["y.JPEG"]}}, r"no \.jpg/\.jpeg/\.png images under .*train"),
        ({"train": {"a": ["x.JPEG"]}, "val": {"a": []}}, r"no \.jpg/\.jpeg/\.png images under .*val"),
    ],
)
def test_imagefolder_missing_or_empty_names_layout(tmp_path, layout, message):
    root = tmp_path / "imagenet"
    if layout is not None:
        root.mkdir()
        (root / "train").mkdir()
        if "val" in layout:
            (root / "val").mkdir()
        make_tree(root, layout)
    with pytest.raises(DataError, match=message):
        imagefolder_sources(root)


def test_imagefolder_unreadable_files_raise_bad_sample(tmp_path):
    make_tree(tmp_path, {"train": {"a": ["bad.JPEG", "good.JPEG", "trunc.JPEG"]}, "val": {"a": ["v.JPEG"]}})
    train, _, _ = imagefolder_sources(tmp_path)
    with pytest.raises(BadSample, match="bad.JPEG.*UnidentifiedImageError"):
        train.load(0)
    with Image.open(train.path(2)) as lazy:
        lazy.verify()  # passes: truncation is found only by a full decode
    with pytest.raises(BadSample, match=r"trunc\.JPEG: OSError: image file is truncated"):
        train.load(2)
    assert train.load(1)[0].size == (64, 48)


# --- bad-sample rules of ImageDataset ----------------------------------------------------------


class _FlakySource:
    """Indices in `bad` fail to decode; the image of index i is filled with i."""

    def __init__(self, size, bad):
        self.size, self.bad = size, set(bad)

    def __len__(self):
        return self.size

    def load(self, index):
        if index in self.bad:
            raise BadSample(f"/data/{index}.JPEG", "OSError: image file is truncated")
        return torch.full((3, 2, 2), index, dtype=torch.uint8), index % 3


def test_bad_sample_substitutes_next_index():
    dataset = ImageDataset(_FlakySource(6, bad={2, 3, 5}))
    assert dataset[1].skipped is None and dataset[1].image[0, 0, 0] == 1
    sample = dataset[2]
    assert sample.image[0, 0, 0] == 4 and sample.label == 1 and sample.skipped == "/data/2.JPEG"
    assert dataset[5].image[0, 0, 0] == 0 and dataset[5].skipped == "/data/5.JPEG"  # wraps around
    assert dataset[(7, 2)].image[0, 0, 0] == 4  # an (epoch, index) key from the train sampler


def test_bad_sample_error_mode_names_the_file():
    dataset = ImageDataset(_FlakySource(6, bad={2}), on_bad_sample="error")
    with pytest.raises(BadSampleError, match=r"^/data/2\.JPEG: cannot decode .*on_bad_sample=skip$"):
        dataset[2]


def test_consecutive_bad_samples_raise():
    dataset = ImageDataset(_FlakySource(10, bad={3, 4, 5}), max_consecutive_bad=3)
    with pytest.raises(BadSampleError, match=r"3 unreadable images in a row from /data/3\.JPEG"):
        dataset[3]
    assert dataset[4].image[0, 0, 0] == 6  # two in a row are tolerated
    everything_bad = ImageDataset(_FlakySource(4, bad=range(4)))
    with pytest.raises(BadSampleError, match="4 unreadable images in a row"):
        everything_bad[0]


def test_bad_sample_error_keeps_one_line_after_dataloader_reraise():
    # What DataLoader does with a worker's exception: type(err)("Caught ... traceback").
    wrapped = "Caught BadSampleError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n" \
              '  File "x.py", line 1\ndlscale.data.dataset.BadSampleError: /d/x.JPEG: cannot decode (OSError: y)\n'
    assert str(BadSampleError(wrapped)) == "/d/x.JPEG: cannot decode (OSError: y)"


def test_exif_warnings_are_quieted():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_exif_warnings()
        warnings.warn("Possibly corrupt EXIF data.  Expecting to read 8 bytes but only got 2. ", UserWarning,
                      stacklevel=1)
        warnings.warn("Corrupt EXIF data.  Expecting to read 12 bytes but only got 6. ", UserWarning, stacklevel=1)
        warnings.warn("Possibly corrupt EXIF MakerNote data.  Expecting ...", UserWarning, stacklevel=1)
        warnings.warn("something else", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something else"]
