"""One node pair's MPI test over the fabric, under deadlines.

Between two ranks on different nodes (the nodes' leaders, or the k-th
local ranks of both for rail k): a handshake, then bandwidth (the lower
rank sends windows of non-blocking messages, acknowledged per window, as
OSU's osu_bw) and latency (ping-pong, half the round trip, as osu_latency),
over each buffer kind asked for:
  host    host memory;
  device  GPU memory (CuPy; GPU = the rank's local index modulo the GPUs it
          sees). Straight to MPI only where both sides' library says it is
          CUDA-aware (`mpi_common.query_cuda_support`, as `nodemap bench
          mpi`) and a verified device transfer between the two proved it;
          otherwise staged through pinned host memory (each window copied
          to the host before it is sent and to the GPU after it arrives, in
          the timing: what an application without CUDA-aware MPI pays). The
          record says which ("transport"). Without a GPU on either side the
          device tests are skipped, with the reason.
The receive buffer is poisoned before every repetition and compared with
the sender's pattern after it; a mismatch is an error, not a number. Every
wait polls against a deadline (`wire.Late` past it), so a partner that
dies costs the timeout."""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from .. import units
from . import wire

POISON = 0xFF  # never in pattern(): values 0..250
KINDS = ("host", "device")
STEP = 16  # tags per round: hello 0, tests 1..7, their agreements +8
OFFSET = {("host", "bw"): 1, ("host", "latency"): 2, ("device", "bw"): 3, ("device", "latency"): 4}
PROOF, AGREE = 5, 8


@dataclass(frozen=True)
class Sizes:
    bw_bytes: int = 4 << 20  # per message
    window: int = 16
    bw_windows: int = 8  # windows per repetition
    lat_iters: int = 200
    repeats: int = 5
    lat_bytes: int = 8  # the ping-pong's message


def pattern(n: int, seed: int) -> bytes:
    base = bytes((i + seed) % 251 for i in range(251))
    return (base * (n // 251 + 1))[:n]


# --- buffers ----------------------------------------------------------------------


class HostBuf:
    """A buffer MPI sends from and receives into; `to_wire`/`from_wire`
    are what a kind does around each message (nothing, for host memory)."""

    transport = "host"

    def __init__(self, n: int, gpu: int = 0) -> None:
        self.mem = memoryview(bytearray(n))

    def view(self, lo: int, hi: int) -> Any:
        return self.mem[lo:hi]

    def load(self, data: bytes) -> None:
        self.mem[:] = data

    def poison(self) -> None:
        self.mem[:] = bytes([POISON]) * len(self.mem)

    def to_wire(self, lo: int, hi: int) -> None:
        pass

    def from_wire(self, lo: int, hi: int) -> None:
        pass

    def read(self) -> bytes:
        return self.mem.tobytes()


class DeviceBuf(HostBuf):
    """GPU memory handed to a CUDA-aware MPI."""

    transport = "cuda-aware"

    def __init__(self, n: int, gpu: int = 0) -> None:
        import cupy as cp
        import numpy as np

        self.cp, self.np, self.n = cp, np, n
        cp.cuda.Device(gpu).use()
        self.dev = cp.empty(n, dtype=cp.uint8)

    def _copy(self, dst: int, src: int, n: int, kind: int) -> None:
        rt = self.cp.cuda.runtime
        rt.memcpyAsync(dst, src, n, kind, 0)
        self.cp.cuda.Device().synchronize()

    def view(self, lo: int, hi: int) -> Any:
        return self.dev[lo:hi]

    def load(self, data: bytes) -> None:
        host = self.np.frombuffer(data, dtype=self.np.uint8)
        self._copy(self.dev.data.ptr, host.ctypes.data, self.n, self.cp.cuda.runtime.memcpyHostToDevice)

    def poison(self) -> None:
        self.cp.cuda.runtime.memsetAsync(self.dev.data.ptr, POISON, self.n, 0)
        self.cp.cuda.Device().synchronize()

    def to_wire(self, lo: int, hi: int) -> None:
        self.cp.cuda.Device().synchronize()  # the GPU's writes land before MPI reads

    def read(self) -> bytes:
        host = self.np.empty(self.n, dtype=self.np.uint8)
        self._copy(host.ctypes.data, self.dev.data.ptr, self.n, self.cp.cuda.runtime.memcpyDeviceToHost)
        return host.tobytes()


class StagedBuf(DeviceBuf):
    """GPU memory through pinned host memory: MPI sees only the host copy."""

    transport = "staged (pinned host)"

    def __init__(self, n: int, gpu: int = 0) -> None:
        super().__init__(n, gpu)
        self._pinned = self.cp.cuda.alloc_pinned_memory(n)
        self.host = self.np.frombuffer(self._pinned, dtype=self.np.uint8, count=n)

    def view(self, lo: int, hi: int) -> Any:
        return self.host[lo:hi]

    def poison(self) -> None:
        super().poison()
        self.host[:] = POISON  # a stale staging copy must not pass for a transfer

    def to_wire(self, lo: int, hi: int) -> None:
        self._copy(self.host.ctypes.data + lo, self.dev.data.ptr + lo, hi - lo,
                   self.cp.cuda.runtime.memcpyDeviceToHost)

    def from_wire(self, lo: int, hi: int) -> None:
        self._copy(self.dev.data.ptr + lo, self.host.ctypes.data + lo, hi - lo,
                   self.cp.cuda.runtime.memcpyHostToDevice)


MakeBuf = Callable[..., HostBuf]  # a buffer class, or one bound to its GPU (functools.partial)


@functools.lru_cache(maxsize=None)
def device_capability() -> dict[str, Any]:
    """This rank's side of the device decision (asked once per process)."""
    from ..bench.comm import mpi_common

    if not mpi_common.gpu_visible():
        return {"gpu": False, "aware": False, "how": "no GPU visible to CuPy"}
    aware, how = mpi_common.query_cuda_support()
    return {"gpu": True, "aware": bool(aware), "how": how}


def device_mode(mine: dict[str, Any] | None, theirs: dict[str, Any] | None) -> tuple[str | None, str]:
    """("cuda-aware" | "staged" | None to skip, why); the same on both sides
    (it reads both capabilities, which both sides have after the handshake)."""
    from ..bench.comm.mpi_common import NOT_AWARE

    if not (mine and mine.get("gpu") and theirs and theirs.get("gpu")):
        return None, "device buffers skipped: no GPU visible on " + ("both sides" if not (mine or {}).get("gpu") and
                                                                      not (theirs or {}).get("gpu") else "one side")
    if mine.get("aware") and theirs.get("aware"):
        return "cuda-aware", f"both sides' MPI says it is CUDA-aware ({mine['how']})"
    return "staged", f"{NOT_AWARE} ({mine['how'] if not mine.get('aware') else theirs['how']})"


def gpu_for(local: int) -> int:
    """The GPU of a rank's k-th local slot among those it sees."""
    import cupy as cp

    return local % max(1, cp.cuda.runtime.getDeviceCount())


# --- the test ---------------------------------------------------------------------


def run(comm: Any, peer: int, rnd: int, sends: bool, tests: tuple[str, ...], sizes: Sizes,
        timeout: float, buffers: tuple[str, ...] = ("host",), local: int = 0) -> list[dict[str, Any]]:
    """This rank's side of one pair test; the sender's side returns the
    figures (each with its "buffers" kind and "transport") and, for a kind
    it could not test, a record with the reason ("skipped")."""
    from mpi4py import MPI

    tag = wire.PAIR + rnd * STEP
    at = wire.deadline(timeout)
    mine = device_capability() if "device" in buffers else None
    token = comm.isend(("hello", rnd, mine), dest=peer, tag=tag)
    theirs = wire.recv(comm, peer, tag, at)[2]
    wire.wait(token, at)
    out: list[dict[str, Any]] = []
    for kind in buffers:
        make, note = _buffers(MPI, comm, peer, tag, sends, kind, mine, theirs, local, at)
        if make is None:
            out.append({"test": "skipped", "buffers": kind, "reason": note})
            continue
        for test in ("bw", "latency"):
            if test in tests:
                fig = (_bw if test == "bw" else _latency)(MPI, comm, peer, tag + OFFSET[(kind, test)], sends,
                                                          sizes, at, make)
                if fig:
                    out.append({**fig, "buffers": kind, "transport": getattr(make, "func", make).transport, "why": note})
    return out if sends else []


def _buffers(MPI: Any, comm: Any, peer: int, tag: int, sends: bool, kind: str, mine: Any, theirs: Any,
             local: int, at: float) -> tuple[MakeBuf | None, str]:
    """How this kind's buffers are made for this pair (None: skipped), and why."""
    if kind == "host":
        return HostBuf, ""
    mode, why = device_mode(mine, theirs)
    if mode is None:
        return None, why
    gpu = gpu_for(local)
    if mode == "cuda-aware" and not _prove(MPI, comm, peer, tag + PROOF, sends, gpu, at):
        mode, why = "staged", "the CUDA-aware transfer of a checked device buffer failed: staged instead"
    return functools.partial(DeviceBuf if mode == "cuda-aware" else StagedBuf, gpu=gpu), why


def _prove(MPI: Any, comm: Any, peer: int, tag: int, sends: bool, gpu: int, at: float, n: int = 1 << 16) -> bool:
    """One checked device-to-device transfer before any device pointer is
    trusted for timing (only asked when both libraries say they are aware:
    a device pointer into a non-aware MPI can crash it)."""
    buf, want = DeviceBuf(n, gpu), pattern(n, tag)
    if sends:
        buf.load(want)
        buf.to_wire(0, n)
        wire.wait_all([comm.Isend([buf.view(0, n), MPI.BYTE], dest=peer, tag=tag)], at)
        return _agree(comm, peer, tag, sends, True, at)
    buf.poison()
    wire.wait_all([comm.Irecv([buf.view(0, n), MPI.BYTE], source=peer, tag=tag)], at)
    return _agree(comm, peer, tag, sends, buf.read() == want, at)


def _bw(MPI: Any, comm: Any, peer: int, tag: int, sends: bool, sz: Sizes, at: float,
        make: MakeBuf = HostBuf) -> dict[str, Any] | None:
    n, w = sz.bw_bytes, sz.window
    ack = bytearray(1)
    buf = make(n * w)
    want = pattern(n * w, tag)
    if sends:
        buf.load(want)
    secs, ok = [], True
    for _ in range(sz.repeats):
        if not sends:
            buf.poison()
        t0 = time.perf_counter()
        for _ in range(sz.bw_windows):
            if sends:
                buf.to_wire(0, n * w)
                reqs = [comm.Isend([buf.view(i * n, (i + 1) * n), MPI.BYTE], dest=peer, tag=tag) for i in range(w)]
                reqs.append(comm.Irecv([ack, MPI.BYTE], source=peer, tag=tag))
            else:
                reqs = [comm.Irecv([buf.view(i * n, (i + 1) * n), MPI.BYTE], source=peer, tag=tag) for i in range(w)]
            wire.wait_all(reqs, at)
            if not sends:
                buf.from_wire(0, n * w)
                wire.wait_all([comm.Isend([ack, MPI.BYTE], dest=peer, tag=tag)], at)
        secs.append(time.perf_counter() - t0)
        if not sends:
            ok = ok and buf.read() == want
    verified = _agree(comm, peer, tag, sends, ok, at)
    if not sends:
        return None
    if not verified:
        raise ValueError("the bandwidth test's receive buffer did not match the sender's pattern")
    gbps = units.gbps(n * w * sz.bw_windows, secs)
    return {"test": "bw", "unit": "GB/s", "higher_is_better": True, "value": statistics.median(gbps),
            "samples": gbps, "bytes": n, "counting": f"{w} messages of {n} B per window, acknowledged per window",
            "verified": True}


def _latency(MPI: Any, comm: Any, peer: int, tag: int, sends: bool, sz: Sizes, at: float,
             make: MakeBuf = HostBuf) -> dict[str, Any] | None:
    """Ping-pong of sz.lat_bytes (8 B between nodes, 1 B inside one); the receiver echoes what it got. Each repetition
    sends a pattern of its own, into buffers poisoned before it, and both
    sides check what they hold after it."""
    msg, echo = make(sz.lat_bytes), make(sz.lat_bytes)
    halves, ok = [], True
    for rep in range(sz.repeats):
        want = pattern(sz.lat_bytes, tag + rep)
        if sends:
            msg.load(want)
        else:
            msg.poison()
        echo.poison()
        t0 = time.perf_counter()
        for _ in range(sz.lat_iters):
            if sends:
                msg.to_wire(0, sz.lat_bytes)
                wire.wait_all([comm.Isend([msg.view(0, sz.lat_bytes), MPI.BYTE], dest=peer, tag=tag)], at)
                wire.wait_all([comm.Irecv([echo.view(0, sz.lat_bytes), MPI.BYTE], source=peer, tag=tag)], at)
                echo.from_wire(0, sz.lat_bytes)
            else:
                wire.wait_all([comm.Irecv([msg.view(0, sz.lat_bytes), MPI.BYTE], source=peer, tag=tag)], at)
                msg.from_wire(0, sz.lat_bytes)
                msg.to_wire(0, sz.lat_bytes)
                wire.wait_all([comm.Isend([msg.view(0, sz.lat_bytes), MPI.BYTE], dest=peer, tag=tag)], at)
        halves.append((time.perf_counter() - t0) / sz.lat_iters / 2 * 1e6)
        ok = ok and (echo if sends else msg).read() == want
    verified = _agree(comm, peer, tag, sends, ok, at)
    if not sends:
        return None
    if not verified:
        raise ValueError("the latency test's echoed bytes did not match")
    return {"test": "latency", "unit": "us", "higher_is_better": False, "value": statistics.median(halves),
            "samples": halves, "bytes": sz.lat_bytes,
            "counting": f"half the round trip of a {sz.lat_bytes} B ping-pong", "verified": True}


def _agree(comm: Any, peer: int, tag: int, sends: bool, ok: bool, at: float) -> bool:
    """Both sides' checks, known to the sender (the receiver returns its own)."""
    if sends:
        return bool(ok and wire.recv(comm, peer, tag + AGREE, at))
    wire.send(comm, ok, peer, tag + AGREE, at)
    return ok
