"""The CLI starts at once: every command's parser, every --help and `dlscale models` without torch or
matplotlib (their imports alone cost seconds of CPU), and the torch-free tables those use agree with the
torch-side registries they stand for."""

import json
import subprocess
import sys

import pytest

from dlscale.cli import COMMAND_MODULES

HELPS = [[name, "--help"] for name in COMMAND_MODULES if name != "torchrun"] + [
    ["--help"], ["profile", "bench", "--help"], ["profile", "train", "--help"], ["data", "check", "--help"],
    ["data", "make-jpegs", "--help"], ["data", "download", "--help"]]
"""`dlscale torchrun --help` is torchrun's own help (every flag is torchrun's): it loads torch by design."""

CPU_BUDGET_S = 2.0
"""CPU seconds for the child that builds every parser and prints every help: about 0.2 s on a 2-core machine,
against 4.4 s when the command modules imported torch and matplotlib. Generous: CPU time, not wall time, and
ten times what it takes, so a busy machine does not fail it; the modules checked below are the exact test."""

_CHILD = """
import contextlib, io, json, resource, sys
from dlscale.cli import build_parser, main
build_parser()
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(argv)
        except SystemExit as done:
            assert done.code == 0, (argv, done.code)
    assert "usage: dlscale" in out.getvalue(), argv
models = io.StringIO()
with contextlib.redirect_stdout(models):
    assert main(["models"]) == 0
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"loaded": sorted(m for m in ("torch", "matplotlib", "torchvision") if m in sys.modules),
                  "cpu_s": usage.ru_utime + usage.ru_stime, "models": models.getvalue()}))
"""


def test_every_help_and_models_start_without_torch_or_matplotlib():
    child = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(HELPS)], capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["loaded"] == []
    assert "resnet50 " in result["models"]
    print(f"{len(HELPS)} helps, every parser and `dlscale models`: {result['cpu_s']:.2f} CPU-s")
    assert result["cpu_s"] < CPU_BUDGET_S


def test_the_parsers_torch_free_names_are_the_registries():
    from dlscale.config.sections import DIST_OPTIMIZERS, TOPOLOGY_NAMES
    from dlscale.strategies import STRATEGIES, TOPOLOGIES

    assert tuple(STRATEGIES) == DIST_OPTIMIZERS and tuple(TOPOLOGIES) == TOPOLOGY_NAMES


def test_the_scale_launchers_are_the_sweep_launchers():
    from dlscale.cli.scale import LAUNCHER_SPECS
    from dlscale.sweep import run

    assert set(LAUNCHER_SPECS) == set(run.SWEEP_LAUNCHERS)


def test_the_models_table_is_every_torch_model():
    """`dlscale models` prints predict's layer table: the registry's names in its order, and for every model the
    parameter count of the torch model and the MACs that models/flops.count_macs counts on it."""
    import torch

    from dlscale.cli.models import model_rows
    from dlscale.models import build_model, count_parameters, model_names
    from dlscale.models.flops import count_macs
    from dlscale.models.resnet import VARIANTS
    from dlscale.predict import layers

    assert layers.model_names() == model_names() and layers.VARIANTS == VARIANTS
    assert [row[0] for row in model_rows(num_classes=10, image_size=64)] == model_names()
    for name in model_names():
        with torch.device("meta"):
            model = build_model(name, num_classes=10)
        params = layers.model_parameters(name, num_classes=10, image_size=64)
        assert sum(p.numel for p in params) == count_parameters(model), name
        assert layers.forward_macs(params) == count_macs(model, image_size=64), name


@pytest.mark.parametrize("name", ["resnext50_32x4d", "wide_resnet50_2"])
def test_the_variants_layer_table_matches_parameter_by_parameter(name):
    from dlscale.models import build_model
    from dlscale.models.flops import count_macs
    from dlscale.predict.layers import forward_macs, model_parameters

    params = model_parameters(name, num_classes=10, width=16, image_size=32)  # resnext: 16 x 4 / 64 per group
    model = build_model(name, num_classes=10, width=16)
    assert [(p.name, p.numel) for p in params] == [(n, t.numel()) for n, t in model.named_parameters()]
    assert forward_macs(params) == count_macs(model, image_size=32)
