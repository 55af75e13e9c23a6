import os
import signal

import pytest

# Children and the test process share 2 cores on CI: keep each torch process to one thread.
os.environ.setdefault("OMP_NUM_THREADS", "1")


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
