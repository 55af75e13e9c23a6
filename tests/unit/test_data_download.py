"""CIFAR's download against a server on the loopback serving a small archive (never the internet): the files
arrive and load back exactly, a wrong checksum is refused in one line and leaves nothing behind, `--download`
fetches once and then finds the copy."""

import hashlib
import http.server
import io
import pickle
import tarfile
import threading
from dataclasses import replace
from functools import partial

import numpy as np
import pytest

from dlscale import cli
from dlscale.config.data import DataConfig
from dlscale.data import loader as data_loader
from dlscale.data.cifar import CIFAR100, cifar_sources
from dlscale.data.download import ensure_cifar
from dlscale.errors import ConfigError, DataError, DlscaleError


def cifar100_archive(members: dict | None = None) -> tuple[bytes, dict]:
    """A cifar-100-python.tar.gz of 6 training and 3 test images, and what its pickles hold."""
    rng = np.random.default_rng(0)
    content = {"train": {"data": rng.integers(0, 256, (6, 3072), dtype=np.uint8), "fine_labels": [0, 1, 2, 3, 4, 99]},
               "test": {"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8), "fine_labels": [5, 6, 7]},
               "meta": {"fine_label_names": [f"class{i}" for i in range(100)]}}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, value in (members or {f"cifar-100-python/{k}": pickle.dumps(v, protocol=2)
                                        for k, v in content.items()}).items():
            info = tarfile.TarInfo(name)
            info.size = len(value)
            tar.addfile(info, io.BytesIO(value))
    return out.getvalue(), content


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the requests would land on the test's stderr
        pass


@pytest.fixture
def served(tmp_path):
    """(base URL, folder it serves) of an HTTP server on 127.0.0.1 for this test."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", folder
    finally:
        server.shutdown()
        server.server_close()


def test_the_archive_arrives_checked_and_loads_back_exactly(tmp_path, served):
    base, folder = served
    archive, content = cifar100_archive()
    (folder / "c.tar.gz").write_bytes(archive)
    said = []
    found = ensure_cifar(tmp_path / "data", CIFAR100, url=f"{base}/c.tar.gz", md5=hashlib.md5(archive).hexdigest(),
                         out=said.append)
    assert found == tmp_path / "data" / "cifar-100-python"
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == [".cifar-100-python.download.lock",
                                                                     "cifar-100-python"]  # the archive removed
    train, val, names = cifar_sources(tmp_path / "data", CIFAR100)
    assert len(train) == 6 and len(val) == 3 and names[99] == "class99"
    image, label = train.load(5)
    assert label == 99 and np.array_equal(np.asarray(image).transpose(2, 0, 1).reshape(-1), content["train"]["data"][5])
    assert said[0].startswith(f"downloading {base}/c.tar.gz") and "as published" in said[1]
    (folder / "c.tar.gz").unlink()  # a second call finds the copy and fetches nothing
    assert ensure_cifar(tmp_path / "data", CIFAR100, url=f"{base}/c.tar.gz") == found


def test_a_wrong_checksum_is_refused_in_one_line_and_leaves_nothing(tmp_path, served, capsys):
    base, folder = served
    archive, _ = cifar100_archive()
    (folder / "c.tar.gz").write_bytes(archive)
    with pytest.raises(DataError, match=r"MD5 [0-9a-f]{32} is not the published 0{32}") as error:
        ensure_cifar(tmp_path / "data", CIFAR100, url=f"{base}/c.tar.gz", md5="0" * 32)
    assert "\n" not in str(error.value)
    assert [p.name for p in (tmp_path / "data").iterdir()] == [".cifar-100-python.download.lock"]
    code = cli.main(["data", "download", "cifar100", str(tmp_path / "cli"), "--url", f"{base}/c.tar.gz",
                     "--md5", "0" * 32])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("dlscale data: error: ") and "MD5" in err[0]
    assert not (tmp_path / "cli" / "cifar-100-python").exists()


def test_the_published_checksum_is_the_default(tmp_path, served):
    """Without --md5 the archive must have CIFAR-100's published MD5 (torchvision's tgz_md5): ours has not."""
    base, folder = served
    archive, _ = cifar100_archive()
    (folder / "c.tar.gz").write_bytes(archive)
    with pytest.raises(DataError, match="is not the published eb9058c3a382ffc7106e4002c42a8d85"):
        ensure_cifar(tmp_path / "data", CIFAR100, url=f"{base}/c.tar.gz")


def test_a_missing_file_and_a_hostile_archive_are_one_line(tmp_path, served):
    base, folder = served
    with pytest.raises(DataError, match="download failed"):
        ensure_cifar(tmp_path / "a", CIFAR100, url=f"{base}/absent.tar.gz")
    hostile, _ = cifar100_archive({"../outside": b"x", "cifar-100-python/train": b"y"})
    (folder / "h.tar.gz").write_bytes(hostile)
    with pytest.raises(DataError, match="not a file or folder under"):
        ensure_cifar(tmp_path / "b", CIFAR100, url=f"{base}/h.tar.gz", md5=hashlib.md5(hostile).hexdigest())
    assert not (tmp_path / "outside").exists()


def test_download_on_the_cifar_presets(tmp_path, served, monkeypatch, capsys):
    """`dlscale config cifar100:... --data DIR --download` fetches the copy and counts its images."""
    base, folder = served
    archive, _ = cifar100_archive()
    (folder / "c.tar.gz").write_bytes(archive)
    monkeypatch.setattr(data_loader, "CIFAR100", replace(CIFAR100, archive_url=f"{base}/c.tar.gz",
                                                         archive_md5=hashlib.md5(archive).hexdigest()))
    code = cli.main(["config", "cifar100:bs256-amp", "--data", str(tmp_path / "cifar"), "--download", "--set",
                     "global_batch_size=2", "--set", "data.num_workers=0"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "training images: 6 (counted)" in out and "download: true" in out
    assert (tmp_path / "cifar" / "cifar-100-python" / "meta").is_file()


def test_download_is_for_cifar_only():
    with pytest.raises(ConfigError, match="CIFAR-10 and CIFAR-100 only"):
        DataConfig(name="imagefolder", download=True)


def test_a_data_folder_that_cannot_take_the_download_names_data_path(tmp_path):
    """From a run, the folder is data.path (`dlscale data download` names its DIR)."""
    (tmp_path / "cifar" / ".cifar-100-python.download.lock").mkdir(parents=True)  # a folder where the lock goes
    cfg = DataConfig(name="cifar100", path=str(tmp_path / "cifar"), download=True, num_workers=0)
    with pytest.raises(DlscaleError, match="data.path") as refused:
        data_loader.build_loaders(cfg, rank=0, world_size=1, batch_size=2)
    assert "DIR" not in str(refused.value)
