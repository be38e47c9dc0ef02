import json
import os
import subprocess
import sys

import nodes
from nodemap.mapping import show
from nodemap.topology.model import Port, replace


def row(rank, cpus, gpus=(), host="n1", threads=None):
    return {"host": host, "rank": rank, "local_rank": rank, "pid": 1, "cpus": cpus, "cpu": int(cpus.split("-")[0].split(",")[0]),
            "mem_policy": "bind", "mem_nodes": "0", "gpus": [{"index": g, "uuid": "", "numa": n, "vendor": "NVIDIA"}
                                                              for g, n in gpus],
            "nic_env": {}, "thread_env": {"OMP_NUM_THREADS": threads} if threads else {}, "verdicts": []}


def test_clean_binding_has_no_verdicts():
    topo = nodes.karolina()  # GPU0 sits on NUMA 3 (PUs 48-63)
    rows = show.judge([row(0, "48-55", [(0, 3)], threads="8"), row(1, "56-63", [(1, 3)], threads="8")], topo)
    assert [r["verdicts"] for r in rows] == [[], []]
    assert "ok" in show.table(rows)


def test_nic_cell_names_the_plans_nic_and_says_when_nothing_steers_to_it():
    assert show._nic_cell({"NODEMAP_NIC": "eth0"}) == "eth0 (no NIC variable)"
    assert show._nic_cell({"NODEMAP_NIC": "mlx5_1", "UCX_NET_DEVICES": "mlx5_1:1"}) == "mlx5_1"
    assert show._nic_cell({"UCX_NET_DEVICES": "mlx5_1:1"}) == "UCX_NET_DEVICES=mlx5_1:1"  # set by hand
    assert show._nic_cell({}) == "-"
    r = row(0, "48-55", [(0, 3)])
    r["nic_env"] = {"NODEMAP_NIC": "eth0"}
    assert "eth0 (no NIC variable)" in show.table([r])


def test_nic_variables_in_effect_are_checked_against_the_plan():
    topo = nodes.karolina()
    rails = tuple(replace(topo.nic("mlx5_1"), name=f"rail{k}", kind="Ethernet", ports=(Port(1, state),),
                          netdevs=(f"rail{k}",)) for k, state in ((0, "up"), (1, "down")))
    topo = replace(topo, nics=rails + topo.nics)
    planned = {"NODEMAP_NIC": "rail0", "FI_TCP_IFACE": "rail0", "UCX_NET_DEVICES": "rail0", "NCCL_SOCKET_IFNAME": "=rail0"}
    assert show.nics_checked(topo, planned) == ""
    assert show.nics_checked(topo, {"NODEMAP_NIC": "mlx5_1", "UCX_NET_DEVICES": "mlx5_1:1",
                                    "NCCL_IB_HCA": "=mlx5_1:1"}) == ""
    assert show.nics_checked(topo, {}) == ""  # no plan: nothing to check against
    assert show.nics_checked(topo, dict(planned, NCCL_SOCKET_IFNAME="^docker")) == ""  # an exclusion: no choice
    changed = show.nics_checked(topo, dict(planned, FI_TCP_IFACE="rail1"))
    assert changed == ("FI_TCP_IFACE=rail1 steers to rail1, the plan gave rail0 (NODEMAP_NIC): the variable was "
                       "changed after nodemap run")
    assert "UCX_NET_DEVICES=rail0,rail1 steers to rail0,rail1" in show.nics_checked(
        topo, dict(planned, UCX_NET_DEVICES="rail0,rail1"))
    down = {"NODEMAP_NIC": "rail1", "FI_TCP_IFACE": "rail1", "UCX_NET_DEVICES": "rail1", "NCCL_SOCKET_IFNAME": "=rail1"}
    assert show.nics_checked(topo, down) == "planned NIC(s) rail1 are down"
    assert show.nics_checked(topo, {"NODEMAP_NIC": "eth9"}) == "planned NIC(s) eth9 are not NICs of this node"
    r = row(0, "48-55", [(0, 3)])
    r["nic_note"] = changed
    assert show.judge([r], topo)[0]["verdicts"] == [changed]


def test_each_verdict():
    topo = nodes.karolina()
    rows = show.judge([
        row(0, "0-7", [(0, 3)]),  # GPU on NUMA 3, CPUs on NUMA 0
        row(1, "8-23"),  # NUMA 0 and 1
        row(2, "4", threads="2"),  # shares PU 4 with rank 0; 2 threads on 1 PU
        row(3, "4", host="n2"),  # same PU number on another node: not shared
    ], topo)
    v = {r["rank"]: r["verdicts"] for r in rows}
    assert any("GPU 0 (NUMA 3) is not local" in x for x in v[0]) and any("shared with rank(s) 2" in x for x in v[0])
    assert v[1] == ["CPUs span NUMA domains 0-1"]
    assert "2 threads on 1 PU(s)" in v[2] and "PUs shared with rank(s) 0" in v[2]
    assert v[3] == []


def test_omp_num_threads_that_is_not_a_count_is_a_verdict():
    topo = nodes.karolina()
    rows = show.judge([row(0, "48-55", threads=t, host=f"n{k}") for k, t in enumerate(["abc", "0", "8,2", "4, 2"])],
                      topo)
    bad = [any("is not a positive count" in v for v in r["verdicts"]) for r in rows]
    assert bad == [True, True, False, False]  # nested levels ("8,2") are OpenMP's own syntax
    assert "not a positive count" in show.table(rows)


def test_visible_gpus_resolve_to_physical_index_and_uuid():
    topo = nodes.karolina()
    got = show.visible_gpus_checked(topo, {"CUDA_VISIBLE_DEVICES": "GPU-00000005,2"})[0]
    assert [(g["index"], g["uuid"], g["numa"]) for g in got] == [(2, "GPU-00000002", 1), (5, "GPU-00000005", 7)]
    assert len(show.visible_gpus_checked(topo, {})[0]) == 8
    assert show.visible_gpus_checked(topo, {"CUDA_VISIBLE_DEVICES": ""})[0] == []


def test_visible_amd_gpus_follow_rocr_then_hip():
    from nodemap.topology.model import GPU, Topology

    topo = Topology(gpus=tuple(GPU(i, "AMD", uuid=f"GPU-{i}") for i in range(4)))
    got, note = show.visible_gpus_checked(topo, {"ROCR_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "1,5"})
    assert [g["index"] for g in got] == [3] and "HIP_VISIBLE_DEVICES entry '5'" in note
    # HIP reads CUDA_VISIBLE_DEVICES as well: no complaint on a node without NVIDIA GPUs
    assert show.visible_gpus_checked(topo, {"CUDA_VISIBLE_DEVICES": "0"}) == (
        [{"index": 0, "uuid": "GPU-0", "numa": -1, "vendor": "AMD"}], "")


def test_table_sorts_by_node_then_rank():
    topo = nodes.karolina()
    rows = show.judge([row(3, "3", host="b"), row(1, "1", host="a"), row(0, "0", host="b")], topo)
    lines = show.table(rows).splitlines()[1:]
    assert [(l.split()[0], l.split()[1]) for l in lines] == [("a", "1"), ("b", "0"), ("b", "3")]


def test_show_without_mpi_prints_own_row():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "MPI_LOCAL", "PMI_", "SLURM_"))}
    env["OMP_NUM_THREADS"] = "999"
    r = subprocess.run([sys.executable, "-m", "nodemap.cli", "show", "--json"], env=env, capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    (only,) = json.loads(r.stdout)["rows"]
    assert only["cpus"] and only["pid"] != os.getpid() and only["thread_env"]["OMP_NUM_THREADS"] == "999"
    assert any("999 threads on" in v for v in only["verdicts"])


def test_a_gpu_that_does_not_exist_or_is_not_the_planned_one_is_a_verdict():
    topo = nodes.perlmutter()
    env = {"CUDA_VISIBLE_DEVICES": "1,7"}  # GPU 7 does not exist: CUDA stops there
    r = show.own_row(topo, env)
    assert [g["index"] for g in r["gpus"]] == [1]
    (v,) = [v for v in show.judge([r], topo)[0]["verdicts"] if "names no GPU" in v]
    assert "'7'" in v
    r = show.own_row(topo, {"CUDA_VISIBLE_DEVICES": "1", "NODEMAP_GPUS": "2"})  # changed after nodemap run
    assert any("the plan gave 2" in v for v in show.judge([r], topo)[0]["verdicts"])
    r = show.own_row(topo, {"CUDA_VISIBLE_DEVICES": "2", "NODEMAP_GPUS": "2"})
    assert not any("plan gave" in v or "names no GPU" in v for v in show.judge([r], topo)[0]["verdicts"])
    r = show.own_row(nodes.two_socket_four_nics(), {"CUDA_VISIBLE_DEVICES": "0"})  # a node without GPUs
    assert any("no NVIDIA GPU" in v for v in show.judge([r], nodes.two_socket_four_nics())[0]["verdicts"])


def test_threads_are_started_and_bound_by_the_openmp_runtime():
    from nodemap.mapping import threads

    cpus = sorted(os.sched_getaffinity(0))
    if threads._runtime()[1] is None or len(cpus) < 2:
        import pytest

        pytest.skip("needs an OpenMP runtime (libgomp) and 2 PUs")
    env = {**os.environ, "OMP_NUM_THREADS": "2", "OMP_PLACES": f"{{{cpus[0]}}},{{{cpus[1]}}}",
           "OMP_PROC_BIND": "close"}
    r = subprocess.run([sys.executable, "-m", "nodemap.cli", "show", "--threads", "--json", "--no-mpi"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (row_,) = json.loads(r.stdout)["rows"]
    assert [(t["thread"], t["cpus"]) for t in row_["threads"]] == [(0, [cpus[0]]), (1, [cpus[1]])]
    assert all(t["cpu"] in t["cpus"] for t in row_["threads"]) and len({t["tid"] for t in row_["threads"]}) == 2
    assert row_["verdicts"] == []
    # two threads pinned to one PU while the rank has two: a verdict
    env["OMP_PLACES"] = f"{{{cpus[0]}}}"
    r = subprocess.run([sys.executable, "-m", "nodemap.cli", "show", "--threads", "--no-mpi"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert "threads 0,1 share PUs" in r.stdout, r.stdout


def test_omp_num_threads_of_non_ascii_digits_is_not_a_count():
    """'٤' (Arabic-Indic four) is a decimal digit to str.isdecimal, not to an OpenMP runtime."""
    from nodemap.mapping.show import _thread_count_verdicts

    assert "not a positive count" in _thread_count_verdicts("\u0664", 8)[0]
    assert _thread_count_verdicts("4,2", 8) == []
    assert _thread_count_verdicts("1000000000", 8)[0].startswith("OMP_NUM_THREADS")


def test_an_mpi_library_that_cannot_join_the_launcher_is_named_before_mpi_init():
    from nodemap.launcher import foreign_mpi

    ompi = {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}
    why = foreign_mpi(ompi, "MPICH Version:      5.0.2\nMPICH Release date: ...")
    assert why.startswith("Open MPI's mpirun started this rank but mpi4py is built for MPICH Version: 5.0.2 ")
    assert foreign_mpi(ompi, "Open MPI v5.0.11, package: Open MPI") == ""
    assert foreign_mpi({"PMI_RANK": "0", "PMI_SIZE": "2"}, "MPICH Version: 5.0.2") == ""  # Hydra and MPICH
    assert "another MPI" in foreign_mpi(ompi, "")
