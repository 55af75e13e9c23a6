"""ImageNet-style folders: root/train/<class>/*.JPEG and root/val/<class>/*.JPEG.

Classes are the sorted folder names under train/; val/ uses the same class indices. Files with
the extensions .jpg, .jpeg or .png (any case) count; others are ignored. Note that ImageNet's
val/ comes as one flat folder and must first be sorted into class folders.

An unreadable file is found only by decoding it: Pillow's verify() passes a truncated JPEG, and
Image.open() is lazy. So load() decodes fully (convert("RGB")) inside the try and raises
BadSample, which ImageDataset turns into a skip or an error.

The fast decode path (decode="fast") is the one exception: a JPEG large enough for a reduced-scale
decode (shorter side >= 2 x the crop size) leaves load() undecoded, so that the crop transform,
which draws the crop box, can choose the scale. load() still rejects such a file when it is not
a JPEG Pillow can parse or when its scan data has no end-of-image marker (a truncated copy, the
common failure); a file corrupt in the middle is found only by the transform, and is then skipped
(or reported) like any unreadable file.

The device decode path (decode="gpu") reads each file and parses its JPEG header in pure
Python (data.jpeg.jpeg_header): a JPEG the device decoder takes (device_decodable: 8-bit YCbCr or
progressive, complete) comes out of load() undecoded, as a JpegFile; any other file (CMYK, grayscale,
PNG, truncated, unreadable) goes the fast path's way, from the bytes already read.
"""

from __future__ import annotations

import copy
import errno
import io
import math
import os
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from dlscale.config.data import DECODE_PATHS
from dlscale.data import cpu_jpeg as cpu_jpeg_module
from dlscale.data.encoded import JpegFile
from dlscale.data.jpeg import device_decodable, jpeg_header, jpeg_is_complete
from dlscale.data.source import BadSample
from dlscale.errors import ConfigError, DataError
from dlscale.rundir.files import open_regular

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
LAYOUT = "train/<class>/*.JPEG, val/<class>/*.JPEG"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def quiet_exif_warnings() -> None:
    """Silence Pillow's "(Possibly) corrupt EXIF data" UserWarnings, which flood ImageNet logs
    (IntelLabs/distiller#163). Called in the main process and in each DataLoader worker."""
    warnings.filterwarnings("ignore", message=r"(Possibly )?[Cc]orrupt EXIF", category=UserWarning)


def _class_folders(split_dir: Path) -> list[str]:
    return scan(split_dir, lambda entry: entry.is_dir())


def _image_files(class_dir: Path) -> list[str]:
    return scan(class_dir, lambda entry: entry.is_file() and entry.name.lower().endswith(IMAGE_EXTENSIONS))


def scan(folder: str | os.PathLike, keep) -> list[str]:
    """The sorted names of folder's entries that `keep(entry)`; one line naming the entry the system cannot look at
    (a loop of symbolic links) or the folder it cannot list, never an OSError from deep inside a command."""
    names = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    kept = keep(entry)
                except OSError as error:
                    loop = " (a loop of symbolic links)" if error.errno == errno.ELOOP else ""
                    raise DataError(f"{entry.path}: cannot be read: {error.strerror or error}{loop}; remove it or "
                                    "make it a file or a folder") from None
                if kept:
                    names.append(entry.name)
    except OSError as error:
        raise DataError(f"{folder}: cannot be listed ({error.strerror or error}); expected {LAYOUT}") from None
    return sorted(names)


class ImageFolderSource:
    """The images of one split. Paths are held as one numpy bytes array (class/file relative to
    the split folder), not a list of str: forked workers would otherwise copy the list page by
    page as they touch the reference counts (pytorch/pytorch#13246).

    draft_min_side: None decodes every image in load() (the plain path); a number hands JPEGs
    whose shorter side is at least that many pixels to the transform undecoded (the fast path).
    for_device: hand JPEGs the device decoder takes over as JpegFile (the device path); the
    others go the way draft_min_side says. device_share: on the device path, the share of the files
    handed over (by index: on_device); the others go the way draft_min_side says too. cpu_jpeg: decode the
    YCbCr JPEGs that draft_min_side leaves to load() with simplejpeg (data.cpu_decoder, data/cpu_jpeg.py), as a
    uint8 (H, W, 3) tensor instead of a Pillow image.
    """

    def __init__(self, split_dir: Path, class_to_index: dict[str, int], *, draft_min_side: int | None = None,
                 for_device: bool = False, device_share: float = 1.0, cpu_jpeg: bool = False):
        self.split_dir = str(split_dir)
        self.cpu_jpeg = cpu_jpeg
        self.draft_min_side = draft_min_side
        self.for_device = for_device
        self.device_share = device_share
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

    def on_cpu(self) -> ImageFolderSource:
        """The same files (the same path array, not a copy), every one decoded on the CPU."""
        twin = copy.copy(self)
        twin.for_device = False
        return twin

    def on_device(self, index: int) -> bool:
        """On the device path, whether the file at index goes to the device (if its decoder takes it): of
        any run of consecutive indices, the share device_share (rounded), spread evenly."""
        share = self.device_share
        return share >= 1 or math.floor((index + 1) * share) > math.floor(index * share)

    @property
    def cpu_decoder(self) -> str | None:
        """Who decodes the JPEGs the fast path decodes at full scale: "simplejpeg" or "pillow"; None off that path."""
        return None if self.draft_min_side is None else "simplejpeg" if self.cpu_jpeg else "pillow"

    def load(self, index: int) -> tuple[Image.Image | JpegFile | torch.Tensor, int]:
        image, label, _ = self.load_sized(index)
        return image, label

    def load_sized(self, index: int) -> tuple[Image.Image | JpegFile | torch.Tensor, int, int]:
        """load(), and the bytes of the file it read (what CountingSource counts, without a stat of its own)."""
        path = self.path(index)
        try:
            data = read_file(path)
            if self.for_device and self.on_device(index):
                image = for_device(data, path, self.draft_min_side, self.cpu_jpeg)
            elif self.draft_min_side is None:
                with Image.open(io.BytesIO(data)) as file:
                    image = file.convert("RGB")  # a full decode: the only check that finds truncation
            else:
                image = for_crop(data, path, self.draft_min_side, self.cpu_jpeg)
        except UnidentifiedImageError:  # Pillow's message names the BytesIO it read from; BadSample names the file
            raise BadSample(path, "UnidentifiedImageError: cannot identify image file") from None
        except Exception as err:  # OSError, DecompressionBombError, ...
            raise BadSample(path, f"{type(err).__name__}: {err}") from None
        return image, int(self.labels[index]), len(data)


def read_file(path: str) -> bytes:
    """The bytes of the regular file at path, in one open, fstat, read and close, where Python's open().read() makes
    several more system calls, each letting the GIL go for another loader thread to take while this one waits for it
    back (data.workers_kind=thread). One read of fstat's size and a byte more ends at the file's end; a file that
    grew since, or a read cut short (Linux reads at most 2 GiB at once; some network file systems less), is read on
    to its end. A FIFO or a device is never read (its open does not wait for a writer)."""
    fd, facts = open_regular(path)
    try:
        data = os.read(fd, facts.st_size + 1)
        if len(data) == facts.st_size:
            return data
        chunks = [data]
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def for_device(data: bytes, path: str, draft_min_side: int | None,
               cpu_jpeg: bool = False) -> JpegFile | Image.Image | torch.Tensor:
    """The file in data as a JpegFile if the device decoder takes it, else as the CPU path opens it
    (for_crop with draft_min_side, or decoded when that is None)."""
    header = jpeg_header(data)
    if device_decodable(header) and jpeg_is_complete(data):
        return JpegFile(data, header.width, header.height, path)
    if draft_min_side is not None:
        return for_crop(data, path, draft_min_side, cpu_jpeg)
    with Image.open(io.BytesIO(data)) as file:
        return file.convert("RGB")


def for_crop(data: bytes, path: str, draft_min_side: int, cpu_jpeg: bool = False) -> Image.Image | torch.Tensor:
    """The image in data (the file at path) for a crop transform that may decode it at reduced scale.

    A JPEG with a shorter side of at least draft_min_side pixels comes back undecoded (header
    parsed, bytes in memory, checked for an end-of-image marker); any other image decoded, RGB:
    with cpu_jpeg, a YCbCr JPEG as a uint8 (H, W, 3) tensor decoded by simplejpeg (data/cpu_jpeg.py).
    """
    size = cpu_jpeg_module.ycbcr_size(data) if cpu_jpeg else None
    # beyond Pillow's decompression-bomb limit, Pillow warns or refuses, as without simplejpeg
    if size is not None and min(size) < draft_min_side and size[0] * size[1] <= (Image.MAX_IMAGE_PIXELS or math.inf):
        decoded = cpu_jpeg_module.decode_rgb(data)
        if decoded is not None:
            return decoded  # else a file libjpeg-turbo finds fault with: Pillow decodes or refuses it, as without
    image = Image.open(io.BytesIO(data))
    if image.format == "JPEG" and min(image.size) >= draft_min_side:
        if not jpeg_is_complete(data):
            raise OSError("image file is truncated (no end-of-image marker after the scan data)")
        image.filename = path  # names the file if the decode in the transform fails
        return image
    image.load()
    return image if image.mode == "RGB" else image.convert("RGB")


def imagefolder_sources(
    root: str | Path | None, *, decode: str = "fast", image_size: int = 224, device_share: float = 1.0,
    cpu_decoder: str = "pillow",
) -> tuple[ImageFolderSource, ImageFolderSource, tuple[str, ...]]:
    """(train, val, class_names) for root/train and root/val.

    decode="fast" lets the train split hand JPEGs of at least 2 x image_size pixels per side to
    the crop transform undecoded (see the module docstring); val always decodes in load().
    decode="gpu" hands the JPEGs the device takes over as JpegFile, in both splits, and the
    others as "fast" does (ImageFolderSource.on_cpu gives the same split for the CPU path); of the
    training JPEGs, device_share (data.device_decode_share) of them, the rest as "fast" does.
    cpu_decoder (data.cpu_decoder, whose default "auto" build_loaders passes): who decodes the training JPEGs the
    fast path decodes at full scale.
    """
    if decode not in DECODE_PATHS:
        raise ConfigError(f"data.decode={decode!r}; use one of {', '.join(DECODE_PATHS)}")
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
    # A reduced-scale decode needs a crop of at least 2 x image_size on both sides.
    draft_min_side = 2 * image_size if decode in ("fast", "gpu") else None
    device = decode == "gpu"
    train = ImageFolderSource(root / "train", class_to_index, draft_min_side=draft_min_side, for_device=device,
                              device_share=device_share,
                              cpu_jpeg=draft_min_side is not None and cpu_jpeg_module.resolve(cpu_decoder))
    val = ImageFolderSource(root / "val", class_to_index, for_device=device)
    return train, val, tuple(classes)
