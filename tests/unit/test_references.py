"""The shipped reference figures load and reproduce the published headline numbers."""

import json

import pytest

from dlscale.errors import ConfigError
from dlscale.report.references import load_reference, reference_names, resolve_names

SHIPPED = {"hal", "ngc", "sc20", "bluefog", "horovod", "dlperf", "marconi100"}


def test_every_reference_loads_with_sources():
    assert set(reference_names()) >= SHIPPED
    for name in reference_names():
        ref = load_reference(name)
        assert ref.name == name and ref.title and ref.hardware.get("device")
        assert all(s["where"] and s["what"] for s in ref.sources)
        for series in ref.series:
            assert ref.source_text(series), f"{name}/{series.id} names no source"
            assert series.points


def test_hal_headline_numbers():
    hal = load_reference("hal")
    feb = hal.get("feb")
    assert feb.point(devices=64)["train_time_s"] == 4071.31       # 1 hr 7 mins 51.31 secs
    assert feb.point(devices=2)["train_time_s"] == 74211.11       # 20 hrs 36 mins 51.11 secs
    assert feb.point(devices=64)["global_batch"] == 13312
    may64 = hal.get("may").point(devices=64)
    assert (may64["global_batch"], may64["final_top1_pct"]) == (16384, 71.93)
    # Throughput efficiency 2 -> 64 GPUs: 65% (docs/references.md#hal-efficiency).
    assert dict(feb.efficiency_curve())[64] == pytest.approx(0.65, abs=0.005)
    assert not feb.read_off_plot


def test_ngc_headline_numbers_and_published_ratios():
    ngc = load_reference("ngc")
    assert ngc.get("a100_80gb_amp").point(devices=1)["img_per_s"] == 2470
    assert ngc.get("a100_80gb_amp").point(devices=8)["img_per_s"] == 16621
    assert ngc.get("a100_80gb_tf32").point(devices=1)["img_per_s"] == 938
    assert ngc.get("v100_16gb_fp32").point(devices=1)["img_per_s"] == 367
    # The README's strong-scaling column is the 8-GPU over the 1-GPU rate (computed there from
    # unrounded rates: 2855 / 367 = 7.78 is printed as 7.76).
    for series in ngc.of_kind("scaling"):
        rates = dict(series.curve("img_per_s"))
        for p in series.points:
            if "speedup" in p:
                assert rates[8] / rates[1] == pytest.approx(p["speedup"], abs=0.025), series.id
    amp = ngc.get("a100_80gb_amp")
    assert amp.value(amp.point(devices=1), "train_time_s") == 14 * 3600  # "~14 h"


def test_sc20_progression_and_weak_scaling():
    sc20 = load_reference("sc20")
    prog = sc20.get("progression")
    assert [prog.value(p, "img_per_s") for p in prog.points][:2] == [680, 1795]
    assert prog.value(prog.points[3], "img_per_s") == pytest.approx((2460 + 2577) / 2)  # a published range
    weak = sc20.get("weak_scaling")
    assert weak.read_off_plot  # the img/s were read off throughputScaling.png
    assert dict(weak.efficiency_curve())[16] == 0.81  # stated in the README text
    rates = dict(weak.curve("img_per_s"))
    assert (rates[16] / 16) / rates[1] == pytest.approx(0.81, abs=0.02)  # the plot agrees with the text


def test_efficiency_points_bluefog_horovod():
    bluefog = load_reference("bluefog")
    assert bluefog.get("neighbor_allreduce").efficiency_curve() == [(128, 0.95)]
    assert bluefog.get("horovod").efficiency_curve() == [(128, 0.66)]
    assert bluefog.get("sample_16").point(devices=16)["img_per_s"] == 4310.6
    horovod = load_reference("horovod")
    assert horovod.get("vgg16").efficiency_curve() == [(128, 0.79), (512, 0.68)]
    assert horovod.get("resnet101").efficiency_curve() == [(128, 0.90), (512, 0.90)]


def test_dlperf_and_paddle_1_8_32_v100():
    ref = load_reference("dlperf")
    amp = ref.get("dlperf_amp")
    assert [v for _, v in amp.curve("img_per_s")] == [802.9, 6154.66, 22551.16]
    derived = 22551.16 / 32 / 802.9
    assert derived == pytest.approx(amp.point(devices=32)["efficiency"], abs=0.001)  # DLPerf's 87.8%
    fp32 = ref.get("dlperf_fp32")
    derived = 10917.09 / 32 / 367.29
    assert derived == pytest.approx(fp32.point(devices=32)["efficiency"], abs=0.001)  # DLPerf's 92.9%
    assert [v for _, v in ref.get("paddle_amp").curve("img_per_s")] == [790.033, 5889.05, 21259.81]


def test_marconi100_speedup_is_time_ratio():
    ref = load_reference("marconi100")
    for series in ref.series:
        base = series.points[0]["epoch_time_s"]
        for p in series.points:
            minutes, _, seconds = p["epoch_time"].rpartition(":")
            hours, _, minutes = minutes.rpartition(":")
            assert p["epoch_time_s"] == int(hours or 0) * 3600 + int(minutes) * 60 + int(seconds)
            assert base / p["epoch_time_s"] == pytest.approx(p["speedup"], abs=0.01)
    assert ref.get("nodes").point(devices=64)["speedup"] == 13.86


def test_names_and_errors(tmp_path):
    assert resolve_names(["hal,ngc", "hal"]) == ["hal", "ngc"]
    assert resolve_names(["all"]) == reference_names()
    with pytest.raises(ConfigError, match="unknown --reference 'hall'; choose from"):
        load_reference("hall")
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({
        "name": "mine", "title": "t", "sources": [{"id": "a", "where": "here", "what": "that"}],
        "series": [{"id": "s", "label": "S", "kind": "scaling", "source": ["a"],
                    "points": [{"devices": 1, "img_per_s": 10}, {"devices": 2, "img_per_s": 15}]}],
    }))
    assert load_reference(str(mine)).get("s").efficiency_curve() == [(1, 1.0), (2, 0.75)]
    mine.write_text('{"name": "broken"}')
    with pytest.raises(ConfigError, match=r"mine.json: no title \(it should be text\)"):
        load_reference(str(mine))
