"""A run's view of the cores it shares (metrics/host_load.py) and what `dlscale explain` makes of it
(explain/host.py): the warning at the start, the record, and the causes ranked with their evidence, on
machines made to look loaded or oversubscribed by a fake load average and a given core count."""

from pathlib import Path

import pytest

from dlscale.errors import ConfigError
from dlscale.explain.build import explain_run
from dlscale.metrics.host_load import LOADAVG_FILE_VARIABLE, HostLoad, read_loadavg
from dlscale.rundir import Run


def _host(ranks, threads, cores, load=(0.1, 0.1, 0.1), end=(0.2, 0.2, 0.2)) -> HostLoad:
    loads = iter([load, end])
    return HostLoad.start(ranks, threads, cores=cores, host_cores=cores, loadavg=lambda: next(loads))


def test_a_quiet_host_whose_threads_fit_its_cores_gets_no_warning():
    host = _host(2, 2, 4)
    assert host.warning() is None and not host.oversubscribed and not host.loaded
    assert host.at_start() == {"load_avg_start": [0.1, 0.1, 0.1], "load_avg_source": "/proc/loadavg",
                               "cores_available": 4, "host_cores": 4, "ranks_per_node": 2, "threads_per_rank": 2,
                               "threads_per_node": 4, "oversubscribed": False, "loaded": False}


def test_more_threads_than_cores_is_one_line_naming_the_threads_that_fit():
    # 4 ranks x 2 threads on 4 cores: 8 threads; one thread per rank fits.
    warning = _host(4, 2, 4).warning()
    assert warning.count("\n") == 0
    assert warning.startswith("warning: 4 rank(s) x 2 threads = 8 compute threads on the 4 cores this process may use")
    assert warning.endswith("set OMP_NUM_THREADS=1 (now 2)")
    # More ranks than cores: no thread count fits, fewer ranks do.
    assert _host(8, 1, 4).warning().endswith("set fewer ranks per node (--nproc 4, now 8)")


def test_a_load_average_above_the_cores_is_warned_even_when_the_threads_fit():
    # The machine: 2 cores, other work at load 4.7, torch's default 2 threads in one rank.
    host = _host(1, 2, 2, load=(4.7, 3.0, 1.4))
    assert host.loaded and not host.oversubscribed
    assert host.warning() == ("warning: the host is already loaded: load average 4.70 over the last minute on 2 "
                              "cores: threads wait for cores and the figures come out low (dlscale explain ranks "
                              "it); set OMP_NUM_THREADS=1 (now 2) or run where nothing else runs")
    assert _host(1, 1, 2, load=(4.7, 3.0, 1.4)).warning().endswith("; run where nothing else runs")


def test_the_record_holds_the_load_at_both_ends_and_the_cpu_time_of_the_timed_part():
    ticks = iter([10.0, 14.0])  # wall clock: 4 s timed
    cpu = iter([1.0, 3.0])      # CPU time: 2 s of it
    host = HostLoad(1, 2, 2, (4.7, 3.0, 1.4), loadavg=lambda: (5.5, 3.2, 1.5), clock=lambda: next(ticks),
                    cpu_clock=lambda: next(cpu))
    host.timed()
    record = host.finish()
    assert record["load_avg_start"] == [4.7, 3.0, 1.4] and record["load_avg_end"] == [5.5, 3.2, 1.5]
    assert record["timed_s"] == 4.0 and record["process_cpu_s"] == 2.0
    assert record["process_cores_busy"] == 0.5 and record["thread_share"] == 0.25  # 2 threads could run 8 s
    assert record["warning"].startswith("warning: the host is already loaded")
    assert HostLoad.start_part(record) == host.at_start()


def test_the_load_average_is_set_against_the_machines_cores_not_the_jobs_share():
    # A job given 4 of a node's 64 cores: load 30 is other jobs on the other cores, not this one's.
    assert not _host_on(4, 64, 30.0).loaded and _host_on(4, 64, 70.0).loaded
    assert "load average 70.00 over the last minute on 64 cores" in _host_on(4, 64, 70.0).warning()


def _host_on(cores, host_cores, load):
    return HostLoad.start(1, 1, cores=cores, host_cores=host_cores, loadavg=lambda: (load, load, load))


def test_the_load_average_source_is_the_file_the_variable_names(tmp_path):
    fake = tmp_path / "loadavg"
    fake.write_text("6.25 5.00 4.00 3/200 1234\n")
    assert read_loadavg({LOADAVG_FILE_VARIABLE: str(fake)}) == (6.25, 5.0, 4.0)
    fake.write_text("busy\n")
    with pytest.raises(ConfigError, match="DLSCALE_LOADAVG_FILE=.*not a readable load average"):
        read_loadavg({LOADAVG_FILE_VARIABLE: str(fake)})
    assert len(read_loadavg({})) == 3  # the kernel's


# ------------------------------------------------------------------------------------- dlscale explain

CPU_RUN = {"kind": "bench", "model": "resnet50", "precision": "fp32", "world_size": 1, "device": "cpu",
           "device_name": "x86_64", "batch_size": 8, "img_per_sec_total_mean": 2.0, "total_ips": 2.0}


def _run(host_load, env=None, **summary):
    start = HostLoad.start_part(host_load)
    return Run(Path("r"), {**CPU_RUN, **summary, "host_load": host_load},
               {}, {"torch_threads": 2, "cpu_available": 2, **(env or {}), "host_load": start})


def _record(ranks, threads, cores, load, share):
    return {"load_avg_start": list(load), "load_avg_source": "/proc/loadavg", "cores_available": cores,
            "host_cores": cores,
            "ranks_per_node": ranks, "threads_per_rank": threads, "threads_per_node": ranks * threads,
            "oversubscribed": ranks * threads > cores, "loaded": load[0] > cores, "load_avg_end": [load[0] + 1, 1, 1],
            "timed_s": 100.0, "process_cpu_s": 100.0 * share * threads, "process_cores_busy": share * threads,
            "thread_share": share}


def test_a_loaded_host_is_ranked_as_a_cause_with_its_measured_evidence():
    # The run: one rank of 2 threads on 2 cores at load 4.7 whose threads ran 5% of the timed part.
    # Before, explain ruled the threads out ("2 x 1 rank(s) on 2 cores") and named nothing.
    e = explain_run(_run(_record(1, 2, 2, (4.7, 3.0, 1.4), 0.05)), "none")
    first = e.ranked()[0]
    assert first.category == "host" and first.cause == "a loaded host: load average 4.70 on 2 cores before the run"
    assert first.effect.factor == pytest.approx(1 / 0.05) and first.effect.bound  # its threads ran 5% of the time
    assert "load average 4.70 / 3.00 / 1.40" in first.evidence and "at the end 5.70" in first.evidence
    assert "0.10 cores' worth of CPU time per second" in first.evidence and "5% of what its 2 threads" in first.evidence
    assert first.change == "run where nothing else runs (a quiet machine, a job of its own); else set " \
                           "OMP_NUM_THREADS=1 (now 2)"


def test_oversubscription_and_load_share_the_measured_slowdown():
    # 2 ranks x 2 threads on 2 cores (2x oversubscribed) on a host at load 3: the threads ran 10% of the time.
    # Oversubscription accounts for 2x of the 10x; the load for the remaining 5x; ranked load first.
    e = explain_run(_run(_record(2, 2, 2, (3.0, 3.0, 3.0), 0.10), world_size=2, total_ips=4.0,
                         img_per_sec_total_mean=4.0), "none")
    host = [f for f in e.ranked() if f.category == "host"]
    assert [f.cause for f in host] == ["a loaded host: load average 3.00 on 2 cores before the run",
                                       "oversubscribed: 4 compute threads on 2 cores"]
    assert host[0].effect.factor == pytest.approx(10 / 2) and host[1].effect.factor == pytest.approx(2.0)
    # The others keep every core busy: one rank of one thread is what suffers least.
    assert host[1].change == "set OMP_NUM_THREADS=1 (now 2) and fewer ranks per node (--nproc 1, now 2)"


def test_a_quiet_host_is_checked_and_ruled_out():
    e = explain_run(_run(_record(1, 2, 2, (0.3, 0.2, 0.1), 0.9)), "none")
    assert not [f for f in e.findings if f.category == "host"]
    ruled = [r.evidence for r in e.ruled_out if r.category == "host"]
    assert any("load average 0.30" in r and "other work left the cores free" in r for r in ruled)
    assert any("2 compute threads fit" in r for r in ruled)
