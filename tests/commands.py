"""`dlscale` and other commands as a user runs them, for the tests: in this process, or in a fresh one.

`dlscale_here(...)` runs a command in the test's own process through dlscale.cli.main: the same parser,
the same one-line errors and exit codes, what it prints captured, but no interpreter to start and no
torch to import (about 2 s a process on the CI's two cores). It is for the tests that check what a
command does. `run_process(...)`, `start_process(...)` and `dlscale_process(...)` start a fresh process,
for the tests whose subject is the process itself: a launcher (torchrun, the ranks of a job), a signal,
a second run beside the first, a terminal, what a fresh interpreter imports.

Both kinds give what subprocess.run gives: returncode, stdout and stderr as text. A fresh process gets a
clean environment, ENV (this checkout's package first on the path, one thread, PATH /usr/bin and /bin),
plus the variables a test adds.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)}
HANG_S = 600.0
"""A fresh process that outlives this is hung. No command the tests start takes a minute on an idle
2-core machine; on CI's, at a load of 10-12, they took up to 5 times as long: this deadline is a hang
guard, never a speed test (speed is measured in benchmarks/)."""
DLSCALE = [sys.executable, "-m", "dlscale"]


def torchrun(nproc: int = 2) -> list[str]:
    """torchrun with nproc workers on this host (its standalone rendezvous); the program follows."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]


def _env(env: dict[str, str] | None) -> dict[str, str]:
    return {**ENV, **(env or {})}


def run_process(command: Sequence, cwd=None, *, env: dict[str, str] | None = None,
        timeout_s: float = HANG_S) -> subprocess.CompletedProcess:
    """command in a fresh process with ENV and `env`, its output captured; raises TimeoutExpired (the
    process killed) after timeout_s."""
    return subprocess.run([str(word) for word in command], cwd=cwd, env=_env(env), capture_output=True,
                          text=True, timeout=timeout_s)


def start_process(command: Sequence, cwd=None, *, env: dict[str, str] | None = None, **popen) -> subprocess.Popen:
    """command started in a fresh process with ENV and `env`, stdout and stderr as text pipes (or what
    `popen` says); the test waits for it."""
    options = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen([str(word) for word in command], cwd=cwd, env=_env(env), **options)


def dlscale_process(*args, cwd=None, env: dict[str, str] | None = None,
            timeout_s: float = HANG_S) -> subprocess.CompletedProcess:
    """`python -m dlscale ARGS` in a fresh process."""
    return run_process([*DLSCALE, *args], cwd, env=env, timeout_s=timeout_s)


def dlscale_here(*args, cwd=None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`dlscale ARGS` in this process, in `cwd` with `env` added to the environment; what it printed and
    its exit code, as a fresh process would give them. An exception the command does not turn into
    an exit code is raised here, its traceback in the test's report."""
    from dlscale.cli import main

    argv = [str(word) for word in args]
    stdout, stderr = io.StringIO(), io.StringIO()
    with _as_a_command(argv, cwd, env), redirect_stdout(stdout), redirect_stderr(stderr):
        try:
            code = main(argv)
        except SystemExit as done:  # argparse: a bad flag (2), --help or --version (0)
            code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
            if isinstance(done.code, str):
                print(done.code, file=sys.stderr)
    return subprocess.CompletedProcess(["dlscale", *argv], code, stdout.getvalue(), stderr.getvalue())


@contextmanager
def _as_a_command(argv: list[str], cwd, env: dict[str, str] | None) -> Iterator[None]:
    """sys.argv as `python -m dlscale` sets it (env.json records it), the command's working directory
    and variables; afterwards all three restored, with torch's deterministic-algorithms switch (a train
    run may turn it on for the whole process) and no process group left behind."""
    import dlscale

    saved_argv, saved_cwd, saved_env = sys.argv, os.getcwd(), dict(os.environ)
    torch = sys.modules.get("torch")
    deterministic = torch.are_deterministic_algorithms_enabled() if torch else None
    sys.argv = [str(Path(dlscale.__file__).with_name("__main__.py")), *argv]
    os.environ.update(env or {})
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.use_deterministic_algorithms(bool(deterministic))
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                torch.distributed.destroy_process_group()
