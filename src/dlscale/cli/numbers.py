"""Every numeric flag's type: a number within bounds that say why, checked when the command line is parsed.

    p.add_argument("--pg-timeout", type=numbers.PG_TIMEOUT, default=600.0)

argparse calls the type with the flag's text; text that is no number, or a number outside the bounds (zero,
negative, infinite, NaN, a fraction where a count is asked, huge) is one line naming the flag, before the
command does anything: `argument --pg-timeout: 'inf': give a number above 0 and at most 31,536,000 (seconds
before a collective that a peer never joins fails; a year at most: longer is no timeout)`. Whatever a command
computes from its numbers afterwards cannot divide by zero, overflow a C integer or allocate terabytes from a
typo. (What a setting costs in memory is checked against the device before the model is built: models/memory.py.)

Every int or float option of every command takes one of these (tests/smoke/test_cli_fuzz.py checks that no
parser uses a bare int or float, and feeds them all bad values).
"""

from __future__ import annotations

import argparse
import math
import re

from dlscale.config.bounds import (
    BATCH_MAX,
    GLOBAL_BATCH_MAX,
    IMAGE_SIDE_MAX,
    IMAGE_SIDE_MIN,
    SEED_MAX,
    TIMEOUT_MAX_S,
    WIDTH_MAX,
    WORKERS_MAX,
)
from dlscale.errors import shown


class Number:
    """A whole number (kind int) or a finite real (kind float) from `least` to `most`; `above`: strictly above
    `least`. `what` names the quantity, `why` says where the bounds come from."""

    numeric = True
    """Marks a numeric flag's type (the fuzz test finds numeric flags by it)."""

    def __init__(self, kind: type, least: float, most: float, what: str, why: str = "", *, above: bool = False):
        self.kind, self.least, self.most, self.above = kind, least, most, above
        self.what, self.why = what, why
        self.__name__ = "whole number" if kind is int else "number"  # argparse's name for the type

    def __call__(self, text: str) -> int | float:
        value = self.parse(text)
        if value is None or not self.holds(value):
            raise argparse.ArgumentTypeError(f"{shown(text)}: give {self.bounds()} ({self.reason()})")
        return value

    def parse(self, text: str) -> int | float | None:
        """The number the text writes, None when it writes none (or NaN, or an infinity)."""
        try:
            value = int(text.strip()) if self.kind is int else float(text)
        except (ValueError, OverflowError):
            return None
        return value if self.kind is int or math.isfinite(value) else None

    def holds(self, value: int | float) -> bool:
        return (value > self.least if self.above else value >= self.least) and value <= self.most

    def bounds(self) -> str:
        kind = "a whole number" if self.kind is int else "a number"
        if self.above:
            return f"{kind} above {_said(self.least)} and at most {_said(self.most)}"
        return f"{kind} from {_said(self.least)} to {_said(self.most)}"

    def reason(self) -> str:
        return f"{self.what}; {self.why}" if self.why else self.what

    def __repr__(self) -> str:
        return f"Number({self.what!r})"


class Counts:
    """A comma-separated list of whole numbers, each a `count` (1,2,4); `unique`: none given twice. Returns a
    tuple in the order given."""

    numeric = True

    def __init__(self, count: Number, example: str, *, unique: bool = False):
        self.count, self.example, self.unique = count, example, unique
        self.__name__ = "list of whole numbers"

    def __call__(self, text: str) -> tuple[int, ...]:
        parts = [part.strip() for part in text.split(",")]
        values = [self.count.parse(part) for part in parts]
        if not parts or any(v is None or not self.count.holds(v) for v in values):
            each = self.count.bounds().replace("a whole number", "whole numbers")
            raise argparse.ArgumentTypeError(f"{shown(text)}: give {each} separated by commas, e.g. {self.example} "
                                             f"({self.count.reason()})")
        repeated = sorted({v for v in values if values.count(v) > 1})
        if self.unique and repeated:
            raise argparse.ArgumentTypeError(f"{shown(text)} names {', '.join(map(str, repeated))} more than once; "
                                             "give each once")
        return tuple(values)


class NumberOrName:
    """A number of `number`'s bounds, or one of `names` (a device a table knows): `--peak-tflops 989.4` or
    `--peak-tflops H100`. Text that is neither is one line naming both."""

    numeric = True

    def __init__(self, number: Number, names, what: str):
        self.number, self.names, self.what = number, names, what
        self.__name__ = "number or name"

    def __call__(self, text: str) -> float | str:
        if text in self.names:
            return text
        value = self.number.parse(text)
        if value is None or not self.number.holds(value):
            raise argparse.ArgumentTypeError(f"{text!r}: give {self.number.bounds()} ({self.number.reason()}), or "
                                             f"{self.what}: {', '.join(self.names)}")
        return value


class Bytes(Number):
    """A size in bytes written as nccl-tests reads -b and -e: 8, 64K, 256M, 1G (powers of 1024)."""

    UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2, "MIB": 1024**2,
             "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}

    def parse(self, text: str) -> int | None:
        match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
        if not match or match.group(2).upper() not in self.UNITS:
            return None
        return int(match.group(1)) * self.UNITS[match.group(2).upper()]

    def bounds(self) -> str:
        return f"a size from {_said(self.least)} to {_said(self.most // 2**30)}G bytes, written 8, 64K, 256M or 1G"


def _said(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:g}"


def whole(least: int, most: int, what: str, why: str = "") -> Number:
    return Number(int, least, most, what, why)


def real(least: float, most: float, what: str, why: str = "", *, above: bool = True) -> Number:
    return Number(float, least, most, what, why, above=above)


# The bounds every command shares. An upper bound is where a value stops meaning anything (or where
# something downstream stops counting), not a guess at what fits: models/memory.py answers that.

MILLION = 1_000_000

SEED = whole(0, SEED_MAX, "the random seed", "numpy's generators take 32-bit seeds")
SECONDS = real(0, TIMEOUT_MAX_S, "seconds", "a year at most: longer is no timeout")
PG_TIMEOUT = real(0, TIMEOUT_MAX_S, "seconds before a collective that a peer never joins fails",
                  "a year at most: longer is no timeout")
POLL_S = real(0, 3600, "seconds between two queries of the jobs' states", "an hour at most")
PRICE = real(0, 1e9, "what one device costs for one hour", "no currency")
FRACTION = real(0, 1, "a fraction")
SHARE = real(0, 1, "the share of the JPEGs the device decodes", "0.6: 60%, the loader workers the rest")
PIXELS = whole(IMAGE_SIDE_MIN, IMAGE_SIDE_MAX, "pixels of a square image's side",
               "a ResNet's stride-2 stages need 8; 16,384 is beyond any ResNet input")
BATCH = whole(1, BATCH_MAX, "images per rank per step", "more is beyond any device's memory")
BATCH_LIST = Counts(BATCH, "16,32,64", unique=True)
GLOBAL_BATCH = whole(1, GLOBAL_BATCH_MAX, "images per step over all devices", "beyond any published recipe")
CLASSES = whole(1, MILLION, "classes of the final layer", "ImageNet-21k has 21,841")
WIDTH = whole(1, WIDTH_MAX, "the base channel count (64: the standard ResNet)",
              "1,024 is 16 times its channels and 256 times its parameters")
STEPS = whole(1, MILLION, "steps", "a million steps is days of benchmarking")
UNTIMED_STEPS = whole(0, MILLION, "untimed steps", "a million steps is days of benchmarking")
EVERY = whole(1, MILLION, "steps between two exchanges")
EVERY_OR_NEVER = whole(0, 2**31 - 1, "steps between two global averages (0: never)")
POOL = whole(1, 1024, "distinct random batches held on the device")
STEM = whole(0, 64, "the stem convolution's input channels (0: no padding, else 4 to 64)")
CUDNN_LIMIT = whole(0, 10_000, "cuDNN algorithms timed per convolution (0: all)")
WORLD = whole(1, 2**20, "ranks", "more than a million ranks is no machine")
DEVICES = Counts(whole(1, 2**24, "device counts", "16,777,216 devices is no machine"), "1,8,64")
PER_NODE = whole(1, 1024, "ranks (devices) per node", "no node has more")
PROCS = Counts(whole(1, 1024, "processes per node", "no node has more cores"), "1,2,4")
NODES = whole(1, 100_000, "nodes", "no cluster has more")
NODE_LIST = Counts(NODES, "1,2")
CPUS = whole(1, 100_000, "CPUs", "no node has more")
LOADER_WORKERS = whole(0, WORKERS_MAX, "loader workers per rank, threads or processes", "no node has more cores")
WORKERS = Counts(whole(0, WORKERS_MAX, "loader workers, threads or processes", "no node has more cores"), "0,1,2,4")
EPOCHS = whole(1, MILLION, "epochs", "a million is beyond any schedule")
LR = real(0, 1e4, "the learning rate", "no SGD converges at 10,000")
PROCESSES = whole(1, 1024, "processes", "no node has more cores")
RESTARTS = whole(0, 10_000, "restarts of failed workers")
SIGNAL_S = whole(0, 65_535, "seconds before the time limit", "SLURM's --signal takes at most 65,535")
REPEATS = whole(1, 1000, "repeats of every setting")
BATCHES = whole(1, MILLION, "timed batches per setting")
UNTIMED_BATCHES = whole(0, MILLION, "untimed batches")
FILES = whole(1, 100 * MILLION, "files")
FILES_OR_NONE = whole(0, 100 * MILLION, "files (0: none)")
MESSAGE_BYTES = Bytes(int, 1, 2**40, "bytes of one message", "1 TiB is beyond any device's memory")
STEP_FACTOR = whole(2, 1024, "the factor from one message size to the next")
COMM_ITERS = whole(1, MILLION, "timed calls per size")
COMM_WARMUP = whole(0, MILLION, "untimed calls per size")
TRACE_STEPS = whole(0, 1000, "steps recorded by torch.profiler (0: no trace)", "a trace of more is too large to open")
GBPS = real(0, 1e6, "Gbit/s of bus bandwidth", "a petabit per second is no network")
NICS = whole(1, 64, "network adapters per node", "no node has more")
BN_GROUP = whole(1, 1024, "devices per BatchNorm group", "a group lives inside a node: no node has more")
EPOCHS_FRACTION = real(0, 10_000, "epochs", "ten thousand epochs is no training run")
SECONDS_OR_ZERO = real(0, TIMEOUT_MAX_S, "seconds", "a year at most", above=False)
NIC_GBPS = real(0, 1e4, "Gbit/s of one network adapter", "ten terabits per second is no adapter")
LATENCY_US = real(0, 1e7, "microseconds of one algorithm step", "ten seconds is no network", above=False)
MILLISECONDS = real(0, 1e7, "milliseconds", "ten thousand seconds")
MILLISECONDS_OR_ZERO = real(0, 1e7, "milliseconds", "ten thousand seconds", above=False)
MEBIBYTES = real(0, 1e6, "MiB", "a terabyte is beyond any device's memory")
CORES = real(0, 1e5, "CPU cores", "no node has more")
SPREAD = real(0, 10, "the spread of a step (std / mean)", "ten times the mean is no step", above=False)
RATE = real(0, 1e8, "images per second", "a hundred million is no device")
PEAK_TFLOPS = real(0, 1e5, "TFLOP/s of one device's dense peak, which the step time divides by",
                   "a hundred PFLOP/s is no single device")
POINTS = real(0, 100, "percentage points", above=False)
