import pytest
from hypothesis import given, strategies as st

from nodemap.errors import NodemapError
from nodemap.launcher import LocalRank, detect, launched, node_name, srun_tasks, tasks_per_node


@pytest.mark.parametrize("env, want", [
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, LocalRank(3, 4, "Open MPI")),
    ({"MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, LocalRank(1, 2, "MPICH/Hydra")),
    ({"MV2_COMM_WORLD_LOCAL_RANK": "5", "MV2_COMM_WORLD_LOCAL_SIZE": "8"}, LocalRank(5, 8, "MVAPICH2")),
    ({"PALS_LOCAL_RANKID": "2", "PALS_LOCAL_SIZE": "12"}, LocalRank(2, 12, "Cray PALS")),
    ({"FLUX_TASK_LOCAL_ID": "1", "FLUX_JOB_SIZE": "8", "FLUX_JOB_NNODES": "2"}, LocalRank(1, 4, "Flux")),
    ({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "8"}, LocalRank(0, 8, "torchrun")),
    ({"SLURM_LOCALID": "1", "SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3",
      "SLURM_TASKS_PER_NODE": "9"}, None),  # local rank 1 but the last node has 1 task: error below
    ({"SLURM_LOCALID": "2", "SLURM_STEP_TASKS_PER_NODE": "4,3(x2)", "SLURM_NODEID": "2"}, LocalRank(2, 3, "Slurm")),
    ({"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "8(x2)", "SLURM_NODEID": "1"}, LocalRank(0, 8, "Slurm")),
])
def test_launchers(env, want):
    if want is None:
        with pytest.raises(NodemapError, match="--local-rank"):
            detect(env)
    else:
        assert detect(env) == want


def test_mpi_launcher_beats_stale_slurm_variables():
    # mpirun inside an sbatch script: every rank inherits the batch step's SLURM_LOCALID=0
    env = {"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    assert detect(env) == LocalRank(1, 2, "Open MPI")


def test_flux_uneven_size_is_unknown_and_flags_complete_it():
    env = {"FLUX_TASK_LOCAL_ID": "1", "FLUX_JOB_SIZE": "7", "FLUX_JOB_NNODES": "2"}
    assert detect(env).size == 0
    assert detect(env, size=4) == LocalRank(1, 4, "Flux + flags")


def test_unknown_launcher_names_the_override_flags():
    with pytest.raises(NodemapError, match="--local-rank R --local-size N"):
        detect({"PATH": "/bin"})
    assert not launched({"PATH": "/bin"})
    assert detect({}, rank=1, size=2) == LocalRank(1, 2, "flags")


@pytest.mark.parametrize("env, kw", [
    ({"MPI_LOCALRANKID": "x1", "MPI_LOCALNRANKS": "2"}, {}),
    ({"MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "2"}, {}),
    ({}, {"rank": 3, "size": 2}),
    ({"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "2(x"}, {}),
])
def test_bad_values_are_errors(env, kw):
    with pytest.raises(NodemapError):
        detect(env, **kw)


@given(st.lists(st.tuples(st.integers(1, 64), st.integers(1, 5)), min_size=1, max_size=6))
def test_tasks_per_node_expands_slurm_syntax(groups):
    text = ",".join(f"{n}(x{k})" if k > 1 else str(n) for n, k in groups)
    assert tasks_per_node(text) == [n for n, k in groups for _ in range(k)]


def test_a_slurm_node_is_named_by_slurm_where_srun_or_slurmd_started_the_process():
    import socket

    host = socket.gethostname()
    srun = {"SLURMD_NODENAME": "n2", "SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "1"}
    assert node_name(srun) == "n2"  # srun's task: several slurmd may share the host
    assert node_name({"SLURMD_NODENAME": "n2"}) == "n2"  # a prolog or health check: no launcher
    assert node_name({}) == host
    # mpiexec inside a job forwards the batch node's name to every rank: not believed
    assert node_name({**srun, "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}) == host
    assert node_name({**srun, "MPI_LOCALRANKID": "x"}) == host  # unsure which launcher
    for odd in ("n1 n2", "../n1", "n1;reboot", "-n1", "n" * 65, "n\x01"):
        assert node_name({"SLURMD_NODENAME": odd}) == host, odd


def test_srun_tasks_only_for_the_tasks_of_an_srun_step():
    step = {"SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "1(x3)", "SLURM_NODEID": "0"}
    assert srun_tasks({**step, "SLURM_STEP_NUM_TASKS": "3"}) == 3
    assert srun_tasks(step) == 0  # a batch script: no step
    assert srun_tasks({**step, "SLURM_STEP_NUM_TASKS": "3", "MPI_LOCALRANKID": "0"}) == 0  # an mpiexec's rank
    assert srun_tasks({**step, "SLURM_STEP_NUM_TASKS": "x"}) == 0
