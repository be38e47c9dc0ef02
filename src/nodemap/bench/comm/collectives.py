"""`nodemap bench nccl`: NCCL collectives, algbw and busbw per size.

What it does, as its --help says, and its Options: collectives_options.py.
"""

from __future__ import annotations

import os
import statistics
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Callable

from ...errors import NodemapError
from . import mpi_common as mc
from .world import World, open_gpus
from ...units import MiB, format_size
from ..driver import Case, PartFailed, Plan
from ..results import Failure, Result, ResultSet, make_result
from .collectives_options import OPS, Options
from ..figures import Figure, Given, figure
from ...topology.model import Topology
from ..story import NO_PAIR, Cost, Count, Node, ResultParams, Seen, Skipped, Step, Story
from ...finding import Finding

WORD = 4  # float32
CORRUPT = "wrong elements after the operation: NCCL or the GPUs' links corrupt data"


def values(cp: Any, rank: int, start: int, count: int) -> Any:
    """What rank `rank` sends at element indexes start..: small exact integers."""
    i = cp.arange(start, start + count, dtype=cp.int64)
    return ((rank + 1) * (i % 7 + 1)).astype(cp.float32)


def _gather(cp: Any, rank: int, n: int, rc: int) -> Any:
    return cp.concatenate([values(cp, r, r * rc // n, rc // n) for r in range(n)])


def _alltoall(c: Any, nc: Any, sp: int, rp: int, sc: int, rc: int, st: int, rank: int, n: int) -> None:
    part = sc // n
    for peer in range(n):
        c.send(sp + peer * part * WORD, part, nc.NCCL_FLOAT32, peer, st)
        c.recv(rp + peer * part * WORD, part, nc.NCCL_FLOAT32, peer, st)


def _sendrecv(c: Any, nc: Any, sp: int, rp: int, sc: int, rc: int, st: int, rank: int, n: int) -> None:
    c.send(sp, sc, nc.NCCL_FLOAT32, (rank + 1) % n, st)
    c.recv(rp, rc, nc.NCCL_FLOAT32, (rank - 1) % n, st)


def _tri(n: int) -> int:
    return n * (n + 1) // 2  # sum over ranks of (rank + 1)


@dataclass(frozen=True)
class Op:
    """One NCCL operation, as nccl-tests' one struct per collective: its elements per rank, where its
    send part lies (in-place: inside the one buffer), its call, its bus factor and what each rank holds
    after it (every rank sends values(rank, start, send count))."""

    counts: Callable[[int, int], tuple[int, int]]  # (send, receive) elements per rank of `total` over n
    call: Callable[..., None]  # (comm, nccl, send ptr, recv ptr, send count, recv count, stream, rank, n)
    want: Callable[[Any, int, int, int], Any]  # (cp, rank, n, recv count) -> the receive buffer, None: unchecked
    bus: Callable[[int], float] = lambda n: 1.0  # nccl-tests' busbw / algbw
    at: Callable[[int, int, int], tuple[int, int]] | None = lambda rank, sc, rc: (0, 0)  # in-place offsets; None: none


OP: dict[str, Op] = {
    "all_reduce": Op(lambda t, n: (t, t),
                     lambda c, nc, sp, rp, sc, rc, st, r, n: c.allReduce(sp, rp, sc, nc.NCCL_FLOAT32, nc.NCCL_SUM, st),
                     lambda cp, r, n, rc: values(cp, 0, 0, rc) * _tri(n), bus=lambda n: 2 * (n - 1) / n),
    "all_gather": Op(lambda t, n: (t // n, t // n * n),
                     lambda c, nc, sp, rp, sc, rc, st, r, n: c.allGather(sp, rp, sc, nc.NCCL_FLOAT32, st), _gather,
                     bus=lambda n: (n - 1) / n, at=lambda r, sc, rc: (r * sc, 0)),
    "reduce_scatter": Op(lambda t, n: (t // n * n, t // n),
                         lambda c, nc, sp, rp, sc, rc, st, r, n: c.reduceScatter(sp, rp, rc, nc.NCCL_FLOAT32,
                                                                                 nc.NCCL_SUM, st),
                         lambda cp, r, n, rc: values(cp, 0, r * rc, rc) * _tri(n), bus=lambda n: (n - 1) / n,
                         at=lambda r, sc, rc: (0, r * rc)),
    "broadcast": Op(lambda t, n: (t, t),
                    lambda c, nc, sp, rp, sc, rc, st, r, n: c.broadcast(sp, rp, sc, nc.NCCL_FLOAT32, 0, st),
                    lambda cp, r, n, rc: values(cp, 0, 0, rc)),
    "reduce": Op(lambda t, n: (t, t),
                 lambda c, nc, sp, rp, sc, rc, st, r, n: c.reduce(sp, rp, sc, nc.NCCL_FLOAT32, nc.NCCL_SUM, 0, st),
                 lambda cp, r, n, rc: values(cp, 0, 0, rc) * _tri(n) if r == 0 else None),
    "alltoall": Op(lambda t, n: (t // n * n, t // n * n), _alltoall,
                   lambda cp, r, n, rc: cp.concatenate([values(cp, j, r * (rc // n), rc // n) for j in range(n)]),
                   bus=lambda n: (n - 1) / n, at=None),
    "sendrecv": Op(lambda t, n: (t, t), _sendrecv, lambda cp, r, n, rc: values(cp, (r - 1) % n, 0, rc), at=None),
}


def bus_factor(op: str, n: int) -> float:
    return OP[op].bus(n)


def counts(op: str, size: int, n: int) -> tuple[int, int]:
    """(send elements, receive elements) per rank for a `size`-byte test; 0 when too small."""
    sc, rc = OP[op].counts(size // WORD, n)
    return (sc, rc) if sc and rc else (0, 0)


def expected(cp: Any, op: str, rank: int, n: int, size: int) -> Any | None:
    """The receive buffer rank `rank` must hold after one `op`; None: nothing to check."""
    return OP[op].want(cp, rank, n, counts(op, size, n)[1])


# --- operations on this process's GPUs -------------------------------------------


def ptrs(lo: Any, op: str, inplace: bool, sc: int, rc: int) -> tuple[int, int]:
    """(send, recv) device pointers; in-place both inside the receive buffer, as nccl-tests lays it out."""
    if not inplace:
        return lo.bufs["send"].data.ptr, lo.bufs["recv"].data.ptr
    s, r = OP[op].at(lo.rank, sc, rc)
    base = lo.bufs["recv"].data.ptr
    return base + s * WORD, base + r * WORD


def calls(w: World, op: str, inplace: bool, size: int) -> list[Callable[[], None]]:
    """Each local GPU's call of one `op`, its pointers and counts worked out once per case: the timed
    loops of small sizes are Python-bound (a microsecond more per operation showed at 64 KiB)."""
    sc, rc = counts(op, size, w.n)
    return [partial(OP[op].call, lo.comm, w.nccl, *ptrs(lo, op, inplace, sc, rc), sc, rc, lo.stream.ptr, lo.rank,
                    w.n) for lo in w.locals]


def enqueue(w: World, ops: list[Callable[[], None]]) -> None:
    """One operation on every local GPU (`calls`), all inside one NCCL group."""
    w.nccl.groupStart()
    try:
        for call in ops:
            call()
    finally:
        w.nccl.groupEnd()


def fill(w: World, op: str, inplace: bool, size: int) -> None:
    """Send data per rank (in-place: at its part of the receive buffer); receive buffers poisoned (NaN)."""
    cp = w.cp
    sc, rc = counts(op, size, w.n)
    for lo in w.locals:
        with cp.cuda.Device(lo.device):
            at = OP[op].at(lo.rank, sc, rc)[0] if OP[op].at else 0  # all_gather: its part of the whole
            lo.bufs["recv"][:].fill(cp.nan)
            into = at if inplace else 0
            lo.bufs["recv" if inplace else "send"][into:into + sc] = values(cp, lo.rank, at, sc)
            cp.cuda.Device().synchronize()


def wrong(w: World, op: str, inplace: bool, size: int) -> int:
    """Elements that differ from the expected result, over every local GPU."""
    cp = w.cp
    sc, rc = counts(op, size, w.n)
    bad = 0
    for lo in w.locals:
        with cp.cuda.Device(lo.device):
            want = expected(cp, op, lo.rank, w.n, size)
            if want is not None:
                off = (ptrs(lo, op, inplace, sc, rc)[1] - lo.bufs["recv"].data.ptr) // WORD
                bad += int((lo.bufs["recv"][off:off + rc] != want).sum())
    return bad


# --- the plan -------------------------------------------------------------------


def parse_ops(spec: str) -> list[str]:
    ops = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise NodemapError(f"--ops {spec!r}: choose from {','.join(OPS)}")
    return ops


def allocate(w: World, nbytes: int) -> None:
    from ..gpu.common import ensure_free

    cp = w.cp
    for lo in w.locals:
        with cp.cuda.Device(lo.device):
            ensure_free(cp, 2 * nbytes, "NCCL send and receive buffers of the largest size")
            lo.bufs = {k: cp.empty(nbytes // WORD, dtype=cp.float32) for k in ("send", "recv")}


def plan(opts: Options) -> Plan:
    """A case per (op, size, place) that has elements; rank 0 reports."""
    from ...units import parse_sizes

    ops, sizes = parse_ops(opts.ops), parse_sizes(opts.sizes, "--sizes")
    w = open_gpus(opts.mode, opts.gpus, opts.timeout, topology=opts.topology)
    w.require_nccl()
    env = {"nccl": w.nccl.get_version(), "cupy": w.cp.__version__, "ranks": w.n,
           "mode": "mpi" if w.comm is not None else "single", "gpus": w.gpu_keys,
           "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE")}
    if w.comm is not None:
        env["mpi"] = mc.library()
    places = [p for p in ("out", "in") if opts.inplace in ("both", p)]
    path = f"{w.n} ranks: " + ", ".join(w.gpu_keys)

    def cases() -> list[Case]:
        allocate(w, max(sizes))
        return [OpCase(w, op, size, where == "in", opts, path) for op in ops for size in sizes for where in places
                if not (where == "in" and OP[op].at is None or counts(op, size, w.n)[0] == 0)]

    return w.plan(f"bench nccl --ops {','.join(ops)} --sizes {opts.sizes}", cases, text, env, list(w.notes))


class OpCase(Case):
    """One operation at one size, out-of-place or in-place: `iters` operations
    a timed repetition (CUDA events on every local stream, the slowest
    rank's), then one more on fresh buffers, every element compared. With
    --graph the `iters` operations are captured at setup (gpu/graphs.py)
    and each repetition launches the graphs instead of queuing them, the
    same events around. One process driving several GPUs captures each
    GPU's stream into a graph of its own, as nccl-tests' -G does (one graph
    over every GPU hung in NCCL: gpu/graphs.py)."""

    def __init__(self, w: World, op: str, size: int, inplace: bool, opts: Options, path: str) -> None:
        self.w, self.op, self.size, self.inplace, self.iters, self.path = w, op, size, inplace, opts.iters, path
        self.timeout, self.use_graph = opts.timeout, opts.graph
        self.name = f"{op} {'in-place' if inplace else 'out-of-place'} {size} B"
        self.label = f"{op} {format_size(size)} {'in-place' if inplace else 'out-of-place'}"
        self._bound = ExitStack()
        self.graph: Any = None
        self.calls: list[Callable[[], None]] = []

    def setup(self) -> None:
        self._bound.enter_context(self.w.bound(self.timeout, f"NCCL {self.op} at {self.size} B (a hung collective)"))
        fill(self.w, self.op, self.inplace, self.size)
        self.calls = calls(self.w, self.op, self.inplace, self.size)
        if self.use_graph:
            from ..gpu.graphs import capture

            self.graph = capture(self.w.cp, [[(lo.device, lo.stream)] for lo in self.w.locals], self.enqueue)

    def enqueue(self) -> None:
        """The `iters` operations of one repetition."""
        for _ in range(self.iters):
            enqueue(self.w, self.calls)

    def run(self) -> float:
        """Seconds per operation of one repetition, the slowest GPU's of the slowest rank."""
        w, cp = self.w, self.w.cp
        w.sync()
        evs = []
        for lo in w.locals:
            with cp.cuda.Device(lo.device):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(lo.stream)
                evs.append((e0, e1, lo))
        if self.graph is not None:
            self.graph.launch()  # each GPU's graph on its stream
        else:
            self.enqueue()
        for e0, e1, lo in evs:
            with cp.cuda.Device(lo.device):
                e1.record(lo.stream)
        t = 0.0
        for e0, e1, lo in evs:
            e1.synchronize()
            t = max(t, cp.cuda.get_elapsed_time(e0, e1) * 1e-3 / self.iters)
        return w.max_all(t)

    def verify(self) -> None:
        w, op, inplace, size = self.w, self.op, self.inplace, self.size
        if self.graph is not None and not inplace:
            # what the graph's last launch left: an out-of-place operation gives the same result each time,
            # and the receive buffers were poisoned before the first launch, so a graph that did not run
            # its operations (a capture that lost them) fails here, not only the one below
            w.sync()
            self._check(" (the graph's last launch)")
        fill(w, op, inplace, size)
        enqueue(w, self.calls)
        w.sync()
        self._check("")

    def _check(self, when: str) -> None:
        w, op, inplace, size = self.w, self.op, self.inplace, self.size
        bad = int(w.max_all(float(wrong(w, op, inplace, size))))
        if bad:
            where = "in-place" if inplace else "out-of-place"
            raise PartFailed(Failure("nccl", op, f"NCCL {op}", "0 wrong elements",
                                     f"{bad} wrong elements ({where}, {format_size(size)}){when}", transport="nccl",
                                     count=bad, size=size, message=f"{self.name}{when}: {bad} {CORRUPT}"))

    def results(self, times: list[float]) -> list[Result]:
        return [result(self.op, self.size, self.w.n, self.inplace, self.iters, times, self.path,
                       graph=self.graph is not None)]

    def teardown(self) -> None:
        if self.graph is not None:
            self.graph.close()
            self.graph = None  # the next (op, size, place) captures its own
        self._bound.close()


def result(op: str, size: int, n: int, inplace: bool, iters: int, times: list[float], path: str,
           graph: bool = False) -> Any:
    """The verified Result of `times` (seconds per operation, one per repetition;
    with `graph`, a launch of the graph of `iters` operations over `iters`)."""
    factor = bus_factor(op, n)
    algbw = [size / t / 1e9 for t in times]
    # one rank moves nothing between GPUs: nccl-tests' busbw is 0 there, so algbw stands in
    unit, vals = ("GB/s busbw", [a * factor for a in algbw]) if factor else ("GB/s", algbw)
    return make_result(
        "nccl", op, unit, vals, verified=True,
        params={"size": size, "ranks": n, "inplace": inplace, "iters": iters, "dtype": "float32",
                "algbw_best": max(algbw), "algbw_median": statistics.median(algbw),
                "time_us_best": min(times) * 1e6, "bus_factor": factor, "wrong": 0}
        | ({"graph": True} if graph else {}),  # without --graph the document is as before
        bytes=size, counting=f"nccl-tests: algbw = {size} B / time, busbw = algbw x {factor:g}",
        path=path, path_class="NCCL",
        verification="every receive element compared with its exact value after one more operation "
                     "(0 wrong)",
    )


def text(rs: ResultSet) -> str:
    from ...units import format_size
    from ...text import number, table

    rows = [[r.metric, "in" if r.params["inplace"] else "out", format_size(r.params["size"]),
             number(r.params["time_us_best"]), number(r.params["algbw_best"]), number(r.stats.best),
             number(r.stats.median), f"{100 * r.stats.spread:.1f}%", str(r.params["wrong"])] for r in rs.results]
    return table(["op", "place", "size", "time us", "algbw GB/s", "busbw GB/s", "busbw med", "spread", "#wrong"],
                 rows, right=[False, False] + [True] * 7)


def figures(results: list[Result], given: Given) -> list[Figure]:
    """all_reduce bus bandwidth at the largest size (out-of-place), judged
    against the slowest GPU<->GPU link of the node (`with_link_peak`)."""
    ar = [r for r in results if r.metric == "all_reduce" and r.unit == "GB/s busbw" and not r.params.get("inplace")]
    if not ar:
        return []
    r = max(ar, key=lambda r: (r.params.get("size", 0), r.stats.best))
    return [figure(r, "nccl/all_reduce", "NCCL", f"NCCL all_reduce busbw, {r.params.get('ranks')} GPUs, "
                   f"{r.params.get('size', 0) // MiB} MiB", kind="nccl", part=f"{r.params.get('ranks')} GPUs",
                   peak=None, peak_source="")]


def slowest_link(figs: list[Figure]) -> tuple[str, float | None, str]:
    """(class, peak, source) of the slowest GPU<->GPU path measured."""
    d2d = [f for f in figs if f.kind == "d2d" and f.peak]
    if not d2d:
        return "", None, ""
    slow = min(d2d, key=lambda f: f.peak)
    return slow.path_class, slow.peak, f"slowest GPU<->GPU path {slow.path_class}: {slow.peak_source}"


def with_link_peak(figs: list[Figure], topo: Topology | None = None) -> list[Figure]:
    klass, peak, source = slowest_link(figs)
    # "NV18, 2 GPUs": the limit rows tell a link class and, where it matters, the GPU count
    return [replace(f, part=f"{klass}, {f.part}" if klass else f.part, peak=peak, peak_source=source)
            if f.kind == "nccl" else f for f in figs]


def steps(node: Node) -> list[Step | Skipped]:
    """all_reduce in one process over every GPU (quick: the largest sizes, out-of-place)."""
    if node.gpus < 2:
        return [Skipped("NCCL", NO_PAIR)]
    opts = (Options(ops="all_reduce", mode="single", sizes="256MiB:1GiB", inplace="out", repeats=3)
            if node.level == "quick" else Options(ops="all_reduce", mode="single"))
    return [Step(what="NCCL all_reduce bus bandwidth", options=opts)]


class Params(ResultParams):
    size: Count
    ranks: Count = 0
    inplace: bool = False


def finding(seen: Seen) -> Finding | None:
    """Slow collectives over links the copies found fast: NCCL's settings first."""
    f = seen.figure
    if f.kind != "nccl":
        return None
    return seen.say("configuration", f"{f.label}: {seen.value}, below what the node's links carry",
                    "check NCCL_* variables (P2P/SHM disabled, forced algorithm) and NCCL_DEBUG=INFO for the "
                    "transport; a slow pair among the GPU<->GPU figures points to hardware")


STORY = Story(params=Params, figures=figures, related=with_link_peak, finding=finding,
              areas=("NCCL",), steps=steps, gpu=True, priority=30,  # NVLink faults, beside the copies'
              cost={"quick": Cost(base=4.0, gpu=1.0), "full": Cost(base=20.0, gpu=2.5)})  # full 24.7 s on 2 H200s
