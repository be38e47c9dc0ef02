"""One node pair's MPI test over the fabric, under deadlines.

Between two ranks on different nodes (the nodes' leaders, or the k-th
local ranks of both for rail k): a handshake, then bandwidth (the lower
rank sends windows of non-blocking messages, acknowledged per window, as
OSU's osu_bw) and latency (ping-pong, half the median round trip: `ROUND_TRIP`),
over each buffer kind asked for:
  host    host memory;
  device  GPU memory (CuPy) on the rank's GPU by the benchmark kinds' rule
          (`gpu_for`: the node's plan, bench/comm/world.py). Straight to MPI only where both sides' library says it is
          CUDA-aware (`mpi_common.capability`, as `nodemap bench mpi`) and a
          verified device transfer between the two proved it; otherwise
          staged through pinned host memory in pipelined chunks, in the
          timing (what an application without CUDA-aware MPI pays). The
          record says which ("transport"). Without a GPU on either side the
          device tests are skipped, with the reason.
The buffers, the pattern, the poison before every repetition and the check
after it, the loops and the device proof are `nodemap bench mpi`'s
(bench/comm/p2p.py); a mismatch is an error, not a number. What is the
fleet's is here: every wait polls against the pair's deadline (`wire.Late`
past it, `wire.Gone` once the partner's heartbeats stopped: a partner node
that dies costs at most the timeout, and the rank goes on
serving rank 0, where bench mpi blocks under one deadline per phase that
ends the process), each round's tags, the agreement on the checks, the
records."""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..bench.comm import p2p
from . import wire

if TYPE_CHECKING:
    from ..bench.comm.mpi_common import Awareness

KINDS = ("host", "device")
STEP = 16  # tags per round: hello 0, tests 1..5, every test's sync 6 and acks and agreements 7
OFFSET = {("host", "bw"): 1, ("host", "latency"): 2, ("device", "bw"): 3, ("device", "latency"): 4}
PROOF, SYNC, ACK = 5, 6, 7
BUFFERS = {"host": "HH", "device": "DD"}  # bench mpi's names of a pair's kinds
TRANSPORT = {"host": "host", "cuda-aware": "cuda-aware", "staged": "staged (pinned host)"}  # p2p's -> the records'


@dataclass(frozen=True)
class Sizes:
    bw_bytes: int = 4 << 20  # per message
    window: int = 16
    bw_windows: int = 8  # windows per repetition
    lat_iters: int = 200
    repeats: int = 5
    lat_bytes: int = 8  # the ping-pong's message


@functools.lru_cache(maxsize=None)
def device_capability() -> Awareness:
    """This rank's side of the device decision (asked once per process), as bench mpi asks it."""
    from ..bench.comm import mpi_common

    return mpi_common.capability()


def device_mode(mine: Awareness | None, theirs: Awareness | None) -> tuple[str | None, str]:
    """("cuda-aware" | "staged" | None to skip, why); the same on both sides
    (it reads both capabilities, which both sides have after the handshake;
    mpi_common.agreed, bench mpi's rule over its ranks)."""
    from ..bench.comm.mpi_common import NOT_AWARE, agreed

    if not (mine and mine.gpu and theirs and theirs.gpu):
        return None, "device buffers skipped: no GPU visible on " + ("both sides" if not (mine and mine.gpu) and
                                                                      not (theirs and theirs.gpu) else "one side")
    both = agreed([mine, theirs])
    if both.aware:
        return "cuda-aware", f"both sides' MPI says it is CUDA-aware ({both.how})"
    return "staged", f"{NOT_AWARE} ({both.how})"


@dataclass
class Figure:
    """One test's record on the sender's side, or a buffer kind it could not test (test "skipped", `reason`)."""

    test: str  # bw | latency | skipped
    buffers: str = "host"  # KINDS
    unit: str = ""
    higher_is_better: bool = True
    value: float = 0.0
    samples: list[float] = field(default_factory=list)
    floors: list[float] = field(default_factory=list)  # latency: FLOOR
    ceilings: list[float] = field(default_factory=list)  # latency: CEILING
    bytes: int = 0  # per message
    counting: str = ""
    verified: bool = False
    transport: str = ""  # TRANSPORT's
    why: str = ""  # how the transport was chosen
    gpus: list[str] = field(default_factory=list)  # device buffers: both sides' GPUs
    reason: str = ""  # why skipped


@dataclass(frozen=True)
class Seat:
    """A rank's place on its node as rank 0 grouped the hellos (the fleet
    uses no collective, so no COMM_TYPE_SHARED split): its local rank (the
    launcher's order, by global rank), the node's rank count, and every local
    rank's device visibility (world.visibility), local rank order."""

    local_rank: int = 0
    local_size: int = 1
    visibility: tuple[tuple[tuple[str, str], ...], ...] = ()  # tuples: the seat is a key (gpu_for)


@functools.lru_cache(maxsize=None)
def gpu_for(seat: Seat) -> Any:
    """The GPU(s) of a rank at this seat (world.Devices): the benchmark
    kinds' rule (bench/comm/world.py: the visibility nodemap or the launcher
    gave it, else the node's plan matched by PCI bus id, else local rank mod
    GPUs with a note); chosen once per process."""
    import os

    import cupy as cp

    from ..bench.comm import world

    mine = world.visibility(os.environ)
    return world.pick(cp, seat.local_rank, seat.local_size, mine, seat.visibility or (mine,))


@functools.lru_cache(maxsize=None)
def gpu_key(seat: Seat) -> str:
    """The Topology's name of the seat's GPU ("GPU3", matched by PCI bus id; "cuda2" where this
    node's topology cannot be read), as the benchmark kinds name theirs; "" without one."""
    import cupy as cp

    from ..bench.gpu.devices import key, load_topology

    d = gpu_for(seat).device
    return key(cp, d, load_topology(None)[0]) if d is not None else ""


# --- the test ---------------------------------------------------------------------


def run(comm: Any, peer: int, rnd: int, sends: bool, sizes: Sizes,
        timeout: float, buffers: tuple[str, ...] = ("host",), seat: Seat = Seat(), nap: bool = False
        ) -> list[Figure]:
    """This rank's side of one pair test; the sender's side returns the
    figures (each with its buffers' kind and transport; device figures
    name both sides' GPUs) and, for a kind it could not test, a
    record with the reason ("skipped"). `seat`: where this rank is on its
    node, for its GPU (`gpu_for`). `nap`: ranks of several nodes share this
    host's CPUs, so the bandwidth loop's waits nap too (wire.wait_all)."""
    from mpi4py import MPI

    tag = wire.PAIR + rnd * STEP
    at = wire.deadline(timeout)
    mine = device_capability() if "device" in buffers else None
    gpu = gpu_key(seat) if mine and mine.gpu else ""
    token = comm.isend(("hello", rnd, mine, gpu), dest=peer, tag=tag)
    _, _, theirs, their_gpu = wire.recv(comm, peer, tag, at)
    wire.wait(token, at, peer=peer)
    end = End(MPI, comm, peer, tag, sends, functools.partial(wire.wait_all, at=at, peer=peer, nap=nap),
              functools.partial(wire.wait_all, at=at, peer=peer, nap=True))
    out: list[Figure] = []
    try:
        for kind in buffers:
            transport, note = _transport(end, kind, mine, theirs, seat)
            if transport is None:
                out.append(Figure("skipped", kind, reason=note))
                continue
            for test in ("bw", "latency"):  # every rail's latency too: a delay on one rail shows in no bandwidth
                fig = _measure(test, end.side(kind, transport, test, sizes), sizes)
                if fig:
                    fig.buffers, fig.transport, fig.why = kind, TRANSPORT[transport], note
                    fig.gpus = [gpu, their_gpu] if kind == "device" else []
                    out.append(fig)
    except Mismatch:
        if sends:
            raise
        return []  # both sides stop at a mismatch; the sender reports it
    return out if sends else []


@dataclass(frozen=True)
class End:
    """This rank's end of the pair: its peer, the round's tags, its role,
    and `wait`: every request polled against the pair's deadline."""

    MPI: Any
    comm: Any
    peer: int
    tag: int  # the round's first
    sends: bool
    wait: p2p.Wait
    ping_wait: p2p.Wait | None = None  # the latency test's (wire.wait_all with nap); None: `wait`

    def side(self, kind: str, transport: str, test: str, sz: Sizes) -> p2p.Side:
        """bench mpi's endpoint of this kind for one test, on the test's tags."""
        buf, n = BUFFERS[kind], sz.bw_bytes if test == "bw" else sz.lat_bytes
        wait = self.ping_wait if test == "latency" and self.ping_wait else self.wait
        ep = p2p.make_endpoint(buf, buf[0], self.MPI, self.comm, n, p2p.seed_of(self.comm.Get_rank()),
                               transport == "cuda-aware", tag=self.tag + OFFSET[(kind, test)], wait=wait)
        return p2p.Side(self.MPI, self.comm, ep, self.peer, self.sends, sync_tag=self.tag + SYNC,
                        ack_tag=self.tag + ACK)


def _transport(end: End, kind: str, mine: Awareness | None, theirs: Awareness | None, seat: Seat
               ) -> tuple[str | None, str]:
    """How this kind's buffers go to MPI for this pair ("host", "cuda-aware",
    "staged"; None: skipped), and why."""
    if kind == "host":
        return "host", ""
    mode, why = device_mode(mine, theirs)
    if mode is None:
        return None, why
    import cupy as cp

    cp.cuda.Device(gpu_for(seat).device).use()  # the GPU of this kind's endpoints
    if mode == "cuda-aware" and not _prove(end):
        mode, why = "staged", "the CUDA-aware transfer of a checked device buffer failed: staged instead"
    return mode, why


def _prove(end: End, n: int = 1 << 16) -> bool:
    """One checked device-to-device transfer each way before any device
    pointer is trusted for timing (only asked when both libraries say they
    are aware: a device pointer into a non-aware MPI can crash it); both
    sides decide alike."""
    ep = p2p.DeviceEndpoint(end.MPI, end.comm, n, p2p.seed_of(end.comm.Get_rank()), end.tag + PROOF, end.wait)
    ok = p2p.transfer_checked(ep, n, end.peer, end.peer)
    return p2p.Side(end.MPI, end.comm, ep, end.peer, end.sends, ack_tag=end.tag + ACK).agree(ok)


def _measure(test: str, s: p2p.Side, sz: Sizes) -> Figure | None:
    """sz.repeats repetitions of bench mpi's loop (p2p.LOOPS), each into a
    poisoned receive buffer and checked after it on both sides, who stop
    alike at a mismatch; the sender's record.

    Not bench's driver: its repetitions are collective over every rank
    (rank 0 reports, Ctrl-C agreed by an allreduce), where a fleet pair runs
    beside other pairs while rank 0 serves them."""
    n, iters, window = (sz.bw_bytes, sz.bw_windows, sz.window) if test == "bw" else (sz.lat_bytes, sz.lat_iters, 1)
    samples, floors, ceilings = [], [], []
    for _ in range(sz.repeats):
        s.ep.poison()
        if test == "bw":
            samples.append(p2p.to_unit(test, n, iters, window, p2p.LOOPS[test](s, n, iters, window)))
        else:  # the median round trip, not the mean: see ROUND_TRIP; the fastest: FLOOR; the slowest: CEILING
            trips = p2p.round_trips(s, n, iters)
            samples.append(statistics.median(trips) / 2 * 1e6)
            floors.append(min(trips) / 2 * 1e6)
            ceilings.append(max(trips) / 2 * 1e6)
        if not s.verified(test, n):
            raise Mismatch(f"the {WHAT[test]} test's received bytes did not match the sender's pattern")
    if not s.first:
        return None
    if test == "bw":
        return Figure("bw", unit="GB/s", value=statistics.median(samples), samples=samples, bytes=n,
                      counting=f"{window} messages of {n} B per window, acknowledged per window", verified=True)
    return Figure("latency", unit="us", higher_is_better=False, value=statistics.median(samples), samples=samples,
                  floors=floors, ceilings=ceilings, bytes=n, counting=ROUND_TRIP.format(n=n, iters=iters),
                  verified=True)


# A pair's latency is a link's: where ranks share CPUs (test nodes on one host, a busy node) a few
# round trips wait for a CPU, and their mean (osu_latency's, bench mpi's) said 1-6 ms of an 8-byte
# round trip whose network half is 12 us; the median of each repetition's round trips is the link's
# as most of them saw it, and a link delayed by 2 ms shows in every one.
ROUND_TRIP = "half the median round trip of {iters} of a {n} B ping-pong"
# FLOOR ("floors": each repetition's fastest half round trip): the link's own time as the luckiest round
# trip saw it. A delay is in every round trip, the scheduler's wait is not: on this project's shared 2-core
# VM at load 6.5 a healthy rail's median reached 1.9 ms, beside a rail 2 ms late at 2.6-3.4 ms, so the
# rails are judged against each other by their floors (fleet/driver.py, pairs.against_siblings).
# CEILING ("ceilings": each repetition's slowest half round trip): what a lost packet costs. Over TCP a
# ping-pong's lost message is resent only after the retransmit timeout (Linux: 200 ms at least; one message
# in flight sends no duplicate acks for a fast retransmit), so a rail losing 1% waits that long in 2-5 of a
# repetition's 200 round trips: medians and floors do not move (network_faults_20261202_loss_siblings.md),
# the slowest round trip does (209-456 ms against its sibling's 8.6-19.8 ms, 8 repetitions of 8).


WHAT = {"bw": "bandwidth", "latency": "latency"}


class Mismatch(ValueError):
    """A repetition delivered wrong bytes (both sides know: Side.verified)."""
