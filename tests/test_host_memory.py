import json
import os
import platform

import pytest

from nodemap import cli
from nodemap.bench.host import memory as hm
from nodemap.bench.host import machine, stream
from nodemap.bench.results import make_result
from nodemap.bench.host import kernels as hk
from nodemap.bench.host import thread_orders as pl
from nodemap.errors import NodemapError
from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import NumaNode, Topology

CPUS = sorted(os.sched_getaffinity(0))[:2]
N = 20_011  # odd, so slices and NT tails end off a vector boundary
# non-x86 builds have no non-temporal stores and refuse --nt-stores
NT = [False, pytest.param(True, marks=pytest.mark.skipif(platform.machine() != "x86_64", reason="NT stores: x86-64"))]


def topo():
    return pl.flat_topology(CpuSet(CPUS))


@pytest.mark.parametrize("nt", NT)
def test_every_kernel_verified_positive_and_counted_the_stream_way(nt):
    rs = stream.measure(topo(), CPUS, N, hk.KERNELS, 2, benchmark="memory", nt_stores=nt)
    assert [r.metric for r in rs] == list(hk.KERNELS)
    words = {"copy": 2, "scale": 2, "add": 3, "triad": 3, "sum": 1}
    for r in rs:
        assert r.verified and r.stats.n == 2 and all(v > 0 for v in r.samples)
        assert r.bytes == words[r.metric] * 8 * N
        extra = 0 if nt or r.metric == "sum" else 1
        assert r.params["write_allocate_bytes"] == (words[r.metric] + extra) * 8 * N
        assert r.path_class == "local" and "first touch" in r.path
        # the write-allocate figure is the same timing with more bytes
        wa = r.params["write_allocate_best_gbps"]
        assert wa == pytest.approx(r.stats.best * r.params["write_allocate_bytes"] / r.bytes)


@pytest.mark.parametrize("kernels", [["copy"], ["scale"], ["add"], ["triad"], ["sum"], list(hk.KERNELS)])
@pytest.mark.parametrize("nt", NT)
def test_a_skipped_element_fails_the_check(kernels, nt):
    run = hk.stream(CPUS, N, kernels, 1, nt_stores=nt, skip=N // 2 + 1)
    assert not run.verified
    assert hk.stream(CPUS, N, kernels, 1, nt_stores=nt).verified


def test_batch_times_back_to_back_repetitions_as_one_sample():
    n = 1 << 21  # 16 MiB per array: a repetition takes milliseconds, far above timer and barrier costs
    one, = stream.measure(topo(), CPUS, n, ["triad"], 3, benchmark="memory")
    eight, = stream.measure(topo(), CPUS, n, ["triad"], 3, benchmark="memory", batch=8)
    assert eight.verified and eight.params["batch"] == 8 and one.params["batch"] == 1
    assert eight.bytes == 8 * one.bytes == 8 * 3 * 8 * n
    assert eight.params["write_allocate_bytes"] == 8 * 4 * 8 * n
    assert "8 repetitions per sample" in eight.counting
    # the fastest sample of each: a slow sample is the machine's noise (CI failed once on the
    # medians, one's middle sample at a third of its best), the fastest is the work done
    secs = lambda r: min(r.bytes / (g * 1e9) for g in r.samples)
    # 8 repetitions really ran per sample: the sample takes several times one repetition
    assert secs(eight) > 3 * secs(one)
    with pytest.raises(NodemapError):
        hk.stream(CPUS, 1000, ["copy"], 1, batch=0)


def test_each_kind_says_its_own_progress_line():
    # stream.py, shared by memory and numa, switched on `benchmark == "memory"`; memory's case says it now
    order = hm.ThreadOrder(topo(), CPUS, N, ["triad"], benchmark="memory", thread_order="spread")
    assert order.progress([]) == f"spread: {len(CPUS)} threads"
    cell = stream.Stream(topo(), CPUS, N, ["triad"], benchmark="numa", label="bandwidth NUMA0 -> NUMA0")
    r = make_result("numa", "triad", "GB/s", [12.5, 12.0], verified=True)
    assert (cell.progress([]), cell.progress([r])) == ("bandwidth NUMA0 -> NUMA0", "bandwidth NUMA0 -> NUMA0: 12.5 GB/s")


def test_failed_check_is_an_error_not_a_number():
    with pytest.raises(NodemapError, match="check failed"):
        stream.measure(topo(), CPUS[:1], N, ["triad"], 1, benchmark="memory", skip=5)


def test_kernel_subsets_check_against_replayed_gold_values():
    for ks in (["copy", "triad"], ["add", "sum"], ["scale", "add"]):
        assert hk.stream(CPUS, 1000, ks, 3).verified


def test_parse_kernels():
    assert stream.parse_kernels("triad,copy") == ["copy", "triad"]
    with pytest.raises(NodemapError, match="unknown kernel fma"):
        stream.parse_kernels("copy,fma")


def _fake_root(tmp, free_kb):
    d = tmp / "sys/devices/system/node/node0"
    d.mkdir(parents=True)
    (d / "meminfo").write_text(f"Node 0 MemTotal: {2 * free_kb} kB\nNode 0 MemFree: {free_kb} kB\n"
                               "Node 0 Inactive(file): 0 kB\n")
    return str(tmp)


def test_array_size_default_is_4x_llc_capped_by_free_memory(tmp_path):
    from nodemap.topology.model import Cache
    t = Topology(numa_nodes=(NumaNode(0, CpuSet([0, 1]), 1 << 30),), caches=(Cache(3, "unified", 1 << 20, CpuSet([0, 1])),))
    root = _fake_root(tmp_path, 1 << 20)  # 1 GiB free
    assert stream.array_size(t, CpuSet([0]), CpuSet(), None, root=root) == (4 << 20, [])
    n, notes = stream.array_size(t.__class__(numa_nodes=t.numa_nodes, caches=(Cache(3, "unified", 1 << 30, CpuSet([0])),)),
                             CpuSet([0]), CpuSet(), None, root=root)
    assert n < 1 << 30 and "capped" in notes[0]
    with pytest.raises(NodemapError, match="free"):
        stream.array_size(t, CpuSet([0]), CpuSet(), "1G", root=root)


def test_free_memory_falls_back_when_nodes_undercount_the_machine(tmp_path):
    root = _fake_root(tmp_path, 1 << 20)  # node 0: 2 GiB total, 1 GiB free
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal: 2097152 kB\nMemAvailable: 1900000 kB\n")
    assert machine.free_memory(CpuSet([0]), root) == 1 << 30  # consistent: the node's own figure
    (proc / "meminfo").write_text(f"MemTotal: {128 << 20} kB\nMemAvailable: {120 << 20} kB\n")
    assert machine.free_memory(CpuSet([0]), root) == 120 << 30  # one 2 GiB node on a 128 GiB machine
    n1 = tmp_path / "sys/devices/system/node/node1"
    n1.mkdir()
    (n1 / "meminfo").write_text("Node 1 MemTotal: 2097152 kB\nNode 1 MemFree: 1048576 kB\n")
    # a subset of the nodes keeps the per-node figure: MemAvailable would count other nodes' memory
    assert machine.free_memory(CpuSet([1]), root) == 1 << 30
    assert machine.free_memory(CpuSet([0, 1]), root) == 120 << 30


def test_mem_node_without_memory_is_refused():
    t = Topology(numa_nodes=(NumaNode(0, CpuSet([0]), 1 << 30), NumaNode(1, CpuSet([1]), 0)))
    assert machine.parse_mem(t, "0") == CpuSet([0])
    with pytest.raises(NodemapError, match="no memory"):
        machine.parse_mem(t, "1")
    with pytest.raises(NodemapError, match="no NUMA node 7"):
        machine.parse_mem(t, "7")


def test_recommendation_takes_fewest_threads_within_2_percent():
    t = topo()
    mk = lambda th, gbs, name: make_result("memory", "triad", "GB/s", [gbs], verified=True,
                                              params={"threads": th, "thread_order": name, "cpu_order": list(range(th))})
    rs = [mk(1, 50.0, "a"), mk(4, 99.0, "b"), mk(8, 100.0, "c"), mk(16, 98.5, "d")]
    assert hm.recommend(rs)[0] == "b"
    assert "GOMP_CPU_AFFINITY=\"0 1 2 3\"" in hm.recommendation_text(rs)
    assert "caution" not in hm.recommendation_text(rs)  # one sample each: best = median
    del t


def test_recommendation_warns_when_medians_choose_otherwise():
    mk = lambda th, gbs, name: make_result("memory", "triad", "GB/s", gbs, verified=True,
                                              params={"threads": th, "thread_order": name, "cpu_order": list(range(th))})
    # 4 threads won one lucky sample; 8 threads are faster on the median
    rs = [mk(4, [100.0, 70.0, 72.0], "b"), mk(8, [99.5, 90.0, 91.0], "c")]
    assert hm.recommend(rs)[0] == "b" and hm.recommend(rs, "median")[0] == "c"
    assert "caution: on median GB/s the choice would be c (8 threads)" in hm.recommendation_text(rs)


def run_cli(capsys, *argv):
    rc = cli.main(["bench", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_sweep_reports_every_promised_thread_order(capsys):
    rc, out, _ = run_cli(capsys, "memory", "--sweep", "--size", "256K", "--repeats", "2", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["complete"] and d["results"]
    t = pl.load_topology()
    promised = pl.promised_names(t, pl.usable_cpus(t))
    reported = {n for r in d["results"] for n in r["params"]["thread_order"].split(" = ")}
    assert reported == promised
    assert {r["metric"] for r in d["results"]} == set(hk.KERNELS)


def test_cli_table_names_a_recommendation(capsys, tmp_path):
    out_file = tmp_path / "r.json"
    rc, out, _ = run_cli(capsys, "memory", "--sweep", "--size", "256K", "--repeats", "1", "--kernels", "triad",
                         "--output", str(out_file))
    assert rc == 0 and "recommended:" in out and "OMP_PLACES" in out
    assert json.loads(out_file.read_text())["command"] == "bench memory"


@pytest.mark.parametrize("argv, needle", [
    (["--cpus", "100000"], "not allowed"),
    (["--kernels", "nope"], "unknown kernel"),
    (["--size", "1000T"], "free"),
    (["--threads", "0"], "at least 1"),
    (["--mem", "99"], "no NUMA node"),
    (["--repeats", "0"], "at least 1"),
    (["--batch", "0"], "at least 1"),
])
def test_cli_bad_input_is_one_line_exit_2(capsys, argv, needle):
    rc, out, err = run_cli(capsys, "memory", "--size", "64K", *argv)
    assert rc == 2 and needle in err and err.count("\n") == 1


def test_unpinnable_cpu_is_an_error():
    with pytest.raises(NodemapError, match="cannot pin"):
        hk.stream([CPUS[0], 99_999], 1000, ["copy"], 1)


def test_results_saved_before_the_rename_read_their_thread_order():
    """Recorded results (benchmarks/, users' files) call the CPU thread order
    "placement"; it reads as "thread_order". GPU data placement keeps its own
    word untouched."""
    from nodemap.bench.results import _renamed_params  # what bench/resultfile.py reads every result through

    assert _renamed_params("memory", {"placement": "1/core"}) == {"thread_order": "1/core"}
    assert _renamed_params("placement", {"placement": "x"}) == {"placement": "x"}
