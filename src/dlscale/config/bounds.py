"""Bounds a setting has wherever it is given: a preset, --set, a flag (cli/numbers.py takes the same). An
upper bound is where a value stops meaning anything, not a guess at what fits: models/memory.py checks that."""

from __future__ import annotations

from dlscale.errors import ConfigError

SEED_MAX = 2**32 - 1
"""numpy's generators take 32-bit seeds."""
IMAGE_SIDE_MIN = 8
"""Pixels of a square image's side, at least: a ResNet's stride-2 stages need 8 (what every flag, the benchmark
and the training data take alike)."""
IMAGE_SIDE_MAX = 16_384
"""Pixels of a square image's side: beyond any ResNet input."""
WIDTH_MAX = 1024
"""A ResNet's base channel count: 16 times the standard 64's channels, 256 times its parameters."""
BATCH_MAX = 65_536
"""Images per rank per step: beyond any device's memory."""
GLOBAL_BATCH_MAX = 2**30
"""Images per optimizer step over all ranks: beyond any published recipe."""
WORKERS_MAX = 1024
"""Loader processes per rank: no node has more cores."""
TIMEOUT_MAX_S = 365 * 24 * 3600
"""A year: longer is no timeout (and Python's timedelta ends at 999,999,999 days)."""
SYNTHETIC_MAX = 10**9
"""Samples of the synthetic data set (its labels are held in memory)."""


def check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
