"""The real-data stage: `dlscale train` with the compiled GPU default (batch 512) on synthetic input and on JPEGs
fed four ways, each JPEG arrangement with `dlscale loader`'s figures beside it, in the order of their value:

  synthetic       random uint8 images through the same loop: the denominator of every ratio
  nvimgcodec      nvImageCodec's hardware decoder (the JPEG engines) with region decode, fed by a thread
  threads         the CPU path, 15 loader threads
  nvjpeg shared   the best device arrangement of the earlier runs: nvJPEG (torchvision) fed by a thread, the decode
                  shared with 15 loader threads (data.device_decode_share from this run's loader runs)
  processes       the CPU path, 15 worker processes: last, run where time is left

Each JPEG arrangement is its `dlscale loader` run (the pipeline alone: img/s, CPU ms and device ms per image, which
decoder and which of its backends decoded) and then its train run; NVML's JPEG-engine utilisation is sampled during
each (nvjpg.py). The nvImageCodec rows need the wheels stage's nvImageCodec: without it they are recorded as
unavailable with its reason. On a CPU (the rehearsal) the same commands run with tiny sizes: nvImageCodec's CPU
backend stands in for the hardware decoder and Pillow for nvJPEG.

`dlscale train`'s training graph is `dlscale bench`'s, so the first compiled run fills the campaign's inductor cache
and the others compile from it; evaluation adds a forward graph once. Goal (docs/benchmarks.md): each JPEG run at
0.90 of the synthetic run or more (0.95 the stretch).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_campaign.plan import COMPILE_S, CPU_RATE, RATES, STARTUP_S, WARM_COMPILE_S, Features, Run, Stage, run_limit_s

COMPILED = {"speed.compile": "true", "speed.compile_mode": "reduce-overhead", "speed.cudnn_benchmark": "true"}
"""The GPU default's compile settings, as `--set` pairs of `dlscale train`."""

LOADER_RATES = {"fast": 3000.0, "gpu": 4000.0, "cpu": 200.0}
"""img/s of the loader runs: the CPU path and the device path on the 16-core GPU machine, rounded down from what
they measured (docs/benchmarks.md, "What the campaign's estimates rest on"); any path on the 2-core CPU rehearsal."""

TRAIN_COMPILE_S = {"first": 58.0, "later": 34.0}
"""What a compiled train run adds to its training: the first after `dlscale bench` compiled its training graph
finds that graph in the cache and compiles the evaluation's forward graph anew; later runs find both. The first run
of an empty cache compiles the training graph too: COMPILE_S's reduce-overhead less WARM_COMPILE_S more."""

TRAIN_EPOCHS = 3
"""Epochs of each train run, the first not counted: at batch 512 an epoch of the 30,720 files is 60 steps, twice
the 30 batches 15 workers hold in flight."""


@dataclass(frozen=True)
class Arrangement:
    """One way of feeding JPEGs to the device: its decode path, loader workers and device side."""

    name: str
    settings: str
    decode: str
    """data.decode: "gpu" (the device decodes) or "fast" (the loader workers)."""
    workers_kind: str
    workers: int
    """Loader workers on the 16-core GPU machine (2 on the CPU rehearsal)."""
    decoder: str | None = None
    """data.decoder on a GPU (the device path); on the CPU rehearsal STAND_IN's."""
    feed: str | None = None
    """data.device_feed."""
    shared: bool = False
    """The decode shared with the loader workers at {share} (SHARE)."""


ARRANGEMENTS = (
    Arrangement("nvimgcodec", "nvImageCodec's hardware JPEG decoder, the training crop decoded as a region, fed by a "
                "thread; {workers} loader threads read the files", "gpu", "thread", 8, "nvimgcodec", "thread"),
    Arrangement("threads", "the CPU path: {workers} loader threads decode", "fast", "thread", 15),
    Arrangement("nvjpeg shared", "nvJPEG (torchvision) fed by a thread, the decode shared with {workers} loader "
                "threads (data.device_decode_share from this run's loader runs)", "gpu", "thread", 15, "nvjpeg",
                "thread", shared=True),
    Arrangement("processes", "the CPU path: {workers} worker processes decode", "fast", "process", 15),
)
"""The JPEG arrangements in order of value: the hardware decoder, the loader threads, the best device arrangement of
the earlier runs (the decode shared and fed by a thread: the best device-path ratio in the records, with the feed the
decode overlap probe chose there; docs/benchmarks.md), the worker processes where time is left."""

STAND_IN = {"nvimgcodec": "nvimgcodec", "nvjpeg": "pillow"}
"""The decoders of the CPU rehearsal: nvImageCodec's CPU backend (named: auto never takes it on the CPU device) and
Pillow for nvJPEG, which decodes on CUDA only."""

SHARE = ("nvjpeg shared", "threads")
"""The loader run that sets {share}, its device-ms per image against the other's img/s (device_share), with the
synthetic run's img/s as the model's."""


@dataclass(frozen=True)
class DataShape:
    """The stage's sizes: on a GPU 30,720 files (3 GiB), 60 steps of 512 per epoch; each loader run times 4x the
    batches its workers keep in flight, so that the prefetch queue cannot hide a loader slower than the model (an
    epoch or sweep not much longer than the queue can)."""

    unique: int
    train: int
    val: int
    batch: int
    loader_batch: int
    size: int


def data_shape(f: Features) -> DataShape:
    if f.device == "cpu":  # two steps an epoch: the code paths of the GPU's, no statistics
        return DataShape(unique=8, train=16, val=4, batch=8, loader_batch=8, size=32)
    return DataShape(unique=256, train=30720, val=64, batch=512, loader_batch=256, size=224)


def _workers(arrangement: Arrangement, f: Features) -> int:
    return arrangement.workers if f.device == "cuda" else 2


def _settings(arrangement: Arrangement, f: Features) -> str:
    said = arrangement.settings.replace("{workers}", str(_workers(arrangement, f)))
    if f.device != "cuda" and arrangement.decoder:
        said += f" (the CPU rehearsal: {STAND_IN[arrangement.decoder]} on the CPU device)"
    return said


def _decoder(arrangement: Arrangement, f: Features) -> str | None:
    if arrangement.decoder is None:
        return None
    return arrangement.decoder if f.device == "cuda" else STAND_IN[arrangement.decoder]


def train_argv(shape: DataShape, name: str, f: Features, sets: dict[str, str], *, synthetic: bool = False
               ) -> list[str]:
    """`dlscale train` of the GPU default's model and settings (tiny on a CPU), 3 epochs at a constant LR."""
    if f.device == "cpu":
        model = {"model.name": "resnet18", "model.width": "8", "precision": "fp32", "log_every": "1", "device": "cpu",
                 "speed.cudnn_benchmark": "false"}
    else:
        model = {"model.name": "resnet50", "precision": "amp_bf16", "log_every": "5", "device": "cuda",
                 "speed.channels_last": "true", "speed.fused_optimizer": "true", **COMPILED}
    every = {**model, "batch_size": str(shape.batch), "data.image_size": str(shape.size), "schedule.name": "constant",
             "schedule.epochs": str(TRAIN_EPOCHS), "schedule.warmup_epochs": "0", "checkpoint.enabled": "false",
             **sets}
    if synthetic:
        every.update({"data.name": "synthetic", "data.synthetic_size": str(shape.train),
                      "data.synthetic_val_size": str(shape.val), "data.synthetic_classes": "4"})
    data = [] if synthetic else ["--data", "{work}/jpegs"]
    flags = [arg for key, value in every.items() for arg in ("--set", f"{key}={value}")]
    return ["-m", "dlscale", "train", "--config", "imagenet:default", *data, *flags,
            "--output-dir", "{work}/runs", "--name", f"train-{name.replace(' ', '-')}-{{round}}"]


def train_estimates(f: Features, shape: DataShape) -> tuple[float, float]:
    """(the first train run's, a later one's) seconds: the first compiles from the campaign's empty cache."""
    if f.device == "cpu":
        later = STARTUP_S["cpu"] + TRAIN_EPOCHS * shape.train / CPU_RATE + 3.0
        return later, later
    later = STARTUP_S["cuda"] + TRAIN_EPOCHS * shape.train / RATES["compiled"] + TRAIN_COMPILE_S["later"]
    first = later + TRAIN_COMPILE_S["first"] - TRAIN_COMPILE_S["later"] + COMPILE_S["reduce-overhead"] - WARM_COMPILE_S
    return first, later


def loader_run(arrangement: Arrangement, f: Features, shape: DataShape) -> Run:
    workers, decoder = _workers(arrangement, f), _decoder(arrangement, f)
    # 4x the batches the workers hold in flight (2 each): what they made before the timer is at most a quarter
    batches = 8 * workers if f.device == "cuda" else 4
    slug = arrangement.name.replace(" ", "-")
    argv = ["-m", "dlscale", "loader", "--data", "{work}/jpegs", "--decode", arrangement.decode,
            *(["--decoder", decoder] if decoder else []), "--workers-kind", arrangement.workers_kind,
            "--workers", str(workers), "--batch-size", str(shape.loader_batch), "--batches", str(batches),
            "--image-size", str(shape.size), "--device", f.device, "--prewarm", "--out", f"{{work}}/loader-{slug}"]
    rate = LOADER_RATES[arrangement.decode] if f.device == "cuda" else LOADER_RATES["cpu"]
    estimate = STARTUP_S[f.device] + (batches + 2 * workers) * shape.loader_batch / rate
    alone = ("the device decoding every file (share 1): its device ms per image sets the share" if arrangement.shared
             else "the pipeline alone")
    return Run(f"loader {arrangement.name}", argv, "loader", estimate, output=f"{{work}}/loader-{slug}/summary.json",
               settings=f"{_settings(arrangement, f)}; {alone}, batch {shape.loader_batch}, to the device",
               sets=arrangement.name, nvjpg=True)


def train_run(arrangement: Arrangement, f: Features, shape: DataShape, estimate_s: float) -> Run:
    sets = {"data.decode": arrangement.decode, "data.workers_kind": arrangement.workers_kind,
            "data.num_workers": str(_workers(arrangement, f))}
    decoder = _decoder(arrangement, f)
    if decoder:
        sets["data.decoder"] = decoder
    if arrangement.feed:
        sets["data.device_feed"] = arrangement.feed
    if arrangement.shared:
        sets["data.device_decode_share"] = "{share}"
    run = Run(f"train JPEG {arrangement.name}", train_argv(shape, arrangement.name, f, sets), "train", estimate_s,
              output=f"{{work}}/runs/train-{arrangement.name.replace(' ', '-')}-{{round}}",
              settings=f"ImageFolder of JPEGs: {_settings(arrangement, f)}", nvjpg=True)
    if arrangement.decode == "gpu" and not arrangement.shared:
        # a device path slower than this cannot finish its epochs before it is stopped: not started at all
        run.min_rate = (f"{arrangement.name}_ips", TRAIN_EPOCHS * shape.train / run_limit_s(estimate_s))
    return run


def _unavailable(arrangement: Arrangement, f: Features) -> str | None:
    if arrangement.decode != "gpu":
        return None
    if not f.gpu_decode:
        return "this dlscale loader has no --decode gpu"
    if not f.loader_decoder:
        return "this dlscale loader has no --decoder"
    if f.device == "cuda" and arrangement.decoder == "nvjpeg" and not f.torchvision:
        return "torchvision (nvJPEG) is not installed here"
    return None


def decode_stage(f: Features) -> Stage:
    shape, device = data_shape(f), f.device
    tree = Run("JPEG tree", ["benchmarks/gpu_campaign/jpeg_tree.py", "{work}/jpegs", "--unique", str(shape.unique),
                             "--train", str(shape.train), "--val", str(shape.val)], "none",
               11.0 if device == "cuda" else 6.0, settings=f"{shape.train} train JPEGs of 500x375 (~100 KiB)")
    first, later = train_estimates(f, shape)
    synthetic = Run("train synthetic", train_argv(shape, "synthetic", f, {"data.num_workers": "15" if device == "cuda"
                                                                          else "2"}, synthetic=True),
                    "train", first, output="{work}/runs/train-synthetic-{round}", sets="synthetic_ips", nvjpg=True,
                    settings="random uint8 images, the same loop and model")
    runs = [synthetic]
    for arrangement in ARRANGEMENTS:
        pair = [loader_run(arrangement, f, shape), train_run(arrangement, f, shape, later)]
        for run in pair:
            run.unavailable = _unavailable(arrangement, f)
            # the CPU path's runs decode with simplejpeg where the wheels stage installed it, else with Pillow
            run.needs = "nvimgcodec" if arrangement.decoder == "nvimgcodec" else "simplejpeg"
        runs += pair
    what = "the compiled GPU default, batch 512" if device == "cuda" else "the tiny CPU model"
    return Stage("decode", f"Real data: JPEGs fed four ways against synthetic input, {what}", 10_000.0, runs,
                 setup=[tree], values={"share": "0.5"},
                 ratios=[(f"train JPEG {a.name}", "train synthetic") for a in ARRANGEMENTS],
                 note=f"`dlscale train`, {TRAIN_EPOCHS} epochs (the first not counted); each arrangement's loader run "
                      "just before its train run, in the order of value; NVML's JPEG-engine utilisation sampled "
                      "during each")


def device_share(workers_ips: float | None, device_ms_per_image: float | None, model_ips: float) -> float:
    """The share of the training JPEGs the device should decode (data.device_decode_share) so that the
    loader workers and the device finish a step's images together, from the loader's two runs.

    The workers decode (1 - s) T img/s at most at their measured rate c; the device's decode time adds to its
    step time: T / m + s T d <= 1 s (m: the model's img/s, d: device-seconds per image). Both bound at the
    best T: x = s T = (1 - c / m) / (1 / m + d), s = x / (c + x). 0.5 where a figure is missing; at least
    0.05 (the workers alone: the fast path's run says that)."""
    if not workers_ips or not device_ms_per_image or model_ips <= 0:
        return 0.5
    if workers_ips >= model_ips:
        return 0.05
    on_device = (1 - workers_ips / model_ips) / (1 / model_ips + device_ms_per_image / 1000)
    return min(max(on_device / (workers_ips + on_device), 0.05), 1.0)
