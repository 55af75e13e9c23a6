"""`dlscale torchrun [torchrun's flags] -m dlscale COMMAND ARGS`: torchrun, preemption-safe.

A drop-in for `torchrun` (every flag is torchrun's own: this is torch.distributed.run in this
process) that differs in two things a job needs when it is preempted:

- SIGTERM (what `kill`, `scancel` and SLURM's time limit send) and SIGUSR1 (SLURM's warning
  before preemption, `#SBATCH --signal=USR1@N`) are passed on to the workers, and the agent
  goes on watching them: they checkpoint at the next step boundary and exit 0, and so does the
  job, with one line saying it stopped and how to resume. Plain torchrun dies of SIGUSR1 (its
  workers were orphans, now they stop when their parent dies) and, on SIGTERM, exits 1 with its
  own traceback after the workers checkpointed.
- A worker that fails ends the job with the failing rank's one-line error as the last line,
  not torchrun's failure summary.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from dlscale.errors import ConfigError
from dlscale.launch.local import children, send_signal

PASSED_ON = (signal.SIGTERM, signal.SIGUSR1)
"""Signals passed on to the workers, whose training checkpoints and stops on either."""
AGENT_SIGNALS = "SIGINT,SIGHUP,SIGQUIT"
"""What torchrun's agent still handles itself (by stopping the workers and failing)."""


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "torchrun", prefix_chars="+", add_help=False,
        help="torchrun that passes SIGTERM/SIGUSR1 on to the workers: they checkpoint, the job exits 0",
        description="torchrun (every flag is torchrun's) that passes SIGTERM and SIGUSR1 on to its workers, "
        "which checkpoint at the next step boundary, and exits 0 with one line; a failed worker's one-line "
        "error is the last line. Example: dlscale torchrun --standalone --nproc-per-node 2 -m dlscale train "
        "--config cpu:digits",
    )
    p.add_argument("torchrun_args", nargs=argparse.REMAINDER, help="torchrun's flags, then -m dlscale COMMAND ARGS")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch.distributed import run as torch_run  # torch: loaded when the command runs
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    argv = list(args.torchrun_args)
    if not argv:
        raise ConfigError("give torchrun's flags and the program, e.g. dlscale torchrun --standalone "
                          "--nproc-per-node 2 -m dlscale train --config cpu:digits")
    if not any(a.startswith(("--signals-to-handle", "--signals_to_handle")) for a in argv):
        argv = ["--signals-to-handle", AGENT_SIGNALS, *argv]  # TERM and USR1 are handled here
    received: list[int] = []

    def pass_on(signum: int, frame) -> None:
        received.append(signum)
        for worker in children(os.getpid()):
            send_signal(worker, signum)

    previous = {sig: signal.signal(sig, pass_on) for sig in PASSED_ON}
    try:
        torch_run.main(argv)
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        print(f"dlscale torchrun: rank {rank} failed: {_cause(failure)}", file=sys.stderr, flush=True)
        return failure.exitcode if failure.exitcode > 0 else 1
    except SignalException as error:
        name = signal.Signals(error.sigval).name
        print(f"dlscale torchrun: stopped by {name} before the workers could checkpoint", file=sys.stderr, flush=True)
        return 128 + int(error.sigval)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        name = signal.Signals(received[0]).name
        print(f"dlscale torchrun: stopped by {name}; the workers checkpointed at a step boundary: run the same "
              "command to resume", flush=True)
    return 0


def _cause(failure) -> str:
    """The failure's one line: a dlscale error as the worker wrote it, else torchrun's short account."""
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "")
    lines = [line for line in str(message).splitlines() if line.strip()]
    if lines:
        return lines[-1].strip()
    return f"exit code {failure.exitcode} ({failure.signal_name()})"
