"""MPI messages that cannot hang: every send and receive is non-blocking and
polled against a deadline, so a rank that never answers costs its timeout,
never the run. Objects travel pickled (mpi4py's lower-case calls); matched
probes (improbe) take messages of any size without a size handshake.
A wait on a rank known to be gone (`gone`: fleet/liveness.py's heartbeats)
ends at once (`Gone`), not at its deadline."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

# Message tags of the fleet protocol (one number each, below the pair tests').
HELLO, ROLE, STATE, DOC, CMD, REPORT = 11, 12, 13, 14, 15, 16
LOCAL = 17  # a leader to its node's second rank: "go" (the node's MPI step) or "skip" (localpair)
BEAT = 18  # heartbeats (liveness)
PAIR = 1000  # pair tests use PAIR + round * pairtest.STEP + step

POLL_S = 0.002  # sleep between polls when waiting for control messages

# Requests that missed their deadline, kept until the process ends: MPI may
# still read or write their buffers (a peer that answers late), and each
# mpi4py request holds its buffer. Not cancelled: cancelling a send kills the
# rank in the mpich wheel's UCX device (SIGSEGV in libucp, seen when a pair
# test timed out under load), and MPI 4.0 deprecates it. Rank 0 ends the
# job with MPI_Abort when a peer was late.
_abandoned: list[Any] = []

# Ranks that stopped sending heartbeats (liveness.Pulse adds them, from its
# own thread; rank 0's heartbeats tell the others): never removed.
gone: set[int] = set()
_ended = {"yes": False}  # this rank's work is over (liveness.abandon): every wait ends at once


def abandon() -> None:
    """Every wait from now on ends at once (Gone)."""
    _ended["yes"] = True


class Late(Exception):
    """A peer did not answer before the deadline."""


class Gone(Late):
    """The peer is gone: no heartbeat from it within liveness's deadline
    (dead, or its MPI stuck); said at once, not at the wait's deadline."""


def deadline(seconds: float) -> float:
    return time.monotonic() + seconds


def left(at: float) -> float:
    return at - time.monotonic()


def _check(at: float, peer: int | None, reqs: list[Any]) -> None:
    """End a wait on `peer` (None: any rank): Gone once the peer is (or this
    rank's work is over), Late past `at`; its requests are kept (MPI may
    still use their buffers)."""
    over = _ended["yes"] or peer in gone
    if over or time.monotonic() > at:
        _abandoned.extend(reqs)
        raise Gone() if over else Late()


def wait(req: Any, at: float, spin: bool = False, peer: int | None = None) -> Any:
    """Complete one request with `peer` before `at` (monotonic); Late
    otherwise (Gone once the peer is). `spin`: poll without sleeping (timed ping-pongs)."""
    while True:
        done, value = req.test()
        if done:
            return value
        _check(at, peer, [req])
        if not spin:
            time.sleep(POLL_S)


SPIN_POLLS = 200  # polls (some 50-100 us) a ping-pong's wait spins before it naps between polls
NAP_S = 50e-6


def wait_all(reqs: list[Any], at: float, spin: bool = True, peer: int | None = None,
             nap: bool = False) -> None:
    """Complete the requests before `at`; Late otherwise (Gone once `peer` is). `spin` (timed loops): poll without
    sleeping. `nap` (a ping-pong's small messages): past SPIN_POLLS polls, sleep NAP_S between
    them, so that where ranks outnumber CPUs (several test nodes on one host) the partner gets the
    CPU at once: a spinning rank held it a whole time slice, and a round trip whose network half
    takes 12 us measured 4-6 ms. A message of a fabric's microseconds arrives within the spin and
    never waits on a nap; bandwidth loops, whose progress needs every poll, do not nap."""
    from mpi4py import MPI

    polls = 0
    while not MPI.Request.Testall(reqs):
        _check(at, peer, reqs)
        if not spin:
            time.sleep(POLL_S)
        elif nap and polls >= SPIN_POLLS:
            time.sleep(NAP_S)
        else:
            polls += 1


def send(comm: Any, obj: Any, dest: int, tag: int, at: float) -> None:
    wait(comm.isend(obj, dest=dest, tag=tag), at, peer=dest)


def post(comm: Any, obj: Any, dest: int, tag: int) -> Any:
    """Send without waiting; the caller keeps the request and tests it later."""
    return comm.isend(obj, dest=dest, tag=tag)


def keep(req: Any) -> None:
    """Hold a request nobody waits on until the process ends (MPI may still use its buffer)."""
    _abandoned.append(req)


def recv(comm: Any, source: int, tag: int, at: float) -> Any:
    """One object from `source` with `tag` before `at`; Late otherwise."""
    while True:
        msg = comm.improbe(source=source, tag=tag)
        if msg is not None:
            return msg.recv()
        _check(at, source, [])
        time.sleep(POLL_S)


def arriving(comm: Any, tags: tuple[int, ...], at: float, more: Callable[[], bool]) -> Iterator[tuple[int, Any]]:
    """(source, object) of each message with one of `tags` as it comes,
    while `more()` (asked again after each) and until `at`."""
    while more() and left(at) > 0:
        got = poll(comm, tags)
        if got is None:
            time.sleep(POLL_S)
        else:
            yield got[0], got[2]


def poll(comm: Any, tags: tuple[int, ...]) -> tuple[int, int, Any] | None:
    """(source, tag, object) of one waiting message with one of `tags`, or None."""
    from mpi4py import MPI

    status = MPI.Status()
    for tag in tags:
        msg = comm.improbe(source=MPI.ANY_SOURCE, tag=tag, status=status)
        if msg is not None:
            return status.Get_source(), tag, msg.recv()
    return None
