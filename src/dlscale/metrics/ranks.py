"""Per-rank times: which rank is slowest, by how much, and whether it is a straggler (no torch).

In a synchronous data-parallel step every rank waits for the others in the gradient allreduce, so
step and backward times come out even on every rank. What a rank does before it reaches that wait
shows a slow rank: the time it waited for its batch and its forward pass. dlscale calls their sum
the rank's *lead time* and compares it across ranks, per log window (train) or timed iteration
(bench). The forward pass is timed inside DDP's wrapper (metrics.timing.time_forward), after the
buffer broadcast DDP's forward starts with, where ranks wait for each other; a compiled model is
timed around the wrapper, broadcast included, which hides part of a slow rank's excess.

A straggler is a rank that is the slowest in at least STRAGGLER_SHARE of the windows and whose lead
time exceeds the median of the other ranks' by at least STRAGGLER_EXCESS over the windows (the median
of its excess): consistently slower, not once.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

STRAGGLER_EXCESS = 0.25
"""A rank counts as slower when its lead time is this much above the median of the other ranks'.
Measured on the 2-core development machine under other processes' load (load average 1.4-4.7), with
two `dlscale bench` ranks of one thread each (tests/distributed/test_stragglers.py): both ranks on one
CPU, the slowest rank's median excess was -1% to +3%; nothing pinned, +1% to +16%, unless another
process shared one rank's core for the whole run (+60% to +114%: a straggler made by outside load);
one rank throttled to a quarter of its core, +152% to +274%. 25% is well above the noise and well
below a rank running at half speed (+100%)."""
STRAGGLER_SHARE = 0.8
"""...and when it is the slowest rank in at least this share of the windows. With noise alone the
slowest rank is a coin toss: two ranks give the same one in 8 of 10 windows 11% of the time, and then
its median excess is the noise's, well under STRAGGLER_EXCESS."""


MIN_WINDOWS = 8
"""Fewer windows name no straggler: with noise alone one of two ranks is the slowest in 80% of 5 windows
37% of the time, of 8 windows 7% (binomial); a 5-iteration bench of a tiny model on the loaded development
machine came out with rank 0 slowest in 4 of 5 by a median of 25%."""
SOMETIMES = 0.2
"""A rank slower by STRAGGLER_EXCESS in this share of the windows (and at least two) is "sometimes"
slower. Even runs on the shared development machine had such windows in 0 to 5 of 10 (0 to 2 with both
ranks on one CPU): the machine's other load, which "sometimes" reports and a straggler verdict must not."""


def slowest(lead_ms: Sequence[float]) -> tuple[int, float]:
    """(rank, excess) of one window: the rank with the longest lead time and how much longer it is
    than the median of the other ranks' (0.25 = 25% longer); (0, 0.0) for one rank."""
    rank = max(range(len(lead_ms)), key=lambda r: lead_ms[r])
    others = [t for r, t in enumerate(lead_ms) if r != rank]
    if not others:
        return rank, 0.0
    median = statistics.median(others)
    return rank, (lead_ms[rank] / median - 1.0) if median > 0 else 0.0


def lead_times(data_ms: Sequence[Sequence[float]], forward_ms: Sequence[Sequence[float]]) -> list[list[float]]:
    """Per window, per rank: data wait + forward (each given per window, per rank)."""
    return [[d + f for d, f in zip(data, forward, strict=True)] for data, forward in zip(data_ms, forward_ms,
                                                                                          strict=True)]


def stragglers(windows: Sequence[Sequence[float]]) -> dict:
    """The ranks' lead times over windows (each window a list with one time per rank): the rank that is
    slowest most often, in how many windows, its median excess over the others in all windows, and:

        straggler   that rank, when it is the slowest in STRAGGLER_SHARE of at least MIN_WINDOWS windows
                    and its median excess is at least STRAGGLER_EXCESS: consistently slower; else None
        pattern     "always" (a straggler), "sometimes" (at least two windows, and SOMETIMES of them, have
                    a rank STRAGGLER_EXCESS slower, but no rank is consistently), "even" (fewer: one noisy
                    window on a shared machine is not a pattern), "one rank"
    """
    windows = [list(w) for w in windows if len(w) > 0]
    if not windows or len(windows[0]) < 2:
        return {"ranks": len(windows[0]) if windows else 0, "windows": len(windows), "slowest_rank": None,
                "slowest_windows": 0, "median_excess_pct": None, "straggler": None, "pattern": "one rank"}
    per_window = [slowest(w) for w in windows]
    ranks = [rank for rank, _ in per_window]
    top = max(set(ranks), key=lambda r: (ranks.count(r), -r))
    excess = statistics.median(_excess(w, top) for w in windows)
    slower = [(r, e) for r, e in per_window if e >= STRAGGLER_EXCESS]
    consistent = (len(windows) >= MIN_WINDOWS and ranks.count(top) >= STRAGGLER_SHARE * len(windows)
                  and excess >= STRAGGLER_EXCESS)
    pattern = "always" if consistent else ("sometimes" if len(slower) >= max(2, SOMETIMES * len(windows)) else "even")
    return {
        "ranks": len(windows[0]), "windows": len(windows), "slowest_rank": top,
        "slowest_windows": ranks.count(top), "median_excess_pct": 100 * excess,
        "slower_windows": len(slower), "slower_ranks": sorted({r for r, _ in slower}),
        "straggler": top if consistent else None, "pattern": pattern,
    }


def _excess(lead_ms: Sequence[float], rank: int) -> float:
    """How much longer rank's lead time is than the median of the other ranks' (negative: shorter)."""
    median = statistics.median(t for r, t in enumerate(lead_ms) if r != rank)
    return lead_ms[rank] / median - 1.0 if median > 0 else 0.0


def too_few(verdict: dict) -> bool:
    """A straggler's pattern (one rank the slowest in STRAGGLER_SHARE of the windows by STRAGGLER_EXCESS) in fewer
    windows than MIN_WINDOWS: slower, but not yet named a straggler."""
    return (verdict.get("straggler") is None and verdict.get("pattern") not in (None, "one rank")
            and verdict["slowest_windows"] >= STRAGGLER_SHARE * verdict["windows"]
            and (verdict["median_excess_pct"] or 0) >= 100 * STRAGGLER_EXCESS)


def describe(verdict: dict, unit: str = "windows") -> str | None:
    """One line for the terminal, or None with one rank. It never calls the ranks even where one rank was slower:
    too few windows to name a straggler, and a rank slower in some windows only, are said as such."""
    if verdict["pattern"] == "one rank":
        return None
    rank, n = verdict["slowest_rank"], verdict["windows"]
    share = f"slowest in {verdict['slowest_windows']} of {n} {unit}, median +{verdict['median_excess_pct']:.0f}%"
    excess = f"{100 * STRAGGLER_EXCESS:.0f}%"
    if verdict["straggler"] is not None:
        return (f"straggler: rank {rank} ({share} data wait + forward over the other ranks' median); the others "
                "wait for it in every allreduce")
    if too_few(verdict):
        return (f"rank {rank} slower: {share} (data wait + forward over the other ranks' median); {n} {unit} are "
                f"too few to call it a straggler ({MIN_WINDOWS} needed): measure longer to tell")
    slower = verdict.get("slower_windows", 0)
    if verdict["pattern"] == "sometimes":
        ranks = ", ".join(map(str, verdict["slower_ranks"]))
        return (f"no straggler: rank(s) {ranks} {excess} slower than the others in {slower} of {n} {unit} only "
                f"(rank {rank} {share})")
    if slower:
        return f"ranks even: a rank {excess} slower than the others in {slower} of {n} {unit} only"
    return f"ranks even: no rank {excess} slower than the others in any of {n} {unit}"
