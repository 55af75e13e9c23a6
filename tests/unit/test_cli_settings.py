"""Flags of the training configuration: each goes into the configuration once, typed (cli/common.py's table),
equal to its --set form, in command-line order with --set; presets listed; a mistyped flag or key gets the
closest one and its own command's help."""

import re
from dataclasses import asdict

import pytest
import torch
from cli_fuzz import leaves

from dlscale import cli
from dlscale.cli import COMMAND_MODULES
from dlscale.cli.common import SETTING_FLAGS, STRATEGY_FLAGS, TRAIN_FLAGS, resolve_config
from dlscale.config import preset_files
from dlscale.config.presets import load_presets
from dlscale.errors import ConfigError, DeviceError
from dlscale.speed import SpeedOptions


def resolved(*argv, command="train"):
    args = cli.build_parser([command]).parse_args([command, *(["--config", "cpu:digits"] if command == "train"
                                                               else ["cpu:digits"]), *argv])
    return asdict(resolve_config(args)[0])


@pytest.mark.parametrize("text", ["2024", "yes", "on", "null", "~", "1e3", "[a]"])
def test_a_flag_reaches_the_configuration_as_the_text_given(text):
    """--data is the folder's name as typed: no YAML reading turns it into a number, a bool or nothing."""
    assert resolved("--data", text)["data"]["path"] == text
    assert resolved("--data", text, command="config")["data"]["path"] == text


def test_set_text_alone_is_read_as_yaml():
    with pytest.raises(ConfigError, match="data.path must be a string, got 2024"):
        resolved("--set", "data.path=2024")
    assert resolved("--set", "data.path=null")["data"]["path"] is None


@pytest.mark.parametrize("flags,sets", [
    (["--epochs", "3"], ["schedule.epochs=3"]),
    (["-b", "32"], ["batch_size=32", "global_batch_size=null"]),  # cpu:digits sets a global batch: it gives way
    (["--batch-size", "32"], ["batch_size=32", "global_batch_size=null"]),
    (["--lr", "0.25"], ["optim.lr=0.25"]),
    (["--precision", "amp_bf16"], ["precision=amp_bf16"]),
    (["-j", "4"], ["data.num_workers=4"]),
    (["--workers", "1"], ["data.num_workers=1"]),
    (["--device", "cpu"], ["device=cpu"]),
    (["--pg-timeout", "30"], ["pg_timeout_s=30"]),
    (["--on-bad-sample", "error"], ["data.on_bad_sample=error"]),
    (["--data", "/d"], ["data.path=/d"]),
    (["--target-accuracy", "0.9"], ["target_accuracy=0.9"]),
    (["--name", "mine"], ["name=mine"]),
    (["--price-per-device-hour", "2.5"], ["price_per_device_hour=2.5"]),
    (["--dist-optimizer", "neighbor_allreduce", "--disable-dynamic-topology", "--atc-style"],
     ["strategy.dist_optimizer=neighbor_allreduce", "strategy.dynamic_topology=false", "strategy.atc_style=true"]),
    (["--num-steps-per-communication", "2", "--global-average-every", "5", "--topology", "ring"],
     ["strategy.num_steps_per_communication=2", "strategy.global_average_every=5", "strategy.topology=ring"]),
])
def test_each_flag_equals_its_set_form(flags, sets):
    by_flags = resolved(*flags)
    assert by_flags == resolved(*[w for s in sets for w in ("--set", s)])
    assert by_flags != resolved()  # the flag changed something


def test_every_setting_flag_is_in_the_table_tested_above():
    tested = {"--epochs", "-b", "--lr", "--precision", "-j", "--device", "--pg-timeout", "--on-bad-sample", "--data",
              "--target-accuracy", "--name", "--price-per-device-hour", "--dist-optimizer", "--atc-style",
              "--disable-dynamic-topology", "--num-steps-per-communication", "--global-average-every", "--topology"}
    table = {row.flags[0] for row in (*SETTING_FLAGS, *TRAIN_FLAGS, *STRATEGY_FLAGS)}
    assert table - tested <= {"--download", "--dynamic-schedule"}  # need a CIFAR set-up / several nodes


def test_flags_and_set_apply_in_the_order_given():
    assert resolved("--set", "data.num_workers=1", "-j", "3")["data"]["num_workers"] == 3
    assert resolved("-j", "3", "--set", "data.num_workers=1")["data"]["num_workers"] == 1
    # a per-rank batch after a global one replaces it; before it, the two contradict (one line at the plan)
    assert resolved("--set", "global_batch_size=128", "-b", "8")["global_batch_size"] is None
    assert resolved("-b", "8", "--set", "global_batch_size=128")["global_batch_size"] == 128


def test_presets_are_listed(capsys):
    assert cli.main(["config", "--list"]) == 0
    listed = capsys.readouterr().out
    for source in preset_files():
        for name in load_presets(source)[1]:
            assert re.search(rf"^{source}:{name} +\S", listed, re.M), f"{source}:{name}"
    assert re.search(r"^cpu:digits +resnet18_cifar width 16 on digits, global batch 64, fp32, 8 epochs cosine LR, "
                     r"1 warm-up epochs$", listed, re.M)
    assert cli.main(["train", "--help"]) == 0
    assert "cpu:digits" in capsys.readouterr().out.replace("\n", " ")
    assert cli.main(["config"]) == 2
    assert "`dlscale config --list` lists the shipped ones" in capsys.readouterr().err


def _one_line(capsys, argv) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_an_unknown_flag_names_the_closest_and_the_command_help(capsys):
    err = _one_line(capsys, ["train", "--config", "cpu:digits", "--batchsize", "8"])
    assert err.startswith("dlscale train: error: unrecognized arguments: --batchsize 8; did you mean --batch-size?")
    assert err.endswith("(see `dlscale train --help`)")
    err = _one_line(capsys, ["profile", "train", "--config", "cpu:digits", "--warmpu=2"])
    assert "did you mean --warmup?" in err and err.endswith("(see `dlscale profile train --help`)")
    assert _one_line(capsys, ["bench", "--zzz"]) == ("dlscale bench: error: unrecognized arguments: --zzz "
                                                     "(see `dlscale bench --help`)")
    # the command a sweep runs is parsed by its own parser before the sweep starts, with the same help
    err = _one_line(capsys, ["scale", "--nproc", "1", "--", "train", "--config", "cpu:digits", "--epoch-s", "2"])
    assert "did you mean --epochs?" in err


def test_an_unknown_key_names_the_closest(capsys):
    err = _one_line(capsys, ["train", "--config", "cpu:digits", "--set", "epochs=3"])
    assert "unknown key epochs: did you mean schedule.epochs?" in err


def test_cudnn_autotuning_on_a_cpu_names_what_the_command_takes(capsys):
    with pytest.raises(DeviceError) as bench:
        SpeedOptions(cudnn_benchmark=True).apply_globals(torch.device("cpu"), flags=True)
    with pytest.raises(DeviceError) as train:
        SpeedOptions(cudnn_benchmark=True).apply_globals(torch.device("cpu"))
    bench_flags = {o for a in cli.build_parser(["bench"])._subparsers._group_actions[0].choices["bench"]._actions
                   for o in a.option_strings}
    suggested = set(re.findall(r"--[a-z-]+", str(bench.value).split(":")[-1]))
    assert suggested == {"--cudnn-benchmark"} <= bench_flags and "--set" not in str(bench.value)
    assert str(train.value).endswith("set speed.cudnn_benchmark=false (--set)")
    resolved("--set", "speed.cudnn_benchmark=false")  # what it suggests to train is a setting it takes


def test_every_option_has_help_and_no_help_says_default_none(capsys):
    bare = [f"{' '.join(words)} {a.option_strings[-1]}" for words, parser in leaves().items() for a in parser._actions
            if a.option_strings and not a.help and a.dest != "help"]
    assert bare == [], bare
    for command in (c for c in COMMAND_MODULES if c != "torchrun"):  # torchrun's --help is torchrun's own
        assert cli.main([command, "--help"]) == 0
        shown = " ".join(capsys.readouterr().out.split())
        assert "(default: None)" not in shown and "(default: False)" not in shown, command


def test_bench_help_states_each_default_once(capsys):
    assert cli.main(["bench", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in shown and "(default: False)" not in shown
    assert "(default: 1000)" in shown and "untimed steps (10)" in shown and "(10) (default" not in shown
    bench = cli.build_parser(["bench"])._subparsers._group_actions[0].choices["bench"]
    assert [a.dest for a in bench._actions if a.option_strings and not a.help] == []
