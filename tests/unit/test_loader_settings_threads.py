"""`dlscale loader` measures every setting with the intra-op threads it would have in training: a 0-worker
setting decodes in the main process on one thread, as one DataLoader worker does (torch sets one thread in
each), not on torch's default team, whose contention made the baseline several times slower than one worker."""

import torch

from dlscale.bench import loader as bench_loader
from dlscale.config import DataConfig


def test_a_setting_decodes_on_the_threads_it_has_in_training(monkeypatch):
    seen = {}

    def measure(cfg, **kwargs):
        seen[cfg.num_workers] = torch.get_num_threads()
        return {}

    monkeypatch.setattr(bench_loader, "_measure", measure)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for workers in (0, 2):
            bench_loader.measure_setting(DataConfig(name="synthetic", num_workers=workers), batch_size=4, batches=1,
                                         warmup=0)
            assert torch.get_num_threads() == 2  # restored after the setting
        # 0 workers: the main process decodes, on one intra-op thread; with workers, each worker (or loader
        # thread) sets its own one, and the main process keeps its team for the copy into the batch
        assert seen == {0: 1, 2: 2}
    finally:
        torch.set_num_threads(before)
