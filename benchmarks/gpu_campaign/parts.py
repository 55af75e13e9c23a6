"""Which stages run, in which order: the two plans that fit the lent GPU machine, and every stage by name.

The machine is held for 15 minutes of device time at most, its start (1-2 minutes) included: part 1 (the default) is
the one command of at most 8 minutes, in order of value, with time for one short rerun after it; part 2 the rest, in
a later session. What does not fit is recorded as not run, with the command that runs it alone.
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
    env_stage,
    peers_stage,
    progression_stage,
    pytest_stage,
)
from gpu_campaign.report import RULE, helps


def wheels_stage(f: Features) -> Stage:
    """nvImageCodec and its nvJPEG installed from --wheels into the work directory, first on the PYTHONPATH of the
    runs that need it where nvImageCodec then decodes on the device (wheels.py); where it cannot, they say why."""
    argv = ["benchmarks/gpu_campaign/wheels.py", "--wheels", f.wheels_dir, "--target", "{work}/wheels",
            "--device", f.device, "--json", "{work}/wheels.json"]
    found = ", ".join(f.wheels) or f"none in {f.wheels_dir} (scripts/gpu-wheels.sh downloads them)"
    run = Run("install wheels", argv, "wheels", WHEELS_S[f.device], output="{work}/wheels.json",
              settings=f"pip install --no-deps --no-index --target; {found}")
    return Stage("wheels", "nvImageCodec's and nvJPEG's wheels, and whether nvImageCodec decodes here", 60.0, [run])


WHEELS_S = {"cuda": 20.0, "cpu": 10.0}
"""The wheels stage: pip's install of the two wheels (2 s on the CPU VM) and a process that imports torch, makes a
CUDA context and decodes two JPEGs on each backend."""


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


STAGES = {"wheels": wheels_stage, "env": env_stage, "baseline": levers.baseline_stage,
          "levers_a": levers.levers_stage, "decode": decode.decode_stage, "floor": levers.floor_stage,
          "ddp": levers.ddp_stage, "curve": levers.curve_stage, "levers_b": levers.levers_b_stage,
          "combined": combined_stage, "profile": levers.profile_stage, "peers": peers_stage,
          "gputests": levers.gputests_stage, "pytest": pytest_stage, "choices": choices_stage,
          "progression": progression_stage}
"""Every stage, in the order they run."""

PARTS = {1: ["wheels", "env", "decode", "floor", "pytest"],
         2: ["env", "baseline", "levers_a", "ddp", "curve", "profile", "peers", "combined"]}
"""The two plans, each in order of value. Part 1, the one command of a loan: the wheels nvImageCodec needs, then
real data (`dlscale train` on synthetic input and on JPEGs fed four ways, each with its loader's figures), then the
throughput floor (the default against coordinate-descent tuning and the combined levers, alternated), then the GPU
test tier, each started only where its estimate fits what is left. Part 2, a later loan's: the default's baseline
from an empty cache, its batch against 768 with the newest GPU tests beside the compilations, the data-parallel
wrapper, the batch curve, the profile, the peers, the levers that helped together. docs/benchmarks.md has what each
stage measured and why the order is this one."""

BUDGET_S = {1: 455.0, 2: 455.0}
"""Each part's deadline on a GPU: the command ends within the 480 s (8 minutes) a loan's command is given, with its
start (3 s), the stopping of a command at the deadline (runner._stop: 10 s at most) and the removal of the work
directory and the writing of its files (5 s) after it."""

NEEDS_WHEELS = ("decode",)
"""Stages with runs that use nvImageCodec or simplejpeg: --stages runs the wheels stage before them. Only those runs
(Run.needs) get the wheels on their PYTHONPATH: the GPU tier tests the machine's own environment, as its tests were
written for."""

OPTIONAL = frozenset(STAGES) - {name for names in PARTS.values() for name in names}
"""Stages in neither plan (--stages runs them): the measurements behind the earlier defaults."""


def build_plan(f: Features, only: dict[str, set[str] | None] | None = None, rounds: int | None = None,
               part: int = 1) -> list[Stage]:
    """The stages to run: the part's plan, or only: {stage: run names or None for all} (env always runs);
    rounds: at most this many rounds per stage."""
    wheels = only is not None and any(name in only for name in NEEDS_WHEELS)
    names = PARTS[part] if only is None else [n for n in STAGES if n == "env" or n in only or
                                               (n == "wheels" and wheels)]
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
