"""explain(): a run (or each run of a sweep) against its published figure: every cause checked, the
findings ranked by estimated effect, what is left unexplained and what to measure next."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from dlscale.explain.context import Context, Result
from dlscale.explain.findings import UNEXPLAINED, Explanation, Finding
from dlscale.explain.host import host
from dlscale.explain.machine import device
from dlscale.explain.measured import communication, input_bound, measurement, stragglers
from dlscale.explain.network import network as network_against_platform
from dlscale.explain.recipe import recipe, software
from dlscale.explain.target import NoMatchingReference, choose
from dlscale.predict.network import Network
from dlscale.predict.platforms import Platform
from dlscale.rundir import CommRun, Run, read_comm_run, read_run, read_runs

CAUSES: tuple[Callable[[Context], Result], ...] = (recipe, device, host, input_bound, communication,
                                                   network_against_platform, stragglers, software, measurement)
"""Each cause is one function of the context returning findings and what it ruled out."""


def explain_run(run: Run, reference: str | None = None, *, baseline: Run | None = None,
                network: Network | None = None, comm_run: CommRun | None = None,
                platform: Platform | None = None, others: tuple[Run, ...] = ()) -> Explanation:
    """One run against `reference` (default: the matching one; none matching: nothing, with a note why).
    others: the runs explained beside it, whose rates may show a setting faster on the same device."""
    note = ""
    try:
        target = choose(run, reference)
    except NoMatchingReference as missing:
        target, note = None, str(missing)
    ctx = Context(run, target, baseline, network, comm_run, platform, others)
    explanation = Explanation(run=str(run.path), describe_run=describe(run), run_ips=run.per_device_ips,
                              reference=target.spec if target else None,
                              describe_reference=target.describe() if target else None,
                              reference_ips=target.per_device_ips if target else None, note=note)
    for cause in CAUSES:
        for item in cause(ctx):
            (explanation.findings if isinstance(item, Finding) else explanation.ruled_out).append(item)
    explanation.next_step = next_step(explanation, run)
    return explanation


def explain(path: str | Path, reference: str | None = None, *, baseline: str | Path | None = None,
            network: Network | None = None, comm_run: str | Path | None = None,
            platform: Platform | None = None) -> list[Explanation]:
    """Every run of a run or sweep directory; a sweep's 1-rank run is the others' baseline. A comm run's
    busbw is compared with `platform`, else the one platform of each run's device."""
    runs = read_runs(path)
    base = read_run(baseline) if baseline else next((r for r in runs if r.world_size == 1), None)
    comm = read_comm_run(comm_run) if comm_run is not None else None
    others = tuple(runs) + ((base,) if base is not None and base not in runs else ())
    return [explain_run(run, reference, baseline=base if run.world_size > 1 else None, network=network,
                        comm_run=comm, platform=platform, others=others) for run in runs]


def describe(run: Run) -> str:
    options = [key for key in ("channels_last", "cudnn_benchmark", "fused_optimizer", "compile", "cuda_graphs")
               if run.speed(key)]
    return (f"{run.kind}, {run.model}, {run.precision}{''.join(' +' + o for o in options)}, batch {run.batch} per "
            f"rank, {run.world_size} x {run.device_name}")


def next_step(explanation: Explanation, run: Run) -> str:
    """What to measure next when the findings do not account for the gap (or find nothing)."""
    left = explanation.unexplained
    if explanation.gap is not None and not explanation.below:
        return ""  # not below the reference: no gap to chase
    if explanation.findings and (left is None or left <= UNEXPLAINED):
        return ""
    profile = _profile_command(run)
    if left is not None and explanation.findings:
        why = f"the findings account for {explanation.explained:.2f}x of the {explanation.gap:.2f}x gap; " \
              f"{left:.2f}x is unexplained"
    elif left is not None:
        why = f"nothing checked explains the {explanation.gap:.2f}x gap"
    else:
        why = "nothing checked stands out"
    return f"{why[0].upper()}{why[1:]}. Measure next: `{profile}` (each part of the step on every rank; " \
           "docs/profiling.md)"


def _profile_command(run: Run) -> str:
    if run.kind == "train":
        preset = run.config.get("preset") or "FILE:PRESET"
        words = ["dlscale", "profile", "train", "--config", preset]
    else:
        words = ["dlscale", "profile", "bench", "--model", run.model, "--batch-size", str(run.batch),
                 "--precision", run.precision]
        if run.summary.get("image_size"):
            words += ["--image-size", str(run.summary["image_size"])]
        words += [f"--{key.replace('_', '-')}" for key in ("channels_last", "cudnn_benchmark", "compile")
                  if run.speed(key)]
    if run.world_size > 1:
        words = ["torchrun", "--nproc_per_node", str(run.world_size), "-m", *words]
    return shlex.join(words)
