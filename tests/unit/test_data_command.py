"""`dlscale data check` and `make-jpegs`: every kind of file counted where it belongs, every unreadable one listed,
the decode rate sized into cores per GPU, and a generated tree that the check and the loader read."""

import io
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlscale import cli
from dlscale.data.check import decode_rate, inspect_file
from dlscale.data.jpeg_tree import photo_like, write_tree


def _jpeg(mode: str = "RGB", size=(40, 30), seed: int = 0, **options) -> bytes:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "CMYK": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, (size[1], size[0], channels) if channels > 1 else (size[1], size[0]), np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, mode).save(out, "JPEG", quality=90, **options)
    return out.getvalue()


def _png(size=(20, 10)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (10, 20, 30)).save(out, "PNG")
    return out.getvalue()


def write_mixed_tree(root):
    """train/a holds one file of every kind, train/b two plain JPEGs, train/empty none; val/ has a class train lacks."""
    files = {
        "train/a/plain0.JPEG": _jpeg(seed=0), "train/a/plain1.JPEG": _jpeg(seed=1, size=(64, 48)),
        "train/a/plain2.jpg": _jpeg(seed=2), "train/a/progressive.JPEG": _jpeg(seed=3, progressive=True),
        "train/a/cmyk.JPEG": _jpeg("CMYK", seed=4), "train/a/gray.JPEG": _jpeg("L", seed=5),
        "train/a/picture.png": _png(), "train/a/truncated.JPEG": _jpeg(seed=6)[:300],
        "train/a/empty.jpg": b"", "train/a/junk.JPEG": b"this is not an image at all",
        "train/a/notes.txt": b"ignored by the loader",
        "train/b/0.JPEG": _jpeg(seed=7), "train/b/1.JPEG": _jpeg(seed=8),
        "val/a/0.JPEG": _jpeg(seed=9), "val/b/0.JPEG": _jpeg(seed=10), "val/stray/0.JPEG": _jpeg(seed=11),
    }
    for relative, data in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    (root / "train" / "empty").mkdir()
    return root


def test_a_header_past_the_first_read_and_junk_after_the_end_are_read_right(tmp_path):
    """A 20 KiB EXIF segment puts the frame past HEAD_BYTES; 2 KiB after the end-of-image marker push it out of
    the tail: the file is read whole for each, and is a readable 40x30 JPEG (as the loader finds it)."""
    big_exif = tmp_path / "exif.JPEG"
    big_exif.write_bytes(_jpeg(exif=b"Exif\x00\x00" + bytes(20_000)))
    junk_after = tmp_path / "junk_after.JPEG"
    junk_after.write_bytes(_jpeg() + bytes(2048))
    cut = tmp_path / "cut.JPEG"
    cut.write_bytes(_jpeg(exif=b"Exif\x00\x00" + bytes(20_000))[:-200])
    for path in (big_exif, junk_after):
        facts = inspect_file(str(path))
        assert (facts.format, facts.width, facts.height, facts.problem) == ("JPEG baseline YCbCr", 40, 30, None)
    assert "truncated" in inspect_file(str(cut)).problem


def test_check_counts_every_kind_and_lists_every_unreadable_file(tmp_path, capsys):
    root = write_mixed_tree(tmp_path / "data")
    code = cli.main(["data", "check", str(root), "--decode-sample", "12", "--json", str(tmp_path / "check.json")])
    out = capsys.readouterr().out
    assert code == 1  # unreadable files and a layout the loader refuses
    report = json.loads((tmp_path / "check.json").read_text())
    train, val = report["splits"]
    assert train["images_per_class"] == {"a": 10, "b": 2, "empty": 0} and train["ignored"] == ["a/notes.txt"]
    assert train["formats"] == {"JPEG baseline YCbCr": 5, "JPEG progressive YCbCr": 1, "JPEG baseline CMYK": 1,
                                "JPEG baseline grayscale": 1, "PNG RGB": 1, "unreadable": 3}
    assert train["jpegs"] == 8 and train["device_decodable"] == 6  # baseline and progressive YCbCr only
    assert val["formats"] == {"JPEG baseline YCbCr": 3} and val["classes"] == 3
    reasons = {entry["path"]: entry["reason"] for entry in report["unreadable"]}
    assert set(reasons) == {"train/a/truncated.JPEG", "train/a/empty.jpg", "train/a/junk.JPEG"}
    assert reasons["train/a/empty.jpg"] == "empty file" and "truncated" in reasons["train/a/truncated.JPEG"]
    assert "not an image" in reasons["train/a/junk.JPEG"]
    assert any("stray" in p and "not classes of train/" in p for p in report["problems"])
    assert any("empty" in p and "hold no" in p for p in report["problems"])
    assert report["decode"]["files"] == 12 and report["decode"]["images_per_cpu_s"] > 0
    # a worker process's CPU time is read in clock ticks: on 12 tiny files it may read none
    assert "thread" in report["decode"]["images_per_cpu_s_by_kind"]
    assert set(report["decode"]["images_per_cpu_s_by_kind"]) <= {"thread", "process"}
    # the GPU rate is the fastest resnet50 run of the shipped measurements, whichever device ran it
    shipped = json.loads((Path(cli.__file__).parents[1] / "references" / "device_mfu.json").read_text())
    fastest_device = max(((entry["img_per_s"], device) for device, entries in shipped["devices"].items()
                          for entry in entries if entry.get("model") == "resnet50" and entry.get("img_per_s")))[1]
    for words in ("classes: 3 in train/, 3 in val/", "unreadable files: 3", "  train/a/empty.jpg: empty file",
                  "JPEG baseline CMYK", f"cores per GPU: resnet50 on an {fastest_device} at batch",
                  "takes 9 of the 15 files surveyed"):
        assert words in out, words


def test_cores_per_gpu_follow_from_the_measured_rate(tmp_path, capsys):
    root = tmp_path / "jpegs"
    write_tree(root, train=8, val=2, classes=2, unique=2, size=(64, 48))
    rate, failed = decode_rate(root, files=8, image_size=32)
    assert failed == [] and rate.files == 8
    code = cli.main(["data", "check", str(root), "--decode-sample", "8", "--image-size", "32", "--gpu-rate", "1000"])
    out = capsys.readouterr().out
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("cores per GPU"))
    per_core = float(next(line for line in out.splitlines() if line.startswith("decode:"))
                     .split(": ")[-1].split(" img per CPU-s")[0].replace(",", ""))
    expected = max(1, -(-1000 // per_core))  # ceil(gpu rate / rate per core), within the rounding of the print
    assert f"needs about {int(expected)} core" in line or f"needs about {int(expected) + 1} core" in line


def test_a_cifar_copy_is_checked_batch_by_batch(tmp_path, capsys):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    labels = [0, 1, 1, 99]
    (folder / "train").write_bytes(pickle.dumps(
        {"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), "fine_labels": labels}, protocol=2))
    (folder / "test").write_bytes(b"not a pickle")
    (folder / "meta").write_bytes(pickle.dumps({"fine_label_names": [f"c{i}" for i in range(100)]}, protocol=2))
    code = cli.main(["data", "check", str(tmp_path), "--json", str(tmp_path / "c.json")])
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "c.json").read_text())
    assert code == 1 and report["kind"] == "cifar100"
    train, val = report["splits"]
    assert train["images"] == 4 and train["images_per_class"]["c1"] == 2 and train["images_per_class"]["c99"] == 1
    assert val["images"] == 0 and [entry["path"] for entry in report["unreadable"]] == ["test"]
    assert "CIFAR-100, the python version" in out and "nothing to decode" in out


def test_not_a_data_set_is_one_line(tmp_path, capsys):
    assert cli.main(["data", "check", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "neither an ImageFolder tree" in err[0]


def test_make_jpegs_writes_a_tree_the_check_and_the_loader_read(tmp_path, capsys):
    root = tmp_path / "tree"
    assert cli.main(["data", "make-jpegs", str(root), "--train", "12", "--val", "4", "--classes", "2", "--unique", "3",
                     "--size", "64x48", "--processes", "1"]) == 0
    train = sorted((root / "train").rglob("*.JPEG"))
    val = sorted((root / "val").rglob("*.JPEG"))
    assert len(train) == 12 and len(val) == 4
    assert len({path.read_bytes() for path in train}) == 3  # distinct images, the rest copies
    assert len({path.read_bytes() for path in val}) == 4
    assert {path.parent.name for path in train} == {"class0", "class1"}
    assert all(Image.open(path).size == (64, 48) for path in train + val)
    assert cli.main(["data", "check", str(root), "--decode-sample", "4", "--image-size", "32"]) == 0
    capsys.readouterr()
    assert cli.main(["data", "make-jpegs", str(root), "--train", "2", "--val", "2", "--classes", "1"]) == 2
    assert "exists" in capsys.readouterr().err


@pytest.mark.parametrize("flags,words", [(["--train", "1", "--classes", "2"], "at least one image"),
                                         (["--unique", "0"], "argument --unique: '0'"),
                                         (["--size", "big"], "WIDTHxHEIGHT")])
def test_make_jpegs_refuses_a_tree_it_cannot_make_in_one_line(tmp_path, capsys, flags, words):
    assert cli.main(["data", "make-jpegs", str(tmp_path / "t"), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0]


def test_photo_like_jpegs_have_imagenets_mean_file_size():
    """500x375 at quality 90: about 100 KiB, ImageNet's mean file (1.28 M files in about 140 GB)."""
    out = io.BytesIO()
    photo_like(500, 375, seed=0).save(out, "JPEG", quality=90)
    assert 80 * 1024 < len(out.getvalue()) < 125 * 1024
