"""The thread input pipeline (data.workers_kind=thread, dlscale.data.threads) against the DataLoader's worker
processes: the same batches bit for bit (bad files skipped the same way), resumed mid-epoch as the uninterrupted
epoch, an error raised in the consumer's thread as itself, no thread left running by an epoch cut short, and the
files read counted exactly."""

import contextlib
import threading
from dataclasses import replace

import pytest
import torch

from dlscale.config import DataConfig
from dlscale.data import build_loaders
from dlscale.data.counting import count_reads
from dlscale.data.device import for_device
from dlscale.data.encoded import EncodedBatch
from dlscale.data.threads import THREAD_NAME, ThreadLoader, _Batches
from dlscale.errors import ConfigError
from tests.unit.test_data_loader import _tree_with_bad_files
from tests.unit.test_device_decode import SIZE, _tree


def _loaders(root, kind, *, seed=0, workers=2, **options):
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=16, num_workers=workers, workers_kind=kind,
                     persistent_workers=False, **options)
    return build_loaders(cfg, rank=0, world_size=1, batch_size=4, val_batch_size=3, seed=seed)


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.images, y.images) and torch.equal(x.labels, y.labels) and x.skipped == y.skipped


def _loader_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith(THREAD_NAME)]


@pytest.mark.slow
def test_threads_make_the_worker_processes_batches_bit_for_bit_with_bad_files_for_two_seeds_and_epochs(tmp_path):
    root = _tree_with_bad_files(tmp_path)
    others = set(_loader_threads())  # another test's loader, in the same process, is not this one's
    for seed in (0, 5):
        threads, processes = _loaders(root, "thread", seed=seed), _loaders(root, "process", seed=seed)
        assert isinstance(threads[0], ThreadLoader) and not isinstance(processes[0], ThreadLoader)
        for epoch in (0, 1):
            threads[0].sampler.set_epoch(epoch)
            processes[0].sampler.set_epoch(epoch)
            made = list(threads[0])
            _same(made, list(processes[0]))
            assert len([path for batch in made for path in batch.skipped]) == 2  # the truncated and the garbage file
        _same(list(threads[1]), list(processes[1]))  # validation: placeholders where the files are unreadable
    assert not set(_loader_threads()) - others


@pytest.mark.slow
def test_on_the_device_decode_path_the_threads_collate_the_workers_encoded_batches(tmp_path):
    root = _tree(tmp_path)
    batches = {}
    for kind in ("thread", "process"):
        cfg = DataConfig(name="imagefolder", path=str(root), image_size=SIZE, decode="gpu", num_workers=2,
                         workers_kind=kind, persistent_workers=False)
        train, _, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=4, seed=3)
        train.sampler.set_epoch(1)
        batches[kind] = list(train)
    for x, y in zip(batches["thread"], batches["process"], strict=True):
        assert isinstance(x, EncodedBatch)
        for name in ("data", "lengths", "sizes", "boxes", "flips", "images", "labels", "keys"):
            assert torch.equal(getattr(x, name), getattr(y, name)), name
        assert x.first_bad == y.first_bad


def test_a_batch_let_go_is_used_again_and_one_still_held_or_viewed_never_is(tmp_path):
    root = _tree_with_bad_files(tmp_path)
    cfg = DataConfig(name="imagefolder", path=str(root), image_size=16, num_workers=2, persistent_workers=False)
    threads, processes = (build_loaders(replace(cfg, workers_kind=kind), rank=0, world_size=1, batch_size=2,
                                        seed=4)[0] for kind in ("thread", "process"))
    made, expected, memory = [], [], set()
    for epoch in (0, 1, 2):  # each batch copied and let go: its memory is free for a later batch
        threads.sampler.set_epoch(epoch)
        processes.sampler.set_epoch(epoch)
        for batch in threads:
            made.append(batch.images.clone())
            memory.add(batch.images.data_ptr())
        expected += [batch.images for batch in processes]
    assert all(torch.equal(x, y) for x, y in zip(made, expected, strict=True))
    assert len(memory) < len(made)  # used again, or this test shows nothing
    threads.sampler.set_epoch(3)
    views = [(batch.images[1], batch.images[1].clone()) for batch in threads]  # only a row of each batch is held
    assert len({view.data_ptr() for view, _ in views}) == len(views)
    assert all(torch.equal(view, copy) for view, copy in views)


def test_the_batch_pool_hands_out_only_memory_nothing_holds():
    """_Batches on its own (no loader thread's locals holding extra references): a batch held, or a view of it, is
    never handed out again; one let go is; another shape gets its own."""
    pool = _Batches(keep=3, pin=False)
    first = pool.take((2, 3))
    second = pool.take((2, 3))
    second_at = second.data_ptr()
    row = second[1]  # only a view of the second is held now
    del second
    third = pool.take((2, 3))
    assert len({first.data_ptr(), second_at, third.data_ptr()}) == 3
    third_at = third.data_ptr()
    del row, third
    assert pool.take((2, 3)).data_ptr() in (second_at, third_at)  # memory let go, used again
    assert first.data_ptr() not in (t.data_ptr() for t in (pool.take((2, 3)), pool.take((2, 3))))
    assert pool.take((1, 3)).shape == (1, 3) and len(pool.kept) == 3


def test_an_epoch_resumed_mid_way_gives_the_uninterrupted_epochs_batches(tmp_path):
    root = _tree_with_bad_files(tmp_path)
    train, _, _ = _loaders(root, "thread", seed=2)
    train.sampler.set_epoch(1)
    whole = list(train)
    train.sampler.set_epoch(1, start_index=4)  # one batch of 4 consumed by the one rank
    _same(list(train), whole[1:])


def test_an_error_in_a_transform_is_raised_in_the_consumers_thread_as_itself_and_stops_the_threads(tmp_path):
    root = _tree_with_bad_files(tmp_path)
    train, _, _ = _loaders(root, "thread")
    calls = []

    def broken(image, generator, out=None):
        calls.append(threading.current_thread().name)
        raise ValueError("the transform broke")

    train.dataset.transform = broken
    others = set(_loader_threads())
    with pytest.raises(ValueError) as raised:
        list(train)
    assert str(raised.value) == "the transform broke"  # one line, the exception itself
    assert calls and all(name.startswith(THREAD_NAME) for name in calls)
    assert not set(_loader_threads()) - others


def test_an_epoch_cut_short_leaves_no_thread_running(tmp_path):
    root = _tree_with_bad_files(tmp_path)
    made, _, _ = _loaders(root, "thread", workers=3)
    # batches of one: 12 of them, of which the threads may make only 2 ahead, so that they are still there
    train = ThreadLoader(made.dataset, made.sampler, 1, threads=3, image_shape=(3, 16, 16), drop_last=True)
    others = set(_loader_threads())  # another test's loader, in the same process, is not this one's
    with contextlib.closing(iter(train)) as batches:
        next(batches)
        assert len(set(_loader_threads()) - others) == 3
    assert not set(_loader_threads()) - others
    batches = iter(train)
    next(batches)
    del batches  # an iterator dropped unclosed ends its threads too
    assert not set(_loader_threads()) - others


def test_the_threads_files_and_bytes_are_counted_exactly(tmp_path):
    root = _tree_with_bad_files(tmp_path)
    train, _, _ = _loaders(root, "thread")
    counting = count_reads(train)
    batches = list(train)
    files = [path for path in (root / "train").rglob("*") if path.is_file()]
    opened = 3 * 4 + 2  # every sample once, and the two unreadable files each replaced by the next
    assert sum(len(batch.labels) for batch in batches) == 12
    assert counting.totals()[0] == opened
    assert counting.counts[0, 0] == 0 and counting.counts[1:, 0].sum() == opened  # the threads' rows, not the main's
    assert counting.worker_pids() == []  # the threads are this process: its own /proc counters hold their reads
    assert counting.totals()[1] >= sum(path.stat().st_size for path in files) - max(p.stat().st_size for p in files)


def test_workers_kind_is_checked_in_one_line_and_auto_takes_threads_for_jpegs_on_cuda():
    with pytest.raises(ConfigError, match=r"^data.workers_kind='fibers'; use one of thread, process, auto$"):
        DataConfig(workers_kind="fibers")
    # auto: threads for JPEGs where the step runs on a GPU; processes where the step's own operators run on the
    # host (a CPU device, or none known) and for the data sets held as arrays
    jpegs, digits = DataConfig(name="imagefolder"), DataConfig(name="digits")
    assert jpegs.workers_kind_on("cuda") == "thread"
    assert jpegs.workers_kind_on("cpu") == jpegs.workers_kind_on(None) == "process" and not jpegs.worker_threads
    assert digits.workers_kind_on("cuda") == "process"
    assert DataConfig(name="digits", workers_kind="thread").workers_kind_on("cpu") == "thread"
    assert DataConfig(name="imagefolder", workers_kind="process").workers_kind_on("cuda") == "process"
    # what build_loaders is given: the kind resolved for the device
    assert for_device(jpegs, "cpu").workers_kind == "process" and not for_device(jpegs, "cpu").worker_threads
    assert for_device(replace(jpegs, decode="fast"), torch.device("cuda")).workers_kind == "thread"


def test_the_digits_threads_make_the_processes_batches(tmp_path):
    made = {}
    for kind in ("thread", "process"):
        cfg = DataConfig(name="digits", num_workers=2, workers_kind=kind, persistent_workers=False)
        train, val, _ = build_loaders(cfg, rank=0, world_size=1, batch_size=256, seed=4)
        made[kind] = list(train) + list(val)
    _same(made["thread"], made["process"])


def test_each_loader_thread_runs_torch_on_one_thread_and_the_consumers_threads_stay(tmp_path):
    root = _tree_with_bad_files(tmp_path)
    train, _, _ = _loaders(root, "thread")
    seen, transform = [], train.dataset.transform

    def recording(image, generator, out=None):
        seen.append(torch.get_num_threads())
        return transform(image, generator, out=out)

    train.dataset.transform = recording
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        list(train)
        assert seen and set(seen) == {1}  # as DataLoader workers: no team of intra-op threads per resize
        assert torch.get_num_threads() == 2
        later = []
        thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        assert later == [2]  # torch's default for new threads is the consumer's count again
    finally:
        torch.set_num_threads(before)
