"""A finding proposes only a change not already in effect on the node (THP
mode, OMP_* and UCX_* set, CUDA-aware MPI) and only what the measurements
support beyond their noise."""

from __future__ import annotations

import check_synth as syn
import nodes
from nodemap.bench.results import ResultSet, make_result
from nodemap.check import expectations, mpi
from nodemap.check.document import CheckDoc, Environment
from nodemap.check.findings import NodeState, thp_mode
from nodemap.check.node import environment
from test_check_mpi import mpi_set

TWO_CORES = nodes.build(nodes.Spec(1, 1, 1, 2))


def doc(*sets, environment=None, checks=(), topo=TWO_CORES):
    d = CheckDoc(level="quick", topology=topo, expectations=expectations.shipped(), results=list(sets),
                 checks=list(checks), environment=Environment(**(environment or {})))
    d.rejudge()
    return d


def finding(d, word):
    return next(f for f in d.findings if word in f.text)


def slow_dram():
    return syn.latency({"L1d": (32, 1.2), "DRAM": (1 << 20, 547.0)})


def test_thp_mode_is_read_through_a_root(tmp_path):
    assert thp_mode("always [madvise] never") == "madvise" and thp_mode("[never]") == "never"
    assert thp_mode(None) == "" and thp_mode("garbage") == ""
    f = tmp_path / "sys" / "kernel" / "mm" / "transparent_hugepage" / "enabled"
    f.parent.mkdir(parents=True)
    f.write_text("[always] madvise never\n")
    assert environment(str(tmp_path)).transparent_hugepage == "always"
    assert environment(str(tmp_path / "nothing")).transparent_hugepage == ""


def test_huge_pages_are_not_advised_where_already_in_effect():
    """The issue's run: THP [madvise] and the kernel's madvise(MADV_HUGEPAGE), yet "enable THP (madvise)"."""
    for mode in ("madvise", "always"):
        f = finding(doc(slow_dram(), environment={"transparent_hugepage": mode}), "DRAM")
        assert "enable transparent huge pages" not in f.fix
        assert f"already in effect (mode [{mode}]" in f.fix
    off = finding(doc(slow_dram(), environment={"transparent_hugepage": "never"}), "DRAM")
    assert "huge pages are off (mode [never])" in off.fix and "echo madvise" in off.fix
    unknown = finding(doc(slow_dram()), "DRAM")  # an old document without the mode: the general advice
    assert "enable transparent huge pages (madvise)" in unknown.fix


def _sweep(one_thread: float, two_threads: float, spread: float) -> ResultSet:
    """The 2-core VM's sweep: 1 thread (1/L3) against one per core, each with its own spread."""
    rs = ResultSet("bench memory")
    for name, threads, v in (("1/L3", 1, one_thread), ("1/core", 2, two_threads)):
        rs.add(make_result("memory", "triad", "GB/s", [v, v * (1 - spread / 2), v * (1 - spread)], verified=True,
                           params={"thread_order": name, "threads": threads, "cpu_order": list(range(threads))},
                           path="NUMA0 cores -> NUMA0 memory", path_class="local"))
    return rs


def test_a_thread_count_within_the_noise_is_no_change():
    """The issue's "STREAM peaks with 1 thread ... fix OMP_NUM_THREADS=1" came from noise."""
    noisy = doc(_sweep(22.0, 19.0, 0.20))  # 16% faster, spreads 20% and 20%
    # the medians' intervals overlap: inconclusive (verdicts.py), so no finding and no OMP_* change proposed
    assert next(j for j in noisy.judged if j.figure.key == "host/stream/triad").verdict == "inconclusive"
    assert not any("STREAM peaks" in f.text for f in noisy.findings)
    clear = finding(doc(_sweep(30.0, 19.0, 0.02)), "STREAM peaks")  # 58% faster, spreads 2%
    assert "OMP_NUM_THREADS=1" in clear.fix and not clear.fix.startswith("no change")


def test_omp_variables_already_set_are_not_proposed():
    env = {"variables": {"OMP_NUM_THREADS": "1", "OMP_PROC_BIND": "close"}}
    f = finding(doc(_sweep(30.0, 19.0, 0.02), environment=env), "STREAM peaks")
    assert "OMP_NUM_THREADS=1 OMP_PROC_BIND=close is already set" in f.fix
    assert "as the sweep recommends" not in f.fix


def test_ucx_transports_already_set_are_not_proposed():
    slow = mpi_set(hh_lat=40.0, hh_bw=0.5)
    plain = finding(doc(slow), "MPI latency")
    assert "check UCX_TLS" in plain.fix
    d = doc(slow, environment={"variables": {"UCX_TLS": "sm,self,cuda_copy"}})
    f = finding(d, "MPI latency")
    assert "check UCX_TLS" not in f.fix and "UCX_TLS=sm,self,cuda_copy already includes shared memory" in f.fix
    excluded = finding(doc(slow, environment={"variables": {"UCX_TLS": "^sm"}}), "MPI latency")
    assert "check UCX_TLS" in excluded.fix  # "^sm" excludes shared memory: not in effect
    d2d = syn.copies({}, dict(enumerate(nodes.KAROLINA_GPU_NUMA)), {(0, 1): 250.0, (1, 0): 250.0})
    slow_dd = mpi_set(dd_bw=60.0, transport="cuda-aware")
    cuda = doc(d2d, slow_dd, topo=nodes.karolina(), environment={"variables": {"UCX_TLS": "rc,sm,cuda_ipc"}})
    f = next(f for f in cuda.findings if f.keys[0] == "mpi/DD/bw")
    assert "includes cuda_ipc" not in f.fix and "already includes CUDA IPC" in f.fix


def test_a_cuda_aware_build_is_not_proposed_where_mpi_is_one():
    d2d = syn.copies({}, dict(enumerate(nodes.KAROLINA_GPU_NUMA)), {(0, 1): 250.0, (1, 0): 250.0})
    staged = mpi_set(dd_bw=11.0)
    not_aware = mpi.awareness_check(True, [staged], {})
    f = finding(doc(d2d, staged, topo=nodes.karolina(), checks=[not_aware]), "CUDA-aware")
    assert f.fix.startswith("use a CUDA-aware MPI build")
    # the library says CUDA-aware (ompi_info) while this run staged its device buffers
    aware = mpi._aware_check(True, True, "ompi_info: mpi_built_with_cuda_support:value:true", "")
    assert NodeState.of(Environment(), [aware]).cuda_aware is True
    f = finding(doc(d2d, staged, topo=nodes.karolina(), checks=[aware]), "CUDA-aware")
    assert "use a CUDA-aware MPI build" not in f.fix and "this MPI is CUDA-aware" in f.fix
    env = {"variables": {"MPIR_CVAR_ENABLE_GPU": "1"}}
    f = finding(doc(d2d, staged, topo=nodes.karolina(), checks=[not_aware], environment=env), "CUDA-aware")
    assert "MPIR_CVAR_ENABLE_GPU=1 is already set" in f.fix and "with MPIR_CVAR_ENABLE_GPU=1" not in f.fix
