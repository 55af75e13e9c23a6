"""The real-data stage of the compiled default: JPEGs decoded on the GPU (nvJPEG) and on the CPU against
synthetic input, and the loader's rate and CPU time per image on each path.

`dlscale train` on the 30,720-file tree with the GPU default's settings (compiled, reduce-overhead): its
training graph is the bench's, so it compiles from the campaign's inductor cache; evaluation adds a
forward graph once. Goal (docs/benchmarks.md): JPEG with GPU decoding >= 0.90 of the synthetic rate, at
most a third of the CPU path's CPU time per image.
"""

from __future__ import annotations

from gpu_campaign.plan import (
    CPU_RATE,
    LOADER_RATE,
    RATES,
    STARTUP_S,
    TRAIN_EPOCHS,
    Features,
    Run,
    Stage,
    data_shape,
    run_limit_s,
    train_argv,
)

COMPILED = {"speed.compile": "true", "speed.compile_mode": "reduce-overhead", "speed.cudnn_benchmark": "true"}
"""The GPU default's compile settings, as `--set` pairs of `dlscale train`."""

LOADER_RATES = {"fast": 3000.0, "gpu": 4000.0}
"""img/s of the campaign's two loader runs on the 16-core GPU machine, rounded down from what they measured
(docs/benchmarks.md, "What the campaign's estimates rest on")."""

TRAIN_COMPILE_S = {"first": 58.0, "later": 34.0}
"""What a compiled train run adds to its training: the first finds the bench's training graph in the cache and
compiles the evaluation's forward graph anew; later runs find both."""

OVERLAP_S = {"cuda": 60.0, "cpu": 8.0}
"""benchmarks/decode_overlap.py: the probe, the calls and 2 rounds of 5 arrangements of 13 eager steps (on a GPU:
about 12 s to start, 10 s of probes, 2-3 s per arrangement and round with the loader's restart)."""


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


ARRANGED = {"data.device_feed": "{device_feed}", "speed.step_stream": "{step_stream}"}
"""The device path's train runs take the arrangement the overlap probe found fastest (read_overlap fills these)."""
UNARRANGED = {"device_feed": "inline", "step_stream": "false"}
"""The placeholders' values where the probe did not run: the defaults."""


def _train(shape, name: str, *, synthetic: bool, decode: str | None, device: str, share: str | None = None
           ) -> list[str]:
    argv = train_argv(shape, name, synthetic=synthetic)
    sets = dict(COMPILED) if device == "cuda" else {}
    if decode is not None:
        sets["data.decode"] = decode
    if decode == "gpu":
        sets.update(ARRANGED)
    if share is not None:
        sets["data.device_decode_share"] = share
    for key, value in sets.items():
        argv[argv.index("--output-dir"):argv.index("--output-dir")] = ["--set", f"{key}={value}"]
    return argv


def decode_stage(f: Features) -> Stage:
    shape, device = data_shape(f), f.device
    batch = 256 if device == "cuda" else int(shape.train_sets["batch_size"])  # the loader's; training takes 512
    size = shape.train_sets["data.image_size"]
    # the CPU path at the most workers (its rate sets the cores needed); the GPU path's workers only read files
    workers = {"fast": [max(shape.workers)] if device == "cuda" else shape.workers,
               "gpu": [min(shape.workers)] if device == "cuda" else shape.workers}
    tree = Run("JPEG tree", ["benchmarks/gpu_campaign/jpeg_tree.py", "{work}/jpegs", "--unique", str(shape.unique),
                             "--train", str(shape.train), "--val", str(shape.val)], "none",
               10.0 if device == "cuda" else 6.0, settings=f"{shape.train} train JPEGs of 500x375 (~100 KiB)")
    loaders = []
    for path in ("fast", "gpu"):
        # 4x the batches the workers hold in flight (2 each), so that what they made before the timer is a quarter
        batches = 8 * max(workers[path]) if device == "cuda" else shape.loader_batches
        argv = ["-m", "dlscale", "loader", "--data", "{work}/jpegs", "--decode", path, "--workers-kind", "thread",
                "--workers", ",".join(map(str, workers[path])), "--batch-size", str(batch), "--batches", str(batches),
                "--image-size", size, "--device", device, "--prewarm", "--out", f"{{work}}/loader-{path}"]
        rate = LOADER_RATES[path] if device == "cuda" else LOADER_RATE[device] * (2.0 if path == "gpu" else 1.0)
        estimate = STARTUP_S[device] + len(workers[path]) * (batches + 2 * max(workers[path])) * batch / rate
        run = Run(f"loader {path}", argv, "loader", estimate, output=f"{{work}}/loader-{path}/summary.json",
                  settings=f"decode {path}, workers {','.join(map(str, workers[path]))}, batch {batch}, {size} px",
                  sets="workers" if path == "fast" else "gpu_workers")
        if path == "gpu" and not (f.gpu_decode and device == "cuda"):
            run.unavailable = "GPU only" if device != "cuda" else "this dlscale loader has no --decode gpu"
        loaders.append(run)
    # why the device path's steps do not overlap their decode, and the arrangement the train runs take
    overlap = Run("decode overlap", ["benchmarks/decode_overlap.py", "--data", "{work}/jpegs", "--workers",
                                     "{gpu_workers}" if device == "cuda" else str(min(shape.workers)),
                                     "--json", "{work}/overlap.json"]
                  + (["--rounds", "2"] if device == "cuda" else ["--steps", "2", "--warmup", "1", "--rounds", "2"]),
                  "overlap", OVERLAP_S[device], output="{work}/overlap.json",
                  settings="the decode beside a busy default stream and a busy stream of its own; eager steps fed "
                           "inline, on a stream of their own, by a decoding thread, both")
    if device == "cuda":  # on the CPU it runs with the Pillow decoder
        overlap.unavailable = loaders[1].unavailable
    loaders.append(overlap)
    epoch_s = shape.train / (RATES["compiled"] if device == "cuda" else CPU_RATE)
    later = STARTUP_S[device] + TRAIN_EPOCHS * epoch_s + (TRAIN_COMPILE_S["later"] if device == "cuda" else 3.0)
    first = later + (TRAIN_COMPILE_S["first"] - TRAIN_COMPILE_S["later"] if device == "cuda" else 0.0)
    synthetic = Run("train synthetic", _train(shape, "train-synthetic", synthetic=True, decode=None, device=device),
                    "train", first, output="{work}/runs/train-synthetic-{round}",
                    settings="random uint8 images, the same loader and model")
    gpu_argv = _train(shape, "train-gpu", synthetic=False, decode="gpu", device=device)
    gpu_argv[gpu_argv.index("data.num_workers={workers}")] = "data.num_workers={gpu_workers}"
    jpeg_gpu = Run("train JPEG gpu", gpu_argv, "train", later, output="{work}/runs/train-gpu-{round}",
                   settings="ImageFolder of JPEGs, decoded on the GPU (nvJPEG)",
                   unavailable=loaders[1].unavailable)
    # a device path slower than this cannot finish its epochs before it is stopped: not started at all
    jpeg_gpu.min_rate = ("device_loader_ips", TRAIN_EPOCHS * shape.train / run_limit_s(later))
    # the workers decode what the device does not, at the fast path's most workers: {share} from the loaders
    jpeg_shared = Run("train JPEG shared", _train(shape, "train-shared", synthetic=False, decode="gpu",
                                                  device=device, share="{share}"),
                      "train", later, output="{work}/runs/train-shared-{round}",
                      settings="ImageFolder of JPEGs, a share decoded on the GPU (data.device_decode_share from the "
                               "loader runs: decode.device_share), the others by the workers on the fast path",
                      unavailable=loaders[1].unavailable)
    jpeg_fast = Run("train JPEG fast", _train(shape, "train-fast", synthetic=False, decode="fast", device=device),
                    "train", later, output="{work}/runs/train-fast-{round}",
                    settings="ImageFolder of JPEGs, the CPU fast path")
    what = "the compiled GPU default" if device == "cuda" else "the tiny CPU model"
    return Stage("decode", f"Real data: JPEGs decoded on the GPU and on the CPU against synthetic input, {what}",
                 10_000.0, [synthetic, jpeg_gpu, jpeg_shared, jpeg_fast], setup=[tree, *loaders],
                 ratios=[("train JPEG gpu", "train synthetic"), ("train JPEG shared", "train synthetic"),
                         ("train JPEG fast", "train synthetic")], values=dict(UNARRANGED),
                 note="`dlscale train`, 3 epochs (the first not counted), data.num_workers the loader's fastest "
                      "setting per path; the GPU decode's loader workers only read files and draw the crops; its "
                      "train runs take data.device_feed and speed.step_stream from the "
                      "decode overlap probe")
