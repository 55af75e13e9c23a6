"""The data section of a run's configuration (data.*): which data set, how it is decoded and fed."""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlscale.config.bounds import IMAGE_SIDE_MAX, IMAGE_SIDE_MIN, SEED_MAX, SYNTHETIC_MAX, WORKERS_MAX
from dlscale.errors import ConfigError, shown

DATASET_NAMES = ("synthetic", "digits", "cifar10", "cifar100", "imagefolder")
ON_BAD_SAMPLE = ("skip", "error")
WORKERS_KINDS = ("thread", "process", "auto")
"""data.workers_kind: loader threads in the training process, DataLoader worker processes, or by the data set."""
DEVICE_FEEDS = ("inline", "thread", "process")
"""data.device_feed: where batches are brought to the device (dlscale.data.device.feeds)."""
DECODE_MODES = ("fast", "plain", "gpu", "auto")
DECODE_PATHS = ("fast", "plain", "gpu")
"""The paths a data set is built for: DECODE_MODES once "auto" is resolved for a device."""
DECODERS = ("auto", "nvimgcodec", "nvjpeg", "pillow")
"""data.decoder: the device decode path's decoders (dlscale.data.device.decoders), or auto."""
CPU_DECODERS = ("auto", "simplejpeg", "pillow")
"""data.cpu_decoder: who decodes the fast path's full-scale JPEGs (dlscale.data.cpu_jpeg), or auto."""
DECODE_ALIASES = {"cpu": "fast"}
"""Other names of decode modes: "cpu" is the fast CPU path (`dlscale loader --decode cpu|gpu`)."""
OWN_IMAGE_SIDE = {"imagefolder": 224}
"""The image side data.image_size None takes (data/loader.py's builders): 224 for imagefolder, 32 for the
others (CIFAR's own, and digits and synthetic at the same size)."""


def own_image_size(name: str) -> int:
    """The side in pixels of a data set's training images when data.image_size is unset."""
    return OWN_IMAGE_SIDE.get(name, 32)


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Which data set to read and how to feed it. Batch sizes live with the training config."""

    name: str = "synthetic"
    """One of synthetic, digits, cifar10, cifar100, imagefolder."""

    path: str | None = None
    """Data root. cifar10: a folder holding `cifar-10-batches-py/` (or that folder itself);
    cifar100: `cifar-100-python/` likewise; imagefolder: a folder with `train/<class>/*.JPEG`
    and `val/<class>/*.JPEG`. Unused by synthetic and digits."""

    download: bool = False
    """cifar10 and cifar100: when data.path holds no copy, download the python version there first, its MD5
    checked against the published one, as torchvision's download=True (`--download`; dlscale.data.download)."""

    image_size: int | None = None
    """Side in pixels of the square training image; None takes the data set's own:
    224 for imagefolder, 32 for cifar, digits and synthetic. CIFAR accepts only 32."""

    val_image_size: int | None = None
    """Side of the square validation crop; None means image_size."""

    val_resize: int | None = None
    """Validation images (imagefolder) are resized so the shorter side is this many pixels,
    then center-cropped to val_image_size. None means round(val_image_size * 256 / 224),
    the ratio of the ImageNet recipe (resize 256, crop 224)."""

    decode: str = "fast"
    """How training JPEGs become crops (imagefolder). "fast" (also called "cpu"): the loader workers
    decode; a JPEG whose shorter side is at least 2 x image_size is decoded at 1/2, 1/4 or 1/8 scale
    when the random crop is that many times image_size (Pillow's draft mode), and crops are resized
    as uint8 tensors by torch's antialiased bilinear kernel. "plain": every file decoded at full size
    by the workers, resized by Pillow. "gpu": the workers only read the files, parse their headers and
    draw the crops; the training process decodes each batch on the device (nvJPEG through
    torchvision, `pip install 'dlscale[gpu]'`) and crops, resizes, flips and normalises it there, train
    and validation; files nvJPEG cannot take (CMYK, grayscale, not JPEG, a decode error) go through
    the fast path. "auto": "gpu" on a CUDA device where torchvision's nvJPEG decoder is installed,
    else "fast". Every path draws the same crop boxes and flips from the same seeds
    (docs/profiling.md has the measured speeds)."""

    cpu_decoder: str = "auto"
    """decode=fast (and the files the device path leaves to the CPU): who decodes a training JPEG in YCbCr that is
    decoded at full scale (its shorter side under 2 x image_size). "simplejpeg": libjpeg-turbo through simplejpeg,
    into an array the crop is cut from, with no Pillow image in between; the same pixels as Pillow's, for less
    CPU time per image (docs/profiling.md, "The CPU's JPEG decoder"). "pillow": Pillow. "auto": simplejpeg where
    it imports, else Pillow. Reduced-scale decodes, other colour spaces, other formats and validation stay
    Pillow's."""

    decoder: str = "auto"
    """decode=gpu: which decoder decodes on the device. "nvimgcodec": NVIDIA's nvImageCodec (`pip install
    'dlscale[gpu]'`), on the GPU's hardware JPEG engines where there are some (A100, H100, H200), nvJPEG's CUDA
    decode elsewhere, only the training crop of each file; on the CPU device its CPU backend. "nvjpeg": nvJPEG
    through torchvision's decode_jpeg, whole images. "pillow": libjpeg on the CPU device (the tests' stand-in).
    "auto": nvimgcodec on CUDA where it imports, else nvjpeg; pillow on the CPU."""

    decode_chunk: int = 64
    """decode=gpu: images per nvJPEG call. Each decoded image holds 3 bytes per pixel on the device until
    its chunk is resized, and the chunk, padded to its largest image, 12 more per padded pixel as float
    while it is: a 500 x 375 JPEG, ImageNet's commonest size, holds 0.56 MB, so a chunk of 64 such images
    about 36 MB, 144 MB as float (docs/profiling.md: the weights, and how chunks group shapes)."""

    device_decode_share: float = 1.0
    """decode=gpu: the share of the training JPEGs the device decodes (0 to 1, more than 0); the loader
    workers decode the others on the fast path, in the same batches. The device's decode time is added to
    each step's, the workers' is not: where the device alone cannot keep up, a share below 1 runs the two
    side by side (docs/profiling.md, "Sharing the decode"). A file goes the same way in every epoch (by
    its index), so a run is reproducible."""

    device_feed: str = "inline"
    """Where the work of bringing a batch to the device runs (the copy; with decode=gpu the decode, crop and
    resize; the normalisation), on a CUDA stream of its own (dlscale.data.device). "inline": the training
    thread, one batch ahead, between two steps (while nvJPEG decodes, that thread waits and enqueues no step).
    "thread": a background thread of the training process, device_feed_depth batches ahead. "process": with
    decode=gpu, the training batches decoded in a process of its own (its own CUDA context) and received by a
    background thread; on an H100 a batch's decode in the training process returned only after the steps queued
    before it, on any stream, and in a process of its own only the decodes are queued (docs/profiling.md).
    Validation decodes in the training process. The batches are the same whatever the feed; a feed stays while a
    GPU run measures it winning."""

    device_feed_depth: int = 2
    """device_feed=thread or process: batches made ahead of the step (each holds a batch's images on the device)."""

    num_workers: int = 2
    """Loader workers per rank (threads or processes: workers_kind); 0 loads in the training process.
    Two suits a small CPU machine; on a GPU node use about cores / GPUs."""

    workers_kind: str = "auto"
    """What a loader worker is. "thread": a thread of the training process that decodes, crops and flips each
    sample straight into its row of the batch (dlscale.data.threads): no pickling, shared-memory copies or
    collation, which Pillow's decode and resize and torch's uint8 kernels allow since they release the GIL.
    "process": a DataLoader worker process, for transforms that hold the GIL. "auto": threads for imagefolder
    (JPEGs) where the model runs on a CUDA device, processes elsewhere: the loader threads took less CPU per
    image than the processes, but where the step's own operators run on the host (a CPU device) they and the
    threads contend for the GIL and the cores, and `dlscale train` ran faster with processes; the data sets held
    as arrays spend their time in Python (docs/profiling.md, "Threads or processes"). Both make the same batches
    from the same seed."""

    pin_memory: bool = True
    """Page-lock host batches so host-to-device copies can be asynchronous. Takes effect
    only when CUDA is available; ignored on the CPU."""

    persistent_workers: bool = True
    """Keep the worker processes alive between epochs (only with num_workers > 0)."""

    prefetch_factor: int = 2
    """Batches each worker loads ahead (only with num_workers > 0)."""

    on_bad_sample: str = "skip"
    """What to do with an image that cannot be decoded (imagefolder): "skip" substitutes the
    next index and reports the path in the batch; "error" stops at once with a DataError."""

    max_consecutive_bad: int = 50
    """With on_bad_sample="skip": this many unreadable files in a row raise a DataError
    (a broken mount rather than a few bad files). 50 is timm's limit."""

    synthetic_size: int = 2048
    """Training samples of the synthetic data set."""

    synthetic_val_size: int = 512
    """Validation samples of the synthetic data set."""

    synthetic_classes: int = 10
    """Classes of the synthetic data set (labels 0 .. synthetic_classes - 1)."""

    seed: int = 0
    """Seed of the synthetic images and labels. Shuffling and augmentation take the run's
    seed (the `seed` argument of build_loaders), so the data stay fixed while it varies."""

    drop_last: bool = True
    """Training epochs of whole global batches only: the shuffled tail that fills no batch is
    dropped. False: torch's DistributedSampler without drop_last, as HAL's loader: each rank gets
    ceil(N / world_size) samples (the order padded with its first indices) and the last, partial
    batch is kept, so an epoch has ceil(ceil(N / world_size) / batch_size) steps (64 x 208 on
    ImageNet: 97, not 96). Needs optim.accumulation_steps=1."""

    def __post_init__(self) -> None:
        if self.name not in DATASET_NAMES:
            raise ConfigError(f"data.name={shown(self.name)} is unknown; use one of {', '.join(DATASET_NAMES)}")
        if self.decode in DECODE_ALIASES:
            object.__setattr__(self, "decode", DECODE_ALIASES[self.decode])  # one name downstream
        if self.decode not in DECODE_MODES:
            raise ConfigError(f"data.decode={shown(self.decode)}; use one of {', '.join(DECODE_MODES)} "
                              f"(or {', '.join(DECODE_ALIASES)})")
        share = self.device_decode_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise ConfigError(f"data.device_decode_share={shown(share)}; use a share above 0 and at most 1 (0.6: the "
                              "device decodes 60% of the training JPEGs, the loader workers the rest)")
        if share != 1 and self.decode in ("fast", "plain"):
            raise ConfigError(f"data.device_decode_share={share} splits the device decode path's work; with "
                              f"data.decode={self.decode} the loader workers decode every file: set data.decode=gpu "
                              "(or auto), or leave the share at 1")
        if self.device_feed not in DEVICE_FEEDS:
            raise ConfigError(f"data.device_feed={shown(self.device_feed)}; use one of {', '.join(DEVICE_FEEDS)}")
        if self.device_feed == "process" and self.decode in ("fast", "plain"):
            raise ConfigError(f"data.device_feed=process decodes on the device in a process of its own; with "
                              f"data.decode={self.decode} the loader workers decode every file: set data.decode=gpu "
                              "(or auto), or use data.device_feed=thread")
        if self.cpu_decoder not in CPU_DECODERS:
            raise ConfigError(f"data.cpu_decoder={shown(self.cpu_decoder)}; use one of {', '.join(CPU_DECODERS)}")
        if self.decoder not in DECODERS:
            raise ConfigError(f"data.decoder={shown(self.decoder)}; use one of {', '.join(DECODERS)}")
        if self.workers_kind not in WORKERS_KINDS:
            raise ConfigError(f"data.workers_kind={shown(self.workers_kind)}; use one of {', '.join(WORKERS_KINDS)}")
        if self.on_bad_sample not in ON_BAD_SAMPLE:
            raise ConfigError(f"data.on_bad_sample={shown(self.on_bad_sample)}; use 'skip' or 'error'")
        for key in ("image_size", "val_image_size", "val_resize"):
            value = getattr(self, key)
            if value is not None and not IMAGE_SIDE_MIN <= value <= IMAGE_SIDE_MAX:
                raise ConfigError(f"data.{key}={value}; use {IMAGE_SIDE_MIN} to {IMAGE_SIDE_MAX:,} pixels (a ResNet's "
                                  "stride-2 stages need 8) or leave it unset")
        crop = self.val_image_size or self.image_size
        if self.val_resize is not None and crop is not None and self.val_resize < crop:
            raise ConfigError(f"data.val_resize={self.val_resize} is below the {crop}-pixel validation crop taken from "
                              f"it; use at least {crop} (the default is the crop x 256 / 224)")
        if isinstance(self.device_feed_depth, bool) or not isinstance(self.device_feed_depth, int) \
                or not 1 <= self.device_feed_depth <= 64:
            raise ConfigError(f"data.device_feed_depth={shown(self.device_feed_depth)}; use 1 to 64 batches made "
                              "ahead")
        for key, most in (("prefetch_factor", 1024), ("max_consecutive_bad", SYNTHETIC_MAX), ("decode_chunk", 65_536),
                          ("synthetic_size", SYNTHETIC_MAX), ("synthetic_val_size", SYNTHETIC_MAX),
                          ("synthetic_classes", 10**6)):
            if not 1 <= getattr(self, key) <= most:
                raise ConfigError(f"data.{key}={getattr(self, key)}; use a number from 1 to {most:,}")
        if not 0 <= self.num_workers <= WORKERS_MAX:
            raise ConfigError(f"data.num_workers={self.num_workers}; use 0 to {WORKERS_MAX:,} (no node has more "
                              "cores)")
        if not 0 <= self.seed <= SEED_MAX:
            raise ConfigError(f"data.seed={self.seed}; use 0 to {SEED_MAX:,} (numpy's generators take 32-bit seeds)")
        if self.download and self.name not in ("cifar10", "cifar100"):
            raise ConfigError(f"data.download fetches CIFAR-10 and CIFAR-100 only, not data.name={self.name}; drop "
                              "--download (`dlscale data make-jpegs` writes a JPEG tree to try imagefolder)")

    def workers_kind_on(self, device_type: str | None) -> str:
        """workers_kind resolved for a model on `device_type` (workers_kind_for)."""
        return workers_kind_for(self.name, self.workers_kind, device_type)

    @property
    def worker_threads(self) -> bool:
        """Whether the loader workers are threads (workers_kind as resolved; "auto" unresolved: processes, as on a
        CPU device)."""
        return self.workers_kind_on(None) == "thread"

    def on_path(self, decode: str) -> DataConfig:
        """This configuration on the decode path `decode` (data.decode resolved for a device: "auto" taken
        as "gpu" or "fast"); device_decode_share and the process feed stay only on the device path (elsewhere
        the thread feed brings the batches over)."""
        on_device = decode == "gpu"
        feed = "thread" if self.device_feed == "process" and not on_device else self.device_feed
        return replace(self, decode=decode, device_decode_share=self.device_decode_share if on_device else 1.0,
                       device_feed=feed)


def workers_kind_for(name: str | None, kind: str, device_type: str | None) -> str:
    """data.workers_kind `kind` of data set `name` resolved for a model on `device_type` (None: not known, as on the
    CPU): "thread" or "process"; "auto" takes threads for imagefolder on CUDA, processes elsewhere."""
    if kind != "auto":
        return kind
    return "thread" if name == "imagefolder" and device_type == "cuda" else "process"
