"""CIFAR-10 and CIFAR-100, the python version (https://www.cs.toronto.edu/~kriz/cifar.html).

The files are Python 2 pickles of dicts: `data` is a uint8 array N x 3072 (1024 red, then 1024
green, then 1024 blue values, row-major 32 x 32), `labels` (CIFAR-10) or `fine_labels`
(CIFAR-100) a list of ints, and the meta file lists the class names. A pickle can run any code
when loaded, so they are read with RestrictedUnpickler, which builds only numpy arrays.
"""

from __future__ import annotations

import codecs
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlscale.data.source import ArraySource
from dlscale.errors import DataError
from dlscale.rundir.files import open_regular

try:  # numpy >= 2 (numpy.core is a deprecated alias there)
    from numpy._core import multiarray as _multiarray
    from numpy._core import numeric as _numeric
except ImportError:  # numpy 1.x
    from numpy.core import multiarray as _multiarray
    from numpy.core import numeric as _numeric

# Per-channel mean and std (0..1 units) of the training images.
# CIFAR-100: the constants of NERSC sc20-dl-tutorial config/cifar100.yaml.
CIFAR100_MEAN = (0.5070751592371323, 0.48654887331495095, 0.4409178433670343)
CIFAR100_STD = (0.2673342858792401, 0.2564384629170883, 0.27615047132568404)
# CIFAR-10: the same statistics over its 50,000 training images, as most CIFAR-10 code uses them.
CIFAR10_MEAN = (0.49139968, 0.48215841, 0.44653091)
CIFAR10_STD = (0.24703223, 0.24348513, 0.26158784)


@dataclass(frozen=True)
class CifarLayout:
    folder: str
    train_files: tuple[str, ...]
    val_files: tuple[str, ...]
    meta_file: str
    label_key: str
    names_key: str
    num_classes: int
    archive_url: str
    """Where the python version is published (torchvision's CIFAR10/CIFAR100 download it from here)."""
    archive_md5: str
    """The archive's MD5, as torchvision checks it (`tgz_md5`) and the data set's page lists it."""


CIFAR10 = CifarLayout(
    folder="cifar-10-batches-py",
    train_files=tuple(f"data_batch_{i}" for i in range(1, 6)),
    val_files=("test_batch",),
    meta_file="batches.meta",
    label_key="labels",
    names_key="label_names",
    num_classes=10,
    archive_url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    archive_md5="c58f30108f718f92721af3b95e74349a",
)
CIFAR100 = CifarLayout(
    folder="cifar-100-python",
    train_files=("train",),
    val_files=("test",),
    meta_file="meta",
    label_key="fine_labels",
    names_key="fine_label_names",
    num_classes=100,
    archive_url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    archive_md5="eb9058c3a382ffc7106e4002c42a8d85",
)


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """`_codecs.encode` as Python 3 protocol-2 pickles use it for bytes, limited to latin1."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r} is not allowed")
    return codecs.encode(text, "latin1")


# The only globals the real files (numpy 1.x, Python 2) and re-pickled copies (numpy 2,
# Python 3) need: ndarray reconstruction. Names map to objects; no module is imported by name.
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _multiarray._reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _multiarray._reconstruct,
    ("numpy.core.numeric", "_frombuffer"): _numeric._frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _numeric._frombuffer,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Builds dicts, lists, strings, numbers and numpy arrays; refuses every other global,
    so a pickle whose __reduce__ names os.system (or anything else) fails before it runs."""

    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed") from None


def load_pickle(path: Path) -> dict[str, object]:
    """A CIFAR pickle as a dict with str keys; DataError naming the file if it is not one."""
    try:
        fd, _ = open_regular(path)
        with os.fdopen(fd, "rb") as file:
            # latin1 turns Python 2 str into str and keeps numpy's array bytes intact.
            content = RestrictedUnpickler(file, encoding="latin1").load()
    except Exception as err:  # whatever a hostile or broken file raises
        raise DataError(
            f"{path}: not a CIFAR python pickle ({err}); download the python version again"
        ) from None
    if not isinstance(content, dict):
        raise DataError(f"{path}: holds a {type(content).__name__}, not a dict; download the python version again")
    return {key.decode("latin1") if isinstance(key, bytes) else key: value for key, value in content.items()}


def read_batch(path: Path, layout: CifarLayout) -> tuple[np.ndarray, np.ndarray]:
    """Images as uint8 (N, 32, 32, 3) and labels as int64 (N,), validated."""
    content = load_pickle(path)
    if "data" not in content or layout.label_key not in content:
        raise DataError(f"{path}: has no 'data' or '{layout.label_key}'; is it {layout.folder}?")
    data, labels = content["data"], np.asarray(content[layout.label_key])
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2
            and data.shape[1] == 3072):
        described = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{path}: 'data' is {described}, expected uint8 N x 3072; download it again")
    if labels.shape != (len(data),) or labels.dtype.kind not in "iu":
        raise DataError(f"{path}: {labels.shape} labels for {len(data)} images; download it again")
    if len(labels) and (labels.min() < 0 or labels.max() >= layout.num_classes):
        raise DataError(
            f"{path}: labels span {labels.min()}..{labels.max()}, expected 0..{layout.num_classes - 1}; "
            f"is this {layout.folder}?"
        )
    images = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return images, labels.astype(np.int64)


def cifar_folder(root: Path, layout: CifarLayout) -> Path | None:
    """The folder holding the data set's batch files: root/<layout.folder>, or root itself; None if neither."""
    for folder in (root / layout.folder, root):
        if all((folder / name).is_file() for name in layout.train_files + layout.val_files):
            return folder
    return None


def _find_folder(root: Path, layout: CifarLayout) -> Path:
    folder = cifar_folder(root, layout)
    if folder is None:
        expected = (f"{root}/{layout.folder}/{{{','.join(layout.train_files + layout.val_files)},"
                    f"{layout.meta_file}}}")
        raise DataError(f"CIFAR files not found: expected {expected} (the python version of the data set; "
                        "--download fetches it)")
    return folder


def cifar_sources(root: str | Path, layout: CifarLayout) -> tuple[ArraySource, ArraySource, tuple[str, ...]]:
    """(train, val, class_names) of the CIFAR copy under root (or in root itself)."""
    folder = _find_folder(Path(root), layout)
    train = [read_batch(folder / name, layout) for name in layout.train_files]
    val = [read_batch(folder / name, layout) for name in layout.val_files]
    meta_path = folder / layout.meta_file
    if not meta_path.is_file():
        raise DataError(f"{meta_path} is missing; download the python version of {layout.folder} again")
    names = load_pickle(meta_path).get(layout.names_key)
    if not isinstance(names, list) or len(names) != layout.num_classes:
        raise DataError(f"{meta_path}: no list of {layout.num_classes} '{layout.names_key}'; download it again")
    class_names = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in names)

    def joined(batches):
        return ArraySource(np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches]))

    return joined(train), joined(val), class_names
