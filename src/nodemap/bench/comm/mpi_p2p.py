"""`nodemap bench mpi`: MPI point-to-point latency and bandwidth.

What it does, as its --help says, and its Options: mpi_p2p_options.py.
"""

from __future__ import annotations

import dataclasses
import os
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from ...errors import NodemapError
from ...units import MiB, format_size, gbps, parse_size, parse_sizes
from . import mpi_common as mc
from .p2p import LOOPS, Endpoint, Side, bw_loop, make_endpoint, seed_of, to_unit
from .world import World, start as start_world
from .. import interrupt
from ..driver import Case, Plan as DriverPlan, Repeats
from ..options import MPI_TIMEOUT_S, choices
from ..results import Result, ResultSet, make_result
from .mpi_p2p_options import SMALL, TESTS, Options
from ..figures import Figure, Given, figure
from ..story import Cost, Count, Node, ResultParams, Seen, Step, Story
from ...finding import Finding
from ...text import number

BUFFERS = ("HH", "HD", "DH", "DD")
STOP_TAG = 97


# --- inputs ---------------------------------------------------------------------


def parse_pairs(specs: list[str], n: int) -> list[tuple[int, int, str]]:
    out = []
    for s in specs:
        try:
            a, b = (int(x) for x in s.split(","))
        except ValueError:
            raise NodemapError(f"--pair {s!r}: give two rank numbers like 0,1") from None
        if a == b or not (0 <= a < n and 0 <= b < n):
            raise NodemapError(f"--pair {s!r}: two different ranks between 0 and {n - 1} (mpiexec -n {n})")
        out.append((a, b, ""))
    return out


def check_ranks(n: int, pairs: bool) -> str:
    """'' when the rank count suits the tests, else the one-line error."""
    if n < 2:
        return ("1 rank: point-to-point tests need 2 ranks; start it with the launcher: "
                "mpiexec -n 2 nodemap bench mpi")
    if pairs and n % 2:
        return (f"{n} ranks: the pair tests need an even number of ranks (every rank a partner); "
                f"use mpiexec -n {n - 1} or -n {n + 1}")
    return ""


REP_BYTES = 512 << 20  # at most this much per timed repetition, so a 64 MiB sweep stays short


def window_for(window: int, size: int) -> int:
    """OSU's window, shrunk (to no fewer than 8) where one window would move
    more than REP_BYTES: past a few MiB the link is saturated by 8 messages."""
    return max(1, min(window, max(8, REP_BYTES // max(1, size))))


def iterations(test: str, size: int, scale: float, window: int) -> int:
    """OSU's counts (latency 1000/100, bw 100/20 windows), bounded so one
    repetition moves at most about REP_BYTES."""
    base = (1000 if size <= SMALL else 100) if test == "latency" else (100 if size <= SMALL else 20)
    per = size * (1 if test == "latency" else window_for(window, size))
    cap = max(1, REP_BYTES // max(1, per))
    return max(1, int(min(base, cap) * scale))


def mem_available() -> int:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


# --- the tests (p2p.py's loops) ---------------------------------------------


def counting(test: str, window: int) -> str:
    if test == "latency":
        return "half the round trip of one message (OSU osu_latency)"
    both = " in each direction, both counted" if test == "bibw" else ""
    return f"message size x {window} messages per window{both} (OSU osu_{test})"


# --- the run --------------------------------------------------------------------


@dataclass
class Sweep:
    """What every pair measures."""

    tests: list[str]
    sizes: list[int]
    buffers: list[str]
    pairs: list[tuple[int, int, str]]
    window: int
    chunk: int
    repeats: int
    scale: float
    timeout: float
    small_repeats: int | None = None

    def repeats_at(self, size: int) -> int:
        """Repetitions of one size: --small-repeats up to SMALL bytes where given."""
        return self.small_repeats if self.small_repeats and size <= SMALL else self.repeats


def plan(opts: Options) -> DriverPlan:
    """Every rank builds the same plan: a case per (pair, buffers, test, size),
    then one per size of the multi-rail bw; rank 0 reports (driver.Plan.together)."""
    tests = choices(opts.tests, TESTS, "--tests")
    buffers = choices(opts.buffers, BUFFERS, "--buffers")
    sizes = parse_sizes(opts.sizes, "--sizes")
    chunk = parse_size(opts.chunk, "--chunk", minimum=1)
    timeout = opts.timeout if opts.timeout is not None else MPI_TIMEOUT_S
    w = start_world(timeout)
    MPI, comm, n = w.MPI, w.comm, w.size
    err = check_ranks(n, pairs=True)
    if err:
        mc.fail(comm, err)
    topo = _topology(opts.topology)
    with mc.deadline(timeout, "the other ranks' placement (allgather)"):
        places = comm.allgather(w.place(topo))
    need = 2 * max(sizes) * (3 if any("D" in b for b in buffers) else 1)
    if need > mem_available():
        mc.fail(comm, f"--sizes up to {format_size(max(sizes))} needs {format_size(need)} of host memory per rank "
                      f"but only {format_size(mem_available())} are available: lower the largest size")
    given = sorted((f.name, getattr(opts, f.name)) for f in dataclasses.fields(opts))
    rs = ResultSet(command="bench mpi " + " ".join(f"{k}={v}" for k, v in given if v not in (None, False, ())))
    rs.environment = {"mpi": mc.library(), "ranks": n, "places": [p.__dict__ for p in places]}
    aw = _awareness(comm, buffers, rs, timeout)
    buffers = _usable(buffers, aw, comm)
    if "D" in "".join(buffers):
        keys = _pick_gpu(w, sizes, rs, topo)
        places = [dataclasses.replace(p, gpu=k.split(":", 1)[1]) for p, k in zip(places, keys)]
        rs.environment["places"] = [p.__dict__ for p in places]  # with each rank's GPU, as the results' paths
    pairs = parse_pairs(list(opts.pair), n) if opts.pair else mc.interesting_pairs(places)
    sweep = Sweep(tests, sizes, buffers, pairs, opts.window, chunk, opts.repeats, opts.iters_scale, timeout,
                  opts.small_repeats)
    agreed = Agreed()
    cases: list[Case] = []
    for a, b, named in pairs:
        host_cls = named or mc.pair_class(places[a], places[b])
        for buf in buffers:
            cls = (gpu_class(topo, places[a], places[b]) or host_cls) if buf == "DD" else host_cls
            g = Group(w, sweep, places, a, b, buf, cls, aw.aware and aw.proven, agreed)
            group = [PairCase(g, test, size) for test in tests for size in sizes]
            group[-1].last = True
            cases += group
    if opts.multirail:
        rails = Rails(MPI, comm, sweep, places)
        cases += [MultirailCase(rails, size) for size in sizes]
    return DriverPlan(rs.command, cases, text, environment=rs.environment, messages=rs.messages,
                      stop=lambda: agreed.stop, root=w.rank == 0, together=True)


class Agreed:
    """Whether all ranks agreed to stop (Ctrl-C on any), as asked at each pair's end."""

    stop = False


def _topology(path: str | None) -> Any:
    if path:
        from ..harness import read_topology

        return read_topology(path)
    try:
        from ...topology.discover import discover

        return discover()
    except Exception:
        return None  # placement then says "cpus 0-3" instead of NUMA nodes


def _awareness(comm: Any, buffers: list[str], rs: ResultSet, timeout: float) -> mc.Awareness:
    aw = mc.probe(comm)
    if any("D" in b for b in buffers):
        aw = mc.prove_cuda_aware(comm, aw)
    rs.environment["cuda_aware"] = {"gpu": aw.gpu, "aware": aw.aware, "proven": aw.proven, "how": aw.how}
    rs.messages.append(aw.message())
    return aw


def _usable(buffers: list[str], aw: mc.Awareness, comm: Any) -> list[str]:
    """GPU buffers asked for on ranks without a GPU: one line, exit 2 (as
    `bench gpu`), never an empty table that exits 0."""
    gpu_kinds = [b for b in buffers if "D" in b]
    if gpu_kinds and not aw.gpu:
        mc.fail(comm, f"--buffers {','.join(gpu_kinds)}: GPU buffers need a CUDA GPU visible to every rank "
                      "(check nvidia-smi, CUDA_VISIBLE_DEVICES and the [cuda] extra); --buffers HH measures "
                      "host memory")
    return buffers


def _pick_gpu(w: World, sizes: list[int], rs: ResultSet, topo: Any) -> list[str]:
    """This rank's GPU as the world chooses it (the node's plan); every rank's "node:GPU1" (cudaN when
    the Topology does not know it)."""
    import cupy as cp

    from ..gpu.devices import ensure_free, key

    w.gpu(cp, lambda dev: key(cp, dev, topo))
    rs.messages += w.notes
    try:
        ensure_free(cp, 2 * max(sizes), "the largest message's device send and receive buffers")
    except NodemapError as e:
        mc.fail(w.comm, str(e))
    return w.gpu_keys


def gpu_class(topo: Any, a: mc.Place, b: mc.Place) -> str:
    """The GPU pair's path class (NV18, PIX, SYS...) on one node, '' if unknown."""
    if topo is None or a.host != b.host or not a.gpu.startswith("GPU") or not b.gpu.startswith("GPU"):
        return "other-node" if a.host != b.host else ""
    if a.gpu == b.gpu:
        return "same-GPU"
    try:
        from ...topology.paths import path

        return path(topo, a.gpu, b.gpu).label
    except Exception:
        return ""


class Group:
    """One pair and buffer kind: both ranks of the pair run its cases with one
    endpoint (of the largest size); the others wait at its end, where every
    rank sends its Results to rank 0 and all agree whether to go on."""

    def __init__(self, w: World, sweep: Sweep, places: list[mc.Place], a: int, b: int, buf: str, cls: str,
                 aware: bool, agreed: Agreed) -> None:
        self.w, self.MPI, self.comm, self.sweep, self.places = w, w.MPI, w.comm, sweep, places
        self.a, self.b, self.buf, self.cls, self.aware, self.agreed = a, b, buf, cls, aware, agreed
        self.rank = w.rank
        self.side: Side | None = None
        self.stopped = False  # both ranks of the pair agreed to stop (Ctrl-C on either)
        self.results: list[Result] = []
        self.transport = "host" if "D" not in buf else ("cuda-aware" if aware else "staged")

    def open(self) -> Side:
        if self.side is None:
            first, peer = self.rank == self.a, self.b if self.rank == self.a else self.a
            ep = make_endpoint(self.buf, self.buf[0] if first else self.buf[1], self.MPI, self.comm,
                               max(self.sweep.sizes), seed_of(self.rank), self.aware, self.sweep.chunk)
            self.side = Side(self.MPI, self.comm, ep, peer, first)
        return self.side

    def end(self) -> list[Result]:
        """The pair's end (a barrier the others wait at), the gather to rank 0, the agreed stop."""
        sw = self.sweep
        whole = sw.timeout * len(sw.tests) * len(sw.sizes)
        if self.rank in (self.a, self.b):
            if self.side is not None:
                self.side.ep.close()
            with mc.deadline(sw.timeout, "the pair's end (barrier)"):
                self.comm.Barrier()
        else:
            with mc.deadline(whole, f"ranks {self.a},{self.b} to finish"):
                self.comm.Barrier()
        got = _collect(self.comm, self.results, self.places, self.a, self.b, self.cls, whole)
        with mc.deadline(sw.timeout, "the other ranks' stop flags (allreduce)"):
            self.agreed.stop = self.w.stop_agreed()  # any rank's Ctrl-C: all leave here, rank 0 reports
        return got


class PairCase(Case):
    """One test at one size between the pair's ranks (OSU's loops, LOOPS)."""

    last = False  # the group's last case: the group's end follows it
    shows_best = False

    def __init__(self, g: Group, test: str, size: int) -> None:
        sw = g.sweep
        self.g, self.test, self.size = g, test, size
        self.iters = iterations(test, size, sw.scale, sw.window)
        self.w = window_for(sw.window, size)
        self.repeats = Repeats(count=sw.repeats_at(size), warmup=1)
        self.label = f"{test} {g.buf} {size} B ranks {g.a},{g.b}"
        self._deadline = ExitStack()

    @property  # type: ignore[override]
    def mine(self) -> bool:
        return self.g.rank in (self.g.a, self.g.b) and not self.g.stopped

    def setup(self) -> None:
        s = self.g.open()
        self._deadline.enter_context(mc.deadline(self.g.sweep.timeout,
                                                 f"rank {s.peer} in {self.test} at {self.size} B"))
        s.ep.poison()

    def run(self) -> float:
        return LOOPS[self.test](self.g.open(), self.size, self.iters, self.w)

    def stop(self) -> bool:  # type: ignore[override]
        """Ctrl-C on either rank of the pair: both stop after the same
        repetition (exchanged between repetitions, outside the timed loops)."""
        s = self.g.open()
        mine = int(interrupt.requested())
        theirs = s.comm.sendrecv(mine, dest=s.peer, source=s.peer, sendtag=STOP_TAG, recvtag=STOP_TAG)
        if theirs:
            interrupt.request()
        self.g.stopped = bool(mine or theirs)
        return self.g.stopped

    def verify(self) -> None:
        s = self.g.open()
        ok = s.verified(self.test, self.size)  # both ranks of the pair
        if s.first and not ok:
            raise NodemapError(f"MPI {self.test} of {self.size} B ({self.g.buf}) delivered wrong bytes: the "
                               "transport corrupts data (for D buffers: a library that claims CUDA-awareness "
                               "but is not)")

    def results(self, times: list[float]) -> list[Result]:
        """The sender's (rank a's) Result; the driver notes an interruption."""
        if not self.g.open().first:
            return []
        test, size, iters, w = self.test, self.size, self.iters, self.w
        return [make_result(
            "mpi", test, "us" if test == "latency" else "GB/s", [to_unit(test, size, iters, w, t) for t in times],
            verified=True,
            params={"size": size, "iters": iters, "window": w if test != "latency" else 1,
                    "buffers": self.g.buf, "transport": self.g.transport, "chunk": self.g.sweep.chunk},
            bytes=0 if test == "latency" else size * w * iters * (2 if test == "bibw" else 1),
            counting=counting(test, w),
            verification="receive buffers poisoned (0xFF) before, compared byte by byte with the sender's pattern "
                         "after, on every receiving rank",
        )]

    def teardown(self) -> None:
        self._deadline.close()

    def gather(self, results: list[Result]) -> list[Result]:
        self.g.results += results
        return self.g.end() if self.last else []


def _collect(comm: Any, mine: list[Result], places: list[mc.Place], a: int, b: int, cls: str,
             timeout: float) -> list[Result]:
    """Every rank's Results on rank 0, each with the pair's path (the others get none)."""
    with mc.deadline(timeout, "results from the other ranks (gather)"):
        got = comm.gather(mine, root=0)
    if got is None:
        return []
    path = f"{places[a].label()} -> {places[b].label()}"
    return [dataclasses.replace(r, path=path + via(r.params.get("transport", "")), path_class=cls)
            for r in (r for part in got for r in part)]


def via(transport: str) -> str:
    return {"staged": " (staged: GPU -> pinned host -> MPI -> pinned host -> GPU)",
            "cuda-aware": " (device buffers straight to MPI)"}.get(transport, "")


# --- multi-rail -----------------------------------------------------------------


def rail_pairs(places: list[mc.Place]) -> list[tuple[int, int]]:
    """Rank pairs exchanging at once: node 0's ranks with node 1's, else the
    first half of the ranks with the second half."""
    hosts = list(dict.fromkeys(p.host for p in places))
    if len(hosts) >= 2:
        left = [p.rank for p in places if p.host == hosts[0]]
        right = [p.rank for p in places if p.host == hosts[1]]
        return list(zip(left, right))
    h = len(places) // 2
    return [(i, i + h) for i in range(h)]


class Rails:
    """Every rank pair at once (rail_pairs): the endpoint their sizes share."""

    def __init__(self, MPI: Any, comm: Any, sweep: Sweep, places: list[mc.Place]) -> None:
        self.MPI, self.comm, self.sweep, self.places = MPI, comm, sweep, places
        self.rank = comm.Get_rank()
        self.pairs = rail_pairs(places)
        self.partner = {a: (b, True) for a, b in self.pairs} | {b: (a, False) for a, b in self.pairs}
        self.inter = len({p.host for p in places}) >= 2
        self.ep: Endpoint | None = None

    def endpoint(self) -> Endpoint:
        if self.ep is None:
            self.ep = Endpoint(self.MPI, self.comm, max(self.sweep.sizes), seed_of(self.rank))
        return self.ep


class MultirailCase(Case):
    """Every pair runs bw at once at one size; aggregate = all bytes / the slowest sender."""

    shows_best = False

    def __init__(self, rails: Rails, size: int) -> None:
        sw = rails.sweep
        self.rails, self.size = rails, size
        self.iters = iterations("bw", size, sw.scale, sw.window)
        self.w = window_for(sw.window, size)
        self.repeats = Repeats(count=sw.repeats, warmup=1)
        self.label = f"multi-rail bw {size} B"
        self._deadline = ExitStack()

    def stop(self) -> bool:  # type: ignore[override]
        return False  # every rank runs every repetition (the reduction in each is collective)

    def setup(self) -> None:
        self._deadline.enter_context(mc.deadline(self.rails.sweep.timeout, f"multi-rail bw at {self.size} B"))
        self.rails.endpoint().poison()

    def run(self) -> float:
        """One repetition, the slowest pair's seconds (ranks without a pair wait in the reduction)."""
        r, MPI = self.rails, self.rails.MPI
        r.comm.Barrier()
        t = bw_loop(Side(MPI, r.comm, r.endpoint(), r.partner[r.rank][0], r.partner[r.rank][1]), self.size,
                    self.iters, self.w) if r.rank in r.partner else 0.0
        return r.comm.allreduce(t, op=MPI.MAX)

    def verify(self) -> None:
        r = self.rails
        ok = True
        if r.rank in r.partner and not r.partner[r.rank][1]:
            ok = r.endpoint().check(self.size, seed_of(r.partner[r.rank][0]))
        if not bool(r.comm.allreduce(int(ok), op=r.MPI.MIN)):
            raise NodemapError(f"multi-rail bw at {self.size} B delivered wrong bytes: the transport corrupts data")

    def results(self, times: list[float]) -> list[Result]:
        r, size, w, iters = self.rails, self.size, self.w, self.iters
        if r.rank != 0:
            return []
        moved = len(r.pairs) * size * w * iters
        where = "between 2 nodes" if r.inter else "inside one node (no second node: shared memory, not NICs)"
        return [make_result(
            "mpi", "multirail bw", "GB/s", gbps(moved, times), verified=True,
            params={"size": size, "iters": iters, "window": w, "pairs": len(r.pairs),
                    "buffers": "HH", "transport": "host"},
            bytes=moved, counting=f"{len(r.pairs)} pairs x message x {w} per window, over the "
                                  "slowest pair's time (aggregate per node)",
            path=f"{len(r.pairs)} rank pairs at once, {where}",
            path_class="inter-node" if r.inter else "intra-node",
            verification="every receiving rank's buffer poisoned before and checked after",
            notes=() if r.inter else ("one node: this is the node's shared-memory MPI path, not its NIC "
                                      "rails; run across 2 nodes for the rails",),
        )]

    def teardown(self) -> None:
        self._deadline.close()


# --- text -----------------------------------------------------------------------


def text(rs: ResultSet) -> str:
    from ...text import number, table

    rows = []
    for r in rs.results:
        p = r.params
        rows.append([r.metric, p.get("buffers", ""), p.get("transport", ""), format_size(p.get("size", 0)),
                     number(r.stats.best), number(r.stats.median), f"{100 * r.stats.spread:.1f}%", r.unit,
                     r.path_class, r.path])
    return table(["test", "buf", "transport", "size", "best", "median", "spread", "unit", "class", "path"], rows,
                 right=[False] * 3 + [True] * 4 + [False] * 3)


def figures(results: list[Result], given: Given) -> list[Figure]:
    """Per buffer kind: latency at the smallest message (host buffers) and
    bandwidth at 16 MiB (the size quick and full both measure). Device
    buffers are judged against the GPUs' copy engines (`device_peak`)."""
    size = mc.figure_size(results)
    out = []
    for buf in ("HH", "DD"):
        rows = [r for r in results if r.params.get("buffers") == buf and r.path_class != "multirail"]
        lat = [r for r in rows if r.metric == "latency"]
        bw = [r for r in rows if r.metric == "bw" and r.params.get("size") == size]
        if lat and buf == "HH":
            r = min(lat, key=lambda r: r.params.get("size", 0))
            out.append(figure(r, "mpi/HH/latency", "MPI", f"MPI latency, host buffers, {r.params.get('size')} B "
                              f"({r.path_class})", kind="mpi_latency", part="host"))
        for r in bw[:1]:
            how = r.params.get("transport", "")
            out.append(figure(r, f"mpi/{buf}/bw", "MPI", f"MPI bandwidth, {'host' if buf == 'HH' else 'device'} "
                              f"buffers ({how}), {size // MiB} MiB, {r.path_class}",
                              kind="mpi_host" if buf == "HH" else "mpi_device", part=how))
    return out


def device_peak(figs: list[Figure], topo: Any = None) -> list[Figure]:
    """MPI with device buffers against the GPU pair's copy-engine bandwidth
    on the same path class (what CUDA IPC moves), else the node's median
    GPU<->GPU copy; no GPU pair measured: recorded only."""
    import statistics

    d2d = [f for f in figs if f.kind == "d2d"]
    out = []
    for f in figs:
        if f.kind == "mpi_device" and d2d:
            same = [d for d in d2d if d.path_class == f.path_class]
            over = same[0].path_class if same else "all GPU pairs"  # no pair on the MPI pair's path class
            f = dataclasses.replace(f, peak=statistics.median(d.value for d in same or d2d),
                                    peak_source=f"median GPU<->GPU copy-engine write over {over} on this node")
        out.append(f)
    return out


LATENCY_SIZE = 1  # latency is read at the smallest size: the default sizes start at 1 B
# Repetitions of the small messages (latency's): one takes about a millisecond, so one preemption of a rank
# by a daemon (a 2-vCPU VM: 2.4 us became 5+ us in 1 of 3) decided a 3-repetition range ([min, max], 75%);
# 15 give the median an order-statistic 95% interval [x(4), x(12)] that leaves 3 such repetitions out, for
# a few tens of ms more.
SMALL_REPEATS = 15


def check_options(level: str, gpu: bool) -> Options:
    """quick measures only the two sizes and tests that are judged, with
    fewer and shorter repetitions; both levels take SMALL_REPEATS of the
    small messages; device buffers too where a GPU is measured."""
    buffers = "HH,DD" if gpu else "HH"
    if level == "quick":
        return Options(sizes=f"{LATENCY_SIZE},{mc.FIGURE_SIZE // MiB}MiB", tests="latency,bw", repeats=3,
                       small_repeats=SMALL_REPEATS, iters_scale=0.3, timeout=60.0, buffers=buffers)
    return Options(timeout=120.0, buffers=buffers, small_repeats=SMALL_REPEATS)


def steps(node: Node) -> list[Step]:
    return [Step(what="MPI point-to-point, host and device buffers", options=check_options(node.level, node.gpus > 0))]


class Params(ResultParams):
    size: Count
    buffers: str = ""
    transport: str = ""


# UCX transports that carry on-node traffic through shared memory, and CUDA IPC
UCX_SHM = ("sm", "shm", "posix", "sysv", "cma", "xpmem", "knem", "all")
UCX_CUDA = ("cuda_ipc", "cuda", "all")
GPU_SUPPORT_VARS = (("MPIR_CVAR_ENABLE_GPU", "1"), ("MPICH_GPU_SUPPORT_ENABLED", "1"))


def finding(seen: Seen) -> Finding | None:
    """Slow MPI on one node is its transport settings: device buffers staged (MPI not CUDA-aware), no CUDA
    IPC, or no shared memory (or ranks sharing a core); a setting already in effect is not proposed."""
    f, v, state = seen.figure, seen.value, seen.state
    if not f.kind.startswith("mpi_"):
        return None
    if f.kind == "mpi_device" and f.part == "staged":
        staged = (f"device buffers are staged ({v} vs {number(f.peak)} {f.unit} between the GPUs' copy engines)"
                  if f.peak else f"device buffers are staged ({v})")
        return seen.say("configuration", f"MPI is not CUDA-aware: {staged}", _cuda_aware_fix(state),
                        (f.key, seen.aware_key))
    if f.kind == "mpi_device":
        near = "that each rank uses the GPU near it (nodemap run)"
        fix = (f"check {near}; UCX_TLS={state.env['UCX_TLS']} already includes CUDA IPC" if state.ucx_tls(UCX_CUDA)
               else f"check that UCX_TLS includes cuda_ipc (NCCL/UCX peer access) and {near}")
        return seen.say("configuration", f"{f.label}: {v}, {f.value / f.peak:.0%} of the GPUs' copy engines"
                        if f.peak else f"{f.label}: {v}", fix)
    what = "slower" if f.kind == "mpi_latency" else "below what shared memory moves"
    fix = ("check that each rank has a core of its own (nodemap run binds them); UCX_TLS="
           f"{state.env['UCX_TLS']} already includes shared memory" if state.ucx_tls(UCX_SHM) else
           "check UCX_TLS / FI_PROVIDER / OMPI_MCA_btl (shared memory: shm, sm, vader, cma) and that each "
           "rank has a core of its own")
    return seen.say("configuration", f"{f.label}: {v}, {what}: the ranks do not use shared memory or share a core",
                    fix)


def _cuda_aware_fix(state: Any) -> str:
    """A CUDA-aware build is proposed only where MPI is not one; the GPU
    switch of MPICH only where it is not already set."""
    on = [f"{k}={val}" for k, val in GPU_SUPPORT_VARS if state.env.get(k) == val]
    if state.cuda_aware:
        return ("this MPI is CUDA-aware (see the awareness check), yet device buffers were staged: pass device "
                "pointers to MPI and check that the GPU transport is enabled" +
                (f" ({', '.join(on)} is already set: check UCX_TLS/UCX_MEMTYPE_CACHE)" if on else
                 " (MPICH: MPIR_CVAR_ENABLE_GPU=1, Cray MPICH: MPICH_GPU_SUPPORT_ENABLED=1)"))
    if on:
        return (f"{', '.join(on)} is already set, so this MPI build has no GPU support: use a CUDA-aware MPI build "
                "(Open MPI/UCX built with CUDA, MPICH built with CUDA)")
    return ("use a CUDA-aware MPI build (Open MPI/UCX built with CUDA, MPICH with MPIR_CVAR_ENABLE_GPU=1, Cray "
            "MPICH with MPICH_GPU_SUPPORT_ENABLED=1)")


STORY = Story(params=Params, figures=figures, related=device_peak, finding=finding,
              areas=("MPI",), steps=steps, launched=True,
              priority=70,  # a launcher's start-up; tells mostly of the job's environment, not the node
              cost={"quick": Cost(base=8.0), "full": Cost(base=85.0)})  # about 7 s quick on an H100, 84.3 s full
