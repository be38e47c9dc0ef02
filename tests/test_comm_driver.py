"""`bench nccl` and `bench ring` on the one driver, over stand-ins for CuPy
and NCCL (fake_cupy, fake_nccl: host memory, collectives done at groupEnd):
their command lines, result documents, tables, verification and exit codes,
without a GPU."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace

import pytest

import fake_nccl
from nodemap import cli
from nodemap.bench import driver
from nodemap.bench.comm import collectives, ring


@pytest.fixture
def gpus(monkeypatch):
    monkeypatch.setenv("NCCL_RUNTIME_CONNECT", "0")  # open_nccl sets it when unset: restored after the test
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    return fake_nccl.install(monkeypatch, devices=2)


NCCL = ["bench", "nccl", "--mode", "single", "--sizes", "64:128", "--iters", "2", "--repeats", "3", "-q"]


def test_kinds_have_a_plan_and_no_run_of_their_own():
    for kind in (collectives, ring):
        assert hasattr(kind, "plan") and not hasattr(kind, "run")


def test_nccl_document_on_two_stand_in_gpus(gpus, capsys):
    assert cli.main(NCCL + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["complete"] and doc["command"] == "bench nccl --ops " + ",".join(collectives.OPS) + " --sizes 64:128"
    assert doc["environment"]["mode"] == "single" and doc["environment"]["gpus"] == ["GPU0", "GPU1"]
    got = {(r["metric"], r["params"]["inplace"], r["params"]["size"]) for r in doc["results"]}
    # alltoall and sendrecv have no in-place form
    assert ("alltoall", True, 64) not in got and ("alltoall", False, 64) in got and ("all_reduce", True, 128) in got
    r = next(r for r in doc["results"] if r["metric"] == "all_reduce" and not r["params"]["inplace"])
    assert r["unit"] == "GB/s busbw" and r["stats"]["n"] == 3 and r["verified"]
    assert r["params"]["iters"] == 2 and r["params"]["wrong"] == 0 and r["params"]["bus_factor"] == 1.0
    assert r["counting"] == "nccl-tests: algbw = 64 B / time, busbw = algbw x 1"
    assert r["path"] == "2 ranks: GPU0, GPU1" and r["path_class"] == "NCCL"
    assert r["verification"].startswith("every receive element compared with its exact value")
    assert "graph" not in r["params"]


def test_nccl_table(gpus, capsys):
    assert cli.main(NCCL + ["--ops", "all_reduce"]) == 0
    out = capsys.readouterr().out
    assert out.split("\n")[0].split() == ["op", "place", "size", "time", "us", "algbw", "GB/s", "busbw", "GB/s",
                                          "busbw", "med", "spread", "#wrong"]
    assert sum(line.startswith("all_reduce") for line in out.splitlines()) == 4  # 2 sizes x out, in


def test_nccl_wrong_elements_fail_the_part_and_the_others_still_run(gpus, capsys, monkeypatch):
    monkeypatch.setattr(gpus[1].World, "corrupt", 3)
    assert cli.main(NCCL + ["--ops", "all_reduce,sendrecv", "--inplace", "out", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert not doc["complete"] and doc["results"] == []
    assert [(f["part"], f["count"], f["size"]) for f in doc["failures"]][:2] == [("all_reduce", 3, 64),
                                                                                  ("all_reduce", 3, 128)]
    assert ("all_reduce out-of-place 64 B: 3 wrong elements after the operation: NCCL or the GPUs' links corrupt "
            "data") in doc["messages"]
    assert sum("wrong elements after the operation" in m for m in doc["messages"]) == 4  # every part measured


def test_nccl_through_check_and_measure(gpus):
    rs = driver.measure(collectives, collectives.Options(ops="all_reduce", mode="single", sizes="256",
                                                         inplace="out", repeats=2, iters=1))
    assert rs.complete and [(r.metric, r.stats.n) for r in rs.results] == [("all_reduce", 2)]


RING = ["bench", "ring", "--sizes", "64,256", "--steps", "2", "--repeats", "2", "-q"]


@pytest.fixture
def ring_gpus(gpus, monkeypatch):
    from nodemap.bench.gpu import common as gpu_common

    monkeypatch.setattr(ring, "WORK_ELEMS", 1024)
    launched = []
    monkeypatch.setattr(gpu_common, "kernel", lambda cp, f, name: lambda *a, **k: launched.append(name))
    return launched


def test_ring_document_and_overlap_phases(ring_gpus, capsys):
    assert cli.main(RING + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["complete"] and doc["command"] == "bench ring --transports peer,nccl,mpi-aware,mpi-staged --sizes 64,256"
    assert [(r["metric"], r["params"]["halo_bytes"]) for r in doc["results"]] == [
        ("halo peer", 64), ("halo nccl", 64), ("halo peer", 256), ("halo nccl", 256)]
    r = doc["results"][0]
    assert r["stats"]["n"] == 2 and r["bytes"] == 128 and r["path"] == "periodic ring GPU0 <-> GPU1"
    assert {"t_comm_us", "t_comp_us", "t_both_us", "overlap", "compute_reps"} <= set(r["params"])
    assert r["notes"][0].startswith("overlap efficiency")
    assert any(m.startswith("mpi-aware: needs one process per GPU") for m in doc["messages"])
    assert ring_gpus  # the compute kernel ran (calibration, comp, both)


def test_ring_no_overlap_and_its_table(ring_gpus, capsys):
    assert cli.main(RING + ["--no-overlap", "--transports", "peer"]) == 0
    out = capsys.readouterr().out
    assert out.split("\n")[0].split()[:3] == ["transport", "halo", "step"]
    assert sum(line.startswith("peer") for line in out.splitlines()) == 2 and not ring_gpus


def test_ring_wrong_halos_fail_the_part(ring_gpus, capsys, monkeypatch):
    monkeypatch.setattr(ring, "check", lambda ctx, fields: 7)
    assert cli.main(RING + ["--no-overlap", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert not doc["complete"] and doc["results"] == []
    assert "peer at 64 B: 7 wrong halo elements: the transport corrupts data" in doc["messages"]
    assert "nccl at 256 B: 7 wrong halo elements: the transport corrupts data" in doc["messages"]
    assert [(f["kind"], f["part"], f["count"]) for f in doc["failures"]] == [("ring", "peer", 7), ("ring", "nccl", 7)] * 2


class FakeComm:
    """MPI.COMM_WORLD of one rank of several: `others` is what the other ranks add to an allreduce."""

    def __init__(self, others=0):
        self.others = others

    def allreduce(self, v, op=None):
        return max(v, self.others)

    def Barrier(self):
        pass


def mpi_ctx(monkeypatch, rank=0, others=0):
    """`open_gpus` of an MPI rank (its own GPU, a world of ranks) over the stand-ins: NCCL open."""
    import fake_cupy
    from nodemap.bench.comm import mpi_common as mc
    from nodemap.bench.comm.world import Local, World

    bounds = []
    monkeypatch.setattr(mc, "library", lambda: "Fake MPI 1.0")
    monkeypatch.setattr(mc, "deadline", lambda s, what: bounds.append((s, what)) or contextlib.nullcontext())

    def open_gpus(mode, gpus, timeout, topology=None):
        (c,) = fake_nccl.NcclCommunicator.initAll([0])  # a world of one NCCL rank: this rank's view
        return World(comm=FakeComm(others), rank=rank, size=2, MPI=SimpleNamespace(MAX=max), cp=fake_cupy,
                     nccl=fake_nccl, gpu_keys=["n:GPU0"], locals=[Local(rank, 0, fake_cupy.cuda.Stream(), c)])

    monkeypatch.setattr(collectives, "open_gpus", open_gpus)
    return bounds


def test_nccl_under_mpi_ranks_run_together_each_case_bounding_its_wait(gpus, monkeypatch):
    bounds = mpi_ctx(monkeypatch)
    p = collectives.plan(collectives.Options(ops="all_reduce", sizes="64,128", inplace="out", timeout=7.0))
    assert p.together and p.root and len(p.cases) == 2
    rs = driver.execute(p, collectives.Options(repeats=2), SimpleNamespace(quiet=True, timeout=7.0, output=None,
                                                                           topology=None))
    assert rs.complete and len(rs.results) == 2 and rs.environment["mpi"] == "Fake MPI 1.0"
    assert bounds == [(7.0, "NCCL all_reduce at 64 B (a hung collective)"),
                      (7.0, "NCCL all_reduce at 128 B (a hung collective)")]


def test_nccl_ranks_stop_where_another_rank_was_interrupted(gpus, monkeypatch, capsys):
    from nodemap.bench import interrupt

    mpi_ctx(monkeypatch, others=1)  # another rank's Ctrl-C: every allreduce of the stop flag says 1
    try:
        assert cli.main(["bench", "nccl", "--ops", "all_reduce", "--sizes", "64,128", "--repeats", "3", "-q",
                         "--json"]) == 130
    finally:
        interrupt.reset()
    doc = json.loads(capsys.readouterr().out)
    # the first case stopped after its warm-up (the flag is agreed after every repetition), the second never ran
    assert doc["results"] == [] and not doc["complete"] and any("interrupted" in m for m in doc["messages"])


def test_a_rank_that_does_not_report_exits_as_rank_0(gpus, monkeypatch, capsys):
    mpi_ctx(monkeypatch, rank=1)
    monkeypatch.setattr(gpus[1].World, "corrupt", 2)
    assert cli.main(["bench", "nccl", "--ops", "all_reduce", "--sizes", "64", "--inplace", "out", "-q"]) == 1
    assert capsys.readouterr().out == ""  # rank 0 prints


# --- --graph: the timed operations captured in CUDA graphs (nccl-tests' -G) --------------------------


@pytest.fixture
def captures(gpus, monkeypatch):
    """Every capture call of the stand-in runtime, in order: (call, stream or graph, device current)."""
    fake_cupy, _ = gpus
    rt, log = fake_cupy.cuda.runtime, []
    monkeypatch.setattr(fake_cupy._Capture, "open", [])
    for name in ("streamBeginCapture", "streamEndCapture", "graphUpload", "graphLaunch", "graphExecDestroy"):
        def spy(*a, _real=getattr(rt, name), _name=name):
            log.append((_name, a[-1] if _name in ("graphUpload", "graphLaunch") else a[0], fake_cupy.Device.current)
                       + ((a[1],) if _name == "streamBeginCapture" else ()))
            return _real(*a)
        monkeypatch.setattr(rt, name, spy)
    return log


def graph_run(capsys, *extra):
    assert cli.main(["bench", "nccl", "--mode", "single", "--ops", "all_reduce", "--sizes", "64", "--inplace", "out",
                     "--iters", "4", "--repeats", "3", "-q", "--json", *extra]) == 0
    (r,) = json.loads(capsys.readouterr().out)["results"]
    return r


def test_graph_captures_each_gpus_stream_and_launches_once_per_repetition(captures, gpus, monkeypatch, capsys):
    fake_cupy, nc = gpus
    monkeypatch.setattr(fake_cupy.cuda.runtime, "devices", 3)
    r = graph_run(capsys, "--graph")
    [calls] = [w.log for w in nc._worlds]
    s = [args[-1] for _, _, args in calls[:3]]  # each GPU's stream, from its first call
    mode = fake_cupy.cuda.runtime.streamCaptureModeThreadLocal
    # a graph per GPU (as nccl-tests -G), each begun and ended under its GPU, before any launch
    assert captures[:6] == [("streamBeginCapture", s[d], d, mode) for d in range(3)] + [
        ("streamEndCapture", s[d], d) for d in range(3)]
    assert [(c[0], c[1], c[2]) for c in captures[6:9]] == [("graphUpload", s[d], d) for d in range(3)]
    # a warm-up and 3 timed repetitions: each launches every GPU's graph once, on its stream
    assert [(c[0], c[1], c[2]) for c in captures[9:21]] == [("graphLaunch", s[d], d) for d in range(3)] * 4
    assert [c[0] for c in captures[21:]] == ["graphExecDestroy"] * 3  # dropped after the case
    names = [name for _, name, _ in calls]
    assert names.count("captured allReduce") == 4 * 3  # --iters 4 on 3 GPUs, captured once
    assert names.count("allReduce") == 3  # the verifying operation runs outside the graph
    assert r["verified"] and r["params"]["graph"] is True and r["params"]["iters"] == 4 and r["stats"]["n"] == 3


def test_graph_keeps_the_documents_definitions_and_without_it_nothing_changes(captures, gpus, capsys):
    _, nc = gpus
    plain = graph_run(capsys)
    assert captures == [] and "graph" not in plain["params"]  # no capture, no graph
    names = [name for _, name, _ in nc._worlds[0].log]
    assert names == ["allReduce"] * (2 * ((1 + 3) * 4 + 1))  # each queued at once: warm-up + 3 x 4, + 1
    graph = graph_run(capsys, "--graph")
    for k in ("metric", "unit", "bytes", "counting", "path", "path_class", "verification"):
        assert graph[k] == plain[k], k
    kinds = [[n for n in r["notes"] if not n.startswith("caution: spread")] for r in (graph, plain)]  # timing's own
    assert kinds[0] == kinds[1]
    assert set(graph["params"]) - set(plain["params"]) == {"graph"}


def test_graph_under_mpi_captures_the_ranks_one_stream(captures, gpus, monkeypatch):
    mpi_ctx(monkeypatch)
    p = collectives.plan(collectives.Options(ops="all_reduce", sizes="64", inplace="out", iters=2, graph=True))
    rs = driver.execute(p, collectives.Options(repeats=2), SimpleNamespace(quiet=True, timeout=None, output=None,
                                                                           topology=None))
    assert rs.complete and rs.results[0].params["graph"] is True
    assert [c[0] for c in captures] == ["streamBeginCapture", "streamEndCapture", "graphUpload"] + [
        "graphLaunch"] * 3 + ["graphExecDestroy"]


def test_graph_is_captured_per_case(captures, gpus, capsys):
    assert cli.main(["bench", "nccl", "--mode", "single", "--ops", "all_reduce,sendrecv", "--sizes", "64,128",
                     "--iters", "2", "--repeats", "2", "-q", "--json", "--graph"]) == 0
    cases = len(json.loads(capsys.readouterr().out)["results"])  # all_reduce out/in and sendrecv out, 2 sizes
    assert cases == 6 and [c[0] for c in captures].count("streamBeginCapture") == 6 * 2  # 2 GPUs


def test_a_graph_that_does_not_run_its_operations_fails_the_part(gpus, monkeypatch, capsys):
    """The timed path is the graph: its own output is checked (the operation after it runs outside)."""
    fake_cupy, _ = gpus
    monkeypatch.setattr(fake_cupy.cuda.runtime, "graphLaunch", lambda graph_exec, stream: None)  # lost operations
    code = cli.main(["bench", "nccl", "--mode", "single", "--ops", "all_reduce", "--sizes", "64", "--inplace", "out",
                     "--iters", "2", "--repeats", "2", "-q", "--json", "--graph"])
    d = json.loads(capsys.readouterr().out)
    assert code == 1 and d["results"] == []
    assert d["failures"][0]["got"].endswith("(the graph's last launch)"), d["failures"]


def test_a_capture_that_fails_ends_every_capture_and_raises_the_original_error(captures, gpus, monkeypatch):
    fake_cupy, _ = gpus
    real = collectives.enqueue

    def fails_under_capture(ctx, *a):
        real(ctx, *a)
        if fake_cupy._Capture.open:  # one operation queued into the open captures, then an error
            raise ValueError("boom: an operation could not be captured")

    monkeypatch.setattr(collectives, "enqueue", fails_under_capture)
    with pytest.raises(ValueError, match="boom"):
        driver.measure(collectives, collectives.Options(ops="all_reduce", mode="single", sizes="64", inplace="out",
                                                        repeats=1, iters=2, graph=True))
    assert fake_cupy._Capture.open == []  # no stream stays capturing
    assert sorted(c[1] for c in captures if c[0] == "streamEndCapture") == sorted(
        c[1] for c in captures if c[0] == "streamBeginCapture")  # every capture begun was ended


# --- real MPI ranks on the stand-ins (fake_nccl's MPI worlds: p2p through mpi4py, collectives by allgather) ---

RANK = """
import os, sys
sys.path.insert(0, sys.argv[1])
import fake_cupy
from nodemap import cli
from nodemap.bench.comm import world
fake_cupy.install(int(os.environ["FAKE_GPUS"]), nccl=True)
world.gpu_keys = lambda cp, devs, topology=None: [f"GPU{d}" for d in devs]
sys.exit(cli.main(sys.argv[2:]))
"""


def mpi_ranks(tmp_path, gpus: int, *argv: str):
    """Two real MPI ranks (the mpich wheel's mpiexec) running nodemap over the stand-ins, on a node of
    `gpus` fake GPUs: each rank on local rank mod GPUs (this VM's plan gives no GPU), so with one
    GPU both ranks drive it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("mpi4py")
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip("no mpiexec next to sys.executable (pip install mpich)")
    (tmp_path / "rank.py").write_text(RANK)
    return subprocess.run([str(mpiexec), "-n", "2", sys.executable, str(tmp_path / "rank.py"),
                           str(Path(__file__).parent), *argv], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES="", NCCL_NVLS_ENABLE="0", FAKE_GPUS=str(gpus)))


@pytest.mark.mpi
def test_nccl_under_real_mpi_ranks_moves_and_verifies_every_operation(tmp_path):
    p = mpi_ranks(tmp_path, 2, "bench", "nccl", "--mode", "mpi", "--sizes", "64,256", "--iters", "2", "--repeats", "2",
                  "--inplace", "out", "--json", "-q")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert {r["metric"] for r in doc["results"]} == set(collectives.OPS) and len(doc["results"]) == 2 * 7
    assert all(r["verified"] and r["params"]["wrong"] == 0 for r in doc["results"])


RING_STAGED = ["bench", "ring", "--mode", "mpi", "--sizes", "64KiB", "--steps", "2", "--repeats", "2", "--no-overlap",
               "--json", "-q"]


@pytest.mark.mpi
@pytest.mark.parametrize("transports", ["mpi-staged", "mpi-staged,nccl"])
def test_ring_ranks_sharing_one_gpu_skip_nccl_with_its_reason(tmp_path, transports):
    """Issue 36: on a 1-GPU node `mpiexec -n 2 nodemap bench ring --mode mpi --transports mpi-staged`
    ended in a traceback (NcclError NCCL_ERROR_INVALID_USAGE from World.nccl: NCCL refuses two ranks on
    one GPU, and the ring opened it though it needs it only for its nccl transport)."""
    p = mpi_ranks(tmp_path, 1, *RING_STAGED, "--transports", transports)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    doc = json.loads(p.stdout)
    assert {r["params"]["transport"] for r in doc["results"]} == {"mpi-staged"}, doc["results"]
    assert all(r["verified"] for r in doc["results"])
    assert any(m.startswith("ranks 0,1 share ") and ":GPU0" in m for m in doc["messages"]), doc["messages"]
    skipped = [m for m in doc["messages"] if m.startswith("nccl: ")]
    if "nccl" in transports:
        assert len(skipped) == 1 and "ranks 0,1 share" in skipped[0] and "NCCL refuses two ranks on one GPU" in \
            skipped[0], doc["messages"]
    else:
        assert not skipped


@pytest.mark.mpi
def test_nccl_of_ranks_sharing_one_gpu_is_refused_in_one_line(tmp_path):
    p = mpi_ranks(tmp_path, 1, "bench", "nccl", "--mode", "mpi", "--sizes", "64", "--iters", "2", "--repeats", "1",
                  "-q")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    (line,) = [x for x in p.stderr.splitlines() if ": error:" in x]  # rank 0 alone says it
    assert "ranks 0,1 share" in line and "give each rank its own GPU" in line
