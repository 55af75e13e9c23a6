"""dlscale as ReFrame tests: `dlscale bench`, a scaling sweep and `dlscale comm`.

    reframe -C site.py -c $(python -m dlscale.reframe) -r
    reframe -C site.py -c $(python -m dlscale.reframe) -n dlscale_bench -S model=resnet50 \\
        -S batch_size=256 -S precision=amp_bf16 -P devices_per_node=1,2,4 -r

Three library classes (dlscale_bench_check, dlscale_scale_check, dlscale_comm_check) and one test
of each (dlscale_bench, dlscale_scale, dlscale_comm: 2 ranks or more). Every setting is a ReFrame
variable: `-S` sets it, `-P VAR=V1,V2` makes one test per value (model, batch, precision, nodes,
devices per node, ...). A site may also subclass the library classes in its own test file. The sweep
runs on one node (its world sizes up to devices_per_node); with num_nodes above 1 it is skipped.

Ranks start through the partition's own launcher (srun, mpirun, ...: one process per device), or
through torchrun started by that launcher, one per node (`launch=torchrun`; the default where
the partition's launcher is `local`, which starts one process).

Sanity and performance read what dlscale prints, the lines Horovod's benchmark prints and
ReFrame's own PyTorch/Horovod test parses (`Img/sec per GPU: ... +-...`, `Total img/sec on N
GPU(s): ... +-...`, CPU in place of GPU on CPUs); the performance variables keep that test's names
(throughput_total, throughput_iteration per device) and add the 95% interval and MFU.

References: for the current system, the site's file (`reference_file`, DLSCALE_REFRAME_REFERENCES;
dlscale/reframe/references.json is the template); where it has none for a test and the hardware
matches a published ResNet-50 figure that dlscale ships (NVIDIA's and DLPerf's, dlscale/references),
that figure less 10% as a floor.

This file imports ReFrame and nothing of dlscale: ReFrame loads it by path, perhaps with a Python
that cannot import dlscale; `python` names the one that runs dlscale.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.backends import getlauncher
from reframe.core.builtins import performance_function, run_after, run_before, sanity_function, variable
from reframe.core.launchers import JobLauncher

PUBLISHED = Path(__file__).resolve().parents[1] / "references"
"""dlscale's published figures (references/*.json), read for the default references."""
PUBLISHED_FILES = ("ngc.json", "dlperf.json")
"""Those with ResNet-50 img/s per device count, device and precision."""
PUBLISHED_FLOOR = -0.1
"""A published figure is a floor: at most 10% below, no upper bound."""
RATE = r"(\S+) \+-(\S+)"
"""A rate and its 95% half-width as Horovod prints them: `166.6 +-6.0`."""


class TorchrunLauncher(JobLauncher):
    """The partition's launcher (one task per node) starting torchrun, which starts the node's ranks:
    `srun ... python -m torch.distributed.run --nproc-per-node 4 ... --no-python python -m dlscale`."""

    def __init__(self, target: JobLauncher, torchrun: list[str]) -> None:
        super().__init__()
        self.target, self.torchrun = target, torchrun

    def command(self, job):
        return self.target.command(job)

    def run_command(self, job):
        head = self.target.run_command(job)  # with the target's own options, before torchrun's
        return " ".join([head, *self.torchrun] if head else self.torchrun)


# Where torchrun's agents meet when the job spans nodes: the first host of the allocation.
FIRST_HOST = ('export MASTER_ADDR=${MASTER_ADDR:-$( (scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null '
              '|| sort -u "$PBS_NODEFILE" 2>/dev/null || hostname) | head -n 1)}')


class dlscale_base(rfm.RunOnlyRegressionTest):
    """What the dlscale tests share: the Python that runs dlscale, the ranks and how they start."""

    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    tags = {"dlscale"}
    #: The Python that runs dlscale on the compute nodes (its venv's python).
    python = variable(str, value=sys.executable)
    #: Nodes of the job.
    num_nodes = variable(int, value=1)
    #: Ranks per node: one per device; 0: the partition's GPUs (its `devices` entry), else 1.
    devices_per_node = variable(int, value=0)
    #: How ranks start: launcher (one process per device by the partition's launcher), torchrun (the
    #: partition's launcher starts one torchrun per node), auto (torchrun where the launcher is local).
    launch = variable(str, value="auto")
    #: dlscale's --device: auto, cpu or cuda (cuda and auto also request the GPUs from the scheduler).
    device = variable(str, value="auto")
    #: Seconds before a collective that a peer never joins fails (dlscale's --pg-timeout).
    pg_timeout = variable(int, value=600)
    #: More flags for the dlscale command.
    extra_opts = variable(typ.List[str], value=[])
    #: The site's references (JSON, dlscale/reframe/references.json is the template); "": none.
    reference_file = variable(str, value=os.environ.get("DLSCALE_REFRAME_REFERENCES", ""))
    time_limit = "30m"
    executable = "python"
    run_dir = "runs/run"
    """dlscale's run directory, relative to the stage directory (kept in the output directory)."""

    @run_before("run")
    def use_python(self):
        self.executable = self.python
        self.keep_files = ["runs"]

    @property
    def ranks_per_node(self) -> int:
        if self.devices_per_node > 0:
            return self.devices_per_node
        partition = self.current_partition
        gpus = [d.num_devices for d in (partition.devices if partition else []) if d.device_type == "gpu"]
        return gpus[0] if gpus and self.device != "cpu" else 1

    @property
    def ranks(self) -> int:
        return self.num_nodes * self.ranks_per_node

    def config_key(self) -> str:
        """What a reference describes, e.g. resnet50/amp_bf16/bs256/2x4."""
        return f"{self.num_nodes}x{self.ranks_per_node}"

    @run_before("run")
    def start_ranks(self):
        launcher = self.current_partition.launcher_type.registered_name
        torchrun = self.launch == "torchrun" or (self.launch == "auto" and launcher == "local" and self.ranks > 1)
        self.skip_if(self.launch not in ("auto", "launcher", "torchrun"),
                     f"launch={self.launch!r}: use auto, launcher or torchrun")
        self.skip_if(launcher == "local" and not torchrun and self.ranks > 1,
                     "the local launcher starts one process: use launch=torchrun (or auto) for several ranks")
        self.skip_if(self.current_partition.scheduler.registered_name == "local" and self.num_nodes > 1,
                     "the local scheduler runs on this node only")
        if self.device != "cpu" and self.ranks_per_node > 0:
            self.num_gpus_per_node = self.ranks_per_node  # a partition without a gpu resource ignores it
        if self.num_nodes > 1:
            self.prerun_cmds += [FIRST_HOST, "export MASTER_PORT=${MASTER_PORT:-29500}"]
            if launcher in ("mpirun-openmpi", "mpirun-intelmpi"):  # they pass the rendezvous to remote ranks
                self.job.launcher.env_vars = {"MASTER_ADDR": "$MASTER_ADDR", "MASTER_PORT": "$MASTER_PORT"}
        if not torchrun:
            self.num_tasks, self.num_tasks_per_node = self.ranks, self.ranks_per_node
            return
        self.num_tasks, self.num_tasks_per_node = self.num_nodes, 1
        rendezvous = (["--standalone"] if self.num_nodes == 1 else
                      ["--rdzv-backend", "c10d", "--rdzv-endpoint", "$MASTER_ADDR:$MASTER_PORT", "--rdzv-id",
                       "dlscale"])
        self.job.launcher = TorchrunLauncher(self.job.launcher, [
            self.python, "-m", "torch.distributed.run", "--nnodes", str(self.num_nodes), "--nproc-per-node",
            str(self.ranks_per_node), *rendezvous, "--no-python"])

    # ------------------------------------------------------------------------- references

    @run_before("performance")
    def set_references(self):
        """The site's references for this test on every system it names, else published defaults."""
        if self.reference:  # given in a subclass or with -S
            return
        site = self.site_references()
        self.reference = site or self.published_references()

    def site_references(self) -> dict:
        if not self.reference_file:
            return {}
        table = json.loads(Path(self.reference_file).read_text())
        key = self.config_key()
        found = {}
        for system, tests in table.items():
            entry = tests.get(key) if isinstance(tests, dict) else None
            if entry:
                found[system] = {name: tuple(value) for name, value in entry.items()}
        return found

    def published_references(self) -> dict:
        return {}

    def summary(self) -> dict:
        """dlscale's summary.json of this test's run ({} if it wrote none)."""
        path = Path(self.stagedir) / self.run_dir / "summary.json"
        return json.loads(path.read_text()) if path.is_file() else {}


def published_rates(device_name: str, *, model: str, precision: str, batch_size: int, image_size: int) -> dict:
    """devices -> img/s that dlscale's references publish for this device (ResNet-50, 224 px)."""
    if model != "resnet50" or image_size != 224 or not device_name:
        return {}
    name = re.sub(r"[^A-Z0-9]+", " ", device_name.upper()).split()
    rates: dict[int, float] = {}
    for file in PUBLISHED_FILES:
        path = PUBLISHED / file
        if not path.is_file():
            continue
        for series in json.loads(path.read_text())["series"]:
            device = str(series.get("device", "")).upper().split()
            if (series.get("kind") != "scaling" or series.get("precision") != precision
                    or series.get("batch_per_device") != batch_size or not device
                    or not all(part in name for part in device)):
                continue
            for point in series["points"]:
                if "devices" in point and "img_per_s" in point:
                    rates.setdefault(point["devices"], float(point["img_per_s"]))
    return rates


# ------------------------------------------------------------------------------ dlscale bench


class dlscale_bench_settings(dlscale_base):
    """The benchmark's settings, as `dlscale bench` names them (shared by the bench and the sweep)."""

    model = variable(str, value="resnet50")
    #: Images per rank per step.
    batch_size = variable(int, value=64)
    precision = variable(str, value="fp32")
    image_size = variable(int, value=224)
    #: Base channel count (small values: tiny test models).
    width = variable(int, value=64)
    num_classes = variable(int, value=1000)
    num_warmup_batches = variable(int, value=10)
    num_batches_per_iter = variable(int, value=10)
    num_iters = variable(int, value=10)
    dist_optimizer = variable(str, value="allreduce")

    def bench_opts(self) -> list[str]:
        return ["--model", self.model, "--batch-size", str(self.batch_size), "--precision", self.precision,
                "--image-size", str(self.image_size), "--width", str(self.width), "--num-classes",
                str(self.num_classes), "--num-warmup-batches", str(self.num_warmup_batches),
                "--num-batches-per-iter", str(self.num_batches_per_iter), "--num-iters", str(self.num_iters),
                "--dist-optimizer", self.dist_optimizer, "--device", self.device, "--pg-timeout",
                str(self.pg_timeout), *self.extra_opts]

    def rates(self, device_name: str) -> dict:
        return published_rates(device_name, model=self.model, precision=self.precision,
                               batch_size=self.batch_size, image_size=self.image_size)


class dlscale_bench_check(dlscale_bench_settings):
    """`dlscale bench`: synthetic-data training throughput with Horovod's protocol and output."""

    run_dir = "runs/bench"

    @run_after("init")
    def describe(self):
        self.descr = f"dlscale bench: {self.model}, batch {self.batch_size} per rank, {self.precision}"
        self.tags = self.tags | {"bench"}

    @run_before("run")
    def set_command(self):
        self.executable_opts = ["-m", "dlscale", "bench", *self.bench_opts(), "--output-dir", "runs", "--name",
                                "bench"]

    def config_key(self) -> str:
        return f"{self.model}/{self.precision}/bs{self.batch_size}/{super().config_key()}"

    @sanity_function
    def validate(self):
        return sn.all([
            sn.assert_found(rf"^Model: {re.escape(self.model)}$", self.stdout),
            sn.assert_found(rf"^Batch size: {self.batch_size}$", self.stdout),
            sn.assert_found(rf"^Total img/sec on {self.ranks} (CPU|GPU)\(s\): {RATE}$", self.stdout),
        ])

    @performance_function("img/s")
    def throughput_total(self):
        """Images/s summed over every rank, mean over the timed iterations."""
        return sn.extractsingle(rf"^Total img/sec on \d+ (?:CPU|GPU)\(s\): {RATE}$", self.stdout, 1, float)

    @performance_function("img/s")
    def throughput_total_ci95(self):
        """The total's 95% half-width (1.96 x std over iterations)."""
        return sn.extractsingle(rf"^Total img/sec on \d+ (?:CPU|GPU)\(s\): {RATE}$", self.stdout, 2, float)

    @performance_function("img/s")
    def throughput_iteration(self):
        """Images/s per device (ReFrame's PyTorch/Horovod test's name for it)."""
        return sn.extractsingle(rf"^Img/sec per (?:CPU|GPU): {RATE}$", self.stdout, 1, float)

    @performance_function("img/s")
    def throughput_iteration_ci95(self):
        return sn.extractsingle(rf"^Img/sec per (?:CPU|GPU): {RATE}$", self.stdout, 2, float)

    @run_before("performance")
    def add_mfu(self):
        """MFU where dlscale knows the device's peak (A100, H100, ...): printed as `MFU: 41.2% of ...`."""
        output = Path(self.stagedir) / self.stdout.evaluate()
        if output.is_file() and re.search(r"^MFU: \S+%", output.read_text(), re.M):
            self.perf_variables["mfu"] = sn.make_performance_function(
                sn.extractsingle(r"^MFU: (\S+)% of", self.stdout, 1, float), "%")

    def published_references(self) -> dict:
        rates = self.rates(self.summary().get("device_name", ""))
        if self.ranks not in rates:
            return {}
        rate = rates[self.ranks]
        return {"*": {"throughput_total": (rate, PUBLISHED_FLOOR, None, "img/s"),
                      "throughput_iteration": (rate / self.ranks, PUBLISHED_FLOOR, None, "img/s")}}


# -------------------------------------------------------------------------- a scaling sweep


class dlscale_scale_check(dlscale_bench_settings):
    """`dlscale scale` on one node of `devices_per_node` devices: the bench at each world size through
    torchrun; per world size N the scaling efficiency (T_N / N) / (T_base / N_base) and the total img/s
    T_N as performance variables."""

    #: World sizes to sweep, each at most devices_per_node; empty (default): 1, 2, 4, ... and
    #: devices_per_node itself.
    world_sizes = variable(typ.List[int], value=[])
    #: weak: the batch per rank stays; strong: the smallest world size's global batch is split.
    mode = variable(str, value="weak")
    #: Seconds one point may run (dlscale scale's --timeout).
    point_timeout = variable(int, value=1200)
    run_dir = "runs/sweep"

    @run_after("init")
    def describe(self):
        sizes = ",".join(map(str, self.world_sizes)) or "1, 2, 4, ... up to devices_per_node"
        self.descr = f"dlscale scale: {self.model}, world sizes {sizes}, {self.mode} scaling on one node"
        self.tags = self.tags | {"scale"}

    def sweep_sizes(self) -> list[int]:
        """The world sizes swept: `world_sizes`, else the powers of two below the node's ranks and
        that number itself (devices_per_node=6: 1, 2, 4, 6)."""
        if self.world_sizes:
            return sorted(set(self.world_sizes))
        sizes = [1 << k for k in range(self.ranks_per_node.bit_length()) if 1 << k < self.ranks_per_node]
        return [*sizes, self.ranks_per_node]

    @run_before("run")
    def start_ranks(self):
        """One process on the node, which starts torchrun for each point itself; the job holds the node's
        devices_per_node devices for the largest point."""
        self.skip_if(self.num_nodes > 1,
                     f"num_nodes={self.num_nodes}: dlscale_scale sweeps on one node (dlscale scale starts each "
                     "point's torchrun on its own host); sweep nodes with dlscale_bench -P num_nodes=1,2,4, or "
                     "outside ReFrame with dlscale scale --launcher slurm --gpus N,N,... --gpus-per-node G")
        beyond = [n for n in self.sweep_sizes() if n > self.ranks_per_node]
        if beyond:
            raise ValueError(f"world_sizes {','.join(map(str, beyond))} exceed the {self.ranks_per_node} "
                             f"device(s) of the node: give devices_per_node={max(beyond)} or more, or smaller "
                             "world_sizes")
        self.num_tasks, self.num_tasks_per_node = 1, 1
        if self.device != "cpu":
            self.num_gpus_per_node = self.ranks_per_node
        self.job.launcher = getlauncher("local")()

    @run_before("run")
    def set_command(self):
        self.executable_opts = [
            "-m", "dlscale", "scale", "--nproc", ",".join(map(str, self.sweep_sizes())), "--mode", self.mode,
            "--timeout", str(self.point_timeout), "--output-dir", "runs", "--name", "sweep", "--", "bench",
            *self.bench_opts()]

    @run_before("performance")
    def add_points(self):
        for n in self.sweep_sizes():
            self.perf_variables[f"efficiency_w{n}"] = sn.make_performance_function(self._cell(n, 4), "%")
            self.perf_variables[f"throughput_w{n}"] = sn.make_performance_function(self._cell(n, 1), "img/s")

    def config_key(self) -> str:
        """e.g. scale/resnet50/amp_bf16/bs256/weak/1,2,4/1x4."""
        sizes = ",".join(map(str, self.sweep_sizes()))
        return f"scale/{self.model}/{self.precision}/bs{self.batch_size}/{self.mode}/{sizes}/{super().config_key()}"

    def _cell(self, world_size: int, column: int):
        """A number from the printed table's row for world_size; the columns after `nodes`: 1 total
        img/s, 2 per-rank img/s, 3 speedup, 4 efficiency %."""
        row = rf"^\| [^|]+ \| {world_size} \| \d+ \|" + r"([^|]*)\|" * 4
        return sn.extractsingle(row, self.stdout, column, lambda cell: float(cell.split()[0].rstrip("%x")))

    @sanity_function
    def validate(self):
        sizes = self.sweep_sizes()
        return sn.all([
            sn.assert_found(rf"^{len(sizes)} of {len(sizes)} points ok", self.stdout),
            *(sn.assert_found(rf"^\| [^|]+ \| {n} \| \d+ \| [\d.]+", self.stdout) for n in sizes),
        ])

    def published_references(self) -> dict:
        sizes = self.sweep_sizes()
        base = min(sizes)
        point = Path(self.stagedir) / self.run_dir / f"world{base}" / "summary.json"
        rates = self.rates(json.loads(point.read_text()).get("device_name", "") if point.is_file() else "")
        if self.mode != "weak" or base not in rates:
            return {}
        found = {f"efficiency_w{n}": (100 * (rates[n] / n) / (rates[base] / base), PUBLISHED_FLOOR, None, "%")
                 for n in sizes if n in rates and n != base}
        return {"*": found} if found else {}


# ----------------------------------------------------------------------------- dlscale comm


class dlscale_comm_check(dlscale_base):
    """`dlscale comm`: nccl-tests' collective benchmark; the bus bandwidth at the largest size."""

    op = variable(str, value="all_reduce")
    min_bytes = variable(str, value="8")
    max_bytes = variable(str, value="256M")
    iters = variable(int, value=20)
    warmup_iters = variable(int, value=5)
    run_dir = "runs/comm"

    @run_after("init")
    def describe(self):
        self.descr = f"dlscale comm: {self.op}, {self.min_bytes} to {self.max_bytes}"
        self.tags = self.tags | {"comm"}

    @run_before("run")
    def set_command(self):
        self.skip_if(self.ranks < 2, "dlscale comm measures communication between ranks: give devices_per_node "
                                     "or num_nodes for 2 ranks or more")
        self.executable_opts = [
            "-m", "dlscale", "comm", "--op", self.op, "-b", self.min_bytes, "-e", self.max_bytes,
            "-n", str(self.iters), "-w", str(self.warmup_iters), "--device", self.device,
            "--pg-timeout", str(self.pg_timeout), "--output-dir", "runs", "--name", "comm", *self.extra_opts]

    def config_key(self) -> str:
        return f"comm/{self.op}/{self.max_bytes}/{super().config_key()}"

    @sanity_function
    def validate(self):
        return sn.all([
            sn.assert_found(rf"^# dlscale comm: {self.op}, {self.ranks} ranks", self.stdout),
            sn.assert_found(r"^# Out of bounds values\s*: 0 OK", self.stdout),
        ])

    def _largest(self, column: int):
        """The first table's (all ranks') row at the largest size: 1 time (us), 2 algbw, 3 busbw (GB/s)."""
        row = r"^\s+(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+(\S+)\s+(\S+)\s+(\S+)\s+\d+"
        table = sn.extractall(row, self.stdout, column + 1, float)
        sizes = sn.extractall(row, self.stdout, 1, int)
        return sn.getitem(table, _last_row_of_first_table(sizes))

    @performance_function("GB/s")
    def busbw(self):
        """Bus bandwidth (out of place) at the largest message size, over all ranks."""
        return self._largest(3)

    @performance_function("GB/s")
    def algbw(self):
        return self._largest(2)

    @performance_function("us")
    def time_largest(self):
        return self._largest(1)


@sn.deferrable
def _last_row_of_first_table(sizes) -> int:
    """Index of the last row before the sizes start again (a multi-node run prints more tables)."""
    for i in range(1, len(sizes)):
        if sizes[i] <= sizes[i - 1]:
            return i - 1
    return len(sizes) - 1


# ------------------------------------------------------------------------------- the tests


@rfm.simple_test
class dlscale_bench(dlscale_bench_check):
    pass


@rfm.simple_test
class dlscale_scale(dlscale_scale_check):
    pass


@rfm.simple_test
class dlscale_comm(dlscale_comm_check):
    pass
