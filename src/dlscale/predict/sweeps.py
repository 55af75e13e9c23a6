"""`dlscale predict --validate --sweep DIR --comm-run DIR`: measured gloo sweeps of this machine, their
larger world sizes predicted from their 1-rank run, a comm run's fit, and the compute slowdown of ranks that
share the host's cores.

Ranks on one host share its cores (and its memory bandwidth): each computes more slowly than one rank
alone. That slowdown is measured, not assumed: the mean forward time per step of the N-rank run's ranks
over the 1-rank run's (`rank_forward_ms`, timed by `dlscale bench` inside each rank, outside the
allreduce). Where a run did not time its forward pass (CUDA graphs), the cores arithmetic of
Workload.core_share stands in.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from dlscale.errors import ConfigError
from dlscale.predict.ceilings import Ceilings
from dlscale.predict.inputs import network_from_comm_run, workload_from_run
from dlscale.predict.model import Strategy, predict_point
from dlscale.rundir import read_summary, read_sweep


@dataclass(frozen=True)
class SweepRow:
    sweep: str
    series: str
    devices: int
    measured: float
    predicted: float
    """Compute (with the measured same-host slowdown) and exposed communication: what the goal is for."""
    with_stragglers: float
    """The same with the stragglers term from the 1-rank run's step spread (on a shared machine that
    spread is mostly other processes' load, which varies in time rather than per step)."""
    limit: str
    inputs: str
    slowdown: float | None = None
    """Each rank's forward time in the N-rank run over the 1-rank run's; None: not measured."""
    cores_arithmetic: float | None = None
    """The prediction with the cores arithmetic instead of the measured slowdown (for comparison)."""

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1

    @property
    def error_with_stragglers(self) -> float:
        return self.with_stragglers / self.measured - 1


def forward_ms(summary: dict) -> float | None:
    """The mean forward time per step over a bench run's ranks and timed iterations, or None."""
    table = summary.get("rank_forward_ms") or []
    values = [v for rank in table for v in rank if v]
    return statistics.fmean(values) if values else None


def host_slowdown(one_rank: dict, n_ranks: dict) -> float | None:
    """The compute slowdown of each of N ranks on one host: forward(N ranks) / forward(1 rank)."""
    alone, shared = forward_ms(one_rank), forward_ms(n_ranks)
    return shared / alone if alone and shared else None


def _series_runs(path: Path) -> dict[str, dict[int, Path]]:
    by_series: dict[str, dict[int, Path]] = {}
    for point, run_dir in read_sweep(path).finished(("ok",)):
        if point.get("nnodes", 1) == 1:
            by_series.setdefault(point.get("series", ""), {})[point["world_size"]] = run_dir
    return by_series


def validate_sweep(sweep_dir: str | Path, comm_dir: str | Path,
                   slowdowns: dict[int, float] | None = None) -> list[SweepRow]:
    """Each series of a `dlscale scale --nproc 1,2,...` sweep: its larger world sizes predicted from its
    1-rank run, a comm run's fit and the measured same-host slowdown (and again with the 1-rank run's step
    spread as stragglers). `slowdowns`: N -> the slowdown measured otherwise (N single-rank runs at once,
    over one alone), instead of the forward times."""
    path = Path(sweep_dir)
    net = network_from_comm_run(comm_dir)
    rows = []
    for series, runs in _series_runs(path).items():
        if 1 not in runs:
            continue
        workload, spread = workload_from_run(runs[1])
        one = read_summary(runs[1], "bench")
        strategy = Strategy(one.get("dist_optimizer") or "allreduce", topology=one.get("topology") or "exp2")
        for n, run_dir in sorted(runs.items()):
            if n == 1:
                continue
            summary = read_summary(run_dir, "bench")
            given = (slowdowns or {}).get(n)
            slowdown = given or host_slowdown(one, summary)
            shared = replace(workload, host_slowdown=slowdown)
            point = predict_point(n, shared, strategy, net)
            noisy = predict_point(n, shared, strategy, net, Ceilings(step_cv=spread))
            measured_by = ("given: single-rank runs at once" if given else
                           f"forward {forward_ms(summary):.1f} ms per step on {n} ranks against "
                           f"{forward_ms(one):.1f} ms on one" if slowdown else "not measured: the cores arithmetic")
            inputs = (f"compute: {workload.source}; same-host slowdown "
                      f"{f'{slowdown:.2f}x' if slowdown else '-'} ({measured_by}); step spread "
                      f"{100 * (spread or 0):.1f}%; network: {net.source}")
            arithmetic = predict_point(n, workload, strategy, net).img_per_s_total
            rows.append(SweepRow(path.name, series or "sweep", n, summary["img_per_sec_total_mean"],
                                 point.img_per_s_total, noisy.img_per_s_total, point.limit, inputs, slowdown,
                                 arithmetic))
    if not rows:
        raise ConfigError(f"{path}: no series with a 1-rank run and a larger one on one node")
    return rows
