"""`dlscale comm`'s settings and its text, as nccl-tests prints them: plain Python, no torch.

nccl-tests (NVIDIA/nccl-tests src/common.cu, `run` and `Reporter`) prints a header (its settings, then
`# Using devices` and one line per rank: rank, group, pid, host, device, PCI bus, device name), then per
collective a table whose rows appear as each size is measured, then the out-of-bounds count and the
average bus bandwidth. `dlscale comm` prints the same lines in the same order: the measurement in
bench/comm.py calls `format_row` after each size, and the command prints the row at once. Kept apart
from the measurement so that `dlscale comm --help` builds its parser without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlscale.config.sections import TOPOLOGY_NAMES
from dlscale.errors import ConfigError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "neighbor_allreduce")
MODES = ("both", "out-of-place", "in-place")
COLUMNS = ("out-of-place", "in-place")


@dataclass(frozen=True, kw_only=True)
class CommConfig:
    ops: tuple[str, ...] = ("all_reduce",)
    """Collectives to measure, in order."""
    min_bytes: int = 8
    max_bytes: int = 256 * 1024 * 1024
    step_factor: int = 2
    """Each size is the previous one times this (nccl-tests' -f)."""
    warmup_iters: int = 1
    """Untimed calls per size (nccl-tests' default)."""
    iters: int = 20
    """Timed calls per size (nccl-tests' default)."""
    mode: str = "both"
    """out-of-place, in-place or both columns."""
    topology: str = "exp2"
    """Graph of the neighbour exchange (--topology, as in bench)."""
    device: str = "auto"
    pg_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        unknown = [op for op in self.ops if op not in OPS]
        if unknown or not self.ops:
            raise ConfigError(f"unknown --op {', '.join(unknown) or '(none)'}; choose from {', '.join(OPS)} or all")
        if self.min_bytes < 1 or self.max_bytes < self.min_bytes:
            raise ConfigError(f"--min-bytes {self.min_bytes} and --max-bytes {self.max_bytes}: need 1 <= min <= max")
        if self.step_factor < 2:
            raise ConfigError(f"--step-factor {self.step_factor} must be 2 or more")
        if self.iters < 1 or self.warmup_iters < 0:
            raise ConfigError("--iters must be >= 1 and --warmup-iters >= 0")
        if self.mode not in MODES:
            raise ConfigError(f"--mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if self.topology not in TOPOLOGY_NAMES:
            raise ConfigError(f"unknown --topology {self.topology!r}; choose one of {', '.join(TOPOLOGY_NAMES)}")

    def sizes(self) -> list[int]:
        out, size = [], self.min_bytes
        while size <= self.max_bytes:
            out.append(size)
            size *= self.step_factor
        return out


def header_lines(cfg: CommConfig, ranks: list[dict], backend: str) -> list[str]:
    """nccl-tests' header: its settings line (one thread and one device per process, every size checked
    once, no CUDA graphs), `# Using devices` with one line per rank, then the job in one line.

    ranks: per rank (in rank order) {"rank", "pid", "host", "device" (index, or None on the CPU),
    "bus_id" (PCI bus number or None), "name"}."""
    lines = [f"# nThread 1 nGpus 1 minBytes {cfg.min_bytes} maxBytes {cfg.max_bytes} step: {cfg.step_factor}(factor) "
             f"warmup iters: {cfg.warmup_iters} iters: {cfg.iters} agg iters: 1 validation: 1 graph: 0",
             "#", "# Using devices"]
    for r in ranks:
        device = "cpu" if r["device"] is None else f"{r['device']:2d}"
        bus = "" if r["bus_id"] is None else f" [0x{r['bus_id']:02x}]"
        lines.append(f"#  Rank {r['rank']:2d} Group  0 Pid {r['pid']:6d} on {r['host']:>10} device {device}{bus} "
                     f"{r['name']}")
    hosts = list(dict.fromkeys(r["host"] for r in ranks))
    per_host = ", ".join(f"{host}: {sum(r['host'] == host for r in ranks)}" for host in hosts)
    lines += ["#", f"# {len(ranks)} ranks on {len(hosts)} host(s) ({per_host}), {backend}", "#"]
    return lines


def table_head(op: str, cfg: CommConfig, n: int, level: str, num_nodes: int, backend: str, device: str) -> list[str]:
    """The lines above one collective's rows: what is measured, then nccl-tests' column names and units."""
    where = {"world": f"{n} ranks", "intra": f"inside each node ({n} ranks per group)",
             "inter": f"between nodes ({n} ranks per group, one per node)"}[level]
    return [f"# dlscale comm: {op}, {where}, {num_nodes} node(s), {backend} on {device}; "
            f"warm-up {cfg.warmup_iters}, iterations {cfg.iters}",
            "#",
            f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       in-place",
            f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  {'time':>7}  {'algbw':>6}  "
            f"{'busbw':>6}  {'#wrong':>6}  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}",
            f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
            f"{'(GB/s)':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}"]


def _num(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: 2 decimals, fewer when the number is wide."""
    for fmt in (f"{{:{width}.2f}}", f"{{:{width}.1f}}", f"{{:{width}.0f}}"):
        text = fmt.format(value)
        if len(text) <= width:
            return text
    return f"{value:{width}.1e}"


def format_row(row: dict) -> str:
    """One size: size, count, type, redop, root, then time, algbw, busbw and #wrong per column (N/A unmeasured)."""
    text = f"{row['size']:>12}  {row['count']:>12}  {row['type']:>8}  {row['redop']:>6}  {row['root']:>6}"
    for mode in COLUMNS:
        col = row.get(mode)
        if col is None:
            text += f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
        else:
            text += (f"  {_num(col['time_us'], 7)}  {_num(col['algbw_gbs'], 6)}  {_num(col['busbw_gbs'], 6)}"
                     f"  {col['wrong']:>6}")
    return text


def table_foot(rows: list[dict], fitted: dict) -> list[str]:
    """nccl-tests' closing lines (out-of-bounds values, the average bus bandwidth), then the fits."""
    measured = [row[mode] for row in rows for mode in COLUMNS if row.get(mode)]
    wrong = sum(col["wrong"] for col in measured)
    busbw = [col["busbw_gbs"] for col in measured]
    lines = [f"# {'Out of bounds values':<20} : {wrong} {'FAILED' if wrong else 'OK'}",
             f"# {'Avg bus bandwidth':<20} : {sum(busbw) / max(len(busbw), 1):g}"]
    for mode, fit in fitted.items():
        if "error" in fit:
            lines.append(f"# Fit {mode}: {fit['error']}")
        else:
            lines.append(f"# Fit {mode}: t = {fit['latency_us']:.1f} us + S x factor / {fit['busbw_gbs']:.3f} GB/s "
                         f"({fit['points']} sizes, rms error {100 * fit['rms_relative_error']:.1f}%)")
    lines.append("#")
    return lines
