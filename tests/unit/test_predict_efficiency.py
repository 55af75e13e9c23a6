"""--validate's published efficiencies of runs dlscale ships no rates for (references/large_batch.json): each is the
prediction a user gets from `dlscale predict` with the paper's own figures, and the efficiency it is judged against
is never one of its inputs."""

import json
from dataclasses import replace
from importlib import resources

import pytest

from dlscale.cli import main
from dlscale.errors import ConfigError
from dlscale.metrics.cost import IMAGENET_TRAIN_IMAGES
from dlscale.predict import efficiency
from dlscale.report.references import load_reference


def _series(name):
    return efficiency.shipped_reference(efficiency.REFERENCE).get(name)


def _with(series, **changes):
    points = tuple({**p, **changes} if p.get("efficiency") else p for p in series.points)
    return replace(series, points=points)


COMMANDS = {
    # Goyal et al.: 90 epochs in one hour on 256 P100 at 32 per GPU, 8 per server on one 50 Gbit Ethernet port;
    # Caffe2's reduce in the server, allreduce between servers, broadcast back.
    "goyal_2017": (3600, 256, 32, 8, ["--platform", "dgx1-v100", "--nics", "1", "--nic-gbps", "50", "--transport",
                                      "tcp", "--algorithm", "hierarchical"]),
    # Akiba et al.: 15 minutes on 1,024 P100, 8 per node on two FDR adapters; ChainerMN's allreduce after backward,
    # in fp16.
    "akiba_2017": (900, 1024, 128, 1, ["--platform", "dss8440-a100-pcie", "--nics", "2", "--nic-gbps", "56",
                                       "--transport", "ib", "--dist-optimizer", "gradient_allreduce", "--grad-bytes",
                                       "2"]),
    "jia_2018": (396, 2048, 256, 1, ["--platform", "dss8440-a100-pcie", "--nics", "1", "--nic-gbps", "100",
                                     "--transport", "roce", "--algorithm", "hierarchical"]),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_check_is_the_prediction_of_the_command_a_user_runs(tmp_path, name):
    seconds, devices, nodes, base, flags = COMMANDS[name]
    row = efficiency.check(_series(name))
    rate = 90 * IMAGENET_TRAIN_IMAGES / seconds
    path = tmp_path / "p.json"
    assert main(["predict", "--from-reference", f"rate={rate!r},devices={devices},batch=32,nodes={nodes}", *flags,
                 "--gpus", f"{base},{devices}", "--json", str(path), "--no-run-dir"]) == 0
    points = {p["devices"]: p for p in json.loads(path.read_text())["points"]}
    assert points[devices]["img_per_s_total"] == pytest.approx(rate, rel=1e-9)  # anchored at its own count
    assert row.predicted == pytest.approx(points[devices]["efficiency"], rel=1e-9)
    assert row.point.step_ms == pytest.approx(points[devices]["step_ms"], rel=1e-9)
    assert (row.devices, row.base) == (devices, base)


def test_the_published_efficiency_is_never_an_input():
    for series in efficiency.shipped_reference(efficiency.REFERENCE).of_kind("efficiency"):
        row = efficiency.check(series)
        assert efficiency.check(_with(series, efficiency=0.5)).predicted == pytest.approx(row.predicted)
        # what it is predicted from does reach it: a slower run (twice its time to train) loses less to its network
        timed = tuple({**p, "train_time_s": 2 * series.value(p, "train_time_s")} if p.get("epochs") else p
                      for p in series.points)
        assert efficiency.check(replace(series, points=timed)).predicted > row.predicted
        assert row.error == pytest.approx(row.predicted / row.published - 1)


@pytest.mark.parametrize("base", [0, 2.5, True, "8"])
def test_a_base_that_is_not_a_device_count_is_refused_when_the_file_is_read(tmp_path, base):
    data = json.loads((resources.files("dlscale") / "references" / "large_batch.json").read_text())
    data["series"][0]["points"][0]["base_devices"] = base
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"series\[0\]\.points\[0\]\.base_devices is .*, not a whole number of 1"):
        load_reference(str(path))


def test_a_base_that_is_not_below_the_point_is_one_line():
    with pytest.raises(ConfigError, match="base_devices must be below the point's 256 devices, got 256"):
        efficiency.check(_with(_series("goyal_2017"), base_devices=256))


@pytest.mark.parametrize("field,value,choices", [
    ("dist_optimizer", "ring_allreduce", "allreduce, gradient_allreduce"),
    ("algorithm", "rings", "auto, ring, tree"),
    ("overlap", "forward", "backward, none, step"),
])
def test_a_bad_strategy_field_is_one_line_naming_it_and_its_value(field, value, choices):
    series = _series("goyal_2017")
    with pytest.raises(ConfigError) as refused:
        efficiency.check(replace(series, meta={**series.meta, field: value}))
    assert str(refused.value).startswith(f"large_batch:goyal_2017: {field}={value!r}; choose one of {choices}")
    assert "\n" not in str(refused.value)
