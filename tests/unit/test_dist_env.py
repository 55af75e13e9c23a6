"""DistEnv over tables of launcher environments (docs/references.md#launcher-precedence, #slurm-env,
#mpi-env, #rule-launcher-env)."""

import pytest

from dlscale.distributed.env import DistEnv, expand_hostlist
from dlscale.errors import ConfigError

TORCHRUN = {
    "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
    "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "29400",
    "TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_USE_AGENT_STORE": "True",
}
SLURM = {
    "SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
    "SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_JOB_ID": "123456",
}
OPENMPI = {
    "OMPI_COMM_WORLD_RANK": "6", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "2",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MASTER_ADDR": "server1",
}
PMI = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}

CASES = [
    # name, environment, expected fields
    ("single process", {}, dict(rank=0, world_size=1, launcher="single", master_addr=None)),
    ("torchrun", TORCHRUN, dict(rank=3, world_size=4, local_rank=1, local_world_size=2, node_rank=1,
                                num_nodes=2, master_addr="node0", master_port=29400, launcher="torchrun",
                                restart_count=2, agent_store=True)),
    # Workers that torchrun starts inside one srun task inherit SLURM_PROCID=0, SLURM_NTASKS=1:
    # torchrun's variables must win or every worker is rank 0 of 1.
    ("torchrun inside srun", {**SLURM, "SLURM_PROCID": "0", "SLURM_NTASKS": "1", **TORCHRUN},
     dict(rank=3, world_size=4, launcher="torchrun")),
    ("plain env vars", {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1234"},
     dict(rank=1, world_size=2, local_world_size=2, node_rank=0, num_nodes=1, launcher="env", agent_store=False)),
    ("slurm one task per gpu", SLURM,
     dict(rank=5, world_size=8, local_rank=1, local_world_size=4, node_rank=1, num_nodes=2,
          master_addr="gpu07", master_port=20000 + 123456 % 20000, launcher="slurm")),
    ("slurm with MASTER_ADDR", {**SLURM, "MASTER_ADDR": "login1", "MASTER_PORT": "4000"},
     dict(master_addr="login1", master_port=4000)),
    ("slurm one node, no node list", {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"},
     dict(rank=1, world_size=2, master_addr="127.0.0.1", num_nodes=1)),
    ("open mpi", OPENMPI, dict(rank=6, world_size=16, local_rank=2, local_world_size=4, node_rank=1,
                               num_nodes=4, master_addr="server1", launcher="openmpi")),
    ("pmi (mpich, intel mpi)", PMI, dict(rank=1, world_size=2, local_rank=1, master_addr="127.0.0.1", launcher="pmi")),
    # mpirun inside an sbatch allocation: every rank inherits the batch step's SLURM_PROCID=0.
    ("mpirun inside slurm", {**SLURM, "SLURM_PROCID": "0", **{k: v for k, v in OPENMPI.items() if k != "MASTER_ADDR"}},
     dict(rank=6, world_size=16, local_rank=2, launcher="openmpi", master_addr="gpu07")),
    ("mpiexec.hydra inside slurm", {**SLURM, "SLURM_PROCID": "0", **PMI}, dict(rank=1, world_size=2, launcher="pmi")),
    ("srun --mpi=pmi2", {**SLURM, "PMI_RANK": "5", "PMI_SIZE": "8"}, dict(rank=5, world_size=8)),
    ("mvapich", {"MV2_COMM_WORLD_RANK": "0", "MV2_COMM_WORLD_SIZE": "2", "MV2_COMM_WORLD_LOCAL_RANK": "0",
                 "MV2_COMM_WORLD_LOCAL_SIZE": "2"}, dict(rank=0, world_size=2, launcher="mvapich")),
]


@pytest.mark.parametrize("name,environ,expected", CASES, ids=[c[0] for c in CASES])
def test_environments(name, environ, expected):
    env = DistEnv.from_env(environ)
    for field, value in expected.items():
        assert getattr(env, field) == value, field


def test_multi_node_without_rendezvous_host_is_an_error():
    environ = {k: v for k, v in SLURM.items() if k != "SLURM_JOB_NODELIST"}
    with pytest.raises(ConfigError, match="MASTER_ADDR"):
        DistEnv.from_env(environ)
    mpi = {k: v for k, v in OPENMPI.items() if k != "MASTER_ADDR"}
    with pytest.raises(ConfigError, match="MASTER_ADDR"):
        DistEnv.from_env(mpi)


@pytest.mark.parametrize("environ,match", [
    ({"RANK": "4", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}, "rank 4 .* not in 0..3"),
    ({"RANK": "x", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}, "RANK='x' is not a whole number the launcher sets"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "two"}, "SLURM_TASKS_PER_NODE"),
])
def test_bad_values_name_the_variable(environ, match):
    with pytest.raises(ConfigError, match=match):
        DistEnv.from_env(environ)


@pytest.mark.parametrize("hostlist,hosts", [
    ("gpu[07-09],cpu1", ["gpu07", "gpu08", "gpu09", "cpu1"]),
    ("node1", ["node1"]),
    ("n[1,3-4]", ["n1", "n3", "n4"]),
    ("a[01-02]-ib[0-1]", ["a01-ib0", "a01-ib1", "a02-ib0", "a02-ib1"]),
    ("x[8-10]", ["x8", "x9", "x10"]),
])
def test_expand_hostlist(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


def test_tasks_per_node_uneven():
    env = DistEnv.from_env({"SLURM_PROCID": "4", "SLURM_NTASKS": "5", "SLURM_NODEID": "1", "SLURM_LOCALID": "0",
                            "SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "4,1", "SLURM_JOB_NODELIST": "n[1-2]"})
    assert env.local_world_size == 1 and env.node_rank == 1 and env.master_addr == "n1"


@pytest.mark.parametrize("visible,local_rank,local_world,expected", [
    (1, 3, 4, "cuda:0"),    # srun --gpus-per-task=1: each rank sees its own GPU as device 0
    (4, 3, 4, "cuda:3"),    # torchrun: every rank sees the node's GPUs and takes its local rank's
    (8, 1, 2, "cuda:1"),
])
def test_select_device_takes_the_gpu_a_rank_sees(monkeypatch, visible, local_rank, local_world, expected):
    import torch

    from dlscale.distributed import select_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    env = DistEnv(rank=local_rank, world_size=local_world, local_rank=local_rank, local_world_size=local_world)
    assert str(select_device(env, "auto")) == expected


def test_select_device_refuses_more_ranks_than_gpus(monkeypatch):
    import torch

    from dlscale.distributed import select_device
    from dlscale.errors import DeviceError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(DeviceError, match="only 2 GPU"):
        select_device(DistEnv(rank=3, world_size=4, local_rank=3, local_world_size=4), "cuda")


@pytest.mark.parametrize("environ,named,not_named", [
    (TORCHRUN, "give torchrun's --rdzv-endpoint HOST:PORT (or --master-addr) a host name", "export"),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "node0"},
     "MASTER_ADDR 'node0' does not resolve", "torchrun"),
])
def test_a_rendezvous_host_that_does_not_resolve_names_what_the_user_set(monkeypatch, environ, named, not_named):
    """Under torchrun MASTER_ADDR is torchrun's, from its --rdzv-endpoint or --master-addr: the line names those;
    a rank started by hand names the MASTER_ADDR the user exported."""
    import socket

    import torch

    from dlscale.distributed import process_group
    from dlscale.errors import DeviceError

    def unknown(host, port):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(process_group.socket, "getaddrinfo", unknown)
    monkeypatch.setattr(process_group, "exit_with_parent", lambda: None)  # not this test process's parent
    with pytest.raises(DeviceError) as raised:
        process_group.init_process_group(DistEnv.from_env(environ), torch.device("cpu"))
    said = str(raised.value)
    assert "'node0'" in said and "does not resolve (" in said and "Name or service not known)" in said, said
    assert named in said, said
    assert not_named not in said and "\n" not in said
