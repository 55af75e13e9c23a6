"""`dlscale torchrun`'s last line is the failed worker's own error, never torchrun's help link ("To enable
traceback see: ..."): the line a dlscale worker records (its argparse refusals included), else the last line of
the worker's stderr where torchrun kept it (--log-dir with --redirects), else its exit code. torchrun's own flag
errors and a rendezvous host that does not resolve are one line, before any worker starts."""

import pytest
from commands import DLSCALE, run_process

from dlscale.cli import main

pytestmark = pytest.mark.filterwarnings("ignore:Unable to enable fault handler")
AGENT = [*DLSCALE, "torchrun", "--standalone", "--nproc-per-node", "1"]


@pytest.mark.parametrize("argv,message", [
    (["--nproc-per-node", "x", "-m", "dlscale", "models"], "torchrun: Unsupported nproc_per_node value: x"),
    (["--nnodes", "0", "--nproc-per-node", "1", "-m", "dlscale", "models"], "torchrun: min_nodes must be > 0"),
    (["--no-such-flag"], "torchrun: the following arguments are required"),
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "no-such-host.invalid:29400", "-m", "dlscale",
      "models"], "the rendezvous host 'no-such-host.invalid' does not resolve"),
    (["--nnodes", "2", "--master-addr", "no-such-host.invalid", "--master-port", "29400", "-m", "dlscale",
      "models"], "the rendezvous host 'no-such-host.invalid' does not resolve"),
])
def test_torchruns_own_refusals_are_one_line(capsys, argv, message):
    assert main(["torchrun", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dlscale torchrun: error: ") and message in err, err


@pytest.mark.parametrize("flags,named,not_named", [
    (["--rdzv-backend", "c10d", "--rdzv-endpoint", "no-such-host.invalid:29400"], "--rdzv-endpoint HOST:PORT",
     "--master-addr"),
    (["--master-addr", "no-such-host.invalid", "--master-port", "29400"], "--master-addr HOST", "--rdzv-endpoint"),
])
def test_a_rendezvous_host_that_does_not_resolve_names_the_flag_that_gave_it(capsys, flags, named, not_named):
    assert main(["torchrun", "--nnodes", "2", *flags, "-m", "dlscale", "models"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"give {named} a host name or address every node reaches" in err and not_named not in err, err


def _last_line(result) -> str:
    return result.stderr.strip().splitlines()[-1]


def test_a_workers_refused_flag_is_the_last_line(tmp_path):
    done = run_process([*AGENT, "-m", "dlscale", "bench", "--no-such-flag"], tmp_path)
    assert done.returncode == 2
    assert _last_line(done) == ("dlscale torchrun: rank 0 failed: dlscale bench: error: unrecognized arguments: "
                                "--no-such-flag (see `dlscale bench --help`)")


def test_a_worker_that_records_nothing_is_its_stderrs_last_line_where_torchrun_kept_it(tmp_path):
    kept = run_process([*AGENT, "--log-dir", tmp_path / "logs", "--redirects", "2", "-m", "no_such_module_of_dlscale"],
                       tmp_path)
    assert kept.returncode == 1
    assert _last_line(kept).startswith("dlscale torchrun: rank 0 failed: ")
    assert _last_line(kept).endswith("No module named no_such_module_of_dlscale (exit code 1)")
    plain = run_process([*AGENT, "-m", "no_such_module_of_dlscale"], tmp_path)
    assert "To enable traceback" not in _last_line(plain)
    assert _last_line(plain).startswith("dlscale torchrun: rank 0 failed: exit code 1, with no error of its own")
