"""Causes in the host the run shared: more compute threads than the cores its processes may use
(oversubscription), and other work on those cores (a loaded host). The evidence is the run's host_load
record (env.json at the start, summary.json at the end: metrics/host_load.py): ranks x threads per rank
against the cores (sched_getaffinity), the load average at the start and end, and rank 0's CPU time over
the timed part. Runs written before that record: env.json's torch_threads and cpu_available alone.

A host is found loaded where the load average exceeded the machine's cores at the start, or where the run's
own record shows that its rates are not the model's speed (metrics/host_load.py's disturbance: its threads
kept off the cores, an interval wider than its mean): the verdict that marks its figures in the terminal,
report and sweep, so explain and the marks agree."""

from __future__ import annotations

from dlscale.explain.context import Context, Result
from dlscale.explain.findings import Effect, Finding, RuledOut
from dlscale.metrics.host_load import HostLoad, run_evidence

OWN = "the run's own measurement"


def host(ctx: Context) -> Result:
    record = {**(ctx.run.env.get("host_load") or {}), **(ctx.run.summary.get("host_load") or {})}
    facts = _facts(ctx, record)
    if facts is None:
        return [RuledOut("host", "threads per rank and cores: not recorded")]
    return [*_oversubscribed(ctx, facts, record), *_loaded(ctx, facts, record)]


def _facts(ctx: Context, record: dict) -> HostLoad | None:
    """The node's ranks, their threads, the cores and the load at the start, as HostLoad holds them."""
    run, env = ctx.run, ctx.run.env
    threads = record.get("threads_per_rank") or env.get("torch_threads")
    cores = record.get("cores_available") or env.get("cpu_available") or env.get("cpu_count")
    if not threads or not cores:
        return None
    per_node = record.get("ranks_per_node") or max(run.world_size // max(run.num_nodes, 1), 1)
    load = record.get("load_avg_start")
    host_cores = record.get("host_cores") or env.get("cpu_count")
    return HostLoad(int(per_node), int(threads), int(cores), tuple(load) if load else None,
                    int(host_cores) if host_cores else None)


def _cpu_time(record: dict) -> str:
    """Rank 0's CPU time over the timed part, as cores busy and as a share of its threads' time."""
    busy, share = record.get("process_cores_busy"), record.get("thread_share")
    if busy is None or share is None:
        return ""
    return (f"; rank 0's process ran {busy:.2f} cores' worth of CPU time per second over the timed part, "
            f"{100 * share:.0f}% of what its {record.get('threads_per_rank')} threads could run")


def _oversubscribed(ctx: Context, facts: HostLoad, record: dict) -> Result:
    run = ctx.run
    said = f"{facts.ranks_per_node} rank(s) per node x {facts.threads_per_rank} threads on {facts.cores} cores"
    if run.device != "cpu":
        return [RuledOut("host", f"threads per rank: {said} (a GPU run computes on its GPU)")]
    if not facts.oversubscribed:
        return [RuledOut("host", f"threads per rank: {said}: {facts.threads} compute threads fit")]
    omp = run.env.get("env_vars", {}).get("OMP_NUM_THREADS", "unset")
    return [Finding("host", f"oversubscribed: {facts.threads} compute threads on {facts.cores} cores",
                    f"{said} (env.json host_load, else torch_threads and cpu_available: the cores this process may "
                    f"use; OMP_NUM_THREADS={omp}){_cpu_time(record)}",
                    Effect(facts.threads / facts.cores, "threads over cores: the ranks take turns on the cores "
                                                        "(dlscale predict's CPU model, docs/prediction.md)",
                           bound=True),
                    f"set {facts.advice()}")]


def _loaded(ctx: Context, facts: HostLoad, record: dict) -> Result:
    load, end = facts.load_start, record.get("load_avg_end")
    own = run_evidence(ctx.run) if ctx.run.device == "cpu" else []  # a GPU run's interval: measurement's
    if load is None and not own:
        return [RuledOut("host", "load average: not recorded (a run from before dlscale recorded it)")]
    at_end = f"; at the end {end[0]:.2f} (the run's own threads included)" if end else ""
    evidence = (f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1, 5, 15 minutes; "
                f"{record.get('load_avg_source') or '/proc/loadavg'}) when the run started, on the machine's "
                f"{facts.machine_cores} cores{at_end}" if load else "load average not recorded")
    if not facts.loaded and not own:
        return [RuledOut("host", f"{evidence}: other work left the cores free")]
    effect = _load_effect(ctx, facts, record)
    if not facts.loaded and facts.oversubscribed and len(own) == 1 and own[0].startswith("its threads") \
            and effect.factor == 1.0:
        return [RuledOut("host", f"{evidence}; {own[0]}: its own oversubscription accounts for that (above)")]
    settings = facts.advice()
    cause = (f"a loaded host: load average {load[0]:.2f} on {facts.machine_cores} cores before the run"
             if facts.loaded else f"a busy host: {own[0]}")
    said = f"; by its own record its rates are not the model's speed: {' and '.join(own)}" if own else ""
    return [Finding("host", cause, evidence + _cpu_time(record) + said, effect,
                    "run where nothing else runs (a quiet machine, a job of its own)" +
                    (f"; else set {settings}" if settings else ""))]


def _load_effect(ctx: Context, facts: HostLoad, record: dict) -> Effect:
    """The share of its threads' time rank 0 ran while it was not waiting for data (a CPU run's own
    measurement), less what its own oversubscription explains; else the cores' fair share among the others'
    load and the run's threads."""
    share, own = record.get("thread_share"), max(facts.threads / facts.cores, 1.0)
    if ctx.run.device != "cpu":
        return Effect(None, "a GPU run shares the host's cores only for its input pipeline and kernel launches: "
                            "by how much the load slowed them is not measured")
    if share:
        total, compute = ctx.run.steady_rates()
        computing = min(total / compute, 1.0) if total and compute else 1.0  # the rest of the time it waited for data
        computing = 1.0 if computing > 0.99 else computing
        share = min(share / computing, 1.0)
        when = f"the {100 * computing:.0f}% of the timed part it did not wait for data" if computing < 1 else \
            "the timed part"
        own_part = f", {own:.2f}x of it its own oversubscription" if own > 1 else ""
        return Effect(max(1.0 / share / own, 1.0),
                      f"{OWN}: its threads ran {100 * share:.0f}% of {when}; with the cores to themselves up to "
                      f"{1 / share:.2f}x faster{own_part}", bound=True)
    if facts.load_start is None:
        return Effect(None, "its rates swung more than their mean: by how much the host slowed them is not measured")
    demand = facts.load_start[0] + facts.threads
    return Effect(demand / max(facts.threads, facts.machine_cores),
                  f"the cores' fair share: {facts.load_start[0]:.2f} runnable tasks of other work and the run's "
                  f"{facts.threads} threads on {facts.machine_cores} cores (the load average at the start)", bound=True)
