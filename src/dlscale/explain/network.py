"""The network against the platform's: a `dlscale comm` run's all_reduce bus bandwidth at its largest
message set against what dlscale predict's model of a shipped platform (references/platforms.json)
expects for the same ranks, nodes and size, and what the difference costs the run's step."""

from __future__ import annotations

import shlex
from dataclasses import replace

from dlscale.errors import DlscaleError
from dlscale.explain.context import Context, Result
from dlscale.explain.findings import UNEXPLAINED, Effect, Finding, RuledOut
from dlscale.predict import inputs
from dlscale.predict.model import Strategy, predict, workload_for_model
from dlscale.predict.network import BUSBW_FACTORS, GB, Network, collective_time
from dlscale.predict.platforms import Platform, platforms
from dlscale.rundir import CommRun


def expected_busbw(net: Network, size: int, ranks: int) -> float:
    """GB/s of bus bandwidth dlscale predict's model gives an all_reduce of `size` bytes over `ranks`
    (ring, NCCL's latencies included): nccl-tests' busbw = factor(n) x S / t."""
    return BUSBW_FACTORS["all_reduce"](ranks) * size / collective_time(net, "all_reduce", size, ranks) / GB


def match_platform(device_name: str) -> tuple[Platform | None, str]:
    """The one shipped platform whose device is in the device name, else None and why."""
    found = [p for p in platforms().values() if p.device.lower() in device_name.lower()]
    if len(found) == 1:
        return found[0], f"the one shipped platform with {found[0].device}s"
    if found:
        return None, (f"{len(found)} shipped platforms have {found[0].device}s ({', '.join(p.id for p in found)}): "
                      "name one with --platform")
    return None, (f"no shipped platform has a {device_name} ({', '.join(platforms())}): name the closest with "
                  "--platform")


def network(ctx: Context) -> Result:
    """The comm run's busbw at its largest size against the platform's (--platform, else the one platform
    of the run's device)."""
    comm = ctx.comm_run
    if comm is None:
        return []
    largest = comm.largest()
    if largest is None:
        return [RuledOut("communication", f"comm run {comm.path}: no all_reduce over all ranks to compare (run "
                                          "dlscale comm --op all_reduce)")]
    size, measured, column = largest
    said = (f"comm run {comm.path}: all_reduce busbw {measured:.2f} GB/s at {size / 2**20:g} MiB ({column}) on "
            f"{comm.ranks} {comm.summary.get('backend')} ranks, {comm.per_node} per node")
    chosen, why = (ctx.platform, "named with --platform") if ctx.platform else match_platform(ctx.run.device_name)
    if chosen is None:
        return [RuledOut("communication", f"{said}; not compared: {why}")]
    net = replace(chosen.network(), devices_per_node=comm.per_node)
    expected = expected_busbw(net, size, comm.ranks)
    evidence = (f"{said}; dlscale predict's model of {chosen.id} ({why}) expects {expected:.2f} GB/s for that size "
                f"and layout ({net.source}), {100 * measured / expected:.0f}% of it measured")
    if expected / measured <= UNEXPLAINED:
        return [RuledOut("communication", evidence)]
    return [Finding("communication", f"network slower than the platform: {measured:.2f} GB/s busbw, "
                                     f"{chosen.id} expects {expected:.2f}", evidence, _effect(ctx, comm, net),
                    "check the transport NCCL chose (NCCL_DEBUG=INFO: NET/IB, not NET/Socket), InfiniBand and "
                    "GPUDirect RDMA (ibstat; NCCL_IB_HCA, NCCL_SOCKET_IFNAME, NCCL_NET_GDR_LEVEL), NVLink peer "
                    f"access (nvidia-smi topo -m; NCCL_P2P_DISABLE unset); then re-measure: `{remeasure(comm, size)}`")]


def remeasure(comm: CommRun, size: int) -> str:
    """The torchrun line that measures all_reduce at `size` again with the comm run's layout."""
    nodes = comm.num_nodes
    words = ["torchrun", *(["--nnodes", str(nodes)] if nodes > 1 else []), "--nproc_per_node",
             str(comm.per_node), "-m", "dlscale", "comm", "--op", "all_reduce", "-e", str(size)]
    return shlex.join(words)


def _effect(ctx: Context, comm: CommRun, platform_net: Network) -> Effect:
    """The run's step on the measured network over its step on the platform's, from dlscale predict's model
    of the run (its 1-rank baseline's step where given, else the run's own step as compute)."""
    run = ctx.run
    if run.world_size < 2:
        return Effect(None, "this run is one rank: its step has no communication; the network slows runs on "
                            "several ranks (explain one with --comm-run)")
    per_node = max(run.world_size // max(run.num_nodes, 1), 1)
    try:
        if ctx.baseline is not None:
            workload, _ = inputs.workload_from_run(ctx.baseline.path)
            whose = f"the 1-rank run {ctx.baseline.name}'s step"
        else:
            step_s = run.batch / run.per_device_ips if run.batch and run.per_device_ips else 0.0
            workload = workload_for_model(run.model, batch_per_device=run.batch or 1, step_s=step_s)
            whose = "the run's own step taken as compute (its communication included: an underestimate)"
        strategy = Strategy(run.summary.get("dist_optimizer") or "allreduce")
        steps = [predict([1, run.world_size], workload, strategy, replace(net, devices_per_node=per_node))[-1]
                 for net in (inputs.network_from_comm_run(comm.path), platform_net)]
    except DlscaleError as error:
        return Effect(None, f"no prediction for this run ({error})")
    measured, expected = steps
    return Effect(measured.step_ms / expected.step_ms,
                  f"dlscale predict's model of this run at {run.world_size} ranks, {whose}: {measured.step_ms:.1f} ms "
                  f"per step on the measured network ({measured.exposed_ms:.1f} ms exposed communication) against "
                  f"{expected.step_ms:.1f} ms on {platform_net.name} ({expected.exposed_ms:.1f} ms)")
