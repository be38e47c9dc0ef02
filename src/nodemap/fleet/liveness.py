"""Whether the fleet's ranks are alive, known within a bounded time: heartbeats.

Every BEAT_S seconds rank 0 sends every rank a heartbeat and every rank
sends rank 0 one. A peer unheard for GONE_S seconds is gone: dead (killed,
crashed, its node down) or its MPI stuck. Rank 0's heartbeats carry the
ranks it found gone, so that a rank waiting on one of them (its pair test's
partner, its node's leader) stops at once (`wire.gone`, `wire.Gone`), not
at the wait's deadline (a node check's is 30 minutes).

Two threads, because MPI itself can stop answering: the beat thread sends
and receives (mpi4py starts MPI with MPI_THREAD_MULTIPLE); the watch
thread reads only clocks, so it acts even when a call into MPI never
returns (2-vCPU VM, 2026-12-02, srun with the mpich wheel's OFI tcp
netmod: an isend to a rank just SIGKILLed blocked every MPI call of the
sender for good).

What a rank does when a peer is gone is the driver's (`on_gone`). `abandon`
ends this rank's work: every wait of the fleet's ends (wire.abandon) and
bench/interrupt.py's stop flag stops the kernels, so that a node check ends
keeping what it measured; proc.end_by is the bound when the main thread
cannot (blocked inside MPI). `stop` ends both threads before
MPI_Finalize, and takes every heartbeat sent to this rank: each side's
last one says "bye", and MPI_Finalize fails on a message left unreceived
("Communicator ... being freed has 1 unmatched message(s)"), after which
Hydra took the rank's exit for a crash and killed the job (SIGKILL).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from . import wire

BEAT_S = 2.0  # between heartbeats
GONE_S = 20.0  # unheard this long: gone (10 missed heartbeats; a loaded 2-core VM delayed none past 3 s)
WATCH_S = 0.5  # how often the watch thread reads the clocks
WRAP_UP_S = 15.0  # what an abandoned rank gets to keep what it measured and end, before proc.end_by ends it
BYE_S = 10.0  # `stop`: every peer's last heartbeat within this
BEAT, BYE = "beat", "bye"


class Pulse:
    """This rank's heartbeats with `peers` (rank 0: every other rank; the others: rank 0)."""

    def __init__(self, comm: Any, peers: Iterable[int], on_gone: Callable[[set[int]], None],
                 gone_after: float = GONE_S) -> None:
        self.comm, self.rank = comm, comm.Get_rank()
        self.peers = [p for p in peers if p != self.rank]
        self.on_gone, self.gone_after = on_gone, gone_after
        self.heard = dict.fromkeys(self.peers, time.monotonic())  # peer -> when its last heartbeat came
        self.sent: dict[int, Any] = {}  # peer -> the heartbeat in flight to it
        self.byes: set[int] = set()  # peers whose last heartbeat came
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._beat, name="nodemap-beat", daemon=True),
                         threading.Thread(target=self._watch, name="nodemap-watch", daemon=True)]

    def start(self) -> Pulse:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> bool:
        """End the heartbeats before MPI_Finalize: both threads, then "bye"
        to every peer not gone and each one's "bye" taken (all it sent
        before comes first: MPI keeps one sender's order). False when that
        took over BYE_S (a peer gone or not ending, MPI stuck): the caller
        must not finalize MPI then (os._exit)."""
        self._stop.set()
        for t in self._threads:
            t.join(BEAT_S + 1)
        if self._threads[0].is_alive():
            return False
        last = [self.comm.isend((BYE, []), dest=p, tag=wire.BEAT) for p in self.peers if p not in wire.gone]
        at = wire.deadline(BYE_S)
        while wire.left(at) > 0:
            self._take()
            if set(self.peers) - wire.gone <= self.byes and all(r.Test() for r in last):
                return True
            time.sleep(wire.POLL_S)
        for req in last + list(self.sent.values()):  # not received: MPI may still hold their buffers
            wire.keep(req)
        return False

    def _beat(self) -> None:
        while not self._stop.is_set():
            self._send()
            self._take()
            self._stop.wait(BEAT_S)

    def _send(self) -> None:
        news = (BEAT, sorted(wire.gone) if self.rank == 0 else [])  # rank 0's: the ranks it found gone
        for p in self.peers:
            before = self.sent.get(p)
            if p in wire.gone or (before is not None and not before.Test()):
                continue  # one heartbeat in flight per peer, none to a rank gone
            self.sent[p] = self.comm.isend(news, dest=p, tag=wire.BEAT)

    def _take(self) -> None:
        """Every heartbeat that has come (the beat thread's; `stop`'s once it has ended)."""
        from mpi4py import MPI

        status = MPI.Status()
        while True:
            msg = self.comm.improbe(source=MPI.ANY_SOURCE, tag=wire.BEAT, status=status)
            if msg is None:
                return
            (kind, news), src = msg.recv(), status.Get_source()
            self.heard[src] = time.monotonic()
            if kind == BYE:
                self.byes.add(src)
            if src == 0 and news:
                wire.gone.update(set(news) - {self.rank})

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_S):
            now = time.monotonic()
            newly = {p for p in self.peers if p not in wire.gone and now - self.heard[p] > self.gone_after}
            if newly:
                wire.gone.update(newly)
                self.on_gone(newly)


# --- ending this rank's work ------------------------------------------------------

_state = {"keeping": False}


def abandon(why: str, line: str) -> None:
    """End this rank's work (from the watch thread): every wait of the
    fleet's ends at once (wire.abandon), the kernels stop after their
    repetition (bench/interrupt.py), so that a node check ends by its own
    path keeping what it measured; and proc.end_by prints `line` and ends
    the process if it has not ended WRAP_UP_S from now (blocked in MPI).
    No exception is thrown into the main thread: one raised in a check's
    last step (its MPI checks ran a subprocess) lost the whole document."""
    from .. import proc
    from ..bench import interrupt

    wire.abandon()
    interrupt.request(why)
    proc.end_by(WRAP_UP_S, line)


@contextmanager
def keeping() -> Iterator[None]:
    """The main thread holds measurements not yet on disk (a node check):
    `abandon` lets it end them rather than ending the process at once."""
    _state["keeping"] = True
    try:
        yield
    finally:
        _state["keeping"] = False


def keeping_now() -> bool:
    return bool(_state["keeping"])
