"""The decode paths as a user meets them: `dlscale loader --decode cpu|gpu` prints img/s, CPU-ms per image
and device-ms per batch; `dlscale train` records the path that ran and skips bad files alike on each;
`decode: gpu` without torchvision is one line; the input-bound warning and `dlscale explain` name the path
and the cores per device it needs.

No GPU here: the device path runs with its CPU decoder (Pillow) on the CPU device, which
`resolve_decode` allows once NvjpegDecoder.unavailable is told it can run (the `device_path` fixture)."""

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dlscale import cli
from dlscale.data import cpu_jpeg
from dlscale.data.device.decoders import nvjpeg
from dlscale.explain.context import Context
from dlscale.explain.measured import input_bound
from dlscale.metrics.input_bound import PROCESS_TAX, input_bound_warning
from dlscale.rundir import Run


@pytest.fixture
def device_path(monkeypatch):
    """data.decode=gpu on the CPU device: the device path's code with the Pillow decoder."""
    monkeypatch.setattr(nvjpeg.NvjpegDecoder, "unavailable", staticmethod(lambda device: None))


@pytest.fixture
def tree(tmp_path) -> Path:
    """2 classes x 8 training JPEGs (one truncated, one CMYK) and 2 x 2 validation JPEGs of 96 x 72."""
    rng = np.random.default_rng(0)
    root = tmp_path / "data"
    for split, count in (("train", 8), ("val", 2)):
        for label in ("a", "b"):
            (root / split / label).mkdir(parents=True)
            for i in range(count):
                image = Image.fromarray(rng.integers(0, 256, (72, 96, 3), dtype=np.uint8))
                buffer = io.BytesIO()
                image.convert("CMYK" if (label, i) == ("b", 3) else "RGB").save(buffer, "JPEG", quality=90)
                (root / split / label / f"{i}.JPEG").write_bytes(buffer.getvalue())
    truncated = root / "train" / "a" / "5.JPEG"
    truncated.write_bytes(truncated.read_bytes()[:truncated.stat().st_size // 2])
    return root


def _loader(tree, out, decode, capsys) -> tuple[dict, str]:
    code = cli.main(["loader", "--data", str(tree), "--workers", "0,2", "--batch-size", "4", "--batches", "4",
                     "--warmup-batches", "0", "--image-size", "32", "--device", "cpu", "--decode", decode,
                     "--out", str(out)])
    assert code == 0
    return json.loads((out / "summary.json").read_text()), capsys.readouterr().out


def test_loader_prints_cpu_time_per_image_and_device_time_per_batch_on_each_path(tree, tmp_path, capsys,
                                                                                 device_path):
    for decode, path in (("cpu", "fast"), ("gpu", "gpu")):
        summary, printed = _loader(tree, tmp_path / decode, decode, capsys)
        assert summary["decode"] == path and summary["decode_asked"] == decode
        header = next(line for line in printed.splitlines() if line.split()[:3] == ["workers", "kind", "img/s"])
        assert "CPU ms/img" in header and "dev ms/batch" in header
        assert f"decode {'gpu (pillow on cpu)' if path == 'gpu' else 'fast'}," in printed
        assert "CPU-ms per image (main process and workers)" in printed and "device-ms per batch" in printed
        for row in summary["settings"]:
            assert row["decode"] == path and row["images"] == 16 and row["skipped"] == 1
            assert row["cpu_ms_per_image"] == pytest.approx(1000 * row["cpu_s"] / row["images"])
            assert row["device_ms_per_batch"] > 0
            if path == "gpu":  # 15 files decoded by the device; the CMYK one by a worker, the truncated one skipped
                assert (row["decoded_on_device"], row["decoded_by_workers"], row["refused_by_device"]) == (15, 1, 0)
            else:
                assert "decoded_on_device" not in row


def test_loader_with_a_device_share_says_so_and_counts_the_files_each_side_decoded(tree, tmp_path, capsys,
                                                                                  device_path):
    code = cli.main(["loader", "--data", str(tree), "--workers", "0", "--batch-size", "4", "--batches", "4",
                     "--warmup-batches", "0", "--image-size", "32", "--device", "cpu", "--decode", "gpu",
                     "--device-share", "0.5", "--out", str(tmp_path / "shared")])
    assert code == 0
    summary, printed = json.loads((tmp_path / "shared" / "summary.json").read_text()), capsys.readouterr().out
    assert summary["device_decode_share"] == 0.5
    assert "decode gpu (pillow on cpu, 50% of the training JPEGs, the workers the rest)," in printed
    # The odd indices of a/0-7, b/0-7 go to the device, but for a/5 (truncated: skipped, a/6 in its place, a
    # worker's) and b/3 (index 11, CMYK): 6 files; the workers decode the other 10 rows.
    (row,) = summary["settings"]
    assert (row["decoded_on_device"], row["decoded_by_workers"], row["refused_by_device"]) == (6, 10, 0)
    assert row["images"] == 16 and row["skipped"] == 1
    assert cli.main(["loader", "--data", str(tree), "--device-share", "0", "--out", str(tmp_path / "zero")]) == 2
    assert "argument --device-share: '0': give a number above 0 and at most 1" in capsys.readouterr().err


def test_loader_names_the_decoder_and_counts_what_each_of_its_backends_decoded(tree, tmp_path, capsys):
    """--decoder nvimgcodec on the CPU device: nvImageCodec's CPU backend decodes what the Pillow decoder does (the
    CMYK file goes to a worker, the truncated one is skipped), and the row says which backend decoded them."""
    pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec's wheel (nvidia-nvimgcodec-cu13) is not installed")
    code = cli.main(["loader", "--data", str(tree), "--workers", "0", "--batch-size", "4", "--batches", "4",
                     "--warmup-batches", "0", "--image-size", "32", "--device", "cpu", "--decode", "gpu",
                     "--decoder", "nvimgcodec", "--out", str(tmp_path / "nvimgcodec")])
    assert code == 0
    summary = json.loads((tmp_path / "nvimgcodec" / "summary.json").read_text())
    assert summary["decoder"] == "nvimgcodec" and "decode gpu (nvimgcodec on cpu)," in capsys.readouterr().out
    (row,) = summary["settings"]
    assert (row["decoder"], row["decoded_on_device"], row["decoded_by_workers"]) == ("nvimgcodec", 15, 1)
    assert row["decoded_by_backend"] == {"cpu_only": 15}


def _no_torchvision(monkeypatch):
    def missing():
        raise ModuleNotFoundError("No module named 'torchvision'")

    monkeypatch.setattr(nvjpeg, "_torchvision_io", missing)


def test_decode_gpu_without_torchvision_is_one_line_in_loader_and_train(tree, tmp_path, capsys, monkeypatch):
    _no_torchvision(monkeypatch)
    assert cli.main(["loader", "--data", str(tree), "--decode", "gpu", "--device", "cpu",
                     "--out", str(tmp_path / "l")]) == 2
    assert cli.main(["train", "--config", "imagenet:default", "--data", str(tree), "--set", "data.decode=gpu",
                     "--set", "device=cpu", "--output-dir", str(tmp_path / "runs")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2, lines
    for line in lines:  # each decoder auto may take, and why it cannot
        assert line.split(": error: ")[1].startswith("data.decode=gpu: nvImageCodec ")
        assert "; torchvision is not installed: pip install 'dlscale[gpu]'" in line


SMALL = ["--set", "model.name=resnet18", "--set", "model.width=8", "--set", "data.image_size=32",
         "--set", "batch_size=4", "--set", "schedule.epochs=1", "--set", "schedule.warmup_epochs=0",
         "--set", "precision=fp32", "--set", "data.num_workers=2", "--set", "log_every=1",
         "--set", "device=cpu", "--set", "checkpoint.enabled=false"]


def test_train_records_the_decode_path_and_skips_alike(tree, tmp_path, device_path):
    summaries = {}
    for decode in ("fast", "gpu"):
        assert cli.main(["train", "--config", "imagenet:default", "--data", str(tree), *SMALL,
                         "--set", f"data.decode={decode}", "--output-dir", str(tmp_path / "runs"),
                         "--name", decode]) == 0
        summaries[decode] = json.loads((tmp_path / "runs" / decode / "summary.json").read_text())
        log = (tmp_path / "runs" / decode / "metrics.jsonl").read_text().splitlines()
        windows = [record for record in map(json.loads, log) if record["record"] == "train"]
        # /proc counts CPU time in 10 ms ticks: a short window can read none, the run as a whole cannot
        assert windows and all(w["host_cpu_ms_per_image"] >= 0 and w["host_cpu_cores"] >= 0 for w in windows)
        assert sum(w["host_cpu_ms_per_image"] for w in windows) > 0
    assert summaries["fast"]["decode"] == "fast" and summaries["gpu"]["decode"] == "gpu"
    # data.cpu_decoder's auto as it resolved here, on both paths (the device path's CPU files too)
    assert summaries["fast"]["cpu_decoder"] == summaries["gpu"]["cpu_decoder"] == cpu_jpeg.name("auto")
    for key in ("steps", "skipped_samples"):
        assert summaries["fast"][key] == summaries["gpu"][key], key
    assert summaries["gpu"]["skipped_samples"] == 1 and summaries["gpu"]["history"][0]["val_count"] == 4


def test_the_input_bound_warning_names_the_path_and_the_cores_it_needs():
    # 256 images per 100 ms step of which 40 ms wait: the model computes 256 / 0.06 = 4,267 img/s; at
    # 3.2 CPU-ms per image that takes 4,267 x 0.0032 = 13.7, so 14 cores.
    message = input_bound_warning(0.04, 0.1, workers=12, decode="fast", cores=16, batch_size=256,
                                  cpu_s_per_image=0.0032, device_type="cuda")
    assert "decode path fast (JPEGs decoded by the loader workers" in message
    assert "takes 3.20 CPU-ms per image in the training process and its workers: about 14 cores per rank" in message
    assert "data.decode=gpu" in message
    on_device = input_bound_warning(0.04, 0.1, workers=4, decode="gpu", cores=16, batch_size=256,
                                    cpu_s_per_image=0.0005, device_type="cuda")
    assert "decode path gpu (JPEGs decoded on the device" in on_device and ": about 3 cores per rank" in on_device
    assert "data.decode=gpu" not in on_device
    # the decode that waited for every stream's queued work on an H100: the process of its own comes first, until on
    assert "try the device decode in a process of its own (data.device_feed=process" in on_device
    assert "device_feed" not in input_bound_warning(0.04, 0.1, workers=4, decode="gpu", cores=16,
                                                              device_type="cuda", decode_process=True)
    assert "data.decode=gpu" not in input_bound_warning(0.04, 0.1, workers=2, decode="fast", cores=8)  # CPU run


def _starved(decode: str, share: float | None = None, process: bool = False, kind: str | None = None) -> Run:
    windows = [{"record": "train", "epoch": 0, "step": step, "throughput_img_per_s": 3600.0,
                "compute_img_per_s": 5600.0, "host_cpu_ms_per_image": 3.2 if decode == "fast" else 0.8,
                "window_s": 5.0} for step in range(1, 6)]
    summary = {"kind": "train", "model": "resnet50", "world_size": 1, "device": "cuda", "batch_size": 256,
               "total_ips": 3600.0, "decode": decode}
    config = {"data": {"name": "imagefolder", "num_workers": 15, "decode": "auto",
                       **({"device_decode_share": share} if share else {}),
                       **({"device_feed": "process"} if process else {}),
                       **({"workers_kind": kind} if kind else {})}}
    return Run(Path("r"), summary, config, {"cpu_count": 16}, tuple(windows))


def test_explain_names_the_decode_path_and_the_cores_per_device_it_needs():
    (found,) = input_bound(Context(_starved("fast")))
    # 3.2 CPU-ms per image at the model's 5,600 img/s: 17.9, so 18 cores per device
    assert "decode path fast (JPEGs decoded by the loader workers" in found.evidence
    assert "3.20 CPU-ms per image" in found.evidence and "about 18 cores per device on this path" in found.evidence
    assert "--set data.decode=gpu" in found.change
    (found,) = input_bound(Context(_starved("gpu")))
    assert "decode path gpu" in found.evidence and "about 5 cores per device" in found.evidence  # 0.8 x 5.6
    assert "data.decode=gpu" not in found.change
    # the device decodes every file and the workers only read: the change offers them a share of the decode
    assert "--set data.device_decode_share=0.5 (the device decodes half the training JPEGs" in found.change
    (found,) = input_bound(Context(_starved("gpu", share=0.6)))
    assert "decode path gpu (JPEGs decoded on the device, the loader workers only reading files; 60% of the " \
           "training JPEGs on the device, the workers the rest)" in found.evidence
    assert "device_decode_share" not in found.change  # a share already: which way helps is for a measurement
    (found,) = input_bound(Context(_starved("gpu")))
    assert "--set data.device_feed=process (on an H100 the device path's decode in the training process " \
        "returned only after the work queued before it on every stream" in found.change
    (found,) = input_bound(Context(_starved("gpu", process=True)))
    assert "decoded in a process of its own)" in found.evidence and "device_feed" not in found.change


def test_the_warning_and_explain_name_the_kind_of_workers_and_offer_threads_for_the_processes_tax():
    kwargs = {"decode": "fast", "cores": 16, "batch_size": 256, "cpu_s_per_image": 0.003, "device_type": "cuda"}
    processes = input_bound_warning(0.04, 0.1, workers=4, workers_kind="process", **kwargs)
    assert "with 4 loader worker processes, keeping up" in processes
    assert "loader threads instead of worker processes (data.workers_kind=thread: the same batches at about " \
           f"1/{PROCESS_TAX:.2f} of the CPU time per image" in processes  # the measured tax, as it is re-measured
    threads = input_bound_warning(0.04, 0.1, workers=1, workers_kind="thread", **kwargs)
    assert "with 1 loader worker thread, keeping up" in threads and "workers_kind" not in threads
    on_device = input_bound_warning(0.04, 0.1, workers=4, workers_kind="thread", **{**kwargs, "decode": "gpu"})
    assert "more loader workers" not in on_device  # on the device path they only read files
    # a run recorded before data.workers_kind had worker processes; "auto" took threads for a JPEG tree
    (found,) = input_bound(Context(_starved("fast")))
    assert "15 loader worker processes per rank deliver" in found.evidence
    assert "--set data.workers_kind=thread (loader threads make the same batches" in found.change
    (found,) = input_bound(Context(_starved("fast", kind="auto")))
    assert "15 loader worker threads per rank deliver" in found.evidence and "workers_kind" not in found.change
    (found,) = input_bound(Context(_starved("gpu")))
    assert "data.num_workers" not in found.change and "workers_kind" not in found.change
    # on a CPU device the step's operators and loader threads contend (dlscale train ran faster with processes):
    # threads are not offered there, and auto took processes
    on_cpu = input_bound_warning(0.04, 0.1, workers=4, workers_kind="process", **{**kwargs, "device_type": "cpu"})
    assert "worker processes, keeping up" in on_cpu and "workers_kind" not in on_cpu
    cpu_run = _starved("fast", kind="auto")
    cpu_run.summary["device"] = "cpu"
    (found,) = input_bound(Context(cpu_run))
    assert "15 loader worker processes per rank deliver" in found.evidence and "workers_kind" not in found.change
