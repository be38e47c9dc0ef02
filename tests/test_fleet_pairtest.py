"""The pair test's pieces: the buffers of each kind (host, device handed to
a CUDA-aware MPI, device staged through pinned host memory) are bench
mpi's (bench/comm/p2p.py), waited on through the caller's `wait` (the
fleet's deadline); which kind a pair uses; its tags. Device memory is
tests/fake_cupy.py's host memory here (the GPU campaign runs the real one:
docs/fleet.md); the copies, poisoning, checks and the decision are the
logic. Whole pair tests over real ranks: test_fleet_mpi.py, and the one
below that forces the CUDA-aware path."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fake_cupy
from nodemap.bench.comm import mpi_common, p2p
from nodemap.fleet import pairtest
from nodemap.fleet.messages import Hello, PairReport
from nodemap.fleet.nodefile import PairResult

AWARE = mpi_common.Awareness(gpu=True, aware=True, how="MPIX_Query_cuda_support() = 1")
PLAIN = mpi_common.Awareness(gpu=True, aware=False, how="MPIX_Query_cuda_support() = 0")
NOGPU = mpi_common.Awareness(gpu=False, aware=False, how="no GPU visible to CuPy")
def hello(rank, nic=""):
    """What a rank of node n1 (0, 1) or n2 (2, 3) on one host says of itself (driver.Coordinator.join)."""
    return Hello(rank, f"n{1 + rank // 2}", "host", [], (), nic, "")


KINDS = {"host": ("HH", "H", False), "cuda-aware": ("DD", "D", True), "staged": ("DD", "D", False)}


@pytest.fixture
def cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    return fake_cupy


@pytest.fixture
def MPI():
    return pytest.importorskip("mpi4py.MPI")


def endpoint(MPI, kind, n, waited):
    """An endpoint of `kind` on COMM_SELF (this rank is its own peer) whose waits are recorded."""
    buf, mine, aware = KINDS[kind]

    def wait(reqs):
        waited.append(len(reqs))
        MPI.Request.Waitall(reqs)

    return p2p.make_endpoint(buf, mine, MPI, MPI.COMM_SELF, n, p2p.seed_of(0), aware, chunk=256, wait=wait)


@pytest.mark.parametrize("kind", KINDS)
def test_a_buffer_kind_carries_the_pattern_and_poison_hides_stale_data(cupy, MPI, kind):
    n, waited = 1000, []
    ep = endpoint(MPI, kind, n, waited)
    assert ep.label == kind
    assert p2p.transfer_checked(ep, n, 0, 0)
    ep.poison()  # what the last repetition left must not pass for the next one's transfer
    assert not ep.check(n, p2p.seed_of(0))
    assert waited, "every request goes through the caller's wait (the fleet's deadline)"


def test_staged_device_memory_goes_through_its_pinned_copies_in_chunks(cupy, MPI):
    n, waited = 1000, []
    ep = endpoint(MPI, "staged", n, waited)
    assert p2p.transfer_checked(ep, n, 0, 0)
    want = p2p.pattern(n, p2p.seed_of(0))
    assert ep.hs.tobytes() == want and ep.hr.tobytes() == want  # MPI saw only the pinned host copies
    assert waited.count(1) >= 4  # each of the 4 received chunks waited for alone, then copied to the GPU
    ep.poison()
    assert (ep.hr == p2p.POISON).all()  # a stale staging copy cannot be copied up as if it had arrived


def test_a_host_end_of_a_staged_pair_cuts_its_messages_as_the_staged_end_does(cupy, MPI):
    # bench mpi's HD: every send meets a receive of its size, message after message (the cut is kept per size)
    host = p2p.make_endpoint("HD", "H", MPI, MPI.COMM_SELF, 1000, p2p.seed_of(0), False, chunk=256)
    gpu = p2p.make_endpoint("HD", "D", MPI, MPI.COMM_SELF, 1000, p2p.seed_of(0), False, chunk=256)
    for n in (1000, 300, 1000):
        gpu.poison()
        got = gpu.irecv(n, 0)
        sent = host.isend(n, 0)
        assert len(sent) == len(got) == -(-n // 256)
        gpu.done(got)
        host.done(sent)
        assert gpu.check(n, p2p.seed_of(0))


@pytest.mark.parametrize("mine, theirs, mode, says", [
    (AWARE, AWARE, "cuda-aware", "CUDA-aware"),
    (AWARE, PLAIN, "staged", "not CUDA-aware"),
    (PLAIN, AWARE, "staged", "not CUDA-aware"),
    (PLAIN, PLAIN, "staged", "MPIX_Query_cuda_support() = 0"),
    (AWARE, NOGPU, None, "no GPU visible on one side"),
    (NOGPU, NOGPU, None, "no GPU visible on both sides"),
    (None, AWARE, None, "skipped"),
])
def test_device_mode_is_the_same_on_both_sides(mine, theirs, mode, says):
    got, why = pairtest.device_mode(mine, theirs)
    assert got == mode and says in why
    assert pairtest.device_mode(theirs, mine)[0] == mode


def test_no_gpu_no_cupy_is_a_capability_not_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises
    monkeypatch.setattr(mpi_common, "query_cuda_support", lambda: (False, "MPIX_Query_cuda_support() = 0"))
    pairtest.device_capability.cache_clear()
    try:
        assert pairtest.device_capability() == mpi_common.Awareness(gpu=False, aware=False, how=PLAIN.how)
    finally:
        pairtest.device_capability.cache_clear()


def test_tags_of_a_round_stay_inside_it():
    used = [o for o in pairtest.OFFSET.values()] + [pairtest.PROOF, pairtest.SYNC, pairtest.ACK]
    assert len(set(used)) == len(used) and max(used) < pairtest.STEP and min(used) > 0


PAIR = """
import dataclasses, json, sys
import fake_cupy
sys.modules["cupy"] = fake_cupy
from mpi4py import MPI
from nodemap.bench.comm import mpi_common, p2p
from nodemap.fleet import pairtest
rank = MPI.COMM_WORLD.Get_rank()
pairtest.device_capability = lambda: mpi_common.Awareness(gpu=True, aware=True, how="said so")
if sys.argv[1] == "corrupt" and rank == 1:  # this side's proof transfer arrives damaged
    pairtest.p2p = type(sys)("p2p_damaged")
    pairtest.p2p.__dict__.update(p2p.__dict__, transfer_checked=lambda *a: p2p.transfer_checked(*a) and False)
if sys.argv[1] == "damaged" and rank == 1:  # every repetition arrives damaged here
    p2p.Endpoint.check = lambda self, n, seed: False
sizes = pairtest.Sizes(bw_bytes=4096, window=4, bw_windows=2, lat_iters=5, repeats=2)
try:
    figs = pairtest.run(MPI.COMM_WORLD, 1 - rank, 1, rank == 0, sizes, 60.0, ("host", "device"))
except ValueError as e:
    figs = {"error": str(e)}
if rank == 0:
    print(json.dumps(figs if isinstance(figs, dict) else [dataclasses.asdict(f) for f in figs]))
"""


def pair(tmp_path, case):
    """Rank 0's figures (or {"error": ...}) of a pair test between two real ranks (PAIR)."""
    pytest.importorskip("mpi4py")
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip("no mpiexec next to sys.executable (pip install mpich)")
    script = tmp_path / "pair.py"
    script.write_text(PAIR)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([str(mpiexec), "-n", "2", sys.executable, str(script), case], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.mpi
@pytest.mark.parametrize("case, transport", [("proven", "cuda-aware"), ("corrupt", "staged (pinned host)")])
def test_device_pointers_go_to_mpi_only_after_a_proof_both_sides_agree_on(tmp_path, case, transport):
    """Two real ranks whose libraries both say CUDA-aware: the checked transfer decides, on both sides alike."""
    figs = pair(tmp_path, case)
    device = [f for f in figs if f["buffers"] == "device"]
    assert [f["test"] for f in device] == ["bw", "latency"] and all(f["verified"] for f in device)
    assert {f["transport"] for f in device} == {transport}
    assert {f["transport"] for f in figs if f["buffers"] == "host"} == {"host"}
    assert all(len(f["gpus"]) == 2 and all(f["gpus"]) for f in device)  # both sides' GPUs named
    assert ("failed: staged instead" in device[0]["why"]) == (case == "corrupt")
    for f in (f for f in figs if f["test"] == "latency"):  # each repetition's fastest and slowest beside its median
        assert len(f["floors"]) == len(f["samples"]) == len(f["ceilings"]) == 2
        assert all(0 < a <= b <= c for a, b, c in zip(f["floors"], f["samples"], f["ceilings"]))


@pytest.mark.mpi
def test_a_damaged_repetition_is_an_error_and_both_sides_stop_after_it(tmp_path):
    # the receiver's check fails: the sender says so at once (the pair's deadline is 60 s), no figure is made
    got = pair(tmp_path, "damaged")
    assert got == {"error": "the bandwidth test's received bytes did not match the sender's pattern"}


# --- each rank's GPU: the node's plan, as the benchmark kinds (bench/comm/world.py) ---------------------


@pytest.fixture
def perlmutter_cuda(monkeypatch):
    """CUDA on the stand-in as on a Perlmutter-like node: 4 devices in PCI order whose bus ids are the
    fixture's GPUs (GPU k nearest NUMA node 3-k); the node's plan is the real one for 4 ranks; nothing
    placed the ranks (no visibility variable)."""
    import fake_cupy
    import nodes
    from nodemap.bench.comm import world
    from nodemap.bench.gpu import devices
    from nodemap.env import GPU_VISIBILITY_VARS
    from nodemap.mapping.nodeplan import plan_dict, read
    from nodemap.mapping.plan import plan
    from nodemap.mapping.request import Request

    topo = nodes.perlmutter()
    bus = [[int(x, 16) for x in g.pci_bus_id.replace(".", ":").split(":")[:3]] for g in topo.gpus]
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(fake_cupy.cuda.runtime, "devices", 4)
    monkeypatch.setattr(fake_cupy.cuda.runtime, "getDeviceProperties", lambda d: {
        "name": b"Fake GPU", "pciDomainID": bus[d][0], "pciBusID": bus[d][1], "pciDeviceID": bus[d][2]})
    monkeypatch.setattr(fake_cupy.Device, "current", -1)
    monkeypatch.setattr(world, "node_plan", lambda size, rank, say: (
        read(plan_dict(topo, plan(topo, Request(tasks=size)))), ""))
    monkeypatch.setattr(devices, "load_topology", lambda path: (topo, ""))
    for v in GPU_VISIBILITY_VARS + (world.PLANNED,):
        monkeypatch.delenv(v, raising=False)
    pairtest.gpu_for.cache_clear()  # chosen once per process: not across tests
    pairtest.gpu_key.cache_clear()
    yield fake_cupy
    pairtest.gpu_for.cache_clear()
    pairtest.gpu_key.cache_clear()


def test_a_fleet_rank_drives_its_planned_gpu_not_its_rail_mod_gpus(perlmutter_cuda, tmp_path):
    """Rank 0's node holds ranks 0-3 and leads with rank 1 (driver.leader_first): rail k is rank k+1, whose
    local rank (launcher order) is k+1; the plan puts local rank j on GPU 3-j (nearest its cores). The old
    rule (rail k -> device k mod 4) put rail 0 on GPU0, far from rank 1's cores."""
    from nodemap.fleet import driver

    cp = perlmutter_cuda
    co = driver.Coordinator(None, driver.Config(str(tmp_path)), None)
    co.nodes = {"n1": driver.NodeRec("n1", driver.leader_first([0, 1, 2, 3]))}
    co.node_of = {r: "n1" for r in range(4)}
    co.hellos = {r: hello(r) for r in range(4)}
    got = []
    for rail, rank in enumerate(co.nodes["n1"].ranks):
        seat = co.seat(rank)  # what rank 0 sends it with its role and every pair command
        assert (seat.local_rank, seat.local_size) == (rank, 4)
        mode, _ = pairtest._transport(None, "device", PLAIN, PLAIN, seat)
        got.append((cp.Device.current, pairtest.gpu_key(seat)))
        assert mode == "staged" and pairtest.gpu_for(seat).how == "plan"
    assert got == [(2, "GPU2"), (1, "GPU1"), (0, "GPU0"), (3, "GPU3")]  # ranks 1, 2, 3, 0
    assert [d for d, _ in got] != [rail % 4 for rail in range(4)]


def test_a_rank_placed_by_its_launcher_keeps_device_0_of_what_it_sees(perlmutter_cuda, monkeypatch):
    vis = tuple((("CUDA_VISIBLE_DEVICES", str(3 - k)),) for k in range(4))  # srun --gpu-bind=map_gpu:3,2,1,0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    d = pairtest.gpu_for(pairtest.Seat(2, 4, vis))
    assert (d.device, d.how) == (0, "visibility")


def test_rails_pair_local_ranks_named_by_their_plan_and_a_failed_rail_is_judged(tmp_path):
    """Rail k is the k-th local rank of both nodes in the launcher's order (rank 0's node leads with
    rank 1: rail 0 is still rank 0, whose plan gave it rail0), named by the NIC its plan gave it; a
    rail whose test failed (past the pair's timeout: a rail too slow or cut) is a bandwidth of 0,
    judged, not a pair left out."""
    from nodemap.fleet import driver

    co = driver.Coordinator(None, driver.Config(str(tmp_path)), None)
    co.nodes = {"n1": driver.NodeRec("n1", driver.leader_first([0, 1])), "n2": driver.NodeRec("n2", [2, 3])}
    co.node_of = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
    co.hellos = {r: hello(r, f"rail{r % 2}") for r in range(4)}
    co.round_no = 1
    assert co.nodes["n1"].ranks == [1, 0] and [co.nodes["n1"].rail_rank(k) for k in (0, 1)] == [0, 1]
    assert co.rail_nics(("n1", "n2"), 1) == ["rail1", "rail1"]
    bw = pairtest.Figure("bw", unit="GB/s", value=0.025)
    lat = pairtest.Figure("latency", unit="us", higher_is_better=False, value=90.0)
    reports = [PairReport(1, ("n1", "n2"), 0, 0, [bw, lat]), PairReport(1, ("n1", "n2"), 0, 2),
               PairReport(1, ("n1", "n2"), 1, 1, error="rank 3 did not answer within 60 s"),
               PairReport(1, ("n1", "n2"), 1, 3, error="rank 1 did not answer within 60 s")]
    alive = [co.nodes["n1"], co.nodes["n2"]]
    got = co.take_reports(alive, [(0, 1)], reports)
    assert got[(0, 1)] == {"mpi bw host": 0.025, "mpi bw host rail0": 0.025, "mpi bw host rail1": 0.0,
                           "mpi latency host": 90.0, "mpi latency host rail0": 90.0}
    failed = [r for r in co.pair_results if r.key == "mpi bw host rail1"]
    assert failed == [PairResult(a="n1", b="n2", key="mpi bw host rail1", unit="GB/s", value=0.0,
                       higher_is_better=True, round=1, nics=["rail1", "rail1"],
                       error="rank 3 did not answer within 60 s")]


def test_each_rail_s_slowest_round_trips_are_judged_against_its_sibling_s(tmp_path):
    """A rail's latency record with ceilings (pairtest.CEILING) gives, beside the floors' 'mpi latency host
    rail1 vs rail0', the rail's tail against its sibling's (pairs.tail_ratio): 'mpi tail host rail1 vs rail0',
    a figure of the pair the isolation judges, recorded in pairs.jsonl."""
    from nodemap.fleet import driver

    co = driver.Coordinator(None, driver.Config(str(tmp_path)), None)
    co.nodes = {"n1": driver.NodeRec("n1", [0, 1]), "n2": driver.NodeRec("n2", [2, 3])}
    co.node_of = {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
    co.hellos = {r: hello(r, f"rail{r % 2}") for r in range(4)}
    co.round_no = 1

    def lat(ceilings):
        return pairtest.Figure("latency", unit="us", higher_is_better=False, value=90.0, samples=[90.0] * 5,
                               floors=[40.0] * 5, ceilings=ceilings)

    bw = pairtest.Figure("bw", unit="GB/s", value=0.025)
    lossy = [106_000.0, 104_700.0, 211_200.0, 105_000.0, 3_900.0]  # 4 of 5 waited for a retransmit
    reports = [PairReport(1, ("n1", "n2"), 0, 0, [bw, lat([3800.0, 16600.0, 3100.0, 3900.0, 7100.0])]),
               PairReport(1, ("n1", "n2"), 1, 1, [bw, lat(lossy)])]
    got = co.take_reports([co.nodes["n1"], co.nodes["n2"]], [(0, 1)], reports)[(0, 1)]
    assert got["mpi tail host rail1 vs rail0"] == pytest.approx(105_000.0 / 25_000.0)  # the sibling's 7.1 ms: the floor
    assert got["mpi tail host rail0 vs rail1"] < 0.1 and got["mpi latency host rail1 vs rail0"] == 1.0
    (rec,) = [r for r in co.pair_results if r.key == "mpi tail host rail1 vs rail0"]
    assert (rec.unit, rec.higher_is_better, rec.nics) == ("x", False, ["rail1", "rail1"])
    assert co.directions["mpi tail host rail1 vs rail0"] is False
    co.linked = False  # one loopback: its rails are one, nothing against a sibling
    assert not any(" vs " in k for k in co.take_reports([co.nodes["n1"], co.nodes["n2"]], [(0, 1)], reports)[(0, 1)])
