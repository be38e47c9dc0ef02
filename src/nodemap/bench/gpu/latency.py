"""Latency of GPU data paths, part of `nodemap bench copies --latency`.

- Load latency: one GPU thread walks a random cycle (dependent 8-byte loads,
  one per 64-byte line, over 4x the L2) in its own memory (HBM), a peer
  GPU's memory, and pinned host memory on each NUMA node. ns per load, as
  Intel MLC's idle latency. The walk's end index is checked against the
  cycle built on the host.
- Small-copy latency: `--iters`-many 8-byte cudaMemcpyAsync back to back
  behind a spin kernel (launch cost excluded), per copy, in microseconds:
  what an API-level transfer costs (p2pBandwidthLatencyTest's figure).
"""

from __future__ import annotations

import ctypes
from typing import Any

from . import common as gc
from ...errors import NodemapError
from ...units import format_size
from .kernels import POISON_SEED, SRC_SEED
from ..driver import Case
from ..peaks import d2d_path, host_class
from ..results import Result, make_result

LINE = 64  # bytes between chased words: one load per cache line
STEPS = 20_000
COPY_BYTES = 8
COPY_ITERS = 100  # copies per timed region: their mean is the latency


def cycle(slots: int, seed: int = 1) -> tuple[Any, Any]:
    """(next, order): next[order[k]] = order[k+1] (element indexes one line
    apart, a single random cycle through every slot); order[0] starts it."""
    import numpy as np

    stride = LINE // 8
    order = np.random.default_rng(seed).permutation(slots).astype(np.uint64) * np.uint64(stride)
    nxt = np.zeros(slots * stride, dtype=np.uint64)
    nxt[order] = np.roll(order, -1)
    return nxt, order


def end_of_walk(order: Any, steps: int) -> int:
    return int(order[steps % len(order)])


def cases(b: Any) -> list[Case]:
    """Every latency case for the GPUs and NUMA nodes of copies.Bench `b`."""
    out: list[Case] = []
    for g in b.devs:
        out.append(Chase(b, g, "HBM", f"{g.key} -> {g.key} HBM", "HBM", owner=g))
        for o in b.devs:
            if o is not g and b.peer:
                label = d2d_path(b.topo, g, o)[0]
                out.append(Chase(b, g, o.key, f"{g.key} -> {o.key} memory", label, owner=o))
        for n in b.nodes:
            where = f"NUMA{n}" if n >= 0 else "host"
            out.append(Chase(b, g, where, f"{g.key} -> {where} memory", host_class(g, n), node=n))
        out += [SmallCopy(b, g, kind, o) for kind, o in
                [("h2d", None), ("d2h", None)] + [("d2d", o) for o in b.devs if o is not g and b.peer]]
    return out


def _ws(b: Any, g: gc.Gpu) -> int:
    return max(64 << 20, 4 * g.l2_bytes) // LINE * LINE


class Chase(Case):
    """Load latency: one thread of GPU `g` walks a random cycle in the memory
    of `owner` (a GPU) or of NUMA node `node` (pinned host memory)."""

    def __init__(self, b: Any, g: gc.Gpu, where: str, path: str, klass: str, owner: gc.Gpu | None = None,
                 node: int = -1) -> None:
        self.b, self.g, self.where, self.path, self.klass, self.owner, self.node = b, g, where, path, klass, owner, node
        self.label = f"load latency {path}"
        self.host: Any = None
        self.chain: Any = None

    def setup(self) -> None:
        import numpy as np

        cp, g = self.b.cp, self.g
        self.ws = ws = _ws(self.b, g)
        nxt, self.order = cycle(ws // LINE)
        if self.owner is not None:
            with cp.cuda.Device(self.owner.ordinal):
                gc.ensure_free(cp, ws, "latency chase")
                self.chain = cp.asarray(nxt)
                # CuPy copies a host array in asynchronously (pinned staging, the owner's current
                # stream); the chase runs on another device's non-blocking stream, which does not
                # wait for it: unsynchronized, it walked a half-written cycle off its end (an
                # illegal address on 2 H100s when bench gpu ran first in the same process).
                cp.cuda.Device().synchronize()
            base = self.chain.data.ptr
        else:
            self.host = gc.HostBuffer(cp, ws, self.node)
            np.ctypeslib.as_array((ctypes.c_uint64 * (ws // 8)).from_address(self.host.ptr))[:] = nxt
            base = self.host.ptr
        with cp.cuda.Device(g.ordinal):
            self.res = cp.zeros(1, dtype="uint64")
            cp.cuda.Device().synchronize()  # the zeroing, on the current stream, before the chase's stream writes
            fn = gc.kernel(cp, "copies.cu", "chase")
        args = (np.uintp(base), np.uint64(self.order[0]), np.int64(STEPS), self.res)
        self.job = gc.Job(g.ordinal, self.b.streams[g.ordinal][0], lambda s: fn((1,), (1,), args, stream=s))

    def run(self) -> float:
        return gc.time_streams(self.b.cp, self.b.gate, [self.job])[0]

    def verify(self) -> None:
        with self.b.cp.cuda.Device(self.g.ordinal):
            got = int(self.res.get()[0])
        want = end_of_walk(self.order, STEPS)
        if got != want:
            raise NodemapError(f"latency chase {self.path}: the walk ended at {got}, expected {want}: "
                               "memory returned wrong data")

    def results(self, secs: list[float]) -> list[Result]:
        ws = self.ws
        params = {"src": self.g.key, "dst": self.where, "working_set": ws, "steps": STEPS, "line": LINE}
        if self.host is not None:
            params["host_pages"] = (", ".join(f"NUMA{k}: {v:.0%}" for k, v in sorted(self.host.placed.items()))
                                    or "unknown")
        return [make_result("copies", "load_latency", "ns", [s / STEPS * 1e9 for s in secs], verified=True,
                            params=params, path=self.path, path_class=self.klass,
                            counting=f"{STEPS} dependent 8-byte loads over a random cycle of {format_size(ws)}",
                            verification="the walk's final index equals the host-computed end of the cycle")]

    def teardown(self) -> None:
        if self.host is not None:
            self.host.close()
        self.chain = None


class SmallCopy(Case):
    """`COPY_ITERS` 8-byte copies issued by GPU `g` back to back: h2d and d2h
    with the first NUMA node's pinned buffers, d2d into peer `peer`."""

    def __init__(self, b: Any, g: gc.Gpu, kind: str, peer: gc.Gpu | None = None) -> None:
        self.b, self.g, self.kind, self.peer = b, g, kind, peer
        where = f"NUMA{b.nodes[0]}" if b.nodes[0] >= 0 else "host"
        self.s, self.d = {"h2d": (where, g.key), "d2h": (g.key, where)}.get(kind, (g.key, peer and peer.key))
        self.label = f"{kind} copy latency {self.s} -> {self.d}"

    def setup(self) -> None:
        b, g = self.b, self.g
        if self.kind == "h2d":
            self.dst, source = b.dst[g.ordinal][0], b.host(b.nodes[0], "src").ptr
        elif self.kind == "d2h":
            self.dst, source = b.host(b.nodes[0], "dst").ptr, b.src[g.ordinal]
        else:
            self.dst, source = b.dst[self.peer.ordinal][0], b.src[g.ordinal]
        with b.cp.cuda.Device(g.ordinal):
            b.fill(self.dst, POISON_SEED)
        self.job = gc.Job(g.ordinal, b.streams[g.ordinal][0], b.ce(self.dst, source, COPY_BYTES, COPY_ITERS))

    def run(self) -> float:
        return max(gc.time_streams(self.b.cp, self.b.gate, [self.job])) / COPY_ITERS

    def verify(self) -> None:
        _check_word(self.b, self.dst, self.g)

    def results(self, secs: list[float]) -> list[Result]:
        s, d = self.s, self.d
        return [make_result("copies", f"{self.kind}_copy_latency", "us", [x * 1e6 for x in secs], verified=True,
                            params={"src": s, "dst": d, "bytes": COPY_BYTES, "iters": COPY_ITERS},
                            path=f"{s} -> {d}", counting=f"{COPY_BYTES}-byte cudaMemcpyAsync, per copy",
                            verification="the copied words equal the source pattern")]


def _check_word(b: Any, dst: Any, g: gc.Gpu) -> None:
    import numpy as np

    cp = b.cp
    with cp.cuda.Device(g.ordinal):
        cp.cuda.Device().synchronize()
    if isinstance(dst, int):
        got = np.ctypeslib.as_array((ctypes.c_uint32 * 2).from_address(dst)).copy()
    else:
        got = dst[:2].get()
    if not np.array_equal(got, gc.pattern(0, 2, SRC_SEED)):
        raise NodemapError(f"small copy to {g.key}'s peer/host buffer left wrong data {got!r}")
