"""Launching on clusters: sbatch scripts and the mpirun line (slurm_jobs.py submits and waits on them).

`sbatch_script(job)` writes a script a person can read and edit. Two layouts (docs/references.md#slurm-launch-layouts):

- torchrun: one srun task per node runs `dlscale torchrun` (torchrun passing SIGTERM and SIGUSR1 on to
  its workers), which starts one worker per GPU and meets the other nodes at a c10d rendezvous on the
  first host; on one node torchrun picks the port itself, on several the script takes one free on the
  first host;
- srun: one srun task per GPU and no torchrun; `DistEnv` reads SLURM_PROCID and friends.

Resources: CPUs per task from the ranks and their loader workers, capped by --cpus-per-node, passed on
to srun; memory as given (slurm_resources.py). Only train is requeued; bench and sweeps are not.

Preemption (train only): `#SBATCH --signal=B:USR1@N` signals the batch shell alone. Its trap sends
USR1 to the srun process, which forwards it to every process of the step; the agents ignore it until
`dlscale torchrun` has installed its handler, which passes it on (`trap '' USR1` before `exec`: an
ignored signal stays ignored across exec; plain torchrun would die of it), the workers checkpoint at
the next step boundary and exit 0, then the script requeues the job. The requeued job runs the same
script with the same run directory, and `train --resume auto` continues from its checkpoints.

"""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dlscale.errors import ConfigError, shown
from dlscale.launch import slurm_resources as resources
from dlscale.rundir import check_output_file, write_text

JOB_LAUNCHERS = ("torchrun", "srun")
"""How an sbatch script starts its workers: one torchrun agent per node, or one srun task per rank."""
JOB_COMMANDS = ("bench", "train", "scale")
"""The dlscale commands an sbatch script can run."""
FREE_PORT = """"$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'"""
"""A port that nothing on this host listens on now: the kernel's choice for a socket bound to port 0."""

SLURM_TIME = re.compile(r"[0-9]+(:[0-9]{1,2}){0,2}|[0-9]+-[0-9]+(:[0-9]{1,2}){0,2}")
"""SLURM's time formats, matched whole (fullmatch: `$` would let a final newline through), in ASCII digits."""

NCCL_BLOCK = """\
# --- NCCL (GPUs only; gloo on CPUs ignores these). Uncomment what your cluster needs.
# export NCCL_DEBUG=INFO                    # print the transports chosen (IB, NVLink, sockets) at start
# export NCCL_SOCKET_IFNAME=ib0             # interface for NCCL's bootstrap sockets (`ip addr` lists them)
# export NCCL_IB_HCA=mlx5                   # InfiniBand adapters to use
# export NCCL_IB_DISABLE=1                  # no InfiniBand: TCP sockets only
# export TORCH_NCCL_ASYNC_ERROR_HANDLING=1  # a failed collective aborts the job instead of hanging"""


@dataclass(frozen=True, kw_only=True)
class SlurmJob:
    program: tuple[str, ...]
    """dlscale's own arguments, e.g. ('train', '--config', 'cpu:digits', '--output-dir', ...)."""
    run_dir: Path
    """Absolute run (or sweep) directory, on storage that every node sees."""
    log: Path
    """Absolute path of the job's output file; %j stands for the job id."""
    nodes: int = 1
    procs_per_node: int = 1
    """Ranks per node: one per GPU (or CPU ranks with request_gpus=False)."""
    launcher: str = "torchrun"
    """torchrun: one task per node running torchrun; srun: one task per GPU, no torchrun."""
    request_gpus: bool = True
    """Ask for procs_per_node GPUs per node (--gpus-per-node); False on nodes without GPUs."""
    job_name: str = "dlscale"
    partition: str | None = None
    time: str | None = None
    """Time limit in a SLURM format: minutes, HH:MM:SS, D-HH:MM."""
    account: str | None = None
    cpus_per_task: int | None = None
    """CPUs per task as given; None: each rank's loader workers + 1 (slurm_resources.cpu_request)."""
    cpus_per_node: int | None = None
    """The cores a node has, when the user says: the derived CPUs per task stay within it."""
    loader_workers: int = 0
    """Loader worker processes per rank: train's data.num_workers; bench feeds synthetic batches (none)."""
    mem: str | None = None
    """Memory per node (sbatch --mem), e.g. 200G; None: the site's default."""
    mem_per_gpu: str | None = None
    """Memory per GPU (sbatch --mem-per-gpu); not with --mem."""
    sbatch_options: tuple[str, ...] = ()
    """More directives, each as on sbatch's command line, e.g. '--qos=high'."""
    signal_s: int = 120
    """Seconds before the time limit at which USR1 asks training to checkpoint (train only)."""
    max_restarts: int = 0
    """torchrun --max-restarts: worker failures a node survives by restarting from the checkpoint."""
    python: str = sys.executable
    workdir: Path = field(default_factory=Path.cwd)
    """Where the job starts (--chdir): relative paths in `program` mean what they meant here."""

    @property
    def command(self) -> str:
        return self.program[0]

    @property
    def preemptible(self) -> bool:
        """Only training can checkpoint and resume; a benchmark is simply rerun after a requeue."""
        return self.command == "train"

    @property
    def tasks_per_node(self) -> int:
        """srun tasks per node: one per rank in the srun layout, else one (torchrun, or the sweep)."""
        return self.procs_per_node if self.launcher == "srun" and self.command != "scale" else 1

    @property
    def ranks_per_task(self) -> int:
        return self.procs_per_node // self.tasks_per_node

    def texts(self) -> Iterator[tuple[str, str]]:
        """(field, text) of every value of the job that goes into its script, whatever its field."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, str | Path):
                    yield f.name, str(item)

    def cpus(self) -> resources.CpuRequest:
        return resources.cpu_request(given=self.cpus_per_task, ranks_per_task=self.ranks_per_task,
                                     tasks_per_node=self.tasks_per_node, loader_workers=self.loader_workers,
                                     cpus_per_node=self.cpus_per_node)

    def memory(self) -> str | None:
        return resources.memory_directive(mem=self.mem, mem_per_gpu=self.mem_per_gpu, request_gpus=self.request_gpus)

    def check(self) -> None:
        for name, value in self.texts():
            check_script_text(value, FIELD_FLAGS.get(name, name))
        if self.command not in JOB_COMMANDS:
            raise ConfigError(f"the job must run dlscale {' or '.join(JOB_COMMANDS)}, not {self.command!r}")
        if self.launcher not in JOB_LAUNCHERS:
            raise ConfigError(f"--launcher {self.launcher!r}: choose torchrun or srun")
        if self.nodes < 1 or self.procs_per_node < 1:
            raise ConfigError("--nodes and --gpus-per-node must be at least 1")
        if self.command == "scale" and self.nodes != 1:
            raise ConfigError("a sweep inside one job runs on one node: use --nodes 1, or sweep across "
                              "nodes with `dlscale scale --launcher slurm --gpus ...` (one job per point)")
        if self.time is not None and not SLURM_TIME.fullmatch(self.time):
            raise ConfigError(f"--time {self.time!r} is not a SLURM time: use minutes, HH:MM:SS or D-HH:MM:SS")
        limit = time_limit_s(self.time)
        if self.preemptible and limit is not None and self.signal_s >= limit:
            raise ConfigError(f"--signal-seconds {self.signal_s} is not below the time limit {self.time}; "
                              "lower it or raise --time")
        if self.max_restarts and (self.launcher != "torchrun" or self.command == "scale"):
            raise ConfigError("--max-restarts is torchrun's: use it with --launcher torchrun and bench or train")
        if self.max_restarts < 0 or self.signal_s < 0:
            raise ConfigError("--max-restarts and --signal-seconds must not be negative")
        self.cpus(), self.memory()  # each raises its own one-line error


FIELD_FLAGS = {"program": "the job's command", "run_dir": "--output-dir", "log": "--output-dir",
               "job_name": "--job-name", "partition": "--partition", "time": "--time", "account": "--account",
               "mem": "--mem", "mem_per_gpu": "--mem-per-gpu", "sbatch_options": "--sbatch-option",
               "python": "--python", "workdir": "the working directory"}
"""The flag that sets each field of a job, for the one line that refuses its value."""
UNSAFE_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")
"""Unicode's control, format (bidirectional overrides), surrogate (bytes that are not UTF-8), line and paragraph
separator characters: none belongs in a job script, and a newline ends the line it is on, so that what follows
runs as a shell command (or, in the `# Written by:` comment, stops sbatch reading the #SBATCH lines after it)."""


def check_script_text(text: str, flag: str) -> str:
    """`text` as it may go into a job script: one line naming `flag` for a control character in it, whatever the
    quoting around it (shlex.quote keeps a newline inside its quotes, which still ends a comment or a directive)."""
    for index, char in enumerate(text):
        if unicodedata.category(char) in UNSAFE_CATEGORIES:
            raise ConfigError(f"{flag} {shown(text)} holds a control character ({ascii(char)} at {index}): in a job "
                              "script it would end the line and run what follows as shell code; remove it")
    return text


def time_limit_s(text: str | None) -> int | None:
    """SLURM's time formats in seconds: 'M', 'M:S', 'H:M:S', 'D-H', 'D-H:M', 'D-H:M:S'."""
    if text is None:
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:  # D-H, D-H:M, D-H:M:S
        units = (3600, 60, 1)[: len(parts)]
    else:  # M, M:S, H:M:S
        units = {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}[len(parts)]
    return int(days or 0) * 86400 + sum(p * u for p, u in zip(parts, units, strict=True))


# ------------------------------------------------------------------------------ the job script


def sbatch_script(job: SlurmJob, *, written_by: Sequence[str] | None = None) -> str:
    """The whole sbatch script for `job`, commented for the person who will read it."""
    job.check()
    for word in written_by or ():
        check_script_text(word, "the command")
    unit = "GPU" if job.request_gpus else "CPU rank"
    layout = {"torchrun": "one torchrun agent per node", "srun": "one srun task per rank"}[job.launcher]
    if job.command == "scale":
        layout = "one task; the sweep starts torchrun for each point"
    title = f"# dlscale {job.command} on {job.nodes} node(s) x {job.procs_per_node} {unit}(s), {layout}."
    lines = ["#!/bin/bash", title]
    if written_by:
        lines.append("# Written by: " + shlex.join(written_by))
    lines += resources.header(job.cpus(), job.memory())
    if job.launcher == "torchrun" and job.command != "scale":
        lines += TORCHRUN_NOTE
    lines += [*_directives(job), "", f"PYTHON={shlex.quote(job.python)}",
              f"RUN_DIR={shlex.quote(str(job.run_dir))}  # on storage that every node sees", ""]
    if job.request_gpus:
        lines += [NCCL_BLOCK, ""]
    lines += [*resources.cpu_lines(job.ranks_per_task, job.loader_workers), ""]
    lines += _rendezvous(job)
    step = _step_command(job)
    lines += _preemptible_run(step) if job.preemptible else [step, 'exit "$?"']
    return "\n".join(_squeeze(lines)) + "\n"


def _squeeze(lines: list[str]) -> list[str]:
    """No two blank lines in a row."""
    out: list[str] = []
    for line in lines:
        if line == "" and (not out or out[-1] == ""):
            continue
        out.append(line)
    return out


def _directives(job: SlurmJob) -> list[str]:
    if job.command == "scale":
        tasks, why = 1, "one task: the sweep starts torchrun for each point"
    elif job.launcher == "torchrun":
        tasks, why = 1, f"one torchrun agent per node; it starts the {job.procs_per_node} workers"
    else:
        tasks, why = job.procs_per_node, "one task per rank, started by srun (no torchrun)"
    rows = [
        (f"--job-name={_value(job.job_name, '--job-name')}", ""),
        (f"--nodes={job.nodes}", ""),
        (f"--ntasks-per-node={tasks}", why),
        *([(f"--gpus-per-node={job.procs_per_node}", "")] if job.request_gpus else []),
        (f"--cpus-per-task={job.cpus().per_task}", "how: the header above"),
        *([(job.memory(), "")] if job.memory() else []),
        *([(f"--partition={_value(job.partition, '--partition')}", "")] if job.partition else []),
        *([(f"--time={job.time}", "")] if job.time else []),
        *([(f"--account={_value(job.account, '--account')}", "")] if job.account else []),
        (f"--chdir={_value(str(job.workdir), 'the working directory')}", "relative paths below are relative to this"),
        (f"--output={_value(str(job.log), '--output-dir')}", "%j is the job id"),
        ("--open-mode=append", "a requeued job appends to the same log"),
    ]
    if job.preemptible:
        rows.append(("--requeue", "SLURM may requeue the job after preemption or a node failure"))
    else:  # a benchmark would measure again into its run directory; a sweep refuses to start again in its own
        rows.append(("--no-requeue", f"{job.command} does not resume: never requeued (SLURM's default is to)"))
    if job.preemptible:
        rows.append((f"--signal=B:USR1@{job.signal_s}",
                     f"USR1 to this script {job.signal_s} s before the time limit"))
    rows += [(_option(option), "") for option in job.sbatch_options]
    return [f"#SBATCH {d:<34} # {why}" if why else f"#SBATCH {d}" for d, why in rows]


def _value(text: str, flag: str) -> str:
    """A value as an #SBATCH line holds it: sbatch splits the line at blanks and reads quotes as its own (a lone
    one is fatal: `Unmatched '`), so a value with a blank is put in double quotes and one with a quote refused."""
    if "'" in text or '"' in text:
        raise ConfigError(f"{flag} {shown(text)} holds a quote, which sbatch reads in an #SBATCH line as its own: the "
                          "job could not be submitted; remove it")
    return f'"{text}"' if any(char.isspace() for char in text) else text


def _option(option: str) -> str:
    """--sbatch-option as a directive: `--comment=a b` with its value in quotes, which sbatch takes off."""
    name, equals, value = option.partition("=")
    return f"{name}={_value(value, '--sbatch-option')}" if equals else option


def _rendezvous(job: SlurmJob) -> list[str]:
    lines = [
        "# Rendezvous on the first node, where this script runs (sbatch(1)).",
        'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'if [ -z "$MASTER_ADDR" ]; then',
        '    echo "cannot name the first host of $SLURM_JOB_NODELIST: is scontrol on PATH?" >&2',
        "    exit 1",
        "fi",
    ]
    if _torchrun_picks_the_port(job):
        lines += ["# One node: torchrun picks a free port itself (--rdzv-endpoint=localhost:0), so two jobs sharing",
                  "# the node never meet at one port.",
                  "export MASTER_ADDR"]
        rendezvous = "localhost:<a free port>"
    else:
        lines += ["# A port nothing on this node listens on now, for rank 0's store: two jobs sharing the node are",
                  "# not given the same one (a port derived from the job id would be, for ids 20000 apart).",
                  f"MASTER_PORT=$({FREE_PORT})",
                  "export MASTER_ADDR MASTER_PORT"]
        rendezvous = "$MASTER_ADDR:$MASTER_PORT"
    if job.max_restarts > 0:
        lines += ["# Restarted workers get a fresh store, not the failed attempt's (pytorch#135712).",
                  "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"]
    lines += ['echo "$(date "+%F %T") job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on '
              f'$SLURM_JOB_NODELIST, rendezvous {rendezvous}, {_cpus_echo()}, run directory $RUN_DIR"', ""]
    return lines


def _torchrun_picks_the_port(job: SlurmJob) -> bool:
    """torchrun's documented way to run several single-node jobs on one host: --rdzv-endpoint=localhost:0."""
    return job.launcher == "torchrun" and job.command != "scale" and job.nodes == 1


def _cpus_echo() -> str:
    return "$SLURM_CPUS_PER_TASK CPUs per task, OMP_NUM_THREADS=$OMP_NUM_THREADS"


def _step_command(job: SlurmJob) -> str:
    """The srun line, one group of arguments per line."""
    first, *program = _wrap_words(["-m", "dlscale", *job.program])
    cpus = '--cpus-per-task="$SLURM_CPUS_PER_TASK"'
    if job.command == "scale":
        return _lines([f'srun --ntasks=1 {cpus} "$PYTHON" {first}', *program])
    # The wrapper ignores USR1, then execs: the agent (and a worker, until dlscale installs its
    # handler) keeps ignoring it, while dlscale's own handlers catch it.
    srun = f"srun --kill-on-bad-exit=1 {cpus} bash -c {IGNORE_USR1} {job.launcher}"
    if job.launcher == "srun":
        return _lines([srun, f'"$PYTHON" {first}', *program])
    endpoint = "localhost:0" if _torchrun_picks_the_port(job) else '"$MASTER_ADDR:$MASTER_PORT"'
    return _lines([
        srun,
        f'"$PYTHON" -m dlscale torchrun --nnodes="$SLURM_JOB_NUM_NODES" --nproc-per-node={job.procs_per_node}',
        f'--rdzv-id="$SLURM_JOB_ID" --rdzv-backend=c10d --rdzv-endpoint={endpoint}',
        f"--max-restarts={job.max_restarts}",
        first,
        *program,
    ])


TORCHRUN_NOTE = [
    "# The agent is `dlscale torchrun` (torchrun, the same flags), not plain torchrun: on SIGTERM (scancel,",
    "# preemption) plain torchrun exits 1 with a traceback and SIGKILLs its workers 30 s later, checkpoint",
    "# written or not, and SIGUSR1 kills it; `dlscale torchrun` passes both on to the workers, which",
    "# checkpoint and stop, waits for them, and exits with their status in one line (docs/cluster.md).",
]


IGNORE_USR1 = """'trap "" USR1; exec "$@"'"""
"""bash -c SCRIPT NAME ARGS...: ignore USR1, then become ARGS."""


def _lines(groups: list[str]) -> str:
    return " \\\n    ".join(groups)


def _wrap_words(args: Sequence[str], width: int = 90) -> list[str]:
    """Quoted arguments in lines of about `width` characters, breaking only before a flag."""
    lines: list[str] = []
    for word in map(shlex.quote, args):
        if lines and (len(lines[-1]) + len(word) < width or not word.startswith("-")):
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _preemptible_run(step: str) -> list[str]:
    return [
        "# USR1 (the time limit is near, or `scancel --batch --signal=USR1 $SLURM_JOB_ID`): srun passes it",
        "# to every process of the step; the workers checkpoint at the next step boundary and exit 0;",
        "# then the job is requeued and `--resume auto` continues from $RUN_DIR/checkpoints.",
        "# TERM (scancel, or preemption without warning): SLURM signals every process itself, the",
        "# workers checkpoint the same way if KillWait leaves time, and SLURM decides about requeueing.",
        "preempted=0",
        'on_usr1() { preempted=1; echo "$(date "+%F %T") USR1: asking the workers to checkpoint"; '
        'kill -USR1 "$step_pid" 2>/dev/null; }',
        'on_term() { echo "$(date "+%F %T") TERM: asking the workers to stop"; kill -TERM "$step_pid" 2>/dev/null; }',
        "trap on_usr1 USR1",
        "trap on_term TERM",
        "",
        f"{step} &",
        "step_pid=$!",
        "",
        "# A trapped signal interrupts `wait`: wait again until the step has really ended.",
        'status=0; wait "$step_pid" || status=$?',
        'while kill -0 "$step_pid" 2>/dev/null; do status=0; wait "$step_pid" || status=$?; done',
        "",
        'if [ "$preempted" = 1 ]; then',
        '    echo "$(date "+%F %T") step ended with status $status; requeueing job $SLURM_JOB_ID"',
        '    scontrol requeue "$SLURM_JOB_ID"',
        "fi",
        'exit "$status"',
    ]


# ------------------------------------------------------------------------------------- mpirun


def mpirun_command(hosts: str, program: Sequence[str], *, python: str = sys.executable,
                   master_port: int = 29500) -> list[str]:
    """Open MPI's mpirun for BlueFog-style host lists: 'server1:4,server2:4' -> 8 ranks.

    MASTER_ADDR (the first host) and MASTER_PORT are exported to every rank: DistEnv reads
    rank and size from OMPI_COMM_WORLD_*, and the rendezvous address from these two.
    """
    slots = []
    for item in hosts.split(","):
        host, _, count = item.strip().partition(":")
        if not host or (count and not count.isdigit()):
            raise ConfigError(f"host list {hosts!r}: write HOST:SLOTS,HOST:SLOTS, e.g. server1:4,server2:4")
        slots.append((host, int(count or 1)))
    ranks = sum(n for _, n in slots)
    return ["mpirun", "-np", str(ranks), "-H", ",".join(f"{h}:{n}" for h, n in slots),
            "--bind-to", "none", "--map-by", "slot",
            "-x", f"MASTER_ADDR={slots[0][0]}", "-x", f"MASTER_PORT={master_port}",
            "-x", "PATH", "-x", "LD_LIBRARY_PATH", python, "-m", "dlscale", *program]


def write_script(path: Path, text: str, flag: str = "--script") -> Path:
    """The script, executable, written atomically: a new file or a regular one replaced (never a device or a FIFO
    of that name); one line naming `flag` when it cannot be written."""
    return write_text(check_output_file(path, flag), text, mode=0o755, flag=flag)
