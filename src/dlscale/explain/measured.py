"""Causes the run measured itself: waiting for data (input-bound), a straggler, communication, and the
measurement (iterations, warm-up, spread). Every effect here is the run's own measurement."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from dlscale.config.data import workers_kind_for
from dlscale.errors import DlscaleError
from dlscale.explain.context import Context, Result
from dlscale.explain.findings import Effect, Finding, RuledOut
from dlscale.metrics.input_bound import (
    DECODE_PATHS,
    INPUT_BOUND_SHARE,
    PROCESS_TAX,
    PROCESS_WHY,
    cores_for_rate,
    cores_said,
    workers_said,
)
from dlscale.metrics.ranks import too_few
from dlscale.predict import inputs
from dlscale.predict.model import Strategy, predict
from dlscale.rundir import number

OWN = "the run's own measurement"


def input_bound(ctx: Context) -> Result:
    """Compute img/s (data wait taken out) against total img/s: NVIDIA ConvNets' compute_ips and total_ips."""
    run = ctx.run
    total, compute = run.steady_rates()
    if not total or not compute:
        return [RuledOut("input", "no data wait recorded")]
    share = max(1.0 - total / compute, 0.0)
    if share < INPUT_BOUND_SHARE:
        return [RuledOut("input", f"data wait {100 * share:.1f}% of the step (input-bound from "
                                  f"{100 * INPUT_BOUND_SHARE:.0f}%: metrics/input_bound.py)")]
    per_rank, need = total / run.world_size, compute / run.world_size
    workers = run.data_settings.get("num_workers")
    cores = run.env.get("cpu_available") or run.env.get("cpu_count")
    per_node = max(run.world_size // max(run.num_nodes, 1), 1)
    cores_per_rank = max(int(cores) // per_node, 1) if cores else None
    evidence = [f"the device waits for data {100 * share:.0f}% of each step: {total:.1f} img/s of the {compute:.1f} "
                f"the model computes (compute_ips / total_ips)"]
    kind = _workers_kind(run)
    if workers:
        each = per_rank / workers
        evidence.append(f"{workers} {workers_said(workers, kind)} per rank deliver {each:.1f} img/s each; the model "
                        f"needs {need:.1f} per rank, {math.ceil(need / each)} workers at that rate")
    elif workers == 0:
        evidence.append("no loader workers: the training process decodes between steps")
    if cores_per_rank:
        evidence.append(f"{cores_per_rank} CPU core(s) per rank ({cores} for {per_node} rank(s) per node)")
    evidence += _reads(run)
    path = _decode_path(run)
    evidence += _path_cores(run, path, need)
    fixes = []
    if workers and kind == "process" and path in ("fast", "plain") and run.device == "cuda":
        fixes.append(f"--set data.workers_kind=thread (loader threads make the same batches without pickling, shared "
                     f"memory and collation: worker processes took {PROCESS_TAX:.2f}x their CPU time per image in "
                     "benchmarks/input_threads.py)")
    if workers is not None and cores_per_rank and workers < cores_per_rank and path != "gpu":
        fixes.append(f"--set data.num_workers={min(cores_per_rank, max(2 * workers, 1))}")
    if path == "plain":
        fixes.append("--set data.decode=fast")
    if path in ("fast", "plain") and run.device == "cuda":
        fixes.append("--set data.decode=gpu (nvJPEG decodes on the device; the loader workers only read files: "
                     "`dlscale loader --decode gpu --device cuda` measures the CPU time per image it takes)")
    if path == "gpu" and run.device == "cuda" and not _decode_process(run):
        fixes.append(f"--set data.device_feed=process ({PROCESS_WHY})")
    if path == "gpu" and workers and _device_share(run) == 1:
        fixes.append("--set data.device_decode_share=0.5 (the device decodes half the training JPEGs, the loader "
                     "workers the rest beside it; `dlscale loader --decode gpu --device cuda --device-share 0.5` "
                     "measures a share)")
    fixes.append("more CPU cores per rank, smaller images or faster storage; `dlscale loader --data PATH` measures "
                 "the pipeline alone (docs/profiling.md)")
    return [Finding("input", "input-bound: the device waits for data", "; ".join(evidence),
                    Effect(compute / total, f"{OWN}: compute img/s over total img/s"), "; ".join(fixes))]


def _workers_kind(run) -> str:
    """The run's kind of loader workers as it ran (its summary's workers_kind; a run that did not record it: its
    data.workers_kind, "auto" resolved by its device as the run did); a run from before the setting had worker
    processes."""
    kind = run.summary.get("workers_kind") or run.data_settings.get("workers_kind")
    if kind == "auto":
        return workers_kind_for(run.data_settings.get("name"), kind, run.summary.get("device"))
    return kind if kind in ("thread", "process") else "process"


def _decode_process(run) -> bool:
    """Whether the run decoded its training batches in a process of their own (data.device_feed=process; before
    that setting, data.device_decode_process)."""
    return run.data_settings.get("device_feed") == "process" or bool(run.data_settings.get("device_decode_process"))


def _decode_path(run) -> str | None:
    """The decode path the run took: summary.json's (data.decode resolved), else the configured one."""
    if run.summary.get("decode"):
        return run.summary["decode"]
    decode = run.data_settings.get("decode")
    return decode if run.data_settings.get("name") == "imagefolder" and decode != "auto" else None


def _device_share(run) -> float:
    """The share of the training JPEGs the device decoded (data.device_decode_share; 1 before it existed)."""
    share = run.data_settings.get("device_decode_share")
    return share if isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share <= 1 else 1.0


def _path_cores(run, path: str | None, per_device: float) -> list[str]:
    """The decode path, its CPU time per image and the cores per device it needs at the model's rate."""
    if path is None:
        return []
    said = f"decode path {path} ({DECODE_PATHS.get(path, path)})"
    if path == "gpu" and _device_share(run) < 1:
        said = f"{said[:-1]}; {_device_share(run):.0%} of the training JPEGs on the device, the workers the rest)"
    if path == "gpu" and _decode_process(run):
        said = f"{said[:-1]}; decoded in a process of its own)"
    windows = [w for w in run.steady_windows() if number(w.get("host_cpu_ms_per_image")) is not None]
    if not windows:
        return [said]
    ms = statistics.fmean(w["host_cpu_ms_per_image"] for w in windows)
    return [f"{said}: {ms:.2f} CPU-ms per image in the training processes and their loader workers (mean of "
            f"{len(windows)} log windows), so the model's {per_device:.1f} img/s per device needs about "
            f"{cores_said(cores_for_rate(ms / 1000, per_device))} per device on this path"]


def _reads(run) -> list[str]:
    windows = [w for w in run.steady_windows() if w.get("io_read_gb_per_s") is not None]
    if not windows:
        return []
    mean = lambda key: statistics.fmean(w[key] for w in windows)  # noqa: E731
    return [f"reads over all ranks: {1000 * mean('io_read_gb_per_s'):.2f} MB/s and {mean('io_read_ops_per_s'):.0f} "
            f"read calls/s, {mean('io_files_per_s'):.1f} files/s, {1000 * mean('io_storage_read_gb_per_s'):.2f} MB/s "
            f"from storage (mean of {len(windows)} log windows)"]


def stragglers(ctx: Context) -> Result:
    """The slowest rank by lead time (data wait + forward; metrics/ranks.py) against the others'."""
    run = ctx.run
    verdict = run.summary.get("stragglers")
    if run.world_size < 2:
        return [RuledOut("stragglers", "one rank")]
    if not verdict or verdict.get("pattern") == "one rank":
        return [RuledOut("stragglers", "no per-rank times recorded (a run from before dlscale recorded them)")]
    lead, step = _rank_means(run)
    rank = verdict["slowest_rank"]
    share = f"rank {rank} slowest in {verdict['slowest_windows']} of {verdict['windows']} " + \
            ("iterations" if run.kind == "bench" else "log windows")
    if verdict["pattern"] == "even" and not too_few(verdict):
        return [RuledOut("stragglers", f"ranks even ({share}, median +{verdict['median_excess_pct']:.0f}%)")]
    others = statistics.median(t for r, t in enumerate(lead) if r != rank) if lead else None
    effect = Effect(None, "the slow windows come and go: no steady cost")
    if verdict["pattern"] == "always" and lead and step and others is not None:
        excess = lead[rank] - others
        effect = Effect(step / max(step - excess, 1e-9),
                        f"{OWN}: every step waits {excess:.1f} ms for rank {rank} ({step:.1f} ms steps)")
    times = ", ".join(f"rank {r} {t:.1f} ms" for r, t in enumerate(lead)) if lead else "not recorded"
    always = verdict["pattern"] == "always"
    cause = f"straggler: rank {rank}" if always else f"{share}, too few to call it a straggler" if too_few(verdict) \
        else f"a rank sometimes slower: rank {rank}"
    return [Finding("stragglers", cause,
                    f"{share}, median +{verdict['median_excess_pct']:.0f}% data wait + forward over the other ranks' "
                    f"median; per step: {times}", effect,
                    f"look at rank {rank}'s host and device: other processes on its cores, its GPU's clocks and "
                    "temperature (nvidia-smi), its data path; `dlscale profile` shows each rank's breakdown")]


def _rank_means(run) -> tuple[list[float], float | None]:
    """Each rank's mean lead time (data + forward) per step, and the mean step, in ms."""
    s = run.summary
    if s.get("rank_lead_ms"):
        step = statistics.fmean(s["rank_step_ms"]) if s.get("rank_step_ms") else None
        return list(s["rank_lead_ms"]), step
    if s.get("rank_forward_ms"):
        lead = [statistics.fmean(d + f for d, f in zip(data, forward, strict=True))
                for data, forward in zip(s["rank_data_ms"], s["rank_forward_ms"], strict=True)]
        return lead, statistics.fmean(t for rank in s["rank_step_ms"] for t in rank)
    return [], None


def communication(ctx: Context) -> Result:
    run = ctx.run
    if run.world_size < 2:
        return [RuledOut("communication", "one rank: nothing to communicate")]
    out: Result = []
    comm, sent, where = run.comm_per_step()
    per_device = run.per_device_ips
    if comm and per_device and run.batch:
        step = 1000.0 * run.batch / per_device
        strategy = run.summary.get("dist_optimizer")
        out.append(Finding("communication", f"{comm:.1f} ms of communication per step ({strategy})",
                           f"the strategy's own timer ({where}): {comm:.1f} ms of a {step:.1f} ms step, "
                           f"{(sent or 0) / 1e6:.1f} MB sent per rank",
                           Effect(step / max(step - comm, 1e-9), f"{OWN}: the step without its communication"),
                           communication_change(ctx)))
    if ctx.baseline is not None and ctx.baseline.per_device_ips and per_device:
        out.append(_against_baseline(ctx, per_device))
    if not out:
        out.append(RuledOut("communication", "overlapped with backward (DDP); no 1-rank run to compare with: explain a "
                                             "sweep (dlscale scale --nproc 1,N) or give --baseline RUN"))
    return out


NEIGHBOUR_STRATEGIES = ("neighbor_allreduce", "hierarchical_neighbor_allreduce")


def communication_change(ctx: Context) -> str:
    """What would communicate less or hide more, leaving out what the run already does: DDP's overlap for
    a run that is not DDP, fewer neighbour exchanges than the run's, a larger batch than its own."""
    run = ctx.run
    strategy = run.summary.get("dist_optimizer") or run.config.get("strategy", {}).get("dist_optimizer") or "allreduce"
    options = []
    if strategy != "allreduce":
        options.append("overlap it with backward (--dist-optimizer allreduce: DDP's buckets)")
    if strategy in NEIGHBOUR_STRATEGIES:
        every = int(run.config.get("strategy", {}).get("num_steps_per_communication") or 1)
        options.append(f"exchange less often (--num-steps-per-communication {2 * every})")
    if run.batch:
        larger = 2 * run.batch
        options.append(f"a larger batch per rank ({ctx.change(f'--batch-size {larger}', f'batch_size={larger}')}, "
                       "if it fits)")
    return "; ".join([*options, "a faster network"])


def _against_baseline(ctx: Context, per_device: float) -> Finding:
    run, base = ctx.run, ctx.baseline
    loss = base.per_device_ips / per_device
    evidence = (f"{per_device:.1f} img/s per rank on {run.world_size} ranks against {base.per_device_ips:.1f} on one "
                f"({base.name}): {100 / loss:.1f}% scaling efficiency")
    change = communication_change(ctx)
    if ctx.network is None:
        return Finding("communication", f"scaling loss {loss:.2f}x against one rank", evidence,
                       Effect(loss, f"{OWN}: the sweep's 1-rank run; communication, stragglers and shared cores "
                                    "together (give --comm-run or --platform for dlscale predict's share)", bound=True),
                       change)
    try:
        workload, _ = inputs.workload_from_run(base.path)
        strategy = Strategy(run.summary.get("dist_optimizer") or "allreduce")
        net = replace(ctx.network, devices_per_node=max(run.world_size // max(run.num_nodes, 1), 1))
        point = predict([1, run.world_size], workload, strategy, net)[-1]
    except DlscaleError as error:
        return Finding("communication", f"scaling loss {loss:.2f}x against one rank", evidence,
                       Effect(loss, f"{OWN} (no prediction: {error})", bound=True), change)
    expected = 1.0 / point.efficiency if point.efficiency else 1.0
    return Finding("communication", f"communication: {expected:.2f}x expected, {loss:.2f}x measured",
                   f"{evidence}; dlscale predict expects {point.exposed_ms:.1f} ms of exposed communication and "
                   f"{point.stragglers_ms:.1f} ms of stragglers per step on {ctx.network.name} "
                   f"({100 * (point.efficiency or 1):.1f}% efficiency)",
                   Effect(expected, f"dlscale predict's model of this step ({ctx.network.source}); the rest of the "
                                    f"loss ({loss / expected:.2f}x) is not communication it models"), change)


def measurement(ctx: Context) -> Result:
    run = ctx.run
    return _interval(ctx) if run.kind == "bench" else _warm_up(ctx)


def _interval(ctx: Context) -> Result:
    s, run = ctx.run.summary, ctx.run
    mean, ci, iters = s.get("img_per_sec_total_mean"), s.get("img_per_sec_total_ci95"), s.get("num_iters")
    if not mean or ci is None:
        return [RuledOut("measurement", "no interval recorded")]
    rel = ci / mean
    evidence = (f"{iters} timed iterations of {s.get('num_batches_per_iter')} steps after "
                f"{s.get('num_warmup_batches')} warm-up steps: {mean:.1f} +-{ci:.1f} img/s (95%, +-{100 * rel:.1f}%)")
    target = ctx.target.per_device_ips * run.world_size if ctx.target else None
    more = f"more iterations (--num-iters {max(20, 2 * (iters or 0))}) on a quiet machine"
    if target and target <= mean + ci:
        return [Finding("measurement", "the published figure lies inside this run's 95% interval", evidence,
                        Effect(target / mean, f"{OWN}: 1.96 x std over iterations (docs/references.md#horovod-ci95)",
                               bound=True), more)]
    if rel >= 0.05 or (iters or 0) < 10:
        return [Finding("measurement", f"a wide interval: +-{100 * rel:.1f}% over {iters} iterations", evidence,
                        Effect(1.0 + rel, f"{OWN}: the upper end of the 95% interval over the mean", bound=True),
                        more)]
    return [RuledOut("measurement", evidence)]


def _warm_up(ctx: Context) -> Result:
    run = ctx.run
    windows, steady = list(run.windows), run.steady_windows()
    if not windows or not steady or not run.total_ips:
        return [RuledOut("measurement", "no log windows recorded")]
    first = [w for w in windows if w not in steady]
    time_all = sum(w.get("window_s") or 0.0 for w in windows)
    share = sum(w.get("window_s") or 0.0 for w in first) / time_all if time_all else 0.0
    steady_rate = statistics.fmean(w["throughput_img_per_s"] for w in steady)
    evidence = (f"{len(windows)} log windows; the epochs' first windows (loader start-up) take {100 * share:.0f}% "
                f"of the time; {steady_rate:.1f} img/s after them against {run.total_ips:.1f} over the epochs")
    if steady_rate > 1.05 * run.total_ips:
        persistent = "" if run.data_settings.get("persistent_workers", True) else \
            ", persistent loader workers (--set data.persistent_workers=true)"
        return [Finding("measurement", "start-up in the measured time", evidence,
                        Effect(steady_rate / run.total_ips, f"{OWN}: the rate after the epochs' first windows"),
                        f"longer epochs{persistent}, or compare steady-state rates (metrics.jsonl)")]
    return [RuledOut("measurement", evidence)]
