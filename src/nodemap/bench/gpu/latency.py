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
from ..driver import repeat
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


def measure(b: Any) -> list[Result]:
    """Every latency Result for the GPUs and NUMA nodes of copies.Bench `b`."""
    out: list[Result] = []
    for g in b.devs:
        out.append(_chase(b, g, "HBM", f"{g.key} -> {g.key} HBM", "HBM", owner=g))
        for o in b.devs:
            if o is not g and b.peer:
                label = d2d_path(b.topo, g, o)[0]
                out.append(_chase(b, g, o.key, f"{g.key} -> {o.key} memory", label, owner=o))
        for n in b.nodes:
            where = f"NUMA{n}" if n >= 0 else "host"
            out.append(_chase(b, g, where, f"{g.key} -> {where} memory", host_class(g, n), node=n))
        out += _small_copies(b, g)
    return out


def _ws(b: Any, g: gc.Gpu) -> int:
    return max(64 << 20, 4 * g.l2_bytes) // LINE * LINE


def _chase(b: Any, g: gc.Gpu, where: str, path: str, klass: str, owner: gc.Gpu | None = None,
           node: int = -1) -> Result:
    import numpy as np

    cp = b.cp
    ws = _ws(b, g)
    nxt, order = cycle(ws // LINE)
    host = None
    try:
        if owner is not None:
            with cp.cuda.Device(owner.ordinal):
                gc.ensure_free(cp, ws, "latency chase")
                chain = cp.asarray(nxt)
                # CuPy copies a host array in asynchronously (pinned staging, the owner's current
                # stream); the chase runs on another device's non-blocking stream, which does not
                # wait for it: unsynchronized, it walked a half-written cycle off its end (an
                # illegal address on 2 H100s when bench gpu ran first in the same process).
                cp.cuda.Device().synchronize()
            base = chain.data.ptr
        else:
            host = gc.HostBuffer(cp, ws, node)
            np.ctypeslib.as_array((ctypes.c_uint64 * (ws // 8)).from_address(host.ptr))[:] = nxt
            base = host.ptr
        with cp.cuda.Device(g.ordinal):
            res = cp.zeros(1, dtype="uint64")
            cp.cuda.Device().synchronize()  # the zeroing, on the current stream, before the chase's stream writes
            fn = gc.kernel(cp, "copies.cu", "chase")
            stream = b.streams[g.ordinal][0]
            args = (np.uintp(base), np.uint64(order[0]), np.int64(STEPS), res)
            job = gc.Job(g.ordinal, stream, lambda s: fn((1,), (1,), args, stream=s))
            secs = repeat(lambda: gc.time_streams(cp, b.gate, [job])[0], repeats=b.repeats, warmup=1)
            got = int(res.get()[0])
        want = end_of_walk(order, STEPS)
        if got != want:
            raise NodemapError(f"latency chase {path}: the walk ended at {got}, expected {want}: "
                               "memory returned wrong data")
    finally:
        if host is not None:
            host.close()
    params = {"src": g.key, "dst": where, "working_set": ws, "steps": STEPS, "line": LINE}
    if host is not None:
        params["host_pages"] = ", ".join(f"NUMA{k}: {v:.0%}" for k, v in sorted(host.placed.items())) or "unknown"
    return make_result("copies", "load_latency", "ns", [s / STEPS * 1e9 for s in secs], verified=True,
                       params=params, path=path, path_class=klass,
                       counting=f"{STEPS} dependent 8-byte loads over a random cycle of {format_size(ws)}",
                       verification="the walk's final index equals the host-computed end of the cycle")


def _small_copies(b: Any, g: gc.Gpu) -> list[Result]:
    cp, out = b.cp, []
    src = b.src[g.ordinal]
    host_src, host_dst = b.host(b.nodes[0], "src"), b.host(b.nodes[0], "dst")
    where = f"NUMA{b.nodes[0]}" if b.nodes[0] >= 0 else "host"
    cases = [("h2d", where, g.key, b.dst[g.ordinal][0], host_src.ptr),
             ("d2h", g.key, where, host_dst.ptr, src)]
    if b.peer:
        cases += [("d2d", g.key, o.key, b.dst[o.ordinal][0], src) for o in b.devs if o is not g]
    for kind, s, d, dst, source in cases:
        with cp.cuda.Device(g.ordinal):
            b.fill(dst, POISON_SEED)
        job = gc.Job(g.ordinal, b.streams[g.ordinal][0], b.ce(dst, source, COPY_BYTES, COPY_ITERS))
        secs = repeat(lambda: max(gc.time_streams(cp, b.gate, [job])) / COPY_ITERS, repeats=b.repeats, warmup=1)
        _check_word(b, dst, g)
        out.append(make_result("copies", f"{kind}_copy_latency", "us", [x * 1e6 for x in secs], verified=True,
                               params={"src": s, "dst": d, "bytes": COPY_BYTES, "iters": COPY_ITERS},
                               path=f"{s} -> {d}", counting=f"{COPY_BYTES}-byte cudaMemcpyAsync, per copy",
                               verification="the copied words equal the source pattern"))
    return out


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
