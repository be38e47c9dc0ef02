"""A node's MPI step under `check --fleet` (fleet/localpair.py): the pair
test's figures become `bench mpi`'s ResultSet, judged by the check's own
figure keys, limits and CUDA-awareness rule; the check runs the step it is
handed, or says why it has none. The real ranks: tests/test_fleet_mpi.py."""

import types

import pytest

import check_synth as syn
import nodes
from nodemap.bench.comm import mpi_common as mc
from nodemap.check import mpi, suite
from nodemap.bench.gpu.devices import Gpu
from nodemap.fleet import localpair, pairtest
from test_check_verdicts import by_key, doc_of

WHAT = "MPI point-to-point, host and device buffers"  # the check's MPI step (bench/comm/mpi_p2p.py)

MIB16 = 16 << 20
PLAIN = mc.Awareness(gpu=True, aware=False, how="MPIX_Query_cuda_support() = 0 in libmpi.so.12")
AWARE = mc.Awareness(gpu=True, aware=True, how="MPIX_Query_cuda_support() = 1 in libmpi.so.40")


def figs(dd_bw=None, transport="staged (pinned host)", hh_bw=9.0, lat=0.8):
    """What pairtest.run returns on the sender's side."""
    out = [pairtest.Figure("bw", "host", "GB/s", True, hh_bw, samples=[hh_bw, hh_bw * .99], bytes=MIB16,
                           counting="8 messages", verified=True, transport="host"),
           pairtest.Figure("latency", "host", "us", False, lat, samples=[lat, lat * 1.01], bytes=8,
                           counting="half the round trip", verified=True, transport="host")]
    if dd_bw is None:
        out.append(pairtest.Figure("skipped", "device", reason="device buffers skipped: no GPU visible on both sides"))
    else:
        out.append(pairtest.Figure("bw", "device", "GB/s", True, dd_bw, samples=[dd_bw, dd_bw * .99], bytes=MIB16,
                                   counting="8 messages", verified=True, transport=transport, why="the reason"))
    return out


def places(topo, gpus=("", "")):
    numa0 = sorted(topo.numa_nodes[0].cpuset)
    return [mc.place_of(5, "n1", numa0[:1], 0, topo, gpus[0]), mc.place_of(6, "n1", numa0[1:2], 1, topo, gpus[1])]


def test_the_figure_size_is_the_checks():
    assert localpair.FIGURE_SIZE == mc.FIGURE_SIZE == localpair.SIZES.bw_bytes


def test_host_figures_are_the_single_node_checks(monkeypatch):
    monkeypatch.setattr(pairtest, "device_capability", lambda: mc.Awareness(gpu=False, aware=False, how="no GPU"))
    topo = nodes.karolina()
    rs = localpair.result_set(figs(), places(topo), topo, ("host", "device"))
    assert rs.command.startswith("bench mpi") and "ranks 5 and 6" in rs.command
    assert rs.messages == ["device buffers skipped: no GPU visible on both sides"]
    j = by_key(doc_of(rs, topo=topo))
    assert set(j) == {"mpi/HH/latency", "mpi/HH/bw"}
    assert j["mpi/HH/bw"].verdict == "pass" and j["mpi/HH/bw"].figure.label == \
        "MPI bandwidth, host buffers (host), 16 MiB, same-numa"
    assert j["mpi/HH/latency"].figure.label == "MPI latency, host buffers, 8 B (same-numa)"
    slow = by_key(doc_of(localpair.result_set(figs(hh_bw=0.5, lat=40.0), places(topo), topo, ("host",)), topo=topo))
    assert slow["mpi/HH/bw"].verdict == "fail" and slow["mpi/HH/latency"].verdict == "fail"


@pytest.mark.parametrize("cap, transport, verdict", [(PLAIN, "staged (pinned host)", "warn"),
                                                     (AWARE, "cuda-aware", "pass")])
def test_device_figures_and_cuda_awareness(monkeypatch, cap, transport, verdict):
    monkeypatch.setattr(pairtest, "device_capability", lambda: cap)
    topo = nodes.karolina()
    pl = places(topo, ("GPU0", "GPU1"))
    rs = localpair.result_set(figs(dd_bw=11.0, transport=transport), pl, topo, ("host", "device"))
    dd = next(r for r in rs.results if r.params["buffers"] == "DD")
    assert dd.params["transport"] == localpair.TRANSPORT[transport]
    assert dd.path_class == "PIX"  # the GPU pair's, as bench mpi names it
    assert dd.path.startswith("rank5@n1:NUMA0:GPU0 -> rank6@n1:NUMA0:GPU1 (")
    aware = mpi.awareness_check(True, [rs], {})
    assert aware.verdict == verdict, aware
    d2d = syn.copies({}, dict(enumerate(nodes.KAROLINA_GPU_NUMA)), {(0, 1): 250.0, (1, 0): 250.0})
    j = by_key(doc_of(d2d, rs, checks=[aware], topo=topo))["mpi/DD/bw"]
    assert j.verdict == "fail" and j.figure.peak == pytest.approx(250.0)  # against the GPU pair's copies
    if verdict == "warn":
        assert aware.label == "MPI is not CUDA-aware" and "11.0 GB/s" in aware.value


def test_the_check_runs_the_step_it_is_handed_or_says_why_not(monkeypatch):
    one = nodes.build(nodes.Spec(1, 1, 1, 4))
    steps, skipped = suite.plan(one, "quick", env={"PMI_RANK": "0"}, in_job=mpi.InJob(None, localpair.ONE_RANK))
    assert "mpi" not in [s.kind for s in steps]
    assert [s.reason for s in skipped if s.what == WHAT] == [localpair.ONE_RANK]
    assert "--ntasks-per-node=<GPUs>" in localpair.ONE_RANK

    got = []

    def measure(level, topo):
        got.append((level, topo))
        return "the ResultSet"

    job = mpi.InJob(measure)
    steps, skipped = suite.plan(one, "quick", env={"PMI_RANK": "0"}, in_job=job)
    assert [s for s in steps if s.kind == "mpi"] == [suite.Step("mpi", (), WHAT)]
    assert not [s for s in skipped if s.what == WHAT]  # a rank, yet the step runs
    assert suite.measure("mpi", [], "quick", job, one) == "the ResultSet" and got == [("quick", one)]

    def fails(level, topo):
        raise mpi.MPIFailed("rank 3 (this node's second local rank) did not answer within 5 s")

    with pytest.raises(suite.KindFailed, match="did not answer"):
        suite.measure("mpi", [], "quick", mpi.InJob(fails), one)


class Rank:
    def __init__(self, rank):
        self.rank = rank

    def Get_rank(self):
        return self.rank


def test_the_second_ranks_gpu_is_the_one_it_names(monkeypatch):
    """With a GPU per task each rank sees its own "device 0": the partner's GPU
    is the one it reports (PCI bus id), not the leader's guess."""
    topo = nodes.karolina()
    monkeypatch.setattr(localpair, "gpu_of", lambda local, topo=None: Gpu(0, "", 0, 0, 0, "0000:10:00.0", key="GPU0"))
    lead = localpair.Lead(Rank(5), 6, [1], 5.0, ("host", "device"), "n1")
    theirs = Gpu(0, "", 0, 0, 0, "0000:11:00.0", key="cuda0")
    me, peer = lead.places(topo, figs(dd_bw=11.0), theirs)
    assert (me.gpu, peer.gpu) == ("GPU0", "GPU1") and peer.rank == 6 and peer.local_rank == 1
    me, peer = lead.places(topo, figs(), theirs)
    assert (me.gpu, peer.gpu) == ("", "")  # no device figures: no GPU in the path


def test_the_second_rank_is_released_when_the_leaders_check_raises(monkeypatch):
    """Else it waits out check_timeout + join_timeout for a word that never comes."""
    from nodemap.fleet import driver, localpair, nodecheck
    from nodemap.fleet.messages import Role

    released = []

    class FakeLead:
        silent = False

        def __init__(self, *a):
            pass

        def step(self):
            return None

        def release(self):
            released.append(True)

    def broken(*a):
        raise RuntimeError("a bug in the check")

    monkeypatch.setattr(localpair, "Lead", FakeLead)
    monkeypatch.setattr(nodecheck, "run_check", broken)
    cfg = types.SimpleNamespace(pair_timeout=5.0, buffers=("host",), level="quick", expect=None)
    with pytest.raises(RuntimeError):
        driver.lead_check(None, cfg, None, "n0", Role(pairtest.Seat(), True, 1, [0]))
    assert released == [True]
