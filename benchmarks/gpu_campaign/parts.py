"""Which stages run, in which order: the two plans that fit the lent GPU machine, and every stage by name.

The machine is lent for 15 minutes at a time, its start (1-2 minutes) included, and one command may run 10:
part 1 (the default) takes at most 8 minutes, part 2 at most 4, in order of value; what does not fit is
recorded as not run, with the command that runs it alone.
"""

from __future__ import annotations

import dataclasses

from gpu_campaign import decode, levers
from gpu_campaign.plan import (
    DEFAULT_BATCH,
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
from gpu_campaign.report import RULE, helps


def combined_stage(f: Features) -> Stage:
    """The compiled default against the levers that helped, together: what the GPU default can become. Both
    variants run at the default's own batch unless a batch lever helped against the default at that batch."""
    flags = f.combined_flags
    variants = [levers.Variant("default", [], batch=DEFAULT_BATCH, compile_s=15.0),
                levers.Variant("combined", flags or [], batch=levers_batch(flags or []))]
    run = levers.alternated("combined", variants, f)
    if flags is None:
        run.unavailable = ("needs the levers' results: a levers stage earlier in the run (its flags are read when "
                           "this stage starts), --after GPU_JSON or --combined FLAGS")
    elif not flags:
        run.unavailable = "no lever helped in this run's levers stages or --after's: nothing to combine"
    return Stage("combined", "The levers that helped, together, against the compiled default",
                 run.estimate_s * 1.3 + 20.0, [run], variants=[v.name for v in variants],
                 ratios=[("combined", "default")], note=f"the levers of this run's levers stages and of --after's "
                                                        f"run that {RULE}; a batch size only where it beat the "
                                                        "default at the default's own batch")


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
    """The batch of a `dlscale bench` command line: its last --batch-size, else the GPU default's."""
    batch = _options(flags).get("--batch-size")
    return int(batch) if batch else DEFAULT_BATCH


STAGES = {"env": env_stage, "baseline": levers.baseline_stage, "levers_a": levers.levers_stage,
          "decode": decode.decode_stage, "ddp": levers.ddp_stage, "curve": levers.curve_stage,
          "levers_b": levers.levers_b_stage, "combined": combined_stage, "profile": levers.profile_stage,
          "peers": peers_stage, "gputests": levers.gputests_stage, "pytest": pytest_stage,
          "choices": choices_stage, "data": data_stage, "progression": progression_stage}
"""Every stage, in the order they run."""

PARTS = {1: ["env", "baseline", "decode"],
         2: ["env", "levers_a", "ddp", "curve", "profile", "peers", "combined"]}
"""The two plans, each in order of value: part 1 the compiled default's baseline and real data (the device path's
train runs, with the arrangement the decode overlap probe finds fastest); part 2 the default's batch against 768
with the newest GPU tests beside its compilations, then the data-parallel wrapper, the batch curve and the
profile, then the peers (eager against eager, compiled against compiled), then the levers that helped, together.
levers_b (coordinate-descent tuning) is in neither: its compile alone outlasts part 2; run it alone with
--stages levers_b. docs/benchmarks.md has what each stage measured and why the order is this one."""

BUDGET_S = {1: 475.0, 2: 225.0}
"""Each part's deadline on a GPU: 7.9 and 3.75 minutes, so that the commands end within 8 and 4.5 minutes and
both fit, with the machine's start, in the 15 minutes a GPU machine is lent for; give part 2 what part 1 left
with --budget-s."""

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


LEVER_STAGES = ("levers_a", "levers_b")
"""The stages whose variants are speed levers of one GPU (the DDP stage's wrapper is not one)."""


def _options(flags: list[str]) -> dict[str, str | None]:
    """A command line's options and their values ("--batch-size 512" -> {"--batch-size": "512"}; a switch maps to
    None); a later option overrides an earlier one, as argparse does."""
    out: dict[str, str | None] = {}
    for i, token in enumerate(flags):
        if token.startswith("--"):
            value = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("--") else None
            out[token] = value
    return out


def _flags(options: dict[str, str | None]) -> list[str]:
    return [token for option, value in options.items() for token in (option, value) if token is not None]


def default_batch(stages: dict) -> int:
    """The GPU default's batch as a campaign's records have it: what the baseline (or the peers' default) ran,
    else DEFAULT_BATCH."""
    for stage, name in (("baseline", "compiled default"), ("peers", "dlscale bench default")):
        for run in stages.get(stage, {}).get("runs", []):
            batch = (run.get("details") or {}).get("batch_size")
            if run.get("name") == name and run.get("status") == "ok" and batch:
                return int(batch)
    return DEFAULT_BATCH


def helpful_flags(document: dict) -> list[str]:
    """The flags the levers that helped add to the default, from a campaign's gpu.json (levers_a, levers_b):
    each lever is what its variant's flags add to its baseline's (the flags both share, such as the batch both
    ran at, are no lever); every helpful lever but the batch, and the batch size that helped most among those
    that beat the default at the default's own batch (a batch that beat 256 says nothing against 512)."""
    stages = document.get("stages", {})
    ours = default_batch(stages)
    flags: dict[str, str | None] = {}
    best_batch: tuple[float, str] | None = None
    for stage in LEVER_STAGES:
        result = stages.get(stage, {})
        records = {r["name"]: r for r in result.get("runs", []) if r.get("variant_flags") is not None}
        for ratio in result.get("ratios", []):
            if ratio.get("ratio") is None or not helps(ratio):
                continue
            lever = _options(records.get(ratio["numerator"], {}).get("variant_flags") or [])
            base = _options(records.get(ratio["denominator"], {}).get("variant_flags") or [])
            added = {k: v for k, v in lever.items() if k not in base or base[k] != v}
            batch = added.pop("--batch-size", None)
            if "--wrap-single-rank" in added:
                continue  # the wrapper is not a lever of one rank
            flags.update(added)
            base_batch = int(base.get("--batch-size") or ours)
            if batch is not None and base_batch == ours and (best_batch is None or ratio["ratio"] > best_batch[0]):
                best_batch = (ratio["ratio"], batch)
    return _flags(flags) + (["--batch-size", best_batch[1]] if best_batch else [])


__all__ = ["BUDGET_S", "OPTIONAL", "PARTS", "STAGES", "Run", "build_plan", "combined_for_run", "default_batch",
           "helpful_flags"]
