"""The checks every bad input goes through: numbers when parsed (cli/numbers.py), a JSON document's shape when
read (rundir/shape.py), an output when written (rundir.writing), and a model's memory before it is built
(models/memory.py)."""

import argparse

import pytest
import torch

from dlscale.cli import numbers
from dlscale.errors import ConfigError, DeviceError, StorageError
from dlscale.models import build_model, count_parameters
from dlscale.models import memory as memory_module
from dlscale.models.memory import BYTES_PER_PARAMETER, check_fits, footprint
from dlscale.rundir import writing
from dlscale.rundir.shape import Maybe, check


@pytest.mark.parametrize("kind,text,value", [
    (numbers.PG_TIMEOUT, "600", 600.0), (numbers.SEED, "4294967295", 2**32 - 1), (numbers.MESSAGE_BYTES, "64K", 65536),
    (numbers.MESSAGE_BYTES, "1G", 2**30), (numbers.PROCS, "1,2,4", (1, 2, 4)), (numbers.BATCH_LIST, "16", (16,)),
])
def test_numbers_in_bounds_parse(kind, text, value):
    assert kind(text) == value


@pytest.mark.parametrize("kind,text", [
    (numbers.PG_TIMEOUT, "0"), (numbers.PG_TIMEOUT, "inf"), (numbers.PG_TIMEOUT, "nan"), (numbers.PG_TIMEOUT, "1e308"),
    (numbers.SEED, "-1"), (numbers.SEED, "4294967296"), (numbers.SEED, "2.5"), (numbers.SEED, "1e3"),
    (numbers.PIXELS, "7"), (numbers.PIXELS, "0x10"), (numbers.MESSAGE_BYTES, "0"), (numbers.MESSAGE_BYTES, "2T"),
    (numbers.PROCS, "1,,2"), (numbers.PROCS, "0"), (numbers.BATCH_LIST, "16,16"), (numbers.WORKERS, "-1"),
])
def test_numbers_out_of_bounds_are_one_line_naming_why(kind, text):
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        kind(text)
    assert repr(text) in str(refused.value) and "\n" not in str(refused.value)


SHAPE = {"world_size": "count", "figure": "positive?", "rows": Maybe([{"size": "count", "*_ms": "number?"}]),
         "fit": ("text?", {"busbw_gbs": "positive"})}


@pytest.mark.parametrize("data,message", [
    ({"figure": 1.0}, "f.json: no world_size (it should be a whole number of 1 or more)"),
    ({"world_size": True}, "world_size is True, not a whole number of 1 or more"),
    ({"world_size": 2, "figure": 0}, "figure is 0, not a number above 0"),
    ({"world_size": 2, "rows": [{"size": 8}, {"size": 8, "step_ms": "x"}]}, "rows[1].step_ms is 'x', not a finite"),
    ({"world_size": 2, "rows": {"size": 8}}, "rows is {'size': 8}, not a list"),
    ({"world_size": 2, "fit": {"busbw_gbs": float("nan")}}, "fit.busbw_gbs is nan, not a number above 0"),
    ({"world_size": 2, "fit": 3}, "fit is 3, not text or an object"),
    ([1], "f.json: the file holds [1], not an object"),
])
def test_a_document_of_the_wrong_shape_is_one_line_naming_the_field(data, message):
    with pytest.raises(ConfigError) as refused:
        check(data, SHAPE, "f.json")
    assert message in str(refused.value)


def test_a_document_of_the_right_shape_passes_with_what_it_may_lack():
    good = {"world_size": 2, "figure": None, "rows": [{"size": 8, "step_ms": 1.5, "other": "anything"}],
            "fit": "no fit: one size", "extra": [1, "x"]}
    assert check(good, SHAPE, "f.json") is good
    assert check({"world_size": 1, "fit": {"busbw_gbs": 2.0}}, SHAPE, "f.json")


def test_an_output_that_cannot_be_written_is_one_line_naming_it(tmp_path):
    (tmp_path / "plot.png").mkdir()
    with pytest.raises(ConfigError, match="--out .*plot.png is a directory; give a file name"), \
            writing(tmp_path / "plot.png", "--out") as path:
        path.write_bytes(b"png")
    (tmp_path / "sub").write_text("x")
    with pytest.raises(StorageError, match="cannot write .*sub/plot.png .*sub is a file.; choose another --out"), \
            writing(tmp_path / "sub" / "plot.png", "--out") as path:
        path.write_bytes(b"png")


def test_the_footprint_counts_parameters_and_convolution_outputs_by_hand():
    """resnet18_cifar, width w, s px (stride-1 stem): the stem and layer1's four convs give w s^2 each, layers 2-4
    five convs (a projection among them) of 2w (s/2)^2, 4w (s/4)^2 and 8w (s/8)^2: 9.375 w s^2 per image."""
    need = footprint("resnet18_cifar", num_classes=10, width=8, batch=2, image_size=32)
    assert need.conv_outputs == 2 * 9.375 * 8 * 32**2
    assert need.parameters == count_parameters(build_model("resnet18_cifar", num_classes=10, width=8))
    assert footprint("resnet50", num_classes=1000, batch=1, image_size=224).parameters == 25_557_032  # torchvision's
    assert need.training_bytes(amp=False) == BYTES_PER_PARAMETER * need.parameters + 4 * need.conv_outputs


def test_what_cannot_fit_is_refused_naming_the_settings(monkeypatch):
    need = footprint("resnet18_cifar", num_classes=10, width=8, batch=2, image_size=32)
    monkeypatch.setattr(memory_module, "host_memory_bytes", lambda: need.training_bytes(amp=False))
    check_fits(need, torch.device("cpu"), settings="--batch-size 2")  # exactly fits
    with pytest.raises(DeviceError, match=r"--batch-size 2 needs at least .* this host has .*, 2 ranks sharing it"):
        check_fits(need, torch.device("cpu"), settings="--batch-size 2", ranks_on_host=2)


def test_a_step_torch_would_refuse_is_one_line_naming_the_settings():
    with pytest.raises(ConfigError, match="--batch-size 1 cannot train: .*value per channel"):
        footprint("resnet18", num_classes=10, width=4, batch=1, image_size=16, settings="--batch-size 1")
    footprint("resnet18", num_classes=10, width=4, batch=1, image_size=64)  # 2x2 at the end: 4 values
    footprint("resnet18", num_classes=10, width=4, batch=1, image_size=16, train=False)  # running statistics
