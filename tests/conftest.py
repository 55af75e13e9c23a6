import os
import signal
from pathlib import Path

import pytest

# Children and the test process share 2 cores on CI: keep each torch process to one thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")

CHECKOUT = Path(__file__).resolve().parents[1]
NOT_OURS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache"}
"""Folders of the checkout that tools write (the virtualenv, caches): left out of the check below."""


def _checkout_files() -> set[str]:
    found = set()
    for folder, dirs, files in os.walk(CHECKOUT):
        dirs[:] = [d for d in dirs if d not in NOT_OURS and not d.endswith(".egg-info")]
        found.update(os.path.relpath(os.path.join(folder, name), CHECKOUT) for name in [*dirs, *files])
    return found


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the session that runs or steers the tests, once
        session.config.stash[_BEFORE] = _checkout_files()


def pytest_sessionfinish(session, exitstatus):
    """Tests write only into their temporary folders: a file or folder the session left in the checkout (a run
    directory in ./runs, a report) fails it, named."""
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    left = sorted(_checkout_files() - before)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"the tests left {len(left)} path(s) in the checkout {CHECKOUT}: {', '.join(left[:10])}"
        if reporter is not None:
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[set]()


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch missing is a different failure
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)


@pytest.fixture
def signal_at_step(monkeypatch):
    """Send SIGUSR1 to this process right after optimizer step `n` (counted from 1)."""
    def arm(n):
        calls = {"count": 0}
        import dlscale.train.loop as loop

        original = loop.train_step

        def step_then_signal(*args, **kwargs):
            loss = original(*args, **kwargs)
            calls["count"] += 1
            if calls["count"] == n:
                os.kill(os.getpid(), signal.SIGUSR1)
            return loss

        monkeypatch.setattr(loop, "train_step", step_then_signal)
        return lambda: monkeypatch.setattr(loop, "train_step", original)
    return arm
