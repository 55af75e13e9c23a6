"""Figures over the ranks of the job, by name: sums, maxima, minima and gathers, one collective a call.

    totals = sum_over_ranks({"energy_j": joules, "ranks": 1}, device)       # totals["ranks"]: the world size
    window = over_ranks(device, sum={"loss": loss}, gather={"step_ms": ms})  # one all_gather for both
    window.sum["loss"], window.gather["step_ms"][rank]

A figure is a number, a 0-d tensor, or a sequence of numbers or 1-d tensor (a list comes back for those).
Tensors stay on the device until the collective, so nothing waits for the device before it; the results
are read with one host synchronisation after it. Call these on log steps and at the ends of runs, never
inside a step. Every rank calls with the same names, in the same order, with the same lengths. Figures
travel as float64: whole numbers are exact up to 2**53. NCCL needs `device` to be this rank's GPU.

Without a process group (one process) nothing is communicated and nothing is sent to the device: sums,
maxima and minima are the figures as given, a gather is this one rank's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from dlscale.errors import ConfigError, DataError, DeviceError, DlscaleError, StorageError

T = TypeVar("T")

Figure = Real | torch.Tensor | Sequence[Real]
"""A number, a 0-d tensor, or a sequence of numbers or a 1-d tensor."""

_REDUCE_OPS = {"sum": "SUM", "max": "MAX", "min": "MIN"}
"""The reductions one all_reduce does; several of them (or a gather) take one all_gather instead."""


@dataclass(frozen=True)
class Reduced:
    """The figures over all ranks, by name. sum, max, min: a number (or a list) per name; gather: a list with
    one entry per rank, in rank order."""

    sum: dict[str, Any] = field(default_factory=dict)
    max: dict[str, Any] = field(default_factory=dict)
    min: dict[str, Any] = field(default_factory=dict)
    gather: dict[str, list] = field(default_factory=dict)


def joined() -> bool:
    """True when this process is one rank of a process group."""
    return dist.is_available() and dist.is_initialized()


def over_ranks(device: torch.device | str, *, sum: Mapping[str, Figure] | None = None,
               max: Mapping[str, Figure] | None = None, min: Mapping[str, Figure] | None = None,
               gather: Mapping[str, Figure] | None = None) -> Reduced:
    """Several reductions of named figures in one collective: an all_reduce when only one of sum, max and
    min is asked for, an all_gather otherwise (sums, maxima and minima then computed from every rank's
    row, on the device)."""
    asked = {"sum": sum or {}, "max": max or {}, "min": min or {}, "gather": gather or {}}
    columns, local = _pack(asked, device if joined() else "cpu")  # one process: nothing goes to the device
    if local is None:
        return Reduced()
    used = [op for op, figures in asked.items() if figures]
    if not joined():
        values = local.tolist()
        host = {op: values for op in _REDUCE_OPS} | {"gather": [values]}
    elif len(used) == 1 and used[0] in _REDUCE_OPS:
        dist.all_reduce(local, op=getattr(dist.ReduceOp, _REDUCE_OPS[used[0]]))
        host = {used[0]: local.tolist()}
    else:
        host = _gathered(local, used)
    return Reduced(**{op: _unpack(host[op], op, columns) for op in used})


def sum_over_ranks(figures: Mapping[str, Figure], device: torch.device | str) -> dict[str, Any]:
    """Each figure summed over the ranks (one all_reduce)."""
    return over_ranks(device, sum=figures).sum


def max_over_ranks(figures: Mapping[str, Figure], device: torch.device | str) -> dict[str, Any]:
    """Each figure's largest value over the ranks (one all_reduce)."""
    return over_ranks(device, max=figures).max


def min_over_ranks(figures: Mapping[str, Figure], device: torch.device | str) -> dict[str, Any]:
    """Each figure's smallest value over the ranks (one all_reduce)."""
    return over_ranks(device, min=figures).min


def gather_over_ranks(figures: Mapping[str, Figure], device: torch.device | str) -> dict[str, list]:
    """Each figure of every rank, in rank order, on every rank (one all_gather)."""
    return over_ranks(device, gather=figures).gather


def broadcast_from_main(value: Any) -> Any:
    """Rank 0's value (any picklable object) on every rank; the value itself without a process group."""
    if not joined():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def on_main(is_main: bool, action: Callable[[], T], *, share: bool = False) -> T | None:
    """`action()` on rank 0 (None elsewhere; with `share`, rank 0's result on every rank, in the same collective); a
    DlscaleError it raises is raised on every rank, so that no rank waits in a collective for a rank 0 that has
    stopped (a run directory it could not claim, an output it could not write)."""
    result, error = None, None
    if is_main:
        try:
            result = action()
        except DlscaleError as raised:
            error = raised
    said = None if error is None else (type(error).__name__, str(error))
    shared, found = broadcast_from_main((result if share else None, said))
    if found is not None:
        kind, message = found
        raise error or _ERRORS.get(kind, DlscaleError)(message)
    return shared if share else result


_ERRORS = {kind.__name__: kind for kind in (ConfigError, StorageError, DataError, DeviceError)}


def barrier() -> None:
    """Wait until every rank has come here; nothing without a process group."""
    if joined():
        dist.barrier()


Columns = dict[tuple[str, str], tuple[int, int, bool]]
"""(reduction, name) -> (first column, length, a list?)."""


def _pack(asked: dict[str, Mapping[str, Figure]], device: torch.device | str) -> tuple[Columns, torch.Tensor | None]:
    """One float64 vector of every figure: tensors first (no host sync), then the host's numbers in one
    tensor, as the log step always did (one allocation for them, one cat)."""
    columns: Columns = {}
    pieces, numbers, at = [], [], 0
    entries = [(op, name, value) for op, figures in asked.items() for name, value in figures.items()]
    for op, name, value in entries:
        if isinstance(value, torch.Tensor):
            piece = value.detach().reshape(-1).to(device=device, dtype=torch.float64)
            pieces.append(piece)
            columns[op, name] = (at, piece.numel(), value.dim() > 0)
            at += piece.numel()
    for op, name, value in entries:
        if not isinstance(value, torch.Tensor):
            vector = not isinstance(value, Real)
            items = [float(v) for v in value] if vector else [float(value)]
            numbers.extend(items)
            columns[op, name] = (at, len(items), vector)
            at += len(items)
    if numbers:
        pieces.append(torch.tensor(numbers, dtype=torch.float64, device=device))
    if not pieces:
        return columns, None
    return columns, pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def _gathered(local: torch.Tensor, used: list[str]) -> dict[str, list]:
    """One all_gather; the asked reductions over the ranks' rows on the device, read in one host sync."""
    rows = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, local)
    table = torch.stack(rows)
    reduce = {"sum": lambda: table.sum(dim=0), "max": lambda: table.amax(dim=0), "min": lambda: table.amin(dim=0),
              "gather": lambda: table.reshape(-1)}
    values = torch.cat([reduce[op]() for op in used]).tolist()
    host, n, at = {}, local.numel(), 0
    for op in used:
        if op == "gather":
            host[op] = [values[at + r * n: at + (r + 1) * n] for r in range(len(rows))]
            at += n * len(rows)
        else:
            host[op], at = values[at: at + n], at + n
    return host


def _unpack(values: list, op: str, columns: Columns) -> dict[str, Any]:
    """The named figures of one reduction from its row (gather: from each rank's row)."""
    def one(row: list, start: int, length: int, vector: bool):
        return row[start:start + length] if vector else row[start]

    return {name: ([one(row, *columns[op, name]) for row in values] if op == "gather"
                   else one(values, *columns[op, name]))
            for (kind, name) in columns if kind == op}
