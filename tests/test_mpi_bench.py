"""`nodemap bench mpi`: real MPI ranks (mpiexec from the mpich wheel beside
sys.executable) on host buffers, bad inputs, and the pure helpers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodemap.bench.comm import mpi_common as mc
from nodemap.bench.comm import mpi_p2p as mp
from nodemap.bench.comm import p2p
from nodemap.bench import options
from nodemap.errors import NodemapError

pytest.importorskip("mpi4py")
BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"
NODEMAP = BIN / "nodemap"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists() or not NODEMAP.exists(),
                                   reason="no mpiexec/nodemap next to sys.executable (pip install mpich)")
QUICK = ["--iters-scale", "0.02", "--repeats", "2", "-q"]


def mpirun(n, *args, timeout=40):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # CI has no GPU; make sure a dev box behaves alike
    return subprocess.run([str(MPIEXEC), "-n", str(n), str(NODEMAP), "bench", "mpi", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def host_run():
    p = mpirun(2, "--sizes", "1:64KiB", "--json", *QUICK)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.mpi
@needs_mpiexec
def test_two_ranks_measure_and_verify_every_test_and_size(host_run):
    res = host_run["results"]
    sizes = [2**k for k in range(17)]
    for test in mp.TESTS:
        got = sorted(r["params"]["size"] for r in res if r["metric"] == test)
        assert got == sizes, test
    assert all(r["verified"] and r["stats"]["best"] > 0 for r in res)
    lat = {r["params"]["size"]: r["stats"]["best"] for r in res if r["metric"] == "latency"}
    assert 0.05 < lat[1] < 1000  # us: shared memory on any machine
    bw = {r["params"]["size"]: r["stats"]["best"] for r in res if r["metric"] == "bw"}
    assert bw[65536] > bw[1]  # bandwidth grows with the message
    assert all(r["path"].startswith("rank0@") and r["path_class"] for r in res)


@pytest.mark.mpi
@needs_mpiexec
def test_probe_says_no_gpu_and_asks_the_library(host_run):
    assert any(m.startswith("no GPU") for m in host_run["messages"])
    aw = host_run["environment"]["cuda_aware"]
    assert aw["gpu"] is False and aw["proven"] is False
    assert "MPIX_Query_cuda_support" in aw["how"] or "no MPIX_Query_cuda_support" in aw["how"]


@pytest.mark.mpi
@needs_mpiexec
def test_device_buffers_without_gpu_exit_2_in_one_line():
    p = mpirun(2, "--sizes", "8", "--tests", "latency", "--buffers", "HH,DD", *QUICK)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and "--buffers DD: GPU buffers need a CUDA GPU" in lines[0], p.stderr
    assert p.stdout == ""


@pytest.mark.mpi
@needs_mpiexec
def test_multirail_on_one_node_says_so():
    p = mpirun(2, "--sizes", "4KiB", "--tests", "bw", "--multirail", "--json", *QUICK)
    assert p.returncode == 0, p.stderr
    mr = [r for r in json.loads(p.stdout)["results"] if r["metric"] == "multirail bw"]
    assert len(mr) == 1 and mr[0]["path_class"] == "intra-node" and "not its NIC" in mr[0]["notes"][0]


@pytest.mark.mpi
@needs_mpiexec
@pytest.mark.parametrize("n,words", [(1, "1 rank"), (3, "3 ranks")])
def test_bad_rank_counts_exit_2_with_one_line(n, words):
    p = mpirun(n, "--sizes", "8")
    assert p.returncode == 2
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0] and "mpiexec -n" in lines[0]


@pytest.mark.mpi
@needs_mpiexec
def test_bad_pair_exits_2():
    p = mpirun(2, "--pair", "0,5", "--sizes", "8")
    assert p.returncode == 2 and "--pair" in p.stderr


def test_a_deadline_ends_a_hang_with_exit_2():
    code = ("import time; from nodemap.bench.comm.mpi_common import deadline\n"
            "with deadline(0.2, 'a peer that never answers'):\n    time.sleep(5)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and "a peer that never answers" in p.stderr


def test_subset_refuses():
    with pytest.raises(NodemapError):
        options.choices("latency,nope", mp.TESTS, "--tests")


def test_iterations_scale_with_size_and_stay_bounded():
    assert mp.iterations("latency", 8, 1, 64) == 1000
    assert mp.iterations("latency", 1 << 20, 1, 64) == 100
    assert mp.iterations("bw", 64 << 20, 1, 64) == 1  # one window of 8 x 64 MiB is the 512 MiB budget
    assert mp.window_for(64, 64 << 20) == 8 and mp.window_for(64, 4 << 20) == 64 and mp.window_for(4, 1) == 4
    assert mp.iterations("bw", 8, 0.01, 64) == 1


def test_units_follow_osu():
    assert p2p.to_unit("latency", 8, 10, 64, 20e-6) == pytest.approx(1.0)  # us, half round trip
    assert p2p.to_unit("bw", 1000, 2, 64, 1e-3) == pytest.approx(128e3 / 1e-3 / 1e9)
    assert p2p.to_unit("bibw", 1000, 2, 64, 1e-3) == pytest.approx(2 * 128e3 / 1e-3 / 1e9)


def test_rank_count_checks():
    assert "mpiexec -n 2" in mp.check_ranks(1, True)
    assert "even" in mp.check_ranks(3, True)
    assert mp.check_ranks(4, True) == "" and mp.check_ranks(3, False) == ""


def place(rank, host="a", numa=(0,), pkg=(0,)):
    return mc.Place(rank, host, "0", numa, pkg)


def test_pair_classes_and_the_interesting_pairs():
    ps = [place(0), place(1), place(2, numa=(1,)), place(3, numa=(2,), pkg=(1,)), place(4, host="b"),
          place(5, numa=(1,))]
    assert [mc.pair_class(ps[0], p) for p in ps[1:5]] == ["same-numa", "other-numa", "other-socket", "other-node"]
    assert mc.interesting_pairs(ps) == [(0, 1, "same-numa"), (0, 2, "other-numa"), (0, 3, "other-socket"),
                                        (0, 4, "other-node")]
    assert mc.pair_class(place(0, numa=()), place(1)) == "same-node"


def test_rail_pairs_cross_nodes_else_halves():
    ps = [place(0, "a"), place(1, "a"), place(2, "b"), place(3, "b")]
    assert mp.rail_pairs(ps) == [(0, 2), (1, 3)]
    assert mp.rail_pairs([place(i) for i in range(4)]) == [(0, 2), (1, 3)]


def test_poisoned_buffer_fails_the_check_and_a_delivered_one_passes():
    ep = p2p.Endpoint(None, None, 300, seed=1)
    ep.poison()
    assert not ep.check(300, 1)
    ep.rbuf[:] = p2p.pattern(300, 1)
    assert ep.check(300, 1) and not ep.check(300, 2)
    assert p2p.POISON not in p2p.pattern(1000, 7)


def test_awareness_messages_are_plain():
    assert mc.Awareness(gpu=False, aware=False, how="").message().startswith("no GPU")
    msg = mc.Awareness(gpu=True, aware=False, how="MPIX_Query_cuda_support() = 0").message()
    assert msg.startswith("MPI is not CUDA-aware: measuring the staged path instead")


def test_the_shared_staging_chunk_is_bench_mpis_default():
    # the fleet's pair test stages with p2p.CHUNK: the same chunks as `bench mpi` without --chunk
    from nodemap.units import parse_size

    assert parse_size(mp.Options().chunk, "--chunk") == p2p.CHUNK


def test_every_ranks_awareness_meets_in_one_rule_that_names_the_doubting_rank():
    yes = mc.Awareness(gpu=True, aware=True, how="MPIX_Query_cuda_support() = 1 in libmpi.so.40")
    no = mc.Awareness(gpu=True, aware=False, how="MPIX_Query_cuda_support() = 0 in libmpi.so.12")
    both = mc.agreed([yes, yes])
    assert (both.gpu, both.aware, both.how) == (True, True, yes.how)
    mixed = mc.agreed([yes, no, yes])
    assert (mixed.gpu, mixed.aware, mixed.how) == (True, False, no.how)
    assert not mc.agreed([yes, mc.Awareness(gpu=False, aware=True, how=yes.how)]).gpu


def test_query_without_a_library_falls_back_to_the_version_string():
    aware, how = mc.query_cuda_support(path="")
    assert aware in (None, True) and how


def test_gpu_pairs_are_classed_by_their_link():
    from nodemap.topology.model import GPU, Link, Topology

    topo = Topology(gpus=(GPU(0, "NVIDIA"), GPU(1, "NVIDIA")), links=(Link("GPU0", "GPU1", count=18, version=4),))
    a, b = mc.Place(0, "h", "0", gpu="GPU0"), mc.Place(1, "h", "1", gpu="GPU1")
    assert mp.gpu_class(topo, a, b) == "NV18"
    assert mp.gpu_class(None, a, b) == ""  # no topology: the host class stands
    assert mp.gpu_class(topo, a, mc.Place(1, "other", "1", gpu="GPU0")) == "other-node"


@pytest.mark.mpi
@needs_mpiexec
def test_sizes_beyond_memory_exit_2_with_one_line():
    p = mpirun(2, "--sizes", "64TiB")
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "lower the largest size" in lines[0]
