"""Work that cannot succeed is refused before it starts, in one line with the bound and why: more ranks than the
host's memory holds, images smaller than a ResNet takes, a last batch BatchNorm cannot train on, a loop of links
in an image tree, a JPEG header no decoder opens, a reference that does not exist, a download that never ends or
unpacks without end. Nothing is left behind by a refusal."""

import http.server
import os
import struct
import threading

import pytest
from faults import hang_guard
from PIL import Image

from dlscale.cli import main
from dlscale.data import download
from dlscale.data.cifar import CIFAR100
from dlscale.errors import ConfigError, DataError
from dlscale.launch.local import RANK_MIN_BYTES, check_local_ranks

pytestmark = pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
TINY_TRAIN = ["--config", "cpu:synthetic", "--set", "model.width=4", "--set", "data.synthetic_size=16", "--set",
              "global_batch_size=4", "--set", "schedule.epochs=2", "--set", "max_steps_per_epoch=1", "--device", "cpu"]


def _one_line(capsys, argv) -> str:
    with hang_guard(120):
        code = main(list(argv))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err[-2000:]
    return err


def test_ranks_beyond_the_hosts_memory_are_refused_with_the_bound():
    check_local_ranks(16, "--nproc", memory_bytes=16 * RANK_MIN_BYTES)
    with pytest.raises(ConfigError, match=r"--nproc starts 17 ranks on this host; each needs at least 256 MiB .* "
                                          r"give at most 16"):
        check_local_ranks(17, "--nproc", memory_bytes=16 * RANK_MIN_BYTES)


@pytest.mark.parametrize("argv", [
    ["scale", "--nproc", "1000", "--", "bench", "--model", "resnet18"],
    ["scale", "--nproc", "1,2", "--nnodes", "600", "--", "bench", "--model", "resnet18"],
    ["torchrun", "--standalone", "--nproc-per-node", "1000", "-m", "dlscale", "models"],
])
def test_a_sweep_or_an_agent_of_more_ranks_than_fit_is_refused_before_any_starts(tmp_path, monkeypatch, capsys,
                                                                                argv):
    monkeypatch.chdir(tmp_path)
    err = _one_line(capsys, argv)
    assert "ranks on this host; each needs at least 256 MiB" in err and "give at most" in err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("setting", ["data.image_size=1", "data.image_size=7", "data.val_resize=1",
                                     "data.val_image_size=4"])
def test_images_smaller_than_a_resnet_takes_are_refused_as_bench_refuses_them(tmp_path, monkeypatch, capsys,
                                                                              setting):
    monkeypatch.chdir(tmp_path)
    err = _one_line(capsys, ["train", *TINY_TRAIN, "--set", setting])
    assert "use 8 to 16,384 pixels" in err or "below the" in err
    assert "8 to 16,384" in _one_line(capsys, ["bench", "--image-size", "7"])
    assert os.listdir(tmp_path) == []


def test_a_resize_below_its_crop_is_refused(capsys):
    err = _one_line(capsys, ["config", "cpu:digits", "--set", "data.val_resize=12"])
    assert "data.val_resize=12 is below the 16-pixel validation crop" in err


@pytest.mark.parametrize("model,size,refused", [("resnet18", 8, True), ("resnet18_cifar", 16, False)])
def test_a_last_batch_of_one_is_refused_only_where_batchnorm_cannot_train_on_it(tmp_path, monkeypatch, capsys, model,
                                                                                size, refused):
    """17 images in batches of 4 (data.drop_last=false): the last holds 1. ResNet-18 at 8 px ends in 1x1 maps (one
    value per channel, which BatchNorm refuses in training); the CIFAR stem keeps 2x2 at 16 px, which trains."""
    monkeypatch.chdir(tmp_path)
    argv = ["train", *TINY_TRAIN, "--set", f"model.name={model}", "--set", f"data.image_size={size}", "--set",
            "data.synthetic_size=17", "--set", "data.drop_last=false", "--set", "max_steps_per_epoch=null"]
    if refused:
        assert "holds 1 image per rank" in _one_line(capsys, argv)
        assert os.listdir(tmp_path) == []
    else:
        assert main(argv) == 0, capsys.readouterr().err


def _tree(root):
    for split in ("train", "val"):
        (root / split / "a").mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (24, 20), (i * 90, 40, 90)).save(root / split / "a" / f"{i}.JPEG")


@pytest.mark.parametrize("where", ["train/loop", "train/a/loop.JPEG"])
@pytest.mark.parametrize("command", ["train", "loader", "data check"])
def test_a_loop_of_links_in_an_image_tree_is_one_line_naming_it(tmp_path, monkeypatch, capsys, command, where):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path / "tree")
    (tmp_path / "tree" / where).symlink_to(tmp_path / "tree" / where)
    argv = {"train": ["train", *TINY_TRAIN, "--set", "data.name=imagefolder", "--data", "tree"],
            "loader": ["loader", "--data", "tree", "--workers", "0", "--batch-size", "2", "--batches", "1",
                       "--image-size", "16", "--out", "l"],
            "data check": ["data", "check", "tree"]}[command]
    err = _one_line(capsys, argv)
    assert f"tree/{where}: cannot be read" in err and "a loop of symbolic links" in err
    assert sorted(os.listdir(tmp_path)) == ["tree"]


def test_data_check_names_a_jpeg_header_no_decoder_opens(tmp_path, capsys):
    """A JPEG whose frame header claims 20,000 x 20,000 pixels: Pillow refuses it as a decompression bomb when
    training opens it, and data check says so from its header."""
    _tree(tmp_path / "tree")
    path = tmp_path / "tree" / "train" / "a" / "0.JPEG"
    data = bytearray(path.read_bytes())
    frame = next(i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] in (0xC0, 0xC1, 0xC2))
    data[frame + 5:frame + 9] = struct.pack(">HH", 20_000, 20_000)  # height, width
    path.write_bytes(bytes(data))
    assert main(["data", "check", str(tmp_path / "tree")]) in (0, 1)
    out = capsys.readouterr().out
    assert "20000x20000 pixels, more than" in out and "decompression bomb" in out


def test_an_explain_reference_that_does_not_exist_is_refused_before_the_report(tmp_path, capsys):
    from cli_fuzz import FIXTURES

    for name, message in (("bogus:x", "unknown --reference 'bogus'"), ("ngc:bogus", "has no series 'bogus'")):
        err = _one_line(capsys, ["report", str(FIXTURES / "bench"), "-o", str(tmp_path / "r"),
                                 "--explain-reference", name])
        assert err.startswith("dlscale report: error: --explain-reference: ") and message in err
    assert not (tmp_path / "r").exists()


class Endless(http.server.BaseHTTPRequestHandler):
    """Answers with bytes that never end (and, at /announced, a Content-Length of a terabyte first)."""

    def do_GET(self) -> None:
        self.send_response(200)
        if self.path == "/announced":
            self.send_header("Content-Length", str(10**12))
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"\0" * 65536)
        except OSError:  # the client stopped reading
            pass

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("path", ["/endless", "/announced"])
def test_a_download_that_never_ends_is_stopped_at_its_bound_and_removed(tmp_path, monkeypatch, path):
    monkeypatch.setattr(download, "ARCHIVE_LIMIT_BYTES", 4 << 20)  # 4 MiB for the test, 512 MiB in use
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with hang_guard(120), pytest.raises(DataError, match="larger than any CIFAR archive"):
            download.ensure_cifar(tmp_path, CIFAR100, url=f"http://127.0.0.1:{server.server_address[1]}{path}",
                                  md5="0" * 32)
    finally:
        server.shutdown()
        server.server_close()
    assert [p.name for p in tmp_path.iterdir()] == [".cifar-100-python.download.lock"]  # no partial file


def test_an_archive_that_unpacks_without_end_is_refused(tmp_path, monkeypatch):
    import io
    import tarfile

    monkeypatch.setattr(download, "UNPACKED_LIMIT_BYTES", 1 << 20)
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("cifar-100-python/train")
        info.size = 2 << 20  # zeros: a few kilobytes packed
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    with pytest.raises(DataError, match="unpacks to more than 1 MiB"):
        download.unpack(archive, tmp_path / "out", CIFAR100)
    assert not (tmp_path / "out").exists() and not archive.exists()
