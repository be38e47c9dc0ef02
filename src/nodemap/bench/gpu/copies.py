"""`nodemap bench copies`: host<->device and device<->device copy matrices.

What it does, as its --help says, and its Options: copies_options.py.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ...errors import NodemapError
from ...text import is_decimal
from ...units import format_size, parse_size
from ...topology.model import Topology
from . import common as gc
from ..driver import Case, Plan
from ..options import choices
from .kernels import POISON_SEED, SRC_SEED  # noqa: F401 (tests fill with them through copies)
from ..peaks import Peak, d2d_path, host_class
from ..results import Result, ResultSet, make_result
from .copies_options import CASES, HOST_CASES, Options
from ..endpoints import Endpoint
from ..figures import Figure, Given, against_local, figure, key_part, said
from ..story import NO_PAIR, Cost, Node, Probe, ResultParams, Seen, Skipped, Step, Story
from ...finding import Finding

SM_BLOCK, SM_BLOCKS_PER_SM = 512, 4  # 2048 threads: a full Hopper/Ampere SM
STAGE_CHUNK = 16 << 20


@dataclass
class Copy:
    """One copy pattern: its streams' work, then how to check it."""

    metric: str  # "d2d_write_ce", "h2d_sm"...
    src: str  # row label in matrices: "GPU0", "NUMA1"
    dst: str
    path: str
    path_class: str
    peak: Peak | None
    nbytes: int  # bytes copied per repetition, all streams together
    jobs: list[gc.Job]
    checks: list[Callable[[], int]]  # each returns the number of bad words
    params: dict[str, Any] = field(default_factory=dict)
    host_timed: Callable[[], float] | None = None  # replaces the gate timing
    notes: tuple[str, ...] = ()


def plan(opts: Options) -> Plan:
    engines = tuple(choices(opts.engine, ("ce", "sm"), "--engine"))
    which = tuple(choices(opts.cases, CASES + HOST_CASES, "--cases"))
    size = parse_size(opts.size, "--size", minimum=1) if opts.size else 512 << 20
    size = max(64 << 10, size // (1 << 16) * (1 << 16))  # whole 64 KiB: 16-byte vectors, page multiples
    cp, topo, devs, rs = gc.open_bench(opts, "bench copies")
    # held until the last case: CuPy's pools emptied, the spin gate and the buffers freed; released
    # here when planning fails (a GPU without room for the buffers), else by the driver (pop_all)
    with ExitStack() as hold:
        hold.enter_context(gc.device_memory(cp))
        gate = hold.enter_context(gc.gate(cp))
        b = hold.enter_context(Bench(cp, gate, devs, topo, size, opts))
        cases: list[Case] = [Pattern(b, build) for build in b.builders(which, engines)]
        if opts.latency:
            from . import latency as gpu_latency

            cases += gpu_latency.cases(b)
        return Plan("bench copies", cases, matrices if opts.matrix else text, environment=rs.environment,
                    messages=rs.messages + b.messages, hold=hold.pop_all())


def numa_nodes(topo: Topology | None) -> list[int]:
    """NUMA nodes with memory this process may use; [-1] when unknown."""
    if topo is None or not topo.numa_nodes:
        return [-1]
    allowed = topo.allowed_mems
    nodes = [n.os_index for n in topo.numa_nodes if n.memory > 0 and (not allowed or n.os_index in allowed)
             and n.kind in ("", "DRAM")]
    return nodes or [-1]


def fan_peak(topo: Topology | None, hub: gc.Gpu, peaks: list[Peak | None], side: str) -> Peak | None:
    """Peak of all-to-one / one-to-all: the sum of the pair paths, but never
    more than the hub GPU's own NVLink ports, which every pair path through
    an NVSwitch shares (each pair shows NV18, yet the 18 links are the same)."""
    if not all(peaks):
        return None
    total = sum(p.gbs for p in peaks)
    ports = sum(l.bandwidth for l in (topo.links if topo else ()) if hub.key in (l.a, l.b))
    if ports and ports < total:
        return Peak(ports, f"{hub.key}'s NVLink ports ({ports:g} GB/s per direction, shared by all peers)")
    return Peak(total, f"sum of the {side} paths' peaks")


class Bench:
    """Buffers and streams of one `bench copies` run; builds and times Cases."""

    def __init__(self, cp: Any, gate: gc.Gate, devs: list[gc.Gpu], topo: Topology | None, size: int,
                 opts: Any) -> None:
        self.cp, self.gate, self.devs, self.topo, self.size = cp, gate, devs, topo, size
        self.repeats, self.iters = opts.repeats, opts.iters
        self.words = size // 4
        self.messages: list[str] = []
        self.nodes = [-1] if opts.host_memory == "own" else numa_nodes(topo)  # -1: the process's policy
        self.hosts: dict[tuple[int, str], gc.HostBuffer] = {}
        self.src: dict[int, Any] = {}
        self.dst: dict[int, list[Any]] = {}
        self.streams: dict[int, list[Any]] = {}
        self.peer = self._enable_peers()

    def __enter__(self) -> "Bench":
        for d in self.devs:
            with self.cp.cuda.Device(d.ordinal):
                n_dst = max(2, len(self.devs))  # all-to-one lands every source in its own buffer
                gc.ensure_free(self.cp, (1 + n_dst) * self.size, f"bench copies ({1 + n_dst} x {format_size(self.size)})")
                self.src[d.ordinal] = self.cp.empty(self.words, dtype="uint32")
                self.dst[d.ordinal] = [self.cp.empty(self.words, dtype="uint32") for _ in range(n_dst)]
                self.streams[d.ordinal] = [self.cp.cuda.Stream(non_blocking=True) for _ in range(n_dst)]
                self.fill(self.src[d.ordinal], SRC_SEED)
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self.hosts.values():
            h.close()
        self.hosts.clear()
        self.src.clear()
        self.dst.clear()

    # -- buffers ---------------------------------------------------------------

    def host(self, node: int, role: str) -> gc.HostBuffer:
        """Pinned host buffer on `node`, one per role ("src" is filled)."""
        key = (node, role)
        if key not in self.hosts:
            h = gc.HostBuffer(self.cp, self.size, node)
            self.hosts[key] = h
            if h.note:
                self.messages.append(h.note)
            if role == "src":
                with self.cp.cuda.Device(self.devs[0].ordinal):
                    self.fill(h.ptr, SRC_SEED)
        return self.hosts[key]

    def fill(self, buf: Any, seed: int) -> None:
        import numpy as np

        fn = gc.kernel(self.cp, "copies.cu", "fill")
        gc.launch(self.cp, fn, self.words, (np.uintp(_addr(buf)), np.int64(self.words), np.uint32(seed)), None, 256,
                  max_grid=65536)
        self.cp.cuda.Device().synchronize()

    def bad_words(self, buf: Any, device: int) -> int:
        """Words of `buf` not holding the source pattern, counted on `device`."""
        import numpy as np

        cp = self.cp
        with cp.cuda.Device(device):
            bad = cp.zeros(1, dtype="uint64")
            fn = gc.kernel(cp, "copies.cu", "check")
            gc.launch(cp, fn, self.words, (np.uintp(_addr(buf)), np.int64(self.words), np.uint32(SRC_SEED), bad),
                      None, 256, max_grid=65536)
            return int(bad.get()[0])

    def _enable_peers(self) -> bool:
        ok = not gc.enable_peer_access(self.cp, [d.ordinal for d in self.devs])
        if not ok and len(self.devs) > 1:
            self.messages.append("peer access is not possible between some GPUs: their d2d cases are skipped "
                                 "(the staged case still runs)")
        return ok

    # -- copy operations ----------------------------------------------------------

    def ce(self, dst: Any, src: Any, nbytes: int | None = None, iters: int = 0) -> Callable[[Any], None]:
        rt, n = self.cp.cuda.runtime, nbytes or self.size
        d, s = _addr(dst), _addr(src)

        def enqueue(stream: Any) -> None:
            for _ in range(iters or self.iters):
                rt.memcpyAsync(d, s, n, rt.memcpyDefault, stream.ptr)

        return enqueue

    def sm(self, dst: Any, src: Any, device: gc.Gpu) -> Callable[[Any], None]:
        import numpy as np

        cp = self.cp
        with cp.cuda.Device(device.ordinal):
            fn = gc.kernel(cp, "copies.cu", "copy16")
        n16 = self.size // 16
        grid = device.sm_count * SM_BLOCKS_PER_SM
        args = (np.uintp(_addr(src)), np.uintp(_addr(dst)), np.int64(n16))

        def enqueue(stream: Any) -> None:
            for _ in range(self.iters):
                fn((grid,), (SM_BLOCK,), args, stream=stream)

        return enqueue

    def op(self, engine: str, dst: Any, src: Any, issuer: gc.Gpu) -> Callable[[Any], None]:
        return self.ce(dst, src) if engine == "ce" else self.sm(dst, src, issuer)

    def job(self, issuer: gc.Gpu, k: int, enqueue: Callable[[Any], None]) -> gc.Job:
        return gc.Job(issuer.ordinal, self.streams[issuer.ordinal][k], enqueue)

    def check(self, buf: Any, device: gc.Gpu) -> Callable[[], int]:
        return lambda: self.bad_words(buf, device.ordinal)

    # -- cases ----------------------------------------------------------------------

    def builders(self, which: Sequence[str], engines: Sequence[str]) -> list[Callable[[], Copy]]:
        """A builder of every Copy of the selected kinds: buffers are allocated
        and poisoned when a case starts, not all up front."""
        pairs = [(a, b) for a in self.devs for b in self.devs if a is not b]
        out: list[Callable[[], Copy]] = []
        bind = lambda f, *a: (lambda: f(*a))  # noqa: E731 - late binding per case
        host = [f for c, f in zip(HOST_CASES, (self.h2d, self.d2h, self.host_bidir)) if "host" in which or c in which]
        for e in engines:
            if host:
                for g in self.devs:
                    for n in self.nodes:
                        out += [bind(f, g, n, e) for f in host]
            if self.peer:
                if "d2d" in which:
                    for a, b in pairs:
                        out += [bind(self.d2d, a, b, e, "write"), bind(self.d2d, a, b, e, "read")]
                if "bidir" in which:
                    out += [bind(self.d2d_bidir, a, b, e) for a, b in pairs]
                if "all" in which and len(self.devs) > 2:
                    out += [bind(self.all_to_one, g, e) for g in self.devs]
                    out += [bind(self.one_to_all, g, e) for g in self.devs]
            if "local" in which:
                out += [bind(self.local, g, e) for g in self.devs]
        if "staged" in which:
            out += [bind(self.staged, a, b) for a, b in pairs]
        return out

    def h2d(self, g: gc.Gpu, node: int, e: str) -> Copy:
        h, dst = self.host(node, "src"), self.dst[g.ordinal][0]
        return self._host_case(f"h2d_{e}", g, node, h, [self.job(g, 0, self.op(e, dst, h.ptr, g))],
                               [self.check(dst, g)], self.size)

    def d2h(self, g: gc.Gpu, node: int, e: str) -> Copy:
        h = self.host(node, "dst")
        return self._host_case(f"d2h_{e}", g, node, h, [self.job(g, 0, self.op(e, h.ptr, self.src[g.ordinal], g))],
                               [self.check(h.ptr, g)], self.size, poison=[h.ptr])

    def host_bidir(self, g: gc.Gpu, node: int, e: str) -> Copy:
        hs, hd, dst = self.host(node, "src"), self.host(node, "dst"), self.dst[g.ordinal][0]
        jobs = [self.job(g, 0, self.op(e, dst, hs.ptr, g)), self.job(g, 1, self.op(e, hd.ptr, self.src[g.ordinal], g))]
        c = self._host_case(f"h2d+d2h_{e}", g, node, hs, jobs, [self.check(dst, g), self.check(hd.ptr, g)],
                            2 * self.size, poison=[hd.ptr])
        c.peak = Peak(2 * c.peak.gbs, f"2 x {c.peak.source} (both directions)") if c.peak else None
        return c

    def _host_case(self, metric, g, node, h, jobs, checks, nbytes, poison=()) -> Copy:
        where = f"NUMA{node}" if node >= 0 else "host"
        to_gpu = not metric.startswith("d2h")
        src, dst = (where, g.key) if to_gpu else (g.key, where)
        arrow = "<->" if "+" in metric else "->"
        placed = ", ".join(f"NUMA{k}: {v:.0%}" for k, v in sorted(h.placed.items()))
        # memory placed by the process's policy (-1): its class from the node most of its pages are on
        landed = node if node >= 0 else max((k for k in h.placed if k >= 0), key=h.placed.get, default=-1)
        with self.cp.cuda.Device(g.ordinal):
            for b in poison or [self.dst[g.ordinal][0]]:
                self.fill(b, POISON_SEED)
        return Copy(metric, src, dst, f"{src} memory {arrow} {dst}" if to_gpu else f"{src} -> {dst} memory",
                    host_class(g, landed), g.pcie, nbytes, jobs, checks,
                    {"src": src, "dst": dst, "host_node": node, "host_pages": placed or "unknown"})

    def d2d(self, a: gc.Gpu, b: gc.Gpu, e: str, mode: str) -> Copy:
        issuer = a if mode == "write" else b
        dst = self.dst[b.ordinal][0]
        return self._d2d_case(f"d2d_{mode}_{e}", a, b,
                              [self.job(issuer, 0, self.op(e, dst, self.src[a.ordinal], issuer))],
                              [self.check(dst, b)], [(dst, b)])

    def d2d_bidir(self, a: gc.Gpu, b: gc.Gpu, e: str) -> Copy:
        da, db = self.dst[a.ordinal][0], self.dst[b.ordinal][0]
        jobs = [self.job(a, 0, self.op(e, db, self.src[a.ordinal], a)),
                self.job(b, 1, self.op(e, da, self.src[b.ordinal], b))]
        c = self._d2d_case(f"d2d_bidir_{e}", a, b, jobs, [self.check(db, b), self.check(da, a)], [(db, b), (da, a)],
                           nbytes=2 * self.size)
        c.peak = Peak(2 * c.peak.gbs, f"2 x {c.peak.source} (both directions)") if c.peak else None
        return c

    def _d2d_case(self, metric, a, b, jobs, checks, poison, nbytes=0) -> Copy:
        label, peak, note = d2d_path(self.topo, a, b)
        for buf, owner in poison:
            with self.cp.cuda.Device(owner.ordinal):
                self.fill(buf, POISON_SEED)
        return Copy(metric, a.key, b.key, f"{a.key} -> {b.key} {label}", label, peak, nbytes or self.size, jobs,
                    checks, {"src": a.key, "dst": b.key}, notes=(note,) if note else ())

    def local(self, g: gc.Gpu, e: str) -> Copy:
        dst = self.dst[g.ordinal][0]
        with self.cp.cuda.Device(g.ordinal):
            self.fill(dst, POISON_SEED)
        # A copy within one GPU reads and writes its memory: both count, as
        # BabelStream's copy, so the HBM datasheet figure is its peak.
        return Copy(f"local_{e}", g.key, g.key, f"{g.key} HBM -> {g.key} HBM", "X", g.hbm, 2 * self.size,
                    [self.job(g, 0, self.op(e, dst, self.src[g.ordinal], g))], [self.check(dst, g)],
                    {"counting": "read + written"})

    def all_to_one(self, g: gc.Gpu, e: str) -> Copy:
        others = [d for d in self.devs if d is not g]
        jobs, checks = [], []
        for k, o in enumerate(others):
            dst = self.dst[g.ordinal][k]
            with self.cp.cuda.Device(g.ordinal):
                self.fill(dst, POISON_SEED)
            jobs.append(self.job(o, 0, self.op(e, dst, self.src[o.ordinal], o)))
            checks.append(self.check(dst, g))
        peak = fan_peak(self.topo, g, [d2d_path(self.topo, o, g)[1] for o in others], "source")
        return Copy(f"all_to_one_{e}", "all", g.key, f"every GPU -> {g.key}", "mixed", peak,
                    len(others) * self.size, jobs, checks, {"dst": g.key})

    def one_to_all(self, g: gc.Gpu, e: str) -> Copy:
        others = [d for d in self.devs if d is not g]
        jobs, checks = [], []
        for k, o in enumerate(others):
            dst = self.dst[o.ordinal][1]
            with self.cp.cuda.Device(o.ordinal):
                self.fill(dst, POISON_SEED)
            jobs.append(self.job(g, k, self.op(e, dst, self.src[g.ordinal], g)))
            checks.append(self.check(dst, o))
        peak = fan_peak(self.topo, g, [d2d_path(self.topo, g, o)[1] for o in others], "destination")
        return Copy(f"one_to_all_{e}", g.key, "all", f"{g.key} -> every GPU", "mixed", peak,
                    len(others) * self.size, jobs, checks, {"src": g.key})

    def staged(self, a: gc.Gpu, b: gc.Gpu) -> Copy:
        """Peer access off: the copy a program without P2P makes."""
        dst = self.dst[b.ordinal][0]
        with self.cp.cuda.Device(b.ordinal):
            self.fill(dst, POISON_SEED)
        pcie = [p for p in (a.pcie, b.pcie) if p]
        peak = min(pcie, key=lambda p: p.gbs) if pcie else None
        return Copy("d2d_staged", a.key, b.key, f"{a.key} -> host -> {b.key}", "staged", peak, self.size, [],
                    [self.check(dst, b)], {"src": a.key, "dst": b.key, "chunk": STAGE_CHUNK},
                    host_timed=lambda: self._staged_once(a, b, dst))

    def _staged_once(self, a: gc.Gpu, b: gc.Gpu, dst: Any) -> float:
        cp, rt = self.cp, self.cp.cuda.runtime
        chunk = min(STAGE_CHUNK, self.size)
        bufs = [cp.cuda.alloc_pinned_memory(chunk) for _ in range(2)]
        sa, sb = self.streams[a.ordinal][0], self.streams[b.ordinal][0]
        with cp.cuda.Device(a.ordinal):
            down = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        with cp.cuda.Device(b.ordinal):
            up = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        src = _addr(self.src[a.ordinal])
        t0 = time.perf_counter()
        for i, off in enumerate(range(0, self.size, chunk)):
            n, k, h = min(chunk, self.size - off), i % 2, bufs[i % 2].ptr
            with cp.cuda.Device(a.ordinal):
                if i >= 2:
                    sa.wait_event(up[k])  # the host chunk is free again
                rt.memcpyAsync(h, src + off, n, rt.memcpyDeviceToHost, sa.ptr)
                down[k].record(sa)
            with cp.cuda.Device(b.ordinal):
                sb.wait_event(down[k])
                rt.memcpyAsync(_addr(dst) + off, h, n, rt.memcpyHostToDevice, sb.ptr)
                up[k].record(sb)
        sb.synchronize()
        return time.perf_counter() - t0


class Pattern(Case):
    """One copy pattern on the driver: its Copy built (buffers allocated,
    destinations poisoned) at setup; a repetition is `--iters` copies timed
    together, in seconds per copy; every destination word checked after."""

    def __init__(self, b: Bench, build: Callable[[], Copy]) -> None:
        self.b, self.build = b, build

    def setup(self) -> None:
        self.c = c = self.build()
        self.label = f"{c.metric} {c.src}->{c.dst}"
        self.messages = tuple(self.b.messages)  # a host buffer's pages elsewhere than asked

    def run(self) -> float:
        c, b = self.c, self.b
        if c.host_timed is not None:
            return c.host_timed()
        return max(gc.time_streams(b.cp, b.gate, c.jobs)) / b.iters

    def verify(self) -> None:
        c = self.c
        bad = sum(f() for f in c.checks)
        if bad:
            raise NodemapError(f"{c.metric} {c.path}: {bad} words differ from the source after the copy: "
                               "the copy or the memory is broken (re-run; report if it repeats)")

    def results(self, secs: list[float]) -> list[Result]:
        c, b = self.c, self.b
        eng = c.metric.rsplit("_", 1)[-1]
        return [make_result(
            "copies", c.metric, "GB/s", [c.nbytes / s / 1e9 for s in secs], verified=True,
            params={"src": c.src, "dst": c.dst, "buffer_bytes": b.size, "iters": b.iters,
                    "engine": eng if eng in ("ce", "sm") else "ce", **c.params},
            bytes=c.nbytes,
            counting=("bytes read + written" if c.metric.startswith("local") else "bytes copied")
                     + f", {c.nbytes // b.size} x {format_size(b.size)} per copy",
            path=c.path, path_class=c.path_class, peak=c.peak.gbs if c.peak else None,
            peak_source=c.peak.source if c.peak else "",
            verification=f"destination poisoned before, all {len(c.checks) * b.words} words checked after",
            notes=c.notes,
        )]


def _addr(buf: Any) -> int:
    return buf if isinstance(buf, int) else buf.data.ptr


# --- printing ----------------------------------------------------------------------


def text(rs: ResultSet) -> str:
    return gc.results_text(rs.results)


def cell(r: Result) -> str:
    """Median (nvbandwidth reports medians), path class, median's % of peak."""
    pct = f" {r.stats.median / r.peak * 100:.0f}%" if r.peak else ""
    return f"{r.stats.median:.1f} {r.path_class}{pct}"


def matrices(rs: ResultSet) -> str:
    """One matrix per metric with a src and dst (rows src, cols dst), then
    everything else as the plain table. Cells: median GB/s, path class, % of peak."""
    groups: dict[str, dict[tuple[str, str], Result]] = {}
    rest = []
    for r in rs.results:
        s, d = r.params.get("src"), r.params.get("dst")
        if r.unit == "GB/s" and s and d and "all" not in (s, d):
            groups.setdefault(r.metric, {})[(s, d)] = r
        else:
            rest.append(r)
    from ...text import matrix

    out = []
    for metric, cells in groups.items():
        rows = sorted({s for s, _ in cells}, key=_order)
        cols = sorted({d for _, d in cells}, key=_order)
        out.append(f"{metric} (GB/s median, path class, % of peak; rows = source, columns = destination)")
        out.append(matrix("src\\dst", rows, cols, lambda s, d: cell(cells[(s, d)]) if (s, d) in cells else ""))
        out.append("")
    if rest:
        out.append(gc.results_text(rest))
    return "\n".join(out).rstrip()


def _order(label: str) -> tuple[int, int, str]:
    digits = "".join(ch for ch in label if is_decimal(ch))
    return (0 if label.startswith("NUMA") else 1, int(digits) if digits else -1, label)


def figures(results: list[Result], given: Given) -> list[Figure]:
    out = []
    for r in results:
        src, dst = r.params.get("src", ""), r.params.get("dst", "")
        pair = f"{said(src)} -> {said(dst)}"
        if r.metric in ("h2d_ce", "d2h_ce"):
            host, gpu = (src, dst) if r.metric == "h2d_ce" else (dst, src)
            local = r.path_class == "NODE"
            a, b = key_part(host, "numa"), key_part(gpu, "gpu")
            d = r.metric[:3]
            key = f"{d}/{a}->{b}" if d == "h2d" else f"{d}/{b}->{a}"
            out.append(figure(r, key, "host<->GPU", f"{d.upper()} {pair} (copy engine)",
                              kind="h2d" if local else "h2d_remote", part=r.peak_source,
                              group=f"{d}/{'local' if local else 'remote'}"))
        elif r.metric == "d2d_write_ce":
            out.append(figure(r, f"d2d/{key_part(src, 'gpu')}->{key_part(dst, 'gpu')}", "GPU<->GPU",
                              f"{pair} {r.path_class} (copy engine write)", kind="d2d", part=r.path_class,
                              group=f"d2d/{r.path_class}"))
    return out + latency_figures(results)


def latency_figures(results: list[Result]) -> list[Figure]:
    """The GPU<->GPU latency matrix of `copies --latency`: a GPU's loads
    from a peer's memory (against the pairs of the same path class) and
    8-byte copies (against every pair), each above the node's minimum."""
    out = []
    for r in results:
        src, dst = said(r.params.get("src", "")), said(r.params.get("dst", ""))
        a, b = r.endpoints
        if not (a and b and a.is_gpu and b.is_gpu) or a == b:  # a GPU and a peer
            continue
        if r.metric == "load_latency":
            out.append(figure(r, f"d2d_latency/{a.key}->{b.key}", "GPU<->GPU",
                              f"{src} loads from {dst} memory, {r.path_class} (latency)", part=r.path_class,
                              group=f"d2d_latency/{r.path_class}"))
        elif r.metric == "d2d_copy_latency":
            out.append(figure(r, f"d2d_copy_latency/{a.key}->{b.key}", "GPU<->GPU",
                              f"{src} -> {dst} 8-byte copy (latency)", group="d2d_copy_latency"))
    return out


def remote_against_local(figs: list[Figure], topo: Topology | None) -> list[Figure]:
    """Host memory on another NUMA node is judged against the same GPU's
    copy from its own node: the local figure becomes the remote one's peak."""
    def gpu_of(f: Figure) -> tuple[tuple[str, str], bool] | None:
        if f.kind not in ("h2d", "h2d_remote"):
            return None
        return (f.key.split("/")[0], next((e.key for e in f.endpoints() if e and e.is_gpu), "")), f.kind == "h2d"

    return against_local(figs, gpu_of)


def steps(node: Node) -> list[Step | Skipped]:
    """Host<->GPU from every NUMA node, and GPU<->GPU where there is a pair (full: their latency too)."""
    pairs = node.gpus > 1
    opts = (Options(engine="ce", cases="host,d2d" if pairs else "host", iters=4, repeats=3)
            if node.level == "quick" else Options(latency=True))
    return [Step(what="host<->GPU (NUMA x GPU) and GPU<->GPU copies", options=opts)] + (
        [] if pairs else [Skipped("GPU<->GPU", NO_PAIR)])


class Params(ResultParams):
    src: str = ""
    dst: str = ""


def _own_h2d(rs: ResultSet, node: int) -> Result | None:
    """The row of host memory placed by the rank's own policy (host_node -1: the probe asks for that
    placement alone), else (a set of every node's rows) the row of the node its memory lands on."""
    rows: dict[int, Result] = {}
    for r in rs.results:
        if r.metric == "h2d_ce":  # the rank's one GPU: the first row of each placement
            rows.setdefault(r.params.get("host_node"), r)
    return rows.get(-1, rows.get(node))


def finding(seen: Seen) -> Finding | None:
    """A slow host<->GPU copy is its GPU's PCIe link (below its capability: the inventory's check names it)
    or, from another NUMA node's memory, where the rank's memory was put; a slow pair, the links between."""
    f, v = seen.figure, seen.value
    if f.kind == "h2d_remote":
        return seen.say("configuration", f"{f.label}: {v}, {f.value / f.peak:.0%} of the copy from the GPU's own "
                        "NUMA node" if f.peak else f"{f.label}: {v}", "bind each rank's memory to its GPU's NUMA "
                        "node (nodemap run does; numactl --membind otherwise)")
    if f.kind == "h2d" or f.area == "host<->GPU":
        g = _gpu(f)
        link = seen.links.get(g.key) if g else None
        if g and link is not None and link.verdict != "pass":
            return seen.say("hardware", f"{g.label}'s PCIe link runs {link.value} (capable of {link.expected}): "
                            f"{f.key.split('/')[0].upper()} {v}{seen.relative}",
                            "reseat the GPU or check the slot and riser", (f.key, link.key))
        return seen.say("hardware", f"{f.label}: {v}{seen.relative}, below what a "
                        f"{f.part.split(' (')[0] or 'PCIe'} link delivers", "check the GPU's PCIe link (lspci -vv "
                        "LnkSta), the IOMMU setting and that the copy ran from the GPU's own NUMA node")
    if f.kind == "d2d":
        return seen.say("hardware", f"{f.label}: {v}{seen.relative}", "check the links between the pair (nvidia-smi "
                        "nvlink -s, nvidia-smi nvlink -e for errors); for PCIe peers, the switch and ACS settings")
    return None


def _gpu(f: Figure) -> Endpoint | None:
    """The Topology GPU a figure measured (its endpoints, bench/endpoints.py): none for a CUDA ordinal
    ("cuda0"), whose index is not the node's GPU of that index (its PCIe link check)."""
    return next((e for e in f.endpoints() if e and e.kind == "gpu"), None)


STORY = Story(params=Params, figures=figures, related=remote_against_local, finding=finding,
              areas=("host<->GPU", "GPU<->GPU"), steps=steps, gpu=True, priority=20,  # PCIe and NVLink faults
              # quick 1.3-1.5 s on one H100 (check_h100_20261125), full 12.1 s on two H200s
              cost={"quick": Cost(gpu_numa=1.5, pair=1.0), "full": Cost(gpu_numa=6.0, pair=1.0)},
              # compare: h2d alone, from the rank's own host memory. One placement, the rank's own: each node's
              # row in turn ran rank A's NUMA0 row while rank B ran its NUMA2 row, so the rows summed had never
              # copied at once (and took NUMA-count times longer); the host case's d2h and h2d+d2h rows took 3x
              probes=(Probe("h2d", "GB/s", lambda threads, size: Options(cases="h2d", engine="ce", gpus="0", repeats=5,
                                                                         host_memory="own"), _own_h2d, gpu=True),))
