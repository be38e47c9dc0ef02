"""A node's own MPI figures under `check --fleet`, measured by ranks the job
already has.

The single-node check starts `mpiexec -n 2 ... bench mpi` for its MPI step;
a check that is itself a rank cannot. So the node's leader hands its check
an `InJob` step: it tells the node's second local rank "go" and the two run
the pair test of the inter-node pairs (`pairtest`: host buffers, and device
buffers where both see a GPU; CUDA-aware where proven, else staged) between
themselves, at the size the check judges (16 MiB); the second rank first
names its GPU, as its own CUDA runtime sees it, for the path's class. The sender's figures
become a ResultSet shaped as `bench mpi`'s, so the check's figures
(`mpi/HH/latency`, `mpi/HH/bw`, `mpi/DD/bw`), limits and CUDA-awareness
item apply unchanged. A second rank that does not answer costs the pair
timeout and is reported as the step's reason; the leader always sends
"go" or "skip" before its document, so the second rank never waits longer
than the leader's check. A node with one local rank says why it has no MPI
figures.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from . import nodecheck, pairtest, wire

if TYPE_CHECKING:
    from ..bench.gpu.devices import Gpu

ROUND = 0  # pair-test tag round: rank 0 numbers the inter-node rounds from 1
# The single-node check's figure size (bench/comm/mpi_common.FIGURE_SIZE, tested equal: not imported, so that the
# ranks that only follow do not load the check); 8 per window (past a few MiB the link is saturated by 8
# messages, bench/mpi_p2p.window_for); each side holds a 16 MiB send and receive buffer (bench/comm/p2p.py).
FIGURE_SIZE = 16 << 20
SIZES = pairtest.Sizes(bw_bytes=FIGURE_SIZE, window=8, bw_windows=4, lat_bytes=1)  # the check's 1 B latency
ONE_RANK = ("one rank on this node: under --fleet the MPI step runs between two ranks of the node, so it needs "
            ">= 2 ranks per node (srun --ntasks-per-node=<GPUs>, mpirun -npernode <GPUs>, mpiexec -ppn <GPUs>)")
TRANSPORT = {v: k for k, v in pairtest.TRANSPORT.items()}  # pairtest's records' -> bench mpi's


class Lead:
    """The leader's side: the check's MPI step, and the second rank's release."""

    def __init__(self, comm: Any, partner: int | None, partner_cpus: list[int], timeout: float,
                 buffers: tuple[str, ...], host: str, seat: pairtest.Seat = pairtest.Seat()) -> None:
        self.comm, self.partner, self.partner_cpus = comm, partner, partner_cpus
        self.timeout, self.buffers, self.host, self.seat = timeout, buffers, host, seat
        self.told = False
        self.silent = False  # the partner missed the step's deadline: rank 0 must end it with the job

    def step(self) -> Any:
        """The check's MPI step (check/mpi.InJob)."""
        from ..check.mpi import InJob

        return InJob(self.measure) if self.partner is not None else InJob(None, ONE_RANK)

    def measure(self, level: str, topo: Any) -> Any:
        from ..check.mpi import MPIFailed

        self.tell("go")
        try:
            theirs = wire.recv(self.comm, self.partner, wire.LOCAL, wire.deadline(self.timeout))  # its GPU
            figs = pairtest.run(self.comm, self.partner, ROUND, True, SIZES, self.timeout, self.buffers, self.seat)
        except wire.Late as e:
            self.silent = True
            why = ("stopped answering (no heartbeat)" if isinstance(e, wire.Gone) else
                   f"did not answer or finish within {self.timeout:g} s (--pair-timeout)")
            raise MPIFailed(f"rank {self.partner} (this node's second local rank) {why}") from None
        except ValueError as e:
            raise MPIFailed(str(e)) from None
        return result_set(figs, self.places(topo, figs, theirs), topo, self.buffers)

    def tell(self, what: str) -> None:
        """Once: "go" as the step starts, "skip" after a check that never
        reached it. Not waited on: a partner that is gone costs the test (for
        "go") its deadline, and nothing else (a leader that lost rank 0 keeps its document first)."""
        if self.partner is None or self.told:
            return
        self.told = True
        wire.keep(wire.post(self.comm, what, self.partner, wire.LOCAL))

    def release(self) -> None:
        self.tell("skip")

    def places(self, topo: Any, figs: list[pairtest.Figure], theirs: Gpu | None) -> list[Any]:
        """Both ranks' Places (their GPUs named where device figures exist), for the path and its class."""
        import os

        from ..bench.comm import mpi_common as mc
        from ..bench.gpu.devices import match_gpu

        device = any(f.buffers == "device" and f.test != "skipped" for f in figs)
        mine = gpu_of(self.seat, topo) if device else None
        peer_gpu = match_gpu(topo, theirs.bus_id, theirs.uuid) if device and theirs else None
        peer_key = peer_gpu.key if peer_gpu is not None else theirs.key if device and theirs else ""
        me = mc.place_of(self.comm.Get_rank(), self.host, os.sched_getaffinity(0), 0, topo, mine.key if mine else "")
        peer = mc.place_of(self.partner, self.host, self.partner_cpus, 1, topo, peer_key)
        return [me, peer]


def gpu_of(seat: pairtest.Seat, topo: Any = None) -> Gpu | None:
    """The GPU a rank at `seat` uses in the step (pairtest.gpu_for: the node's plan),
    as its own CUDA runtime sees it (each rank may see other GPUs: --gpus-per-task):
    PCI bus id, UUID, Topology key ("GPU1"; "cudaN" without the topology); None without one."""
    if not pairtest.device_capability().gpu:
        return None
    try:
        import cupy as cp

        from ..bench.gpu.devices import describe

        return describe(cp, pairtest.gpu_for(seat).device, topo)
    except Exception:  # a label, never a reason to stop
        return None


def follow(comm: Any, leader: int, timeout: float, buffers: tuple[str, ...], said: str,
           seat: pairtest.Seat) -> None:
    """The second rank's side, once its leader said `said` ("go" or "skip");
    a failure is the leader's to report (it is the sender: it sees it too)."""
    if said != "go":
        return
    if nodecheck.hang_point() == "local":
        nodecheck.hang_forever()
    try:
        wire.send(comm, gpu_of(seat) if "device" in buffers else None, leader, wire.LOCAL, wire.deadline(timeout))
        pairtest.run(comm, leader, ROUND, False, SIZES, timeout, buffers, seat)
    except (wire.Late, ValueError):
        pass


def heard(comm: Any, leader: int) -> str | None:
    """The leader's word ("go"/"skip"), if it has come."""
    msg = comm.improbe(source=leader, tag=wire.LOCAL)
    return msg.recv() if msg is not None else None


def result_set(figs: list[pairtest.Figure], places: list[Any], topo: Any, buffers: tuple[str, ...]) -> Any:
    """The sender's figures as `bench mpi`'s ResultSet: params buffers HH/DD,
    size and transport; the path and its class as `bench mpi` names them."""
    from ..bench.comm import mpi_common as mc
    from ..bench.comm.mpi_p2p import gpu_class, via
    from ..bench.results import ResultSet, make_result

    a, b = places
    rs = ResultSet(command=f"bench mpi (nodemap check --fleet: ranks {a.rank} and {b.rank} of this node, "
                           f"fleet/localpair.py)")
    rs.environment = {"mpi": mc.library(), "ranks": 2, "places": [asdict(p) for p in places],
                      "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    for f in figs:
        if f.test == "skipped":
            rs.messages.append(f.reason)
            continue
        buf, transport = pairtest.BUFFERS[f.buffers], TRANSPORT.get(f.transport, f.transport)
        cls = (gpu_class(topo, a, b) or mc.pair_class(a, b)) if buf == "DD" else mc.pair_class(a, b)
        rs.results.append(make_result(
            "mpi", f.test, f.unit, f.samples, verified=f.verified,
            params={"size": f.bytes, "buffers": buf, "transport": transport,
                    "window": SIZES.window if f.test == "bw" else 1},
            bytes=f.bytes * SIZES.window * SIZES.bw_windows if f.test == "bw" else 0,
            counting=f.counting, path=f"{a.label()} -> {b.label()}{via(transport)}", path_class=cls,
            verification="receive buffers poisoned (0xFF) before every repetition, compared with the sender's "
                         "pattern after it (fleet/pairtest.py)",
            notes=(f.why,) if f.why else ()))
    if "device" in buffers:
        rs.environment["cuda_aware"] = awareness(figs)
    return rs


def awareness(figs: list[pairtest.Figure]) -> dict[str, Any]:
    """`bench mpi`'s cuda_aware record from this rank's library (its word
    with or without a GPU, mpi_common.capability) and the device test:
    proven when the device figures went straight to MPI."""
    cap = pairtest.device_capability()
    device = [f for f in figs if f.buffers == "device"]
    proven = any(f.transport == "cuda-aware" for f in device)
    ran = any(f.test != "skipped" for f in device)
    return {"gpu": bool(cap.gpu and ran), "aware": bool(cap.aware), "proven": proven, "how": cap.how}
