"""The --raport-file against NVIDIA's dllogger and ConvNets, and the readers DeepLearningExamples ships.

The readers below are written the way DeepLearningExamples' scripts read their files:
PyTorch/Translation/Transformer/scripts/draw_summary.py (every LOG line's `elapsedtime`, the
PARAMETER data, the first `[]` summary) and PyTorch/Recommendation/NCF/qa/generate_tables.py
(`get_training_data`: the last line's data and `batch_size` of every PARAMETER record). The
metadata expected is typed from ConvNets' image_classification/logger.py (docs/references.md#dllogger-format).
"""

import json
from collections import defaultdict
from datetime import datetime

import pytest

from dlscale.config import load_config
from dlscale.data import DatasetInfo
from dlscale.distributed import DistEnv
from dlscale.metrics.records import Records
from dlscale.metrics.timing import IterationTimes
from dlscale.rundir import RunDir
from dlscale.train.plan import make_plan
from dlscale.train.raport import convnets_parameters

# ConvNets' register_metric calls, in order: Metrics.LOSS/IPS/TIME/ACC_METADATA; train.lr has none.
LOSS, IPS = {"unit": None, "format": ":.5f"}, {"unit": "images/s", "format": ":.2f"}
TIME, ACC = {"unit": "s", "format": ":.5f"}, {"unit": "%", "format": ":.2f"}
CONVNETS_METADATA = [
    ("train.loss", LOSS), ("train.compute_ips", IPS), ("train.total_ips", IPS), ("train.data_time", TIME),
    ("train.compute_time", TIME), ("train.lr", {}), ("train.grad_scale", LOSS),
    ("val.top1", ACC), ("val.top5", ACC), ("val.loss", LOSS), ("val.compute_ips", IPS), ("val.total_ips", IPS),
    ("val.data_time", TIME), ("val.compute_latency", TIME), ("val.compute_latency_at100", TIME),
    ("val.compute_latency_at99", TIME), ("val.compute_latency_at95", TIME),
]

TRAIN = {"epoch": 0, "step": 20, "iteration": 20, "train_loss": 2.5, "lr": 0.1, "throughput_img_per_s": 400.0,
         "compute_img_per_s": 500.0, "data_time_ms": 50.0, "step_time_ms": 250.0, "grad_scale": 65536.0}
EPOCH = {"epoch": 0, "step": 40, "val_top1_pct": 12.5, "val_top5_pct": 50.0, "val_loss": 2.25, "elapsed_s": 9.0,
         "throughput_img_per_s": 380.0, "lr": 0.1, "val_total_img_per_s": 900.0, "val_compute_img_per_s": 1200.0,
         "val_data_time_ms": 4.0, "val_compute_latency_ms": 20.0, "val_compute_latency_at100_ms": 30.0,
         "val_compute_latency_at99_ms": 29.0, "val_compute_latency_at95_ms": 25.0}


@pytest.fixture
def raport(tmp_path):
    path = tmp_path / "raport.json"
    records = Records(RunDir.create(tmp_path, "run"), enabled=True, raport_file=path, tensorboard=False)
    records.parameters({"batch_size": 208, "lr": 5.2, "epochs": 90, "arch": "resnet50", "preset": "hal"})
    records.train(TRAIN)
    records.epoch(EPOCH)
    second = {**EPOCH, "epoch": 1, "val_total_img_per_s": 1100.0, "val_compute_img_per_s": 1400.0,
              "val_compute_latency_ms": 10.0}
    records.epoch(second)
    records.summary({"total_ips": 390.0, "best_top1_pct": 12.5, "best_top5_pct": 50.0, "history": [EPOCH, second]})
    records.close()
    return path


def draw_summary_read(path):
    """draw_summary.py's parsing loop."""
    jlog = defaultdict(list)
    jlog["parameters"] = {}
    with open(path) as f:
        for line in f.readlines():
            line_dict = json.loads(line[5:])
            if line_dict["type"] == "LOG":
                if line_dict["step"] == "PARAMETER":
                    jlog["parameters"].update(line_dict["data"])
                elif line_dict["step"] == [] and "training_summary" not in jlog:
                    jlog["training_summary"] = line_dict["data"]
                else:
                    for k, v in line_dict["data"].items():
                        jlog[k].append((line_dict["step"], line_dict["elapsedtime"], v))
    return jlog


def get_training_data(filename):
    """NCF's qa/generate_tables.py get_training_data."""
    with open(filename) as opened:
        line = opened.readlines()[-1]
    data = json.loads(line[len("DLLL "):])["data"]
    with open(filename) as opened:
        for line in opened.readlines():
            d = json.loads(line[len("DLLL "):])
            if d.get("step", "") == "PARAMETER":
                data["batch_size"] = d["data"]["batch_size"]
    return data


def test_deeplearningexamples_readers_parse_the_file(raport):
    jlog = draw_summary_read(raport)
    assert jlog["parameters"]["batch_size"] == 208 and jlog["parameters"]["arch"] == "resnet50"
    assert jlog["training_summary"]["train.total_ips"] == 390.0
    assert [step for step, _, _ in jlog["val.top1"]] == [[0], [1]]
    data = get_training_data(raport)
    assert data["batch_size"] == 208 and data["val.top1"] == 12.5


def test_every_line_has_dlloggers_fields_in_its_order(raport):
    lines = raport.read_text().splitlines()
    assert all(line.startswith("DLLL ") for line in lines)
    elapsed = []
    for line in lines:
        entry = json.loads(line[5:])
        keys = list(entry)
        if entry["type"] == "LOG":  # dllogger v1.0.0 JSONStreamBackend.log
            assert keys == ["timestamp", "datetime", "elapsedtime", "type", "step", "data"]
        else:  # JSONStreamBackend.metadata
            assert keys == ["timestamp", "elapsedtime", "datetime", "type", "metric", "metadata"]
        assert all(isinstance(entry[k], str) for k in ("timestamp", "datetime", "elapsedtime"))
        stamp = datetime.strptime(entry["datetime"], "%Y-%m-%d %H:%M:%S.%f")  # str(datetime.now())
        assert stamp.timestamp() == pytest.approx(float(entry["timestamp"]), abs=1e-3)
        elapsed.append(float(entry["elapsedtime"]))
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0


def test_metadata_lines_match_convnets_register_metric(raport):
    entries = [json.loads(line[5:]) for line in raport.read_text().splitlines()]
    assert [(e["metric"], e["metadata"]) for e in entries if e["type"] == "METADATA"] == CONVNETS_METADATA
    assert entries[0]["step"] == "PARAMETER"  # parameters first, then the metadata, as ConvNets


def test_train_and_validation_values(raport):
    entries = [json.loads(line[5:]) for line in raport.read_text().splitlines()]
    train = next(e for e in entries if e.get("step") == [0, 20])["data"]
    # ConvNets: data_time, and compute_time = it_time - data_time, in seconds
    assert train["train.data_time"] == pytest.approx(0.05) and train["train.compute_time"] == pytest.approx(0.2)
    assert train["train.total_ips"] == 400.0 and train["train.compute_ips"] == 500.0
    assert train["train.grad_scale"] == 65536.0 and train["train.lr"] == 0.1
    epoch = next(e for e in entries if e.get("step") == [0])["data"]
    assert epoch["val.total_ips"] == 900.0 and epoch["val.compute_ips"] == 1200.0
    assert epoch["val.data_time"] == pytest.approx(0.004) and epoch["val.compute_latency"] == pytest.approx(0.02)
    assert [epoch[f"val.compute_latency_at{q}"] for q in (100, 99, 95)] == pytest.approx([0.03, 0.029, 0.025])
    final = entries[-1]["data"]
    assert final["val.total_ips"] == 1000.0 and final["val.compute_ips"] == 1300.0  # means over the epochs
    assert final["val.compute_latency"] == pytest.approx(0.015)


def test_latencies_and_rates_by_hand():
    times = IterationTimes()
    for i in range(1, 21):  # compute 1 .. 20 ms, data 0.5 ms, 2 images each
        times.add(0.0005, i / 1000, 2)
    summary = times.latency_ms()
    # np.quantile(..., "nearest") over 20 values: q * 19 rounded -> index 19, 19 (18.81), 18 (18.05)
    assert summary["compute_latency_at100_ms"] == pytest.approx(20.0)
    assert summary["compute_latency_at99_ms"] == pytest.approx(20.0)
    assert summary["compute_latency_at95_ms"] == pytest.approx(19.0)
    assert summary["compute_latency_ms"] == pytest.approx(10.5) and summary["data_time_ms"] == pytest.approx(0.5)
    total, compute = times.rates()  # 40 images; compute 0.21 s, data 0.01 s
    assert compute == pytest.approx(40 / 0.21) and total == pytest.approx(40 / 0.22)
    assert IterationTimes().rates() == (0.0, 0.0) and IterationTimes().latency_ms()["compute_latency_ms"] is None


def _info(num_classes=1000, image_size=224):
    return DatasetInfo(name="imagefolder", num_classes=num_classes, mean=(0.5,) * 3, std=(0.2,) * 3,
                       train_size=1_281_167, val_size=50_000, image_size=image_size, val_image_size=image_size)


def test_parameter_record_carries_convnets_arguments(tmp_path):
    cfg, _ = load_config("imagenet:hal-rn50")
    plan = make_plan(cfg, 64, 1_281_167)
    env = DistEnv(rank=0, world_size=64, local_rank=0, local_world_size=4, num_nodes=16)
    params = convnets_parameters(cfg, plan, env, _info(), raport_file="r.json", workspace=tmp_path,
                                 loss_scale=65536.0)
    want = {"batch_size": 208, "epochs": 90, "arch": "resnet50", "amp": True, "warmup": 5, "lr_schedule": "step",
            "world_size": 64, "distributed": True, "bn_weight_decay": True, "static_loss_scale": 65536.0,
            "optimizer_batch_size": -1, "memory_format": "nchw", "model.num_classes": 1000, "raport_file": "r.json"}
    assert {k: params[k] for k in want} == want
    assert params["lr"] == pytest.approx(5.2)  # ConvNets' --lr is the LR used for the global batch
    ngc, _ = load_config("imagenet:ngc-rn50-amp")
    params = convnets_parameters(ngc, make_plan(ngc, 8, 1_281_167), DistEnv(world_size=8), _info(),
                                 raport_file=None, workspace=tmp_path, loss_scale=65536.0)
    assert (params["bn_weight_decay"], params["memory_format"], params["lr_schedule"]) == (False, "nhwc", "cosine")
    assert params["lr"] == pytest.approx(2.048) and params["label_smoothing"] == 0.1
    assert params["model.conv_init"] == "fan_in"  # ConvNets' default, the NGC presets'


def test_parameter_record_types_are_convnets_own(tmp_path):
    """ConvNets' record holds ints where its argparse defaults or configs.yml (through launch.py's set_defaults)
    give them: warmup (type=int), end_lr (default 0), static_loss_scale (default 1; configs.yml's 128); and it
    names its checkpoint file (checkpoint_filename)."""
    ngc, _ = load_config("imagenet:ngc-rn50-amp")
    params = convnets_parameters(ngc, make_plan(ngc, 8, 1_281_167), DistEnv(world_size=8), _info(),
                                 raport_file=None, workspace=tmp_path, loss_scale=65536.0)
    typed = {key: (type(params[key]).__name__, params[key]) for key in ("warmup", "end_lr", "static_loss_scale")}
    assert typed == {"warmup": ("int", 8), "end_lr": ("int", 0), "static_loss_scale": ("int", 65536)}
    assert params["checkpoint_filename"] == "checkpoint-<step>.pt"
    cosine, _ = load_config("imagenet:ngc-rn50-amp", ["schedule.end_lr=0.0001", "schedule.warmup_epochs=2.5",
                                                     "schedule.warmup_per=iteration"])
    params = convnets_parameters(cosine, make_plan(cosine, 8, 1_281_167), DistEnv(world_size=8), _info(),
                                 raport_file=None, workspace=tmp_path, loss_scale=1.5)
    assert (params["end_lr"], params["warmup"], params["static_loss_scale"]) == (0.0001, 2.5, 1.5)
