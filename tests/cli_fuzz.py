"""Wrong command lines for every dlscale command, generated from the commands' own parsers, and a runner
that gives each to dlscale.cli.main in this process (tests/README.md, "The fuzz").

A case is a command's working base line (BASES) with one bad input of a class:

    numbers   a numeric flag (read from the parser: int and float types, dlscale's number types, count lists)
              or a numeric key of the training configuration (read from its dataclasses, given with --set):
              zero, negative, infinite, NaN, huge, fractional, empty, malformed lists
    outputs   a flag or argument that names something to write (--json, --raport-file, --script, --output-dir,
              --out, --name, a folder to fill): a directory where a file goes, a file where a folder goes, a
              path under a file, a path under /proc where nothing can be created, another command's run (a copy
              of tests/fixtures), `..`, a character device (mknod) or a FIFO where a file or a folder goes
    inputs    a flag or argument that reads from disk, given a damaged copy of a real one: a run or sweep
              directory of tests/fixtures, a preset file, a reference file, a checkpoint, a data folder;
              damaged by binary bytes, truncation, the wrong JSON or YAML type at the top or at one field
              chosen at random, a field removed; or one of its files made a FIFO, a link to /dev/zero, a number
              of 5,000 digits or a nesting deeper than Python recurses
    text      a flag that takes free text (a job's name, a partition, --sbatch-option, an MLflow experiment, a
              --set value): a newline and other control characters, shell marks, quotes, a byte that is not
              UTF-8, 100,000 characters
    setups    tiny training set-ups that torch would reject deep inside (BatchNorm on one image per rank,
              images smaller than the model's strides, one class, a validation set smaller than its batch):
              these run one real step
    any       any option given any of the values above

The work is stubbed where it would begin (a training or benchmark step, a collective's timing, a loader
measurement, a sweep's points, sbatch, torchrun, a download, writing a JPEG tree): a case covers what a
command does before its work, which is where a bad input must be refused. A case fails when an exception
that is not a DlscaleError leaves main(), or when a refusal is not one line.

    python tests/cli_fuzz.py --cases 2000 --seed 7     # or: DLSCALE_FUZZ_CASES=2000 DLSCALE_FUZZ_SEED=7 pytest ...
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import io
import json
import os
import random
import re
import shutil
import sys
import tempfile
import traceback
import typing
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from faults import Hung, device, hang_guard

from dlscale.cli import build_parser, main
from dlscale.config import TrainConfig

FIXTURES = Path(__file__).parent / "fixtures" / "runs-022c5c5"
CLASSES = ("numbers", "outputs", "inputs", "setups", "text", "any")

# ------------------------------------------------------------------------------------ the base lines

TINY_BENCH = ["--model", "resnet18_cifar", "--width", "4", "--image-size", "16", "--batch-size", "2",
              "--num-classes", "4", "--device", "cpu"]
TIMING = ["--num-warmup-batches", "0", "--num-batches-per-iter", "1", "--num-iters", "1"]
TINY_TRAIN = ["--config", "cpu:synthetic", "--set", "model.width=4", "--set", "data.num_workers=0", "--set",
              "data.synthetic_size=16", "--set", "data.synthetic_val_size=4", "--set", "max_steps_per_epoch=1",
              "--set", "schedule.epochs=1", "--set", "schedule.warmup_epochs=0", "--set", "log_every=1", "--set",
              "global_batch_size=4", "--device", "cpu"]
WINDOW = ["--warmup", "0", "--steps", "1", "--trace-steps", "0"]


@dataclass
class Base:
    """A command line that works: options, then positionals (dest -> tokens) in the parser's order."""

    options: list[str]
    positionals: dict[str, list[str]] = field(default_factory=dict)


BASES: dict[tuple[str, ...], typing.Callable[[Path, Path], Base]] = {
    ("bench",): lambda tmp, tree: Base([*TINY_BENCH, *TIMING, "--output-dir", f"{tmp}/runs"]),
    ("models",): lambda tmp, tree: Base([]),
    ("train",): lambda tmp, tree: Base([*TINY_TRAIN, "--output-dir", f"{tmp}/runs"]),
    ("config",): lambda tmp, tree: Base(TINY_TRAIN[2:], {"config": ["cpu:synthetic"]}),
    ("profile", "bench"): lambda tmp, tree: Base([*TINY_BENCH, *WINDOW, "--out", f"{tmp}/profile"]),
    ("profile", "train"): lambda tmp, tree: Base([*TINY_TRAIN, *WINDOW, "--out", f"{tmp}/profile"]),
    ("loader",): lambda tmp, tree: Base(["--data", str(tree), "--workers", "0", "--batch-size", "2", "--batches",
                                         "1", "--warmup-batches", "0", "--image-size", "16", "--out",
                                         f"{tmp}/loader"]),
    ("scale",): lambda tmp, tree: Base(["--nproc", "1", "--output-dir", f"{tmp}/runs"],
                                       {"rest": ["--", "bench", *TINY_BENCH, *TIMING]}),
    ("report",): lambda tmp, tree: Base(["--output-dir", f"{tmp}/report", "--no-explain"],
                                        {"paths": [str(FIXTURES / "bench")]}),
    ("slurm",): lambda tmp, tree: Base(["--nodes", "1", "--gpus-per-node", "1", "--script", f"{tmp}/job.sbatch"],
                                       {"rest": ["bench", *TINY_BENCH, "--output-dir", f"{tmp}/runs"]}),
    ("torchrun",): lambda tmp, tree: Base([], {"torchrun_args": ["--standalone", "--nproc-per-node", "1", "-m",
                                                                 "dlscale", "models"]}),
    ("comm",): lambda tmp, tree: Base(["--min-bytes", "8", "--max-bytes", "64", "--iters", "1", "--warmup-iters",
                                       "0", "--device", "cpu", "--output-dir", f"{tmp}/runs"]),
    ("predict",): lambda tmp, tree: Base(["--gpus", "1,8", "--from-run", str(FIXTURES / "bench"), "--platform",
                                          "dgx1-v100", "--no-run-dir"]),
    ("explain",): lambda tmp, tree: Base(["--reference", "none"], {"path": [str(FIXTURES / "bench")]}),
    ("data", "check"): lambda tmp, tree: Base(["--decode-sample", "2", "--image-size", "16"], {"path": [str(tree)]}),
    ("data", "make-jpegs"): lambda tmp, tree: Base(["--train", "2", "--val", "1", "--classes", "1", "--size",
                                                    "16x16", "--processes", "1"], {"path": [f"{tmp}/jpegs"]}),
    ("data", "download"): lambda tmp, tree: Base([], {"dataset": ["cifar10"], "path": [f"{tmp}/cifar"]}),
}
"""Every command's working line; a command without one fails the fuzz (add its line here)."""

OUTPUT_DESTS = {"json": "file", "raport_file": "file", "script": "file", "output_dir": "dir", "out": "dir",
                "name": "name"}
"""Options that name what a command writes, by dest, in every command that has them."""
OUTPUT_POSITIONALS = {("data", "make-jpegs"): "path", ("data", "download"): "path"}

RUN_DIRS = ("bench", "bench-curve", "train", "profile", "comm", "loader", "predict", "sweep")
INPUTS: dict[tuple[str, ...], dict[str, tuple[str, ...]]] = {
    ("report",): {"paths": RUN_DIRS, "reference": ("reference",)},
    ("explain",): {"path": ("bench", "train", "sweep"), "against": ("bench", "train"), "baseline": ("bench",),
                   "comm_run": ("comm",), "reference": ("reference",)},
    ("predict",): {"from_run": ("bench", "profile"), "comm_run": ("comm",), "step_curve": ("bench-curve",),
                   "loader_run": ("loader",), "stragglers_from": ("bench",), "sweep": ("sweep",),
                   "from_reference": ("reference",), "reference_file": ("reference",)},
    ("train",): {"config": ("preset",), "resume": ("checkpoint",), "data": ("data",)},
    ("config",): {"config": ("preset",), "data": ("data",)},
    ("profile", "train"): {"config": ("preset",), "data": ("data",)},
    ("loader",): {"data": ("data",)},
    ("data", "check"): {"path": ("data",)},
}
"""Flags and arguments that read from disk (by dest), and what each reads: a run directory of these kinds
(tests/fixtures), a preset file, a reference file, a checkpoint, a data folder."""

IMAGEFOLDER = ["--set", "data.name=imagefolder"]
EXTRA_FLAGS = {("predict",): {"loader_run": ["--cores-per-device", "4"], "sweep": ["--validate", "--comm-run",
                                                                                   str(FIXTURES / "comm")],
                              "reference_file": ["--validate"]},
               ("train",): {"data": IMAGEFOLDER}, ("config",): {"data": IMAGEFOLDER},
               ("profile", "train"): {"data": IMAGEFOLDER}}
"""What an input flag needs beside it to be read at all."""

# ------------------------------------------------------------------------------------- bad values

NUMBERS = ["0", "-1", "-7", "inf", "-inf", "nan", "1e308", "-1e308", "1" + "0" * 30, "2.5", "1e-320",
           "9223372036854775808", "0x10", "", " ", "1,", ",", "0,0", "-1,2", "1,nan", "4,inf", "3.5,1", "1e9",
           "4294967296", "1" + "0" * 400]
YAML_NUMBERS = ["0", "-1", "-7", ".inf", "-.inf", ".nan", "1.0e+308", "1" + "0" * 30, "2.5", "1.0e-320",
                "9223372036854775808", "true", "[1, 2]", "{a: 1}", "'3'", "null", "", "4294967296"]
LONG_NAMES = ["n" * 300, "d/" * 2100]
"""A name longer than a file system's 255 bytes, a path longer than Linux's 4,096."""
JUNK = ["x", "-", "--", "a,b", "1x1", "0x0", "∞", "\x7f", "../..", "/proc", "//proc/x", ":", "none:none", *LONG_NAMES]
"""Never `/` or a path outside the case's folder that could be created: a case writes only into its folder."""
TEXT = ["x\ny", "x\n", "\nsrun touch PWNED", "x\r", "\x1b[2J", "a\x00b", "x\u2028y", "\u202ex", "\udcff",
        "$(touch PWNED)", "`touch PWNED`", "a;b", "it's", 'a"b', "a b", "x" * 100_000]
"""Free text a flag may be given: control characters (one that ends a line in a job script above all), shell marks,
quotes, a blank, a byte that is not UTF-8 (as Python holds it from argv), a long value."""
WRONG_JSON = ["fast", None, [], {}, 0, -1, True, 1e308, -1e308, float("nan"), float("inf"), [1, "x"], {"x": 1},
              "", 2**64]


def leaves() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command's parser by its words: ("bench",), ("profile", "train"), ("data", "check"), ..."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found[words] = parser
            return
        for name, sub in subs[0].choices.items():
            walk(sub, (*words, name))

    walk(build_parser(), ())
    return found


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options that take a value."""
    return [a for a in parser._actions if a.option_strings and a.nargs != 0
            and not isinstance(a, argparse._HelpAction | argparse._VersionAction)]


def flag(action: argparse.Action) -> str:
    return max(action.option_strings, key=len)


def is_numeric(action: argparse.Action) -> bool:
    """An option the parser reads as a number or a list of counts."""
    kind = action.type
    if kind in (int, float) or getattr(kind, "numeric", False):
        return True
    default = action.default
    if isinstance(default, int | float) and not isinstance(default, bool):
        return True
    if isinstance(default, str) and default and set(default) <= set("0123456789,"):
        return True
    return any(word in (action.metavar or "") for word in ("N,N", "N[,N", "B[,B", "SECONDS", "PRICE"))


def is_text(action: argparse.Action) -> bool:
    """An option that takes free text: no number, no path, no fixed choices (a name, a partition, --set)."""
    return not (is_numeric(action) or getattr(action.type, "path", False) or action.choices)


def numeric_keys(cls: type = TrainConfig, prefix: str = "") -> list[str]:
    """Every numeric key of the training configuration, read from its dataclasses (section.key)."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            keys += numeric_keys(hint, f"{prefix}{f.name}.")
            continue
        args = set(typing.get_args(hint)) - {type(None)} or {hint}
        if args & {int, float}:
            keys.append(f"{prefix}{f.name}")
    return keys


# ---------------------------------------------------------------------------------------- damage


def damage_json(data, rng: random.Random) -> str | bytes:
    """A JSON document made wrong: binary, truncated, another type at the top, one field changed or removed."""
    text = json.dumps(data, indent=1)
    how = rng.choice(["binary", "truncated", "top", "field", "field", "field", "drop"])
    if how == "binary":
        return b"\x80\xff\xfe{" + rng.randbytes(rng.randrange(1, 64))
    if how == "truncated":
        return text[:rng.randrange(0, max(len(text), 1))]
    if how == "top":
        return json.dumps(rng.choice([[], [data], "text", 3, None, True]))
    data = copy.deepcopy(data)
    holder, key = _pick(data, rng, containers_only=how == "drop")
    if holder is None:
        return json.dumps(rng.choice(WRONG_JSON))
    if how == "drop" and isinstance(holder, dict):
        del holder[key]
    else:
        old = holder[key]
        holder[key] = rng.choice([v for v in WRONG_JSON if type(v) is not type(old)])
    return json.dumps(data)


def _pick(data, rng: random.Random, *, containers_only: bool = False):
    """A random (container, key) inside data, reached by a random walk."""
    path = []
    node = data
    while isinstance(node, dict | list) and node:
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path.append((node, key))
        node = node[key]
        if rng.random() < 0.25:
            break
    if containers_only:
        path = [(h, k) for h, k in path if isinstance(h, dict)]
    return path[-1] if path else (None, None)


def damage_run_dir(kind: str, place: Path, rng: random.Random) -> Path:
    """A copy of the fixture's run (or sweep) directory of this kind with one file damaged."""
    target = place / f"{kind}-damaged"
    shutil.copytree(FIXTURES / kind, target)
    files = sorted(p for p in target.rglob("*") if p.suffix in (".json", ".jsonl"))
    chosen = rng.choice(files)
    if rng.random() < 0.1:
        chosen.unlink() if rng.random() < 0.5 else chosen.write_text("")
        return target
    if rng.random() < 0.2:
        hostile(chosen, rng)
        return target
    if chosen.suffix == ".jsonl":
        lines = chosen.read_text().splitlines()
        index = rng.randrange(len(lines))
        lines[index] = _text(damage_json(json.loads(lines[index]), rng)).replace("\n", " ")
        chosen.write_text("\n".join(lines) + "\n")
    else:
        _write(chosen, damage_json(json.loads(chosen.read_text()), rng))
    return target


def damage_preset(place: Path, rng: random.Random) -> str:
    """A copy of presets/cpu.yaml made wrong, as FILE:synthetic."""
    from dlscale.config.presets import preset_files

    data = yaml.safe_load(preset_files()["cpu"].read_text())
    path = place / "preset.yaml"
    how = rng.choice(["binary", "truncated", "top", "field", "field", "field"])
    if how == "binary":
        path.write_bytes(b"\x80\xff\xfe:" + rng.randbytes(rng.randrange(1, 64)))
    elif how == "truncated":
        text = preset_files()["cpu"].read_text()
        path.write_text(text[:rng.randrange(0, len(text))])
    elif how == "top":
        path.write_text(yaml.safe_dump(rng.choice([[data], "text", 3, None, {"synthetic": [1]}])))
    else:
        holder, key = _pick(data, rng)
        if holder is not None:
            holder[key] = rng.choice([yaml.safe_load(v) for v in YAML_NUMBERS if v] + WRONG_JSON[:7])
        path.write_text(yaml.safe_dump(data))
    return f"{path}:synthetic"


def damage_reference(place: Path, rng: random.Random) -> str:
    """A copy of references/hal.json made wrong."""
    from dlscale.report.references import reference_dir

    path = place / "reference.json"
    _write(path, damage_json(json.loads((reference_dir() / "hal.json").read_text()), rng))
    return str(path)


HOSTILE = ("fifo", "zero", "digits", "nesting")
"""The files no reader may read without bound: a FIFO (a read would wait for a writer forever), a link to /dev/zero
(a read that never ends), a number of 5,000 digits, a nesting deeper than Python recurses."""


def hostile(path: Path, rng: random.Random) -> None:
    """path made one of HOSTILE, drawn by rng."""
    make_hostile(path, rng.choice(HOSTILE))


def make_hostile(path: Path, how: str) -> None:
    """path made into the HOSTILE file `how`, in place of what was there."""
    path.unlink(missing_ok=True)
    if how == "fifo":
        os.mkfifo(path)
    elif how == "zero":
        path.symlink_to("/dev/zero")
    elif how == "digits":
        path.write_text('{"kind": "bench", "world_size": ' + "7" * 5000 + "}\n")
    else:
        path.write_text("[" * 100_000 + "]" * 100_000 + "\n")


def bad_file(place: Path, rng: random.Random, what: str) -> str:
    """Something that is not what a flag reads: binary bytes, JSON, an empty file, a folder, nothing, or a file no
    reader may read without bound."""
    path = place / f"not-a-{what}"
    how = rng.choice(["binary", "json", "empty", "dir", "missing", "dir-of-junk", "long", "hostile"])
    if how == "long":
        return str(place / rng.choice(LONG_NAMES))
    if how == "hostile":
        hostile(path, rng)
        return str(path)
    if how == "binary":
        path.write_bytes(rng.randbytes(rng.randrange(1, 200)))
    elif how == "json":
        path.write_text(json.dumps({"kind": "bench"}))
    elif how == "empty":
        path.write_text("")
    elif how in ("dir", "dir-of-junk"):
        path.mkdir()
        if how == "dir-of-junk":
            (path / "train").write_text("x")
            (path / "val").mkdir()
    return str(path)


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _write(path: Path, value: str | bytes) -> None:
    if isinstance(value, bytes):
        path.write_bytes(value)
    else:
        path.write_text(value)


def bad_output(place: Path, rng: random.Random, kind: str) -> str:
    """A place nothing can be written to as asked: a folder for a file, a file for a folder, a path under a
    file, under /proc; for a run name, one that leaves its folder or names a file."""
    folder, file = place / "a-folder", place / "a-file"
    folder.mkdir(exist_ok=True)
    file.write_text("x")
    if kind == "name":
        run = _run_copy(place, rng)
        return rng.choice(["a-file", "", "/proc/x", "../a-file", "a-file/x", ".", "..", "/", "a\nb", *LONG_NAMES,
                           f"../{place.name}/{run.name}", run.name])
    return rng.choice([str(folder), str(file), f"{file}/x", f"{file}/x/y.json", "/proc/x", "/proc/x/y.json",
                       "/proc/self/x", "", "/proc", str(place / LONG_NAMES[0]), str(place / LONG_NAMES[1]),
                       str(_run_copy(place, rng)), "..", str(_special(place, rng))])


def _run_copy(place: Path, rng: random.Random) -> Path:
    """A copy of one kind of run of tests/fixtures in place: a run another command wrote, which no output may
    take over."""
    kind = rng.choice(RUN_DIRS)
    target = place / f"run-of-{kind}"
    if not target.exists():
        shutil.copytree(FIXTURES / kind, target)
    return target


def _special(place: Path, rng: random.Random) -> Path:
    """A character device (mknod; a FIFO where this process may not make one) or a FIFO: no file output may
    replace or write either, no folder output may be made there."""
    path = place / "special"
    if not path.exists():
        device(path) if rng.random() < 0.5 else os.mkfifo(path)
    return path


# ------------------------------------------------------------------------------------------ cases


@dataclass
class Case:
    seed: int
    index: int
    words: tuple[str, ...]
    kind: str
    argv: list[str]
    what: str
    steps: int = 0
    """Real steps to run before the stub stops the work (the set-ups class runs one)."""

    def __str__(self) -> str:
        return f"seed {self.seed} case {self.index} ({self.kind}: {self.what}): dlscale {' '.join(self.argv)}"


def pairs(found: dict[tuple[str, ...], argparse.ArgumentParser]) -> list[tuple[tuple[str, ...], str]]:
    """(command, class) for every class a command has something for."""
    out = []
    for words, parser in found.items():
        opts = options(parser)
        has = {"numbers": any(map(is_numeric, opts)) or any(a.dest == "overrides" for a in opts),
               "outputs": any(a.dest in OUTPUT_DESTS for a in opts) or words in OUTPUT_POSITIONALS,
               "inputs": words in INPUTS, "setups": words in SETUPS, "text": any(map(is_text, opts)),
               "any": bool(opts)}
        out += [(words, kind) for kind in CLASSES if has[kind]]
    return out


def generate(seed: int, count: int, place: Path, tree: Path, *, commands: set[str] | None = None,
             classes: set[str] | None = None) -> list[Case]:
    """`count` cases over every (command, class) pair in turn (shuffled by the seed): every command gets every
    class it has before any gets a second case. `commands` and `classes` narrow the pairs."""
    found = leaves()
    missing = sorted(" ".join(w) for w in found if w not in BASES)
    assert not missing, f"no base command line for dlscale {', '.join(missing)}: add one to BASES in {__file__}"
    order = [(words, kind) for words, kind in pairs(found)
             if (not commands or words[0] in commands) and (not classes or kind in classes)]
    random.Random(seed).shuffle(order)
    cases = []
    for index in range(count):
        words, kind = order[index % len(order)]
        rng = random.Random(f"{seed}:{index}")
        folder = place / f"case{index}"
        folder.mkdir(parents=True)
        cases.append(make_case(seed, index, words, kind, found, folder, tree, rng))
    return cases


def make_case(seed: int, index: int, words: tuple[str, ...], kind: str, found: dict, folder: Path, tree: Path,
              rng: random.Random) -> Case:
    parser = found[words]
    base = BASES[words](folder, tree)
    extra: list[str] = []
    steps = 0
    nested_words = _nested(words, base, rng, folder)
    if kind in ("numbers", "any") and nested_words and rng.random() < 0.4:
        # A swept or submitted command's own flags, checked by its parser before anything starts.
        nested = found[nested_words]
        action = rng.choice([a for a in options(nested) if kind == "any" or is_numeric(a)] or options(nested))
        key = next(iter(base.positionals))
        base.positionals[key] += _value_tokens(action, kind if kind == "numbers" else "junk", rng, folder)
        what = f"{' '.join(nested_words)} {flag(action)}"
    elif kind == "numbers":
        numeric = [a for a in options(parser) if is_numeric(a)]
        if any(a.dest == "overrides" for a in options(parser)) and (not numeric or rng.random() < 0.4):
            key = rng.choice(numeric_keys())
            extra = [f"--set={key}={rng.choice(YAML_NUMBERS)}"]
            what = f"--set {key}"
        else:
            action = rng.choice(numeric)
            extra = _value_tokens(action, kind, rng, folder)
            what = flag(action)
    elif kind == "outputs":
        outs = [a for a in options(parser) if a.dest in OUTPUT_DESTS]
        if words in OUTPUT_POSITIONALS and (not outs or rng.random() < 0.3):
            dest = OUTPUT_POSITIONALS[words]
            base.positionals[dest] = [bad_output(folder, rng, "dir")]
            what = dest
        else:
            action = rng.choice(outs)
            extra = [f"{flag(action)}={bad_output(folder, rng, OUTPUT_DESTS[action.dest])}"]
            what = flag(action)
    elif kind == "inputs":
        dest, reads = rng.choice(list(INPUTS[words].items()))
        value = _input(rng.choice(reads), folder, rng)
        action = next(a for a in parser._actions if a.dest == dest)
        extra_flags = EXTRA_FLAGS.get(words, {}).get(dest, [])
        if action.option_strings:
            extra = [f"{flag(action)}={value}", *extra_flags]
        else:
            base.positionals[dest] = [value]
            extra = list(extra_flags)
        what = f"{dest} ({reads})"
    elif kind == "setups":
        extra, what = SETUPS[words](rng)
        steps = 1
    elif kind == "text":
        action = rng.choice([a for a in options(parser) if is_text(a)])
        value = rng.choice(TEXT)
        if action.dest == "overrides":
            extra = [f"--set={rng.choice(['name', 'data.path', 'model.name', 'precision'])}={value}"]
        else:
            extra = [f"{flag(action)}={value}"]
        what = f"{flag(action)} {value[:20]!r}"
    else:
        action = rng.choice(options(parser))
        extra = _value_tokens(action, rng.choice(["numbers", "outputs", "junk"]), rng, folder)
        what = flag(action)
    argv = [*words, *base.options, *extra]
    for tokens in base.positionals.values():
        argv += tokens
    return Case(seed, index, words, kind, argv, what, steps)


NESTED = {("scale",): {"bench": ["--", "bench", *TINY_BENCH, *TIMING], "train": ["--", "train", *TINY_TRAIN]},
          ("slurm",): {"bench": ["bench", *TINY_BENCH], "train": ["train", *TINY_TRAIN]}}
"""The commands a sweep or a job runs: their flags are checked by their own parsers before anything starts."""


def _nested(words: tuple[str, ...], base: Base, rng: random.Random, folder: Path) -> tuple[str, ...] | None:
    """The command a sweep or a job runs (bench or train, chosen), put in the base line; None for the others."""
    if words not in NESTED:
        return None
    command = rng.choice(sorted(NESTED[words]))
    tokens = list(NESTED[words][command])
    if words == ("slurm",):
        tokens += ["--output-dir", f"{folder}/runs"]
    base.positionals[next(iter(base.positionals))] = tokens
    return (command,)


def _value_tokens(action: argparse.Action, kind: str, rng: random.Random, folder: Path) -> list[str]:
    if action.dest == "overrides":
        return [f"--set={rng.choice(numeric_keys())}={rng.choice(YAML_NUMBERS + JUNK)}"]
    pool = {"numbers": NUMBERS, "outputs": [bad_output(folder, rng, "file")], "junk": JUNK + NUMBERS[:8]}[kind]
    return [f"{flag(action)}={rng.choice(pool)}"]


def _input(reads: str, folder: Path, rng: random.Random) -> str:
    if reads in RUN_DIRS:
        return str(damage_run_dir(reads, folder, rng)) if rng.random() < 0.85 else bad_file(folder, rng, "run")
    if reads == "preset":
        return damage_preset(folder, rng) if rng.random() < 0.85 else bad_file(folder, rng, "preset") + ":x"
    if reads == "reference":
        return damage_reference(folder, rng) if rng.random() < 0.85 else bad_file(folder, rng, "reference") + ".json"
    return bad_file(folder, rng, reads)


# -------------------------------------------------------------------------------------- set-ups


def _train_setup(rng: random.Random) -> tuple[list[str], str]:
    settings = {"global_batch_size": rng.choice([1, 2, 3]), "model.name": rng.choice(["resnet18_cifar", "resnet18"]),
                "data.image_size": rng.choice([8, 9, 16]), "data.synthetic_classes": rng.choice([1, 2]),
                "data.synthetic_val_size": rng.choice([1, 3]), "val_batch_size": rng.choice([1, 2, 4]),
                "optim.accumulation_steps": rng.choice([1, 1, 3])}
    chosen = dict(rng.sample(sorted(settings.items()), rng.randrange(1, 4)))
    return [f"--set={k}={v}" for k, v in chosen.items()], ", ".join(f"{k}={v}" for k, v in chosen.items())


def _bench_setup(rng: random.Random) -> tuple[list[str], str]:
    settings = {"--batch-size": rng.choice([1, 2]), "--model": rng.choice(["resnet18_cifar", "resnet18"]),
                "--image-size": rng.choice([8, 9, 17]), "--num-classes": rng.choice([1, 2]),
                "--stem-channels": rng.choice([0, 1, 2, 4]), "--pool-batches": rng.choice([1, 2])}
    chosen = dict(rng.sample(sorted(settings.items()), rng.randrange(1, 4)))
    return [f"{k}={v}" for k, v in chosen.items()], ", ".join(f"{k} {v}" for k, v in chosen.items())


def _loader_setup(rng: random.Random) -> tuple[list[str], str]:
    settings = {"--batch-size": rng.choice([1, 3, 64]), "--image-size": rng.choice([8, 9]),
                "--dataset": rng.choice(["synthetic", "imagefolder"])}
    chosen = dict(rng.sample(sorted(settings.items()), rng.randrange(1, 3)))
    return [f"{k}={v}" for k, v in chosen.items()], ", ".join(f"{k} {v}" for k, v in chosen.items())


SETUPS = {("train",): _train_setup, ("profile", "train"): _train_setup, ("bench",): _bench_setup,
          ("profile", "bench"): _bench_setup, ("loader",): _loader_setup}


# ------------------------------------------------------------------------------------------ running


class WorkStarted(BaseException):
    """Raised by a stub where a command's work would begin: the case got past every check."""


@dataclass
class Outcome:
    case: Case
    result: str
    """refused (exit 2, one line), started (the work would begin), done (exit 0/1), or failed."""
    detail: str = ""


def _stubs(case: Case) -> list[tuple[object, str, object]]:
    """(module, name, replacement) where the work begins; a set-up case runs its real first step."""
    import torch.distributed.run

    import dlscale.bench.comm
    import dlscale.bench.loader
    import dlscale.bench.synthetic
    import dlscale.cli.slurm
    import dlscale.data.jpeg_tree
    import dlscale.profiling
    import dlscale.sweep.run
    import dlscale.train.loop

    def stop(*args, **kwargs):
        raise WorkStarted

    def after(real, steps: int):
        done = [0]

        def call(*args, **kwargs):
            if done[0] >= steps:
                raise WorkStarted
            done[0] += 1
            return real(*args, **kwargs)
        return call

    def offline(url, *args, **kwargs):  # an address on the network would start a download
        if str(url).lower().startswith(("http:", "https:", "ftp:")):
            raise WorkStarted
        return real_urlopen(url, *args, **kwargs)

    real_urlopen = urllib.request.urlopen
    stubs = [(dlscale.sweep.run.PointByPoint, "run", stop), (dlscale.sweep.run.SlurmJobs, "run", stop),
             (dlscale.cli.slurm, "submit", stop), (urllib.request, "urlopen", offline),
             (torch.distributed.run, "main", stop),
             (dlscale.data.jpeg_tree, "write_tree", stop), (dlscale.bench.comm, "_measure", stop)]
    for module, name in ((dlscale.train.loop, "train_step"), (dlscale.bench.synthetic, "train_step"),
                         (dlscale.profiling, "train_step"), (dlscale.bench.loader, "measure_setting")):
        stubs.append((module, name, after(getattr(module, name), case.steps)))
    return stubs


@contextlib.contextmanager
def _torch_globals():
    """What a command sets process-wide (deterministic algorithms, cuDNN, threads), put back after it."""
    import torch

    saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
             torch.backends.cudnn.deterministic, torch.get_num_threads(), torch.get_float32_matmul_precision())
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(saved[0])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[1], saved[2]
        torch.set_num_threads(saved[3])
        torch.set_float32_matmul_precision(saved[4])


OUTSIDE = (Path("/"), Path(__file__).resolve().parents[1])
"""Places a case must not write into (it writes into its own folder only): the file system's root and the
checkout (./runs of a command given no --output-dir)."""
DLSCALE_NAMES = re.compile(r"(config|env|summary|sweep)\.json|metrics\.jsonl|\.lock(\.holder)?|\.dlscale\.json|logs|tb|"
                           r"jobs|checkpoints|runs|report|PWNED|mlflow\.db|mlartifacts|"
                           r"(bench|train|comm|loader|profile|predict|sweep|scale)-.*")
"""What dlscale would leave there: a run's files and folders, a default run name."""


CASE_GUARD_S = 120
"""A case that outlives this waits on something (a FIFO, a lock): it fails. Cases take a second or two."""


def _outside() -> set[str]:
    return {str(root / name) for root in OUTSIDE for name in os.listdir(root) if DLSCALE_NAMES.fullmatch(name)}


def run_case(case: Case, cwd: Path) -> Outcome:
    """main(case.argv) in this process, in cwd, with the work stubbed; failed also when it wrote into a place
    outside its folder (OUTSIDE)."""
    before = _outside()
    try:
        with hang_guard(CASE_GUARD_S):
            outcome = _run_case(case, cwd)
    except Hung as hung:  # a read that waits, a lock that is never taken: a failed case, not a stopped fuzz
        outcome = Outcome(case, "failed", str(hung))
    wrote = sorted(_outside() - before)
    if wrote and outcome.result != "failed":
        return Outcome(case, "failed", f"wrote outside its folder: {', '.join(wrote)}")
    return outcome


def _run_case(case: Case, cwd: Path) -> Outcome:
    stubs = _stubs(case)
    saved = [(module, name, getattr(module, name)) for module, name, _ in stubs]
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        os.chdir(cwd)
        for module, name, replacement in stubs:
            setattr(module, name, replacement)
        with _torch_globals(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(case.argv))
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 2
            except WorkStarted:
                return Outcome(case, "started")
    except Exception:
        return Outcome(case, "failed", traceback.format_exc())
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
        os.chdir(here)
    errors = [line for line in err.getvalue().splitlines() if line.strip()]
    if "Traceback (most recent call last)" in err.getvalue() + out.getvalue():
        return Outcome(case, "failed", f"a traceback was printed:\n{err.getvalue()[-3000:]}")
    if code == 2:
        said = [line for line in errors if "error:" in line]
        if len(said) != 1:
            return Outcome(case, "failed", f"exit 2 without one error line: {errors[-5:]}")
        return Outcome(case, "refused", said[0])
    return Outcome(case, "done", f"exit {code}")


@contextlib.contextmanager
def jpeg_tree(place: Path):
    """A tiny ImageFolder tree of JPEGs (2 classes), made once for the data and loader cases."""
    from dlscale.data.jpeg_tree import write_tree

    tree = place / "tree"
    write_tree(tree, train=4, val=2, classes=2, size=(24, 20), processes=1)
    yield tree


def run(seed: int, count: int, place: Path, say=lambda line: None, **narrow) -> list[Outcome]:
    with jpeg_tree(place) as tree:
        cases = generate(seed, count, place / "cases", tree, **narrow)
        outcomes = []
        for case in cases:
            outcome = run_case(case, place / "cases" / f"case{case.index}")
            say(f"{outcome.result:>8}  {case}" + (f"\n{outcome.detail}" if outcome.result == "failed" else ""))
            outcomes.append(outcome)
    return outcomes


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--cases", type=int, default=200)
    cli.add_argument("--seed", type=int, default=0)
    cli.add_argument("--commands", default="", help="only these commands, e.g. report,predict")
    cli.add_argument("--classes", default="", help=f"only these classes: {', '.join(CLASSES)}")
    given = cli.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        results = run(given.seed, given.cases, Path(scratch), say=lambda line: print(line, flush=True),
                      commands=set(filter(None, given.commands.split(","))),
                      classes=set(filter(None, given.classes.split(","))))
    failed = [o for o in results if o.result == "failed"]
    counts = {r: sum(o.result == r for o in results) for r in ("refused", "started", "done", "failed")}
    print(f"seed {given.seed}: {len(results)} cases, {counts}")
    sys.exit(1 if failed else 0)
