"""Side-by-side comparisons at equal world size: precision and speed options (the SC20
progression), and gradient-synchronisation strategies (allreduce vs neighbor-allreduce).

Benchmark runs are compared when there are any, else train runs. Runs are comparable when
everything but the compared setting is equal (model, input, batch per rank, the other settings).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from dlscale.report.flags import host_note
from dlscale.rundir import Run

PRECISION_ORDER = ("fp32", "tf32", "amp_fp16", "amp_bf16")


@dataclass(frozen=True)
class CompareRow:
    group: str
    """What the compared runs share, e.g. 'bench resnet18 32px, 4/rank, allreduce'."""
    world_size: int
    setting: str
    """The compared value: 'amp_bf16 +channels_last' or 'neighbor_allreduce'."""
    run: Run
    ratio: float | None
    """Throughput over the first setting's at the same world size."""
    efficiency: float | None = None
    flag: str = ""
    """Why the efficiency cannot be true, when it is above 100% (report/flags.py)."""
    host: str = ""
    """Which of the run and its series' baseline did not measure the model's speed (report/flags.py)."""


def progression_rows(runs: list[Run], efficiencies: dict | None = None) -> list[CompareRow]:
    """Precision and speed options side by side; efficiencies maps a run's path to its scaling
    efficiency (from its own series), the mark of one above 100% and the host's (efficiency, flag, host)."""
    def fixed(run: Run) -> tuple:
        return _common(run) + (run.summary.get("dist_optimizer"),)

    rows = _compare(_throughput_runs(runs), fixed, lambda r: r.setting, _setting_order)
    return _with_efficiency(rows, efficiencies or {})


def dist_optimizer_rows(runs: list[Run], efficiencies: dict | None = None) -> list[CompareRow]:
    """Strategies side by side, allreduce first."""
    def fixed(run: Run) -> tuple:
        return _common(run) + (run.setting,)

    def order(name: str) -> tuple:
        return (name != "allreduce", name)

    rows = _compare(_throughput_runs(runs), fixed, lambda r: str(r.summary.get("dist_optimizer")), order)
    return _with_efficiency(rows, efficiencies or {})


def _with_efficiency(rows: list[CompareRow], efficiencies: dict) -> list[CompareRow]:
    return [CompareRow(r.group, r.world_size, r.setting, r.run, r.ratio,
                       *efficiencies.get(r.run.path, (None, "", host_note(r.run)))) for r in rows]


def _throughput_runs(runs: list[Run]) -> list[Run]:
    measured = [r for r in runs if r.total_ips]
    bench = [r for r in measured if r.kind == "bench"]
    return bench or measured


def _common(run: Run) -> tuple:
    """What compared runs share; runs of one sweep are compared among themselves."""
    s = run.summary
    where = f"{s.get('image_size')}px" if run.kind == "bench" else run.data
    return (run.sweep or "", run.kind, s.get("model"), where, f"{run.per_rank_batch}/rank")


def _setting_order(setting: str) -> tuple:
    precision, *options = setting.split(" ")
    rank = PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)
    return (rank, len(options), options)


def _compare(runs, fixed, value, order) -> list[CompareRow]:
    groups: dict[tuple, dict[tuple[int, str], Run]] = defaultdict(dict)
    for run in sorted(runs, key=lambda r: r.name):
        groups[fixed(run)].setdefault((run.world_size, value(run)), run)  # first by name wins
    rows = []
    for key, members in groups.items():
        if len({v for _, v in members}) < 2:
            continue  # nothing to compare
        source, kind, model, *rest = key
        label = (f"{source}: " if source else "") + f"{kind} {model}, " + ", ".join(str(k) for k in rest)
        for world in sorted({w for w, _ in members}):
            present = sorted((v for w, v in members if w == world), key=order)
            base = members[(world, present[0])].total_ips
            for v in present:
                run = members[(world, v)]
                rows.append(CompareRow(label, world, v, run, run.total_ips / base if base else None))
    return rows


# ------------------------------------------------------------------ precisions side by side (NGC, Paddle)


@dataclass(frozen=True)
class PrecisionGrid:
    """Runs that differ only in precision: img/s per (world size, precision), as NGC's and PaddlePaddle's
    tables print them (devices x {FP32, AMP})."""

    group: str
    precisions: tuple[str, ...]
    per_rank_batch: int | None
    cells: dict
    """(world size, precision) -> Run."""

    @property
    def world_sizes(self) -> list[int]:
        return sorted({w for w, _ in self.cells})


def precision_grids(runs: list[Run]) -> list[PrecisionGrid]:
    """One grid per set of runs that share everything but their precision (speed options included)."""
    groups: dict[tuple, dict[tuple[int, str], Run]] = defaultdict(dict)
    for run in sorted(_throughput_runs(runs), key=lambda r: r.name):
        fixed = _common(run) + (" ".join(f"+{o}" for o in run.options), run.summary.get("dist_optimizer"),
                                run.device_name)
        groups[fixed].setdefault((run.world_size, run.precision), run)
    grids = []
    for key, cells in groups.items():
        precisions = sorted({p for _, p in cells}, key=lambda p: _setting_order(p))
        if len(precisions) < 2:
            continue
        source, kind, model, where, batch, options, dist, device = key
        label = (f"{source}: " if source else "") + f"{kind} {model} {where} {options}".rstrip() + f", {dist}, {device}"
        grids.append(PrecisionGrid(label, tuple(precisions), next(iter(cells.values())).per_rank_batch, cells))
    return grids
