"""README.md's commands are the CLI's: every `dlscale ...` line of a code block parses with its command's own parser,
every code span in the prose names a command and flags that exist, and the cheap ones run and print what the README
shows."""

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dlscale.cli import COMMAND_MODULES, build_parser
from dlscale.cli.common import parse_command_flags

README = Path(__file__).resolve().parents[2] / "README.md"


def _argv(command_line: str) -> list[str] | None:
    """The arguments after the `dlscale` program word (`dlscale ...`, `-m dlscale ...`), None if the line runs
    no dlscale command."""
    words = shlex.split(command_line.split(" # ")[0].replace("\\\n", " "))
    for index, word in enumerate(words):
        if word == "dlscale" and (index == 0 or words[index - 1] == "-m"):
            return words[index + 1:]
    return None


FENCE = re.compile(r"```[a-z]*\n(.*?)```", flags=re.S)


def readme_commands() -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """(the README's text of it, its arguments): for every command line of a code block, and every code span."""
    text = README.read_text()
    lines, spans = [], []
    for block in FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            argv = _argv(line) if line.startswith(("dlscale ", "torchrun ", "python")) else None
            if argv:
                lines.append((line, argv))
    for span in re.findall(r"`([^`]*\bdlscale [a-z][^`]*)`", FENCE.sub("", text)):
        argv = _argv(" ".join(span.split()))
        if argv:
            spans.append((" ".join(span.split()), argv))
    return lines, spans


BLOCK_LINES, SPANS = readme_commands()


def _flags(command: str) -> set[str]:
    """Every option string of the command's parser and of its sub-parsers (profile bench, data check, ...)."""
    found, parsers = set(), [build_parser([command])._subparsers._group_actions[0].choices[command]]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                parsers += action.choices.values()
    return found


def test_the_readme_has_its_commands():
    assert len(BLOCK_LINES) >= 7 and len(SPANS) >= 30  # the examples; the command table and the prose
    assert {argv[0] for _, argv in BLOCK_LINES + SPANS} >= set(COMMAND_MODULES)


@pytest.mark.parametrize("text,argv", BLOCK_LINES, ids=[text[:50] for text, _ in BLOCK_LINES])
def test_every_readme_command_line_parses(text, argv):
    assert argv[0] in COMMAND_MODULES, f"README runs `dlscale {argv[0]}`, which is no command"
    parse_command_flags(argv[0], argv[1:], where=f"README's `{text}`")


@pytest.mark.parametrize("text,argv", SPANS, ids=[text[:50] for text, _ in SPANS])
def test_every_readme_code_span_names_a_command_and_its_flags(text, argv):
    assert argv[0] in COMMAND_MODULES, f"README names `dlscale {argv[0]}`, which is no command"
    if argv[0] == "torchrun":  # every flag is torchrun's own
        return
    unknown = [word for word in argv[1:] if word.startswith("-") and word.split("=")[0] not in _flags(argv[0])]
    assert not unknown, f"README's `{text}`: dlscale {argv[0]} has no {', '.join(unknown)}"


def test_the_readme_prediction_is_what_predict_prints():
    line, argv = next((t, a) for t, a in BLOCK_LINES if a[0] == "predict" and "--gpus" in a)
    shown = README.read_text().split(line, 1)[1].split("```", 1)[0].strip().splitlines()
    out = subprocess.run([sys.executable, "-m", "dlscale", *argv, "--no-run-dir"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    printed = [row.rstrip() for row in out.stdout.splitlines()]
    for row in shown:
        assert row.rstrip() in printed, row


def test_the_readme_model_sizes_are_what_models_prints():
    from dlscale.cli.models import model_rows

    rows = {row[0]: row[1] for row in model_rows(num_classes=1000, image_size=224)}
    text = " ".join(README.read_text().split())
    for name, count in re.findall(r"`?(\w+)`?: ([\d,]{9,})", text):
        if name in rows:
            assert rows[name] == count, name
    cifar = {row[0]: row[1] for row in model_rows(num_classes=100, image_size=32)}
    assert "resnet50_cifar with 100 classes: 23,712,932" in text and cifar["resnet50_cifar"] == "23,712,932"


def test_the_readme_config_command_runs(tmp_path):
    _, argv = next((t, a) for t, a in BLOCK_LINES if a[:2] == ["config", "cpu:digits"])
    out = subprocess.run([sys.executable, "-m", "dlscale", *argv], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "# cpu-digits on 2 rank(s)" in out.stdout or "on 2 rank(s)" in out.stdout
