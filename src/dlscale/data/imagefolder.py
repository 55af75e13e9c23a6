"""ImageNet-style folders: root/train/<class>/*.JPEG and root/val/<class>/*.JPEG.

Classes are the sorted folder names under train/; val/ uses the same class indices. Files with
the extensions .jpg, .jpeg or .png (any case) count; others are ignored. Note that ImageNet's
val/ comes as one flat folder and must first be sorted into class folders.

An unreadable file is found only by decoding it: Pillow's verify() passes a truncated JPEG, and
Image.open() is lazy. So load() decodes fully (convert("RGB")) inside the try and raises
BadSample, which ImageDataset turns into a skip or an error.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
from PIL import Image

from dlscale.data.dataset import BadSample
from dlscale.errors import DataError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
LAYOUT = "train/<class>/*.JPEG, val/<class>/*.JPEG"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def quiet_exif_warnings() -> None:
    """Silence Pillow's "(Possibly) corrupt EXIF data" UserWarnings, which flood ImageNet logs
    (IntelLabs/distiller#163). Called in the main process and in each DataLoader worker."""
    warnings.filterwarnings("ignore", message=r"(Possibly )?[Cc]orrupt EXIF", category=UserWarning)


def _class_folders(split_dir: Path) -> list[str]:
    return sorted(entry.name for entry in os.scandir(split_dir) if entry.is_dir())


def _image_files(class_dir: Path) -> list[str]:
    return sorted(
        entry.name for entry in os.scandir(class_dir)
        if entry.is_file() and entry.name.lower().endswith(IMAGE_EXTENSIONS)
    )


class ImageFolderSource:
    """The images of one split. Paths are held as one numpy bytes array (class/file relative to
    the split folder), not a list of str: forked workers would otherwise copy the list page by
    page as they touch the reference counts (pytorch/pytorch#13246)."""

    def __init__(self, split_dir: Path, class_to_index: dict[str, int]):
        self.split_dir = str(split_dir)
        relative, labels = [], []
        for class_name in _class_folders(split_dir):
            if class_name not in class_to_index:
                raise DataError(
                    f"{split_dir / class_name} is not a class of train/; val/ must use train's "
                    f"class folders ({LAYOUT})"
                )
            for file_name in _image_files(split_dir / class_name):
                relative.append(os.fsencode(f"{class_name}/{file_name}"))
                labels.append(class_to_index[class_name])
        if not relative:
            raise DataError(f"no .jpg/.jpeg/.png images under {split_dir}; expected {LAYOUT}")
        self.relative_paths = np.array(relative, dtype=np.bytes_)
        self.labels = np.array(labels, dtype=np.int64)
        quiet_exif_warnings()

    def __len__(self) -> int:
        return len(self.labels)

    def path(self, index: int) -> str:
        return os.path.join(self.split_dir, os.fsdecode(self.relative_paths[index]))

    def load(self, index: int) -> tuple[Image.Image, int]:
        path = self.path(index)
        try:
            with Image.open(path) as file:
                image = file.convert("RGB")  # a full decode: the only check that finds truncation
        except Exception as err:  # OSError, UnidentifiedImageError, DecompressionBombError, ...
            raise BadSample(path, f"{type(err).__name__}: {err}") from None
        return image, int(self.labels[index])


def imagefolder_sources(root: str | Path | None) -> tuple[ImageFolderSource, ImageFolderSource, tuple[str, ...]]:
    """(train, val, class_names) for root/train and root/val."""
    if root is None:
        raise DataError(f"data.name=imagefolder needs data.path, a folder with {LAYOUT}")
    root = Path(root)
    for split in ("train", "val"):
        if not (root / split).is_dir():
            raise DataError(f"{root / split} is not a folder; data.path must hold {LAYOUT}")
    classes = _class_folders(root / "train")
    if not classes:
        raise DataError(f"{root / 'train'} has no class folders; expected {LAYOUT}")
    class_to_index = {name: index for index, name in enumerate(classes)}
    train = ImageFolderSource(root / "train", class_to_index)
    val = ImageFolderSource(root / "val", class_to_index)
    return train, val, tuple(classes)
