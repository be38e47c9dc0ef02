"""`nodemap bench nccl`: NCCL collectives, algbw and busbw per size.

What it does, as its --help says, and its Options: collectives_options.py.
"""

from __future__ import annotations

import os
import statistics
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable

from ...errors import NodemapError
from . import mpi_common as mc
from . import world
from .world import World, alone
from ...units import MiB, format_size
from .. import interrupt
from ..harness import check_count
from ..driver import Case, PartFailed, Plan
from ..results import Failure, Result, ResultSet, make_result
from .collectives_options import OPS, Options
from ..figures import Figure, Given, figure
from dataclasses import replace
from ...topology.model import Topology
from ..story import NO_PAIR, Cost, Count, Node, ResultParams, Skipped, Step, Story

NO_INPLACE = ("alltoall", "sendrecv")
WORD = 4  # float32
CORRUPT = "wrong elements after the operation: NCCL or the GPUs' links corrupt data"
NCCL_MISSING = ("CuPy has no usable NCCL (cupy.cuda.nccl): install NCCL for your CUDA "
                "(pip install nvidia-nccl-cu12 / nvidia-nccl-cu13) next to CuPy")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    return 1.0


def launched_by_mpi() -> bool:
    from ... import env

    return env.world_size(os.environ) > 1


def import_nccl() -> tuple[Any, Any]:
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # before NCCL reads its environment
    from ..gpu.common import import_cupy

    cp = import_cupy()
    try:
        from cupy.cuda import nccl

        if not getattr(nccl, "available", True):
            raise ImportError
    except Exception:
        raise NodemapError(NCCL_MISSING) from None
    return cp, nccl


# --- communicators --------------------------------------------------------------


@dataclass
class Local:
    """One GPU this process drives: its NCCL communicator and stream."""

    rank: int  # NCCL rank
    device: int  # CUDA ordinal
    comm: Any
    stream: Any
    bufs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ctx:
    """The NCCL world as this process sees it."""

    cp: Any
    nccl: Any
    n: int  # NCCL ranks in all
    locals: list[Local]
    world: World = field(default_factory=alone)  # the ranks (mpi mode), or this process alone
    gpu_keys: list[str] = field(default_factory=list)  # every rank's GPU, rank order
    nccl_why: str = ""  # why the comms are None though NCCL is installed (ranks sharing a GPU), '' else

    @property
    def mpi(self) -> Any:
        """MPI.COMM_WORLD in mpi mode, else None."""
        return self.world.comm

    def max_all(self, v: float) -> float:
        """The largest value across processes (a collective: all call it)."""
        return self.world.max_all(v)

    def is_root(self) -> bool:
        return self.world.is_root()

    def sync(self) -> None:
        for lo in self.locals:
            lo.stream.synchronize()
        self.world.barrier()

    def close(self) -> None:
        if self.world.comm is not None:
            self.world.close()  # its NCCL communicator is the one local's
        else:
            for lo in self.locals:
                try:
                    if lo.comm is not None:
                        lo.comm.destroy()
                except Exception:
                    pass
        self.cp.get_default_memory_pool().free_all_blocks()


def open_ctx(mode: str, gpus: str | None, timeout: float, nccl_optional: bool = False,
             topology: str | None = None) -> Ctx:
    """With `nccl_optional`, a CuPy without NCCL gives a Ctx whose comms are
    None (ctx.nccl None), and ranks NCCL refuses (sharing a GPU) one whose
    comms are None and ctx.nccl_why says why, for benchmarks with other
    transports too; without it, either is a one-line NodemapError."""
    if mode == "auto":
        mode = "mpi" if launched_by_mpi() else "single"
    try:
        cp, nccl = import_nccl()
    except NodemapError as e:
        if not nccl_optional or str(e) != NCCL_MISSING:
            raise
        from ..gpu.common import import_cupy

        cp, nccl = import_cupy(), None
    if mode == "single":
        from ..options import gpus as gpu_list

        devs = gpu_list(gpus, cp.cuda.runtime.getDeviceCount())
        # One thread driving every GPU: all_reduce at 8 B-64 KiB hung on 2
        # and 4 H200 (NCCL 2.28.9) while p2p ops and >= 1 MiB finished.
        # Suspected cause, not yet confirmed on a GPU: connections made
        # lazily inside the first small collective's group. Connect at init
        # instead, unless the user chose otherwise.
        os.environ.setdefault("NCCL_RUNTIME_CONNECT", "0")
        with mc.deadline(timeout, "ncclCommInitAll"):
            comms = nccl.NcclCommunicator.initAll(devs) if nccl else [None] * len(devs)
        locals_ = []
        for r, (d, c) in enumerate(zip(devs, comms)):
            with cp.cuda.Device(d):
                locals_.append(Local(r, d, c, cp.cuda.Stream(non_blocking=True)))
        return Ctx(cp, nccl, len(devs), locals_, gpu_keys=gpu_keys(cp, devs, topology))
    w = world.start(timeout)
    w.gpu(cp, lambda d: gpu_keys(cp, [d], topology)[0])  # from the node's plan (world.py)
    why = w.nccl_refusal() if nccl and nccl_optional else ""
    c = w.nccl(nccl) if nccl and not why else None
    return Ctx(cp, nccl, w.size, [Local(w.rank, w.device, c, cp.cuda.Stream(non_blocking=True))], w, w.gpu_keys,
               why)


def gpu_keys(cp: Any, devs: list[int], topology: str | None = None) -> list[str]:
    """Topology names ("GPU3", as `nodemap topo` or the --topology file) of
    CUDA ordinals; cudaN where unknown."""
    from ..gpu.devices import key, load_topology

    try:
        topo = load_topology(topology)[0]
    except Exception:  # a label, never a reason to stop
        topo = None
    return [key(cp, d, topo) for d in devs]


# --- operations -----------------------------------------------------------------


def counts(op: str, size: int, n: int) -> tuple[int, int]:
    """(send elements, receive elements) per rank for a `size`-byte test; 0 when too small."""
    total = size // WORD
    if op in ("all_gather", "reduce_scatter", "alltoall"):
        c = total // n
        if c == 0:
            return 0, 0
        return {"all_gather": (c, c * n), "reduce_scatter": (c * n, c), "alltoall": (c * n, c * n)}[op]
    return total, total


def ptrs(lo: Local, op: str, inplace: bool, n: int, recv_count: int) -> tuple[int, int]:
    """(send, recv) device pointers; in-place as nccl-tests lays it out."""
    s, r = lo.bufs["send"].data.ptr, lo.bufs["recv"].data.ptr
    if not inplace:
        return s, r
    if op == "all_gather":
        return r + lo.rank * (recv_count // n) * WORD, r  # my part inside the receive buffer
    if op == "reduce_scatter":
        return s, s + lo.rank * recv_count * WORD
    return r, r


def enqueue(ctx: Ctx, op: str, inplace: bool, size: int) -> None:
    """One operation on every local GPU, all inside one NCCL group."""
    nc, n = ctx.nccl, ctx.n
    sc, rc = counts(op, size, n)
    f32, SUM = nc.NCCL_FLOAT32, nc.NCCL_SUM
    nc.groupStart()
    try:
        for lo in ctx.locals:
            sp, rp = ptrs(lo, op, inplace, n, rc)
            st, c = lo.stream.ptr, lo.comm
            if op == "all_reduce":
                c.allReduce(sp, rp, sc, f32, SUM, st)
            elif op == "all_gather":
                c.allGather(sp, rp, sc, f32, st)
            elif op == "reduce_scatter":
                c.reduceScatter(sp, rp, rc, f32, SUM, st)
            elif op == "broadcast":
                c.broadcast(sp, rp, sc, f32, 0, st)
            elif op == "reduce":
                c.reduce(sp, rp, sc, f32, SUM, 0, st)
            elif op == "alltoall":
                part = sc // n
                for peer in range(n):
                    c.send(sp + peer * part * WORD, part, f32, peer, st)
                    c.recv(rp + peer * part * WORD, part, f32, peer, st)
            elif op == "sendrecv":
                c.send(sp, sc, f32, (lo.rank + 1) % n, st)
                c.recv(rp, rc, f32, (lo.rank - 1) % n, st)
    finally:
        nc.groupEnd()


def values(cp: Any, rank: int, start: int, count: int) -> Any:
    """What rank `rank` sends at element indexes start..: small exact integers."""
    i = cp.arange(start, start + count, dtype=cp.int64)
    return ((rank + 1) * (i % 7 + 1)).astype(cp.float32)


def expected(cp: Any, op: str, rank: int, n: int, size: int) -> Any | None:
    """The receive buffer rank `rank` must hold after one `op`; None: nothing to check."""
    sc, rc = counts(op, size, n)
    tri = n * (n + 1) // 2  # sum over ranks of (rank + 1)
    one = values(cp, 0, 0, rc)  # (i % 7 + 1)
    if op == "all_reduce":
        return one * tri
    if op == "broadcast":
        return one
    if op == "reduce":
        return one * tri if rank == 0 else None
    if op == "all_gather":
        return cp.concatenate([values(cp, r, r * rc // n, rc // n) for r in range(n)])
    if op == "reduce_scatter":
        return values(cp, 0, rank * rc, rc) * tri
    if op == "alltoall":
        part = rc // n
        return cp.concatenate([values(cp, j, rank * part, part) for j in range(n)])
    if op == "sendrecv":
        return values(cp, (rank - 1) % n, 0, rc)
    raise ValueError(op)


def fill(ctx: Ctx, op: str, inplace: bool, size: int) -> None:
    """Send data per rank; receive buffers poisoned (NaN)."""
    cp, n = ctx.cp, ctx.n
    sc, rc = counts(op, size, n)
    for lo in ctx.locals:
        with cp.cuda.Device(lo.device):
            send, recv = lo.bufs["send"], lo.bufs["recv"]
            recv[:].fill(cp.nan)
            start = lo.rank * sc if op == "all_gather" else 0
            data = values(cp, lo.rank, start, sc)
            if inplace and op == "all_gather":
                recv[lo.rank * sc:(lo.rank + 1) * sc] = data
            elif inplace:
                recv[:sc] = data
                send[:sc] = data
            else:
                send[:sc] = data
            cp.cuda.Device().synchronize()


def wrong(ctx: Ctx, op: str, inplace: bool, size: int) -> int:
    """Elements that differ from the expected result, over every local GPU."""
    cp, n = ctx.cp, ctx.n
    _, rc = counts(op, size, n)
    bad = 0
    for lo in ctx.locals:
        with cp.cuda.Device(lo.device):
            want = expected(cp, op, lo.rank, n, size)
            if want is None:
                continue
            _, rp = ptrs(lo, op, inplace, n, rc)
            base = lo.bufs["recv"] if not (inplace and op == "reduce_scatter") else lo.bufs["send"]
            off = (rp - base.data.ptr) // WORD
            got = base[off:off + rc]
            bad += int((got != want).sum())
    return bad


# --- the plan -------------------------------------------------------------------


def parse_ops(spec: str) -> list[str]:
    ops = [s.strip() for s in spec.split(",") if s.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise NodemapError(f"--ops {spec!r}: choose from {','.join(OPS)}")
    return ops


def stop_agreed(ctx: Ctx) -> bool:
    """Ctrl-C on any rank: every rank leaves at the same point (one process: its own flag)."""
    if ctx.mpi is None:
        return interrupt.requested()
    if ctx.max_all(int(interrupt.requested())):
        interrupt.request()
        return True
    return False


def allocate(ctx: Ctx, nbytes: int) -> None:
    from ..gpu.common import ensure_free

    cp = ctx.cp
    for lo in ctx.locals:
        with cp.cuda.Device(lo.device):
            ensure_free(cp, 2 * nbytes, "NCCL send and receive buffers of the largest size")
            lo.bufs = {k: cp.empty(nbytes // WORD, dtype=cp.float32) for k in ("send", "recv")}


def plan_on(ctx: Ctx, command: str, make: Callable[[], list[Case]], text: Callable[[ResultSet], str],
            environment: dict[str, Any], messages: list[str]) -> Plan:
    """The Plan of a kind on this NCCL world (nccl, ring): the context closed
    after the last case, or here when planning fails; rank 0 reports; under
    MPI the ranks run the cases together (each bounds its own wait) and stop
    where they agree (stop_agreed); one process has the driver's --timeout."""
    with ExitStack() as hold:
        hold.callback(ctx.close)
        cases = make()
        return Plan(command, cases, text, environment=environment, messages=messages,
                    stop=lambda: stop_agreed(ctx), hold=hold.pop_all(), root=ctx.is_root(),
                    together=ctx.mpi is not None)


def bound(ctx: Ctx, seconds: float, what: str) -> AbstractContextManager:
    """A case's own bound under MPI (ranks run together: no watchdog there), else none (the driver's)."""
    return mc.deadline(seconds, what) if ctx.mpi is not None else nullcontext()


def plan(opts: Options) -> Plan:
    """A case per (op, size, place) that has elements; rank 0 reports."""
    from ...units import parse_sizes

    ops, sizes = parse_ops(opts.ops), parse_sizes(opts.sizes, "--sizes")
    check_count("--iters", opts.iters, 1, "operation per repetition")
    ctx = open_ctx(opts.mode, opts.gpus, opts.timeout, topology=opts.topology)
    env = {"nccl": ctx.nccl.get_version(), "cupy": ctx.cp.__version__, "ranks": ctx.n,
           "mode": "mpi" if ctx.mpi is not None else "single", "gpus": ctx.gpu_keys,
           "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE")}
    if ctx.mpi is not None:
        env["mpi"] = mc.library()
    places = [p for p in ("out", "in") if opts.inplace in ("both", p)]
    path = f"{ctx.n} ranks: " + ", ".join(ctx.gpu_keys)

    def cases() -> list[Case]:
        allocate(ctx, max(sizes))
        return [OpCase(ctx, op, size, where == "in", opts, path) for op in ops for size in sizes for where in places
                if not (where == "in" and op in NO_INPLACE or counts(op, size, ctx.n)[0] == 0)]

    return plan_on(ctx, f"bench nccl --ops {','.join(ops)} --sizes {opts.sizes}", cases, text, env,
                   list(ctx.world.notes))


class OpCase(Case):
    """One operation at one size, out-of-place or in-place: `iters` operations
    a timed repetition (CUDA events on every local stream, the slowest
    rank's), then one more on fresh buffers, every element compared. With
    --graph the `iters` operations are captured at setup (gpu/graphs.py)
    and each repetition launches the graphs instead of queuing them, the
    same events around. One process driving several GPUs captures each
    GPU's stream into a graph of its own, as nccl-tests' -G does (one graph
    over every GPU hung in NCCL: gpu/graphs.py)."""

    def __init__(self, ctx: Ctx, op: str, size: int, inplace: bool, opts: Options, path: str) -> None:
        self.ctx, self.op, self.size, self.inplace, self.iters, self.path = ctx, op, size, inplace, opts.iters, path
        self.timeout, self.use_graph = opts.timeout, opts.graph
        self.name = f"{op} {'in-place' if inplace else 'out-of-place'} {size} B"
        self.label = f"{op} {format_size(size)} {'in-place' if inplace else 'out-of-place'}"
        self._bound = ExitStack()
        self.graph: Any = None

    def setup(self) -> None:
        self._bound.enter_context(bound(self.ctx, self.timeout, f"NCCL {self.op} at {self.size} B (a hung collective)"))
        fill(self.ctx, self.op, self.inplace, self.size)
        if self.use_graph:
            from ..gpu.graphs import capture

            self.graph = capture(self.ctx.cp, [[(lo.device, lo.stream)] for lo in self.ctx.locals], self.enqueue)

    def enqueue(self) -> None:
        """The `iters` operations of one repetition."""
        for _ in range(self.iters):
            enqueue(self.ctx, self.op, self.inplace, self.size)

    def run(self) -> float:
        """Seconds per operation of one repetition, the slowest GPU's of the slowest rank."""
        ctx, cp = self.ctx, self.ctx.cp
        ctx.sync()
        evs = []
        for lo in ctx.locals:
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
        return ctx.max_all(t)

    def verify(self) -> None:
        ctx, op, inplace, size = self.ctx, self.op, self.inplace, self.size
        if self.graph is not None and not inplace:
            # what the graph's last launch left: an out-of-place operation gives the same result each time,
            # and the receive buffers were poisoned before the first launch, so a graph that did not run
            # its operations (a capture that lost them) fails here, not only the one below
            ctx.sync()
            self._check(" (the graph's last launch)")
        fill(ctx, op, inplace, size)
        enqueue(ctx, op, inplace, size)
        ctx.sync()
        self._check("")

    def _check(self, when: str) -> None:
        ctx, op, inplace, size = self.ctx, self.op, self.inplace, self.size
        bad = int(ctx.max_all(float(wrong(ctx, op, inplace, size))))
        if bad:
            where = "in-place" if inplace else "out-of-place"
            raise PartFailed(Failure("nccl", op, f"NCCL {op}", "0 wrong elements",
                                     f"{bad} wrong elements ({where}, {format_size(size)}){when}", transport="nccl",
                                     count=bad, size=size, message=f"{self.name}{when}: {bad} {CORRUPT}"))

    def results(self, times: list[float]) -> list[Result]:
        return [result(self.op, self.size, self.ctx.n, self.inplace, self.iters, times, self.path,
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


STORY = Story(params=Params, figures=figures, related=with_link_peak,
              areas=("NCCL",), steps=steps, gpu=True, priority=30,  # NVLink faults, beside the copies'
              cost={"quick": Cost(base=4.0, gpu=1.0), "full": Cost(base=20.0, gpu=2.5)})  # full 24.7 s on 2 H200s
