"""MPI point-to-point measurement as OSU defines it, for `nodemap bench mpi`
(mpi_p2p.py) and the fleet's pair test (fleet/pairtest.py) alike:

- buffers per kind (`make_endpoint`): host memory; GPU memory handed
  straight to a CUDA-aware MPI; GPU memory staged through pinned host
  memory in pipelined chunks (what an application without CUDA-aware MPI
  pays);
- the pattern a rank sends (seeded by its rank), the poison its receive
  buffer gets before a repetition, the byte-by-byte check after it, on
  both ranks of the pair (`Side.verified`);
- the loops, one repetition each: latency ping-pong, bw windows
  acknowledged per window, bibw;
- `transfer_checked`: one verified transfer of device buffers, before
  any timing trusts a device pointer to MPI.

How a rank waits is the caller's (`wait`, a function of a list of
requests). `bench mpi` blocks in MPI_Waitall under one deadline per phase
(mpi_common.deadline: a poll per call would cost each ping-pong
microseconds); the fleet polls every request against its own deadline
(wire.wait_all raises wire.Late: its partner is another node that may
die, and the rank must go on serving rank 0). Tags are the caller's too:
the fleet numbers each round's messages apart.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Callable

POISON = 0xFF  # never produced by pattern() (values 0..250)
ACK_TAG, SYNC_TAG, DATA_TAG = 99, 98, 1
CHUNK = 1 << 20  # the staging chunk: bench mpi's --chunk default

Wait = Callable[[list], None]


def pattern(n: int, seed: int) -> bytes:
    """Byte i is (131 i + 31 seed) mod 251: period 251, so one period is
    computed and tiled (64 MiB in milliseconds, not seconds). Plain bytes:
    host buffers need no numpy, which `[mpi]` does not install."""
    period = bytes((131 * i + 31 * seed) % 251 for i in range(251))
    return (period * (n // 251 + 1))[:n]


def seed_of(rank: int) -> int:
    """The pattern seed of what `rank` sends (its receiver checks against it)."""
    return rank + 1


class Endpoint:
    """A rank's send and receive buffers of one kind; sends and receives."""

    label = "host"
    chunk = 0  # > 0: messages go in pieces of this many bytes (to match a staged peer)

    def __init__(self, MPI: Any, comm: Any, nbytes: int, seed: int, tag: int = DATA_TAG,
                 wait: Wait | None = None) -> None:
        self._init(MPI, comm, tag, wait)
        # memoryviews, so the chunks of _views are views, not copies
        self.sbuf: Any = memoryview(bytearray(pattern(nbytes, seed)))
        self.rbuf: Any = memoryview(bytearray(nbytes))

    def _init(self, MPI: Any, comm: Any, tag: int, wait: Wait | None) -> None:
        self.MPI, self.comm, self.tag = MPI, comm, tag
        self._cut: dict[int, tuple[list, list]] = {}
        if wait is None and MPI is not None:
            wait = MPI.Request.Waitall  # itself, not wrapped: a latency loop calls it twice per round trip
        self.wait: Any = wait

    def _chunks(self, n: int) -> list[tuple[int, int]]:
        c = max(1, min(self.chunk, n)) if self.chunk else n
        return [(o, min(c, n - o)) for o in range(0, n, c)] if n else [(0, 0)]

    def poison(self) -> None:
        if self.rbuf.nbytes:
            ctypes.memset((ctypes.c_char * self.rbuf.nbytes).from_buffer(self.rbuf), POISON, self.rbuf.nbytes)

    def check(self, n: int, seed: int) -> bool:
        return self._received(n) == pattern(n, seed)

    def _received(self, n: int) -> bytes:
        return self.rbuf[:n].tobytes()

    def _views(self, n: int) -> tuple[list, list]:
        """The send and receive buffers of an n-byte message as MPI takes
        them, one per chunk; cut once per size (cutting them per message cost
        a ping-pong about a microsecond a round trip in Python)."""
        if n not in self._cut:
            cut = self._chunks(n)
            self._cut[n] = ([[self.sbuf[o:o + c], self.MPI.BYTE] for o, c in cut],
                            [[self.rbuf[o:o + c], self.MPI.BYTE] for o, c in cut])
        return self._cut[n]

    def isend(self, n: int, dest: int) -> list[Any]:
        return [self.comm.Isend(b, dest=dest, tag=self.tag) for b in self._views(n)[0]]

    def irecv(self, n: int, src: int) -> list[Any]:
        return [self.comm.Irecv(b, source=src, tag=self.tag) for b in self._views(n)[1]]

    def done(self, reqs: list[Any]) -> None:
        self.wait(reqs)

    def finish(self) -> None:
        """Every message this endpoint started is complete (staged: copied to the GPU)."""

    def close(self) -> None:
        pass


class DeviceEndpoint(Endpoint):
    """GPU buffers (the current device's) handed straight to a CUDA-aware MPI."""

    label = "cuda-aware"

    def __init__(self, MPI: Any, comm: Any, nbytes: int, seed: int, tag: int = DATA_TAG,
                 wait: Wait | None = None) -> None:
        import cupy as cp
        import numpy as np  # CuPy's own dependency

        self._init(MPI, comm, tag, wait)
        self.cp = cp
        self.sbuf = cp.asarray(np.frombuffer(pattern(nbytes, seed), dtype=np.uint8))
        self.rbuf = cp.empty(nbytes, dtype=cp.uint8)
        cp.cuda.Device().synchronize()

    def poison(self) -> None:
        self.rbuf.fill(POISON)
        self.cp.cuda.Device().synchronize()

    def _received(self, n: int) -> bytes:
        return self.cp.asnumpy(self.rbuf[:n]).tobytes()


class StagedEndpoint(DeviceEndpoint):
    """GPU buffers through pinned host memory, in pipelined chunks.

    One staging buffer per direction, so the messages of a window go one
    after another (a message's requests finish before the next reuses it);
    inside a message, chunk i is sent while the D2H of chunk i+1 runs.
    """

    label = "staged"

    def __init__(self, MPI: Any, comm: Any, nbytes: int, seed: int, chunk: int, tag: int = DATA_TAG,
                 wait: Wait | None = None) -> None:
        super().__init__(MPI, comm, nbytes, seed, tag, wait)
        import numpy as np

        cp = self.cp
        self.chunk = chunk
        self._mem = [cp.cuda.alloc_pinned_memory(nbytes) for _ in range(2)]
        self.hs, self.hr = (np.frombuffer(m, dtype=np.uint8, count=nbytes) for m in self._mem)
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.pending_send: list[Any] = []
        self.pending_recv: tuple[int, list[Any]] | None = None

    def poison(self) -> None:
        super().poison()
        self.hr[:] = POISON  # a stale staging copy must not pass for a transfer

    def isend(self, n: int, dest: int) -> list[Any]:
        cp = self.cp
        self.wait(self.pending_send)  # the staging buffer is free again
        events = []
        for o, c in self._chunks(n):
            cp.cuda.runtime.memcpyAsync(self.hs.ctypes.data + o, self.sbuf.data.ptr + o, c,
                                        cp.cuda.runtime.memcpyDeviceToHost, self.stream.ptr)
            ev = cp.cuda.Event(disable_timing=True)
            ev.record(self.stream)
            events.append(ev)
        reqs = []
        for (o, c), ev in zip(self._chunks(n), events):
            ev.synchronize()
            reqs.append(self.comm.Isend([self.hs[o:o + c], self.MPI.BYTE], dest=dest, tag=self.tag))
        self.pending_send = reqs
        return reqs

    def irecv(self, n: int, src: int) -> list[Any]:
        self._finish_recv()
        reqs = [self.comm.Irecv([self.hr[o:o + c], self.MPI.BYTE], source=src, tag=self.tag)
                for o, c in self._chunks(n)]
        self.pending_recv = (n, reqs)
        return reqs

    def _finish_recv(self) -> None:
        if self.pending_recv is None:
            return
        cp = self.cp
        n, reqs = self.pending_recv
        for (o, c), r in zip(self._chunks(n), reqs):
            self.wait([r])  # H2D of chunk i runs while chunk i+1 arrives
            cp.cuda.runtime.memcpyAsync(self.rbuf.data.ptr + o, self.hr.ctypes.data + o, c,
                                        cp.cuda.runtime.memcpyHostToDevice, self.stream.ptr)
        self.stream.synchronize()
        self.pending_recv = None

    def done(self, reqs: list[Any]) -> None:
        self.wait(reqs)
        if self.pending_recv is not None and self.pending_recv[1] is reqs:
            self._finish_recv()

    def finish(self) -> None:
        self.wait(self.pending_send)
        self.pending_send = []
        self._finish_recv()


def make_endpoint(buf: str, mine: str, MPI: Any, comm: Any, nbytes: int, seed: int, aware: bool,
                  chunk: int = CHUNK, tag: int = DATA_TAG, wait: Wait | None = None) -> Endpoint:
    """`buf` is the pair's kinds (HH, HD, DH, DD), `mine` this rank's (H or
    D): D is handed to MPI where `aware`, else staged. When either end is
    staged, both cut messages into the same chunks, so every send meets a
    receive of its size."""
    staged = "D" in buf and not aware
    if mine == "H":
        ep = Endpoint(MPI, comm, nbytes, seed, tag, wait)
    elif aware:
        ep = DeviceEndpoint(MPI, comm, nbytes, seed, tag, wait)
    else:
        return StagedEndpoint(MPI, comm, nbytes, seed, chunk, tag, wait)
    ep.chunk = chunk if staged else 0
    return ep


def transfer_checked(ep: Endpoint, n: int, dest: int, source: int) -> bool:
    """One transfer, checked: this rank's pattern to `dest` while `source`'s
    arrives into the poisoned receive buffer; whether it arrived intact."""
    ep.poison()
    ep.done(ep.irecv(n, source) + ep.isend(n, dest))
    ep.finish()
    return ep.check(n, seed_of(source))


# --- the loops --------------------------------------------------------------------


@dataclass
class Side:
    """One rank's view of a pair test (its endpoint's `wait` for every request)."""

    MPI: Any
    comm: Any
    ep: Endpoint
    peer: int
    first: bool  # the sender / ping side
    sync_tag: int = SYNC_TAG
    ack_tag: int = ACK_TAG

    def _both(self, tag: int, nbytes: int) -> None:
        got = [self.comm.Irecv([bytearray(nbytes), self.MPI.BYTE], source=self.peer, tag=tag)]
        self.ep.wait(got + [self.comm.Isend([bytearray(nbytes), self.MPI.BYTE], dest=self.peer, tag=tag)])

    def sync(self) -> None:
        self._both(self.sync_tag, 0)

    def send(self, n: int) -> None:
        self.ep.done(self.ep.isend(n, self.peer))

    def recv(self, n: int) -> None:
        self.ep.done(self.ep.irecv(n, self.peer))

    def ack(self, receive: bool) -> None:
        if receive:
            self.ep.wait([self.comm.Irecv([bytearray(4), self.MPI.BYTE], source=self.peer, tag=self.ack_tag)])
        else:
            self.ep.wait([self.comm.Isend([bytearray(4), self.MPI.BYTE], dest=self.peer, tag=self.ack_tag)])

    def check(self, n: int) -> bool:
        """What the peer sent arrived intact (after a repetition)."""
        return self.ep.check(n, seed_of(self.peer))

    def agree(self, ok: bool) -> bool:
        """Both ranks' word, known to both (so both go on or stop alike)."""
        theirs = bytearray(1)
        self.ep.wait([self.comm.Irecv([theirs, self.MPI.BYTE], source=self.peer, tag=self.ack_tag),
                      self.comm.Isend([bytearray([ok]), self.MPI.BYTE], dest=self.peer, tag=self.ack_tag)])
        return ok and bool(theirs[0])

    def verified(self, test: str, n: int) -> bool:
        """After a repetition of `test`: whatever either rank received (bw's
        sender receives none) is its peer's pattern; known to both."""
        return self.agree(self.check(n) if test != "bw" or not self.first else True)

    def finish(self) -> None:
        self.ep.finish()


def _round_trip(s: Side, n: int) -> None:
    if s.first:
        s.send(n)
        s.recv(n)
    else:
        s.recv(n)
        s.send(n)


def latency_loop(s: Side, n: int, iters: int, window: int) -> float:
    s.sync()
    t0 = s.MPI.Wtime()
    for _ in range(iters):
        _round_trip(s, n)
    return s.MPI.Wtime() - t0


def round_trips(s: Side, n: int, iters: int) -> list[float]:
    """latency_loop's ping-pong, each round trip timed on its own (seconds): where ranks share
    CPUs, a few round trips wait for one and the mean says more of the scheduler than of the link."""
    s.sync()
    out = []
    clock = s.MPI.Wtime
    for _ in range(iters):
        t0 = clock()
        _round_trip(s, n)
        out.append(clock() - t0)
    return out


def bw_loop(s: Side, n: int, iters: int, window: int) -> float:
    s.sync()
    t0 = s.MPI.Wtime()
    post = s.ep.isend if s.first else s.ep.irecv  # the first rank sends the window, its peer acknowledges it
    for _ in range(iters):
        s.ep.done([r for _ in range(window) for r in post(n, s.peer)])
        s.finish()
        s.ack(receive=s.first)
    return s.MPI.Wtime() - t0


def bibw_loop(s: Side, n: int, iters: int, window: int) -> float:
    s.sync()
    t0 = s.MPI.Wtime()
    staged = isinstance(s.ep, StagedEndpoint)
    for _ in range(iters):
        if staged:  # one staging buffer per direction: messages in turn, both ways at once
            for _ in range(window):
                reqs = s.ep.irecv(n, s.peer)
                s.ep.done(s.ep.isend(n, s.peer))
                s.ep.done(reqs)
        else:
            reqs = [r for _ in range(window) for r in s.ep.irecv(n, s.peer)]
            reqs += [r for _ in range(window) for r in s.ep.isend(n, s.peer)]
            s.ep.done(reqs)
        s.finish()
    return s.MPI.Wtime() - t0


LOOPS: dict[str, Callable[[Side, int, int, int], float]] = {"latency": latency_loop, "bw": bw_loop,
                                                           "bibw": bibw_loop}


def to_unit(test: str, n: int, iters: int, window: int, seconds: float) -> float:
    """A repetition's seconds as the test's figure: us (half a round trip) or GB/s."""
    if test == "latency":
        return seconds / (2 * iters) * 1e6
    moved = n * window * iters * (2 if test == "bibw" else 1)
    return moved / seconds / 1e9
