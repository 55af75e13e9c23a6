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
import socket
import sys
from pathlib import Path

from dlscale.errors import ConfigError, line_of, shown
from dlscale.launch.errors import last_line
from dlscale.launch.local import check_local_ranks, children, send_signal

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
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    argv = list(args.torchrun_args)
    if not argv:
        raise ConfigError("give torchrun's flags and the program, e.g. dlscale torchrun --standalone "
                          "--nproc-per-node 2 -m dlscale train --config cpu:digits")
    if not any(a.startswith(("--signals-to-handle", "--signals_to_handle")) for a in argv):
        argv = ["--signals-to-handle", AGENT_SIGNALS, *argv]  # TERM and USR1 are handled here
    parsed = _parse(torch_run, argv)
    _check_rendezvous_host(parsed)
    if parsed.nproc_per_node.isdigit():  # gpu, cpu, auto: torchrun counts the devices
        check_local_ranks(int(parsed.nproc_per_node), "--nproc-per-node")
    received: list[int] = []

    def pass_on(signum: int, frame) -> None:
        received.append(signum)
        for worker in children(os.getpid()):
            send_signal(worker, signum)

    previous = {sig: signal.signal(sig, pass_on) for sig in PASSED_ON}
    try:
        torch_run.run(parsed)
    except ChildFailedError as error:
        rank, failure = error.get_first_failure()
        print(f"dlscale torchrun: rank {rank} failed: {_cause(failure, parsed.log_dir)}", file=sys.stderr,
              flush=True)
        return failure.exitcode if failure.exitcode > 0 else 1
    except (ValueError, AssertionError, RendezvousError) as error:  # torchrun refusing its flags, or no rendezvous
        raise ConfigError(f"torchrun: {_first_line(error)}") from None
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


def _parse(torch_run, argv: list[str]) -> argparse.Namespace:
    """torchrun's flags read by torchrun's own parser, a flag it refuses one line (argparse's usage block is not)."""
    parser = torch_run.get_args_parser()

    def refuse(message: str):
        raise ConfigError(f"torchrun: {message} (see `torchrun --help`)")

    parser.error = refuse
    return parser.parse_args(argv)


def _check_rendezvous_host(args: argparse.Namespace) -> None:
    """A rendezvous host that does not resolve is one line now, not torchrun's traceback after its retries; the
    line names the flag that gave it (--rdzv-endpoint, else --master-addr)."""
    if args.standalone:  # this host
        return
    endpoint = args.rdzv_endpoint or ""
    host = (endpoint.rsplit(":", 1)[0] if ":" in endpoint and not endpoint.endswith("]") else endpoint).strip("[]")
    host, flag = (host, "--rdzv-endpoint HOST:PORT") if endpoint else (args.master_addr, "--master-addr HOST")
    if not host:
        return
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError) as error:
        raise ConfigError(f"torchrun: the rendezvous host {shown(host)} does not resolve ({_first_line(error)}); "
                          f"give {flag} a host name or address every node reaches") from None


def _first_line(error: BaseException) -> str:
    return line_of(error, 300) or type(error).__name__


def _cause(failure, log_dir: str | None) -> str:
    """The failure's one line: the error the worker recorded (a dlscale error, or the last line of a traceback
    that torch's record() wrote), else the last line of its stderr where torchrun kept it (--log-dir with
    --redirects or --tee), else its exit code."""
    if os.path.isfile(failure.error_file):  # torch names a missing one <N/A>
        message = failure.message
        if isinstance(message, dict):
            message = message.get("message", "")
        said = line_of(message, 500, last=True)
        if said:
            return said
    signal_name = f" ({failure.signal_name()})" if failure.exitcode < 0 else ""
    kept = sorted(Path(log_dir).glob(f"*/attempt_*/{failure.local_rank}/stderr.log"), key=os.path.getmtime) \
        if log_dir else []
    said = last_line(kept[-1]) if kept else ""
    if said:
        return f"{said} (exit code {failure.exitcode}{signal_name})"
    return (f"exit code {failure.exitcode}{signal_name}, with no error of its own recorded: its last lines above "
            "say why (with --log-dir DIR --redirects 2, torchrun keeps them and this line quotes the last)")
