"""Which stages run, in which order: the two plans that fit the lent GPU machine, and every stage by name.

The machine is lent for 15 minutes at a time, its start (1-2 minutes) included, and one command may run 10:
part 1 (the default) takes at most 8 minutes, part 2 at most 4, in order of value; what does not fit is
recorded as not run, with the command that runs it alone.
"""

from __future__ import annotations

import dataclasses

from gpu_campaign import decode, levers
from gpu_campaign.plan import (
    Features,
    Run,
    Stage,
    choices_stage,
    data_stage,
    env_stage,
    peers_stage,
    progression_stage,
    pytest_stage,
)


def combined_stage(f: Features) -> Stage:
    """The compiled default against the levers that helped, together: what the GPU default can become."""
    flags = f.combined_flags
    variants = [levers.Variant("default", [], batch=512, compile_s=15.0),
                levers.Variant("combined", flags or [], batch=levers_batch(flags or []))]
    run = levers.alternated("combined", variants, f)
    if flags is None:
        run.unavailable = ("needs the levers' results: a levers stage earlier in the run (its flags are read when "
                           "this stage starts), --after GPU_JSON or --combined FLAGS")
    elif not flags:
        run.unavailable = "no lever helped in this run's levers stages or --after's: nothing to combine"
    return Stage("combined", "The levers that helped, together, against the compiled default",
                 run.estimate_s * 1.3 + 20.0, [run], variants=[v.name for v in variants],
                 ratios=[("combined", "default")], note="the levers of this run's levers stages and of --after's "
                                                        "run whose windows beat the default's by 1% or more in most "
                                                        "rounds")


def combined_for_run(f: Features, results: dict, after: dict | None = None,
                     rounds: int | None = None) -> tuple[Stage, list[str]]:
    """The combined stage as it starts, and its flags: the levers that helped in this run's stages before it
    and in --after's run (this run's figures first where both have a stage)."""
    flags = helpful_flags({"stages": {**(after or {}), **results}})
    stage = combined_stage(dataclasses.replace(f, combined_flags=flags))
    if rounds is not None:
        stage.rounds = max(1, min(stage.rounds, rounds))
    return stage, flags


def levers_batch(flags: list[str]) -> int:
    sizes = [flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag == "--batch-size"]
    return int(sizes[-1]) if sizes else 512


STAGES = {"env": env_stage, "baseline": levers.baseline_stage, "levers_a": levers.levers_stage,
          "decode": decode.decode_stage, "ddp": levers.ddp_stage, "curve": levers.curve_stage,
          "levers_b": levers.levers_b_stage, "combined": combined_stage, "profile": levers.profile_stage,
          "peers": peers_stage, "gputests": levers.gputests_stage, "pytest": pytest_stage,
          "choices": choices_stage, "data": data_stage, "progression": progression_stage}
"""Every stage, in the order they run."""

PARTS = {1: ["env", "baseline", "decode"],
         2: ["env", "levers_a", "ddp", "curve", "profile", "peers", "combined"]}
"""The two plans, each in order of value: part 1 the default's baseline and real data (on 2026-11-27, H100, the
device path's train run reached 0.574 of the synthetic rate with the decode in a thread: the decode overlap probe
found it waits for the whole device, and now also measures the decode in a process of its own, the arrangement
its train runs take where it wins); part 2 the default's batch against 768 with the newest GPU tests beside its
compilations (1.002x on the third H100 run: the default stays at 512), then what the last two H100 runs did not
reach: the data-parallel wrapper, the batch curve and the profile (measured once, on the first H100 run of
2026-11-27), then the default against timm's benchmark.py and the bare loop (measured on the third), the levers
that helped together. levers_b (coordinate-descent tuning) is in neither: its compile outlasted the 150 s it
was given on 2026-11-27 (H200); run it alone with --stages levers_b."""

BUDGET_S = {1: 475.0, 2: 225.0}
"""Each part's deadline on a GPU: 7.9 and 3.75 minutes, so that the commands end within 8 and 4.5 minutes (on
2026-11-27, H100, part 1 ran 475 s of its 475, 481 s with the interpreter's start and end, and left part 2 335 s
of the 15 minutes: give part 2 what status's budget_left_s says, less 20 s)."""

OPTIONAL = frozenset(STAGES) - {name for names in PARTS.values() for name in names}
"""Stages in neither plan (--stages runs them): the measurements behind the earlier defaults."""


def build_plan(f: Features, only: dict[str, set[str] | None] | None = None, rounds: int | None = None,
               part: int = 1) -> list[Stage]:
    """The stages to run: the part's plan, or only: {stage: run names or None for all} (env always runs);
    rounds: at most this many rounds per stage."""
    names = PARTS[part] if only is None else [n for n in STAGES if n == "env" or n in only]
    stages = []
    for name in names:
        stage = STAGES[name](f)
        chosen = (only or {}).get(name)
        if chosen:
            unknown = chosen - {r.name.replace(" ", "_") for r in stage.runs}
            if unknown:
                raise ValueError(f"stage {name} has no run {', '.join(sorted(unknown))}")
            stage.runs = [r for r in stage.runs if r.name.replace(" ", "_") in chosen]
            kept = {r.name for r in stage.runs}
            stage.ratios = [(a, b) for a, b in stage.ratios if a in kept and b in kept]
        if rounds is not None:
            stage.rounds = max(1, min(stage.rounds, rounds))
        stages.append(stage)
    return stages


HELPS = 1.01
"""A lever helps when its median beats the default's by this factor and most of its rounds agree."""


def helpful_flags(document: dict) -> list[str]:
    """The flags of the levers that helped in a campaign's gpu.json (levers_a, levers_b): every helpful
    non-batch lever, and the batch size that helped most."""
    flags: list[str] = []
    best_batch: tuple[float, list[str]] | None = None
    for stage in ("levers_a", "levers_b", "ddp"):
        result = document.get("stages", {}).get(stage, {})
        records = {r["name"]: r for r in result.get("runs", []) if r.get("variant_flags") is not None}
        for ratio in result.get("ratios", []):
            rounds = ratio.get("per_round") or []
            if ratio.get("ratio") is None or ratio["ratio"] < HELPS or sum(p > 1 for p in rounds) * 2 <= len(rounds):
                continue
            lever = records.get(ratio["numerator"], {}).get("variant_flags") or []
            if "--wrap-single-rank" in lever:
                continue  # the wrapper is not a lever of one rank
            if "--batch-size" in lever:
                if best_batch is None or ratio["ratio"] > best_batch[0]:
                    best_batch = (ratio["ratio"], lever)
            else:
                flags += lever if lever and lever[0] not in flags else []
    return flags + (best_batch[1] if best_batch else [])


__all__ = ["BUDGET_S", "OPTIONAL", "PARTS", "STAGES", "Run", "build_plan", "combined_for_run", "helpful_flags"]
