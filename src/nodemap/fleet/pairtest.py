"""One node pair's MPI test over the fabric, under deadlines.

Between two ranks on different nodes (the nodes' leaders, or the k-th
local ranks of both for rail k): a handshake, then bandwidth (the lower
rank sends windows of non-blocking messages, acknowledged per window, as
OSU's osu_bw) and latency (ping-pong, half the round trip, as osu_latency).
Host buffers. The receive buffer is poisoned before every repetition and
compared with the sender's pattern after it; a mismatch is an error, not a
number. Every wait polls against a deadline (`wire.Late` past it), so a
partner that dies costs the timeout."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from .. import units
from . import wire

POISON = 0xFF  # never in pattern(): values 0..250


@dataclass(frozen=True)
class Sizes:
    bw_bytes: int = 4 << 20  # per message
    window: int = 16
    bw_windows: int = 8  # windows per repetition
    lat_iters: int = 200
    repeats: int = 5


def pattern(n: int, seed: int) -> bytes:
    base = bytes((i + seed) % 251 for i in range(251))
    return (base * (n // 251 + 1))[:n]


def run(comm: Any, peer: int, rnd: int, sends: bool, tests: tuple[str, ...], sizes: Sizes,
        timeout: float) -> list[dict[str, Any]]:
    """This rank's side of one pair test; the sender's side returns the figures."""
    from mpi4py import MPI

    tag = wire.PAIR + rnd * 8
    at = wire.deadline(timeout)
    token = comm.isend(("hello", rnd), dest=peer, tag=tag)
    wire.recv(comm, peer, tag, at)
    wire.wait(token, at)
    out = []
    if "bw" in tests:
        bw = _bw(MPI, comm, peer, tag + 1, sends, sizes, at)
        if bw:
            out.append(bw)
    if "latency" in tests:
        lat = _latency(MPI, comm, peer, tag + 2, sends, sizes, at)
        if lat:
            out.append(lat)
    return out


def _bw(MPI: Any, comm: Any, peer: int, tag: int, sends: bool, sz: Sizes, at: float) -> dict[str, Any] | None:
    n, w = sz.bw_bytes, sz.window
    ack = bytearray(1)
    if sends:
        buf = memoryview(bytearray(pattern(n * w, tag)))
    else:
        buf = memoryview(bytearray(n * w))
        want = pattern(n * w, tag)
    secs, ok = [], True
    for _ in range(sz.repeats):
        if not sends:
            buf[:] = bytes([POISON]) * len(buf)
        t0 = time.perf_counter()
        for _ in range(sz.bw_windows):
            if sends:
                reqs = [comm.Isend([buf[i * n:(i + 1) * n], MPI.BYTE], dest=peer, tag=tag) for i in range(w)]
                reqs.append(comm.Irecv([ack, MPI.BYTE], source=peer, tag=tag))
            else:
                reqs = [comm.Irecv([buf[i * n:(i + 1) * n], MPI.BYTE], source=peer, tag=tag) for i in range(w)]
            wire.wait_all(reqs, at)
            if not sends:
                wire.wait_all([comm.Isend([ack, MPI.BYTE], dest=peer, tag=tag)], at)
        secs.append(time.perf_counter() - t0)
        if not sends:
            ok = ok and buf.tobytes() == want
    verified = _agree(comm, peer, tag, sends, ok, at)
    if not sends:
        return None
    if not verified:
        raise ValueError("the bandwidth test's receive buffer did not match the sender's pattern")
    gbps = units.gbps(n * w * sz.bw_windows, secs)
    return {"test": "bw", "unit": "GB/s", "higher_is_better": True, "value": statistics.median(gbps),
            "samples": gbps, "bytes": n, "counting": f"{w} messages of {n} B per window, acknowledged per window",
            "verified": True}


def _latency(MPI: Any, comm: Any, peer: int, tag: int, sends: bool, sz: Sizes, at: float) -> dict[str, Any] | None:
    msg = bytearray(8)
    halves, ok = [], True
    for _ in range(sz.repeats):
        t0 = time.perf_counter()
        for i in range(sz.lat_iters):
            if sends:
                msg[0] = i % 251
                wire.wait_all([comm.Isend([msg, MPI.BYTE], dest=peer, tag=tag)], at)
                msg[0] = POISON
                wire.wait_all([comm.Irecv([msg, MPI.BYTE], source=peer, tag=tag)], at)
                ok = ok and msg[0] == i % 251
            else:
                msg[0] = POISON
                wire.wait_all([comm.Irecv([msg, MPI.BYTE], source=peer, tag=tag)], at)
                ok = ok and msg[0] == i % 251
                wire.wait_all([comm.Isend([msg, MPI.BYTE], dest=peer, tag=tag)], at)
        halves.append((time.perf_counter() - t0) / sz.lat_iters / 2 * 1e6)
    verified = _agree(comm, peer, tag, sends, ok, at)
    if not sends:
        return None
    if not verified:
        raise ValueError("the latency test's echoed bytes did not match")
    return {"test": "latency", "unit": "us", "higher_is_better": False, "value": statistics.median(halves),
            "samples": halves, "bytes": 8, "counting": "half the round trip of an 8 B ping-pong", "verified": True}


def _agree(comm: Any, peer: int, tag: int, sends: bool, ok: bool, at: float) -> bool:
    """Both sides' checks, known to the sender."""
    if sends:
        return bool(ok and wire.recv(comm, peer, tag + 4, at))
    wire.send(comm, ok, peer, tag + 4, at)
    return ok
