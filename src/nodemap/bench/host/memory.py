"""`nodemap bench memory`: STREAM bandwidth for one thread order, or a sweep.

Bytes are counted the STREAM way (copy/scale 2, add/triad 3 words of 8 B
per element, sum 1); the write-allocate traffic (one more word per written
array unless stores are non-temporal) is recorded beside it. Its command
line (help, Options): memory_options.py.
"""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

from ...errors import NodemapError
from ...topology.cpuset import CpuSet, CpuSetError
from ...topology.model import Topology
from ...topology.sysfs import nodes_undercount
from ...units import format_size, gbps, parse_size
from .. import driver
from . import kernels as hostkernels, thread_orders
from .memory_options import Options
from ..driver import Case, Plan, Repeats
from ..harness import check_count
from ..peaks import PEAK_UNKNOWN, Peak, dram_peak
from ..results import Result, ResultSet, make_result
from ..figures import Figure, Given, figure, interval
from dataclasses import replace
from ..story import Cost, Count, Node, Positive, Probe, ResultParams, Step, Story

ELEMENT = 8  # bytes of a double
RECOMMEND_WITHIN = 0.02  # triad within 2% of the best counts as the best


# --- sizes and memory --------------------------------------------------------------

MIN_ARRAY = 4096


def meminfo(path: str) -> dict[str, int]:
    out = {}
    try:
        with open(path) as f:
            for line in f:
                # "MemFree: 123 kB" or per node "Node 0 MemFree: 123 kB"
                m = re.search(r"([\w()]+):\s+(\d+)\s*kB", line)
                if m:
                    out[m.group(1)] = int(m.group(2)) * 1024
    except OSError:
        pass
    return out


def free_memory(nodes: CpuSet, root: str = "/") -> int:
    """Free bytes on `nodes`, or MemAvailable when nodes have no meminfo.

    Per node: MemFree plus the page cache and slab the kernel can drop
    (Inactive(file), SReclaimable), a node-local MemAvailable. Some
    sandboxed or virtualized sysfs trees give nodes far less memory than
    /proc/meminfo gives the machine (a lent 128 GiB VM: one node of 8 GiB);
    when `nodes` are all the nodes there are, MemAvailable is used then."""
    node_dir = os.path.join(root, "sys/devices/system/node")
    try:
        present = {int(d[4:]) for d in os.listdir(node_dir) if d[:4] == "node" and d[4:].isdecimal()}
    except OSError:
        present = set()
    total, known, node_total = 0, False, 0
    for n in present | set(nodes):
        info = meminfo(os.path.join(node_dir, f"node{n}", "meminfo"))
        node_total += info.get("MemTotal", 0)
        if n in nodes and "MemFree" in info:
            total += info["MemFree"] + info.get("Inactive(file)", 0) + info.get("SReclaimable", 0)
            known = True
    machine = meminfo(os.path.join(root, "proc/meminfo"))
    undercounted = nodes_undercount(node_total, machine.get("MemTotal", 0))
    if known and not (undercounted and present <= set(nodes)):
        return total
    return machine.get("MemAvailable", 0)


def llc_bytes(topo: Topology, cpus: CpuSet) -> int:
    return sum(c.size for c in topo.last_level_caches() if not c.cpuset.isdisjoint(cpus))


def array_size(topo: Topology, cpus: CpuSet, mem_nodes: CpuSet, size: str | None, arrays: int = 3,
               root: str = "/", option: str = "--size") -> tuple[int, list[str]]:
    """Bytes per array and notes: 4x the LLCs involved, capped by free memory."""
    nodes = mem_nodes or topo.numa_of(cpus)
    free = free_memory(nodes, root)
    where = f"NUMA {nodes.format()}" if nodes else "this machine"
    if size is not None:
        n = parse_size(size, option, minimum=MIN_ARRAY)
        if free and arrays * n > free:
            raise NodemapError(f"{option} {size}: {arrays} arrays need {format_size(arrays * n)} but {where} has "
                               f"{format_size(free)} free; give a smaller {option}")
        return n, []
    llc = llc_bytes(topo, cpus)
    want = 4 * llc if llc else 256 << 20
    notes = [] if llc else ["last-level cache size unknown: arrays of 256 MiB"]
    cap = int(0.6 * free / arrays) if free else want
    if cap < want:
        notes.append(f"arrays capped at {format_size(cap)} by free memory (4x LLC would be {format_size(want)})")
        want = cap
    return max(want, MIN_ARRAY), notes


# --- parsing ------------------------------------------------------------------------


def parse_kernels(text: str) -> list[str]:
    ks = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in ks if k not in hostkernels.KERNELS]
    if bad or not ks:
        raise NodemapError(f"--kernels: unknown kernel {', '.join(bad) or '(none)'}; "
                           f"choose from {','.join(hostkernels.KERNELS)}")
    return [k for k in hostkernels.KERNELS if k in ks]  # the STREAM order the gold values assume


def parse_mem(topo: Topology, text: str | None) -> CpuSet:
    if text is None:
        return CpuSet()
    try:
        nodes = CpuSet.parse(text)
    except CpuSetError as e:
        raise NodemapError(f"--mem: {e} (use NUMA node numbers like 0 or 0-1)") from None
    known = {n.os_index: n for n in topo.numa_nodes}
    for i in nodes:
        if i not in known:
            raise NodemapError(f"--mem {text}: there is no NUMA node {i}; nodes here: {topo.nodeset.format()}")
        if known[i].memory == 0:
            raise NodemapError(f"--mem {text}: NUMA node {i} has no memory; pick a node with memory")
    if topo.allowed_mems and not nodes.issubset(topo.allowed_mems):
        raise NodemapError(f"--mem {text}: this process may only use NUMA nodes {topo.allowed_mems.format()}")
    return nodes


# --- measuring ----------------------------------------------------------------------


def path_of(topo: Topology, cpus: Sequence[int], mem_nodes: CpuSet) -> tuple[str, str]:
    cs = CpuSet(cpus)
    home = topo.numa_of(cs)
    mem = mem_nodes or home
    src = f"NUMA{home.format()} cores({cs.format()})"
    how = "" if mem_nodes else " (first touch)"
    return f"{src} -> NUMA{mem.format()} memory{how}", "local" if mem.issubset(home) else "remote"


class Stream(Case):
    """STREAM on one set of pinned CPUs, every kernel asked: native/stream.c
    loops the repetitions (one untimed first, threads pinned and arrays
    first-touched once), each sample `batch` repetitions back to back."""

    def __init__(self, topo: Topology, cpus: Sequence[int], n: int, kernels: Sequence[str], *,
                 nt_stores: bool = False, mem_nodes: CpuSet = CpuSet(), benchmark: str = "memory",
                 thread_order: str = "", batch: int = 1, skip: int = -1, peak: Peak | None = None,
                 label: str = "", params: dict | None = None, messages: Sequence[str] = ()) -> None:
        self.topo, self.cpus, self.n, self.kernels = topo, list(cpus), n, list(kernels)
        self.nt_stores, self.mem_nodes, self.benchmark, self.thread_order = nt_stores, mem_nodes, benchmark, thread_order
        self.batch, self.skip, self.peak = batch, skip, peak
        self.label = label or thread_order
        self.params = params or {}  # added to every Result's (numa's cell)
        self.messages = messages
        self.last: hostkernels.StreamRun | None = None

    def runs(self, reps: int) -> list[dict[str, float]]:
        """Per repetition: each kernel's seconds."""
        self.last = run = hostkernels.stream(self.cpus, self.n, self.kernels, reps, nt_stores=self.nt_stores,
                                             mem_nodes=list(self.mem_nodes), batch=self.batch, skip=self.skip)
        done = len(run.seconds[self.kernels[0]])
        return [{k: run.seconds[k][i] for k in self.kernels} for i in range(done)]

    def figure(self, sample: dict[str, float]) -> float:
        return sum(sample.values())

    def verify(self) -> None:
        run = self.last
        if run is not None and not run.verified:
            raise NodemapError(f"STREAM check failed on CPUs {CpuSet(self.cpus).format()}: {run.failure()}; the "
                               "numbers are not reported (memory errors? rerun, then check the machine)")

    def results(self, samples: list[dict[str, float]]) -> list[Result]:
        assert self.last is not None
        isa, n, batch, cpus = self.last.isa, self.n, self.batch, self.cpus
        path, cls = path_of(self.topo, cpus, self.mem_nodes)
        share = node_share(self.topo, CpuSet(cpus), self.mem_nodes, self.peak)
        llc = llc_bytes(self.topo, CpuSet(cpus))
        out = []
        for k in self.kernels:
            seconds = [s[k] for s in samples]
            words = hostkernels.STREAM_WORDS[k]
            wa_words = words + (0 if self.nt_stores else hostkernels.WRITES[k])
            nbytes = words * ELEMENT * n * batch
            wa_bytes = wa_words * ELEMENT * n * batch
            out.append(make_result(
                self.benchmark, k, "GB/s", gbps(nbytes, seconds), verified=True,
                params={"threads": len(cpus), "cpus": CpuSet(cpus).format(), "cpu_order": list(cpus),
                        "thread_order": self.thread_order, "elements": n, "array_bytes": n * ELEMENT,
                        "nt_stores": self.nt_stores, "mem_nodes": self.mem_nodes.format(), "isa": isa,
                        "batch": batch, "write_allocate_bytes": wa_bytes,
                        "write_allocate_best_gbps": wa_bytes / min(seconds) / 1e9} | self.params,
                bytes=nbytes,
                counting=f"STREAM: {words} x 8 B per element ({wa_words} x 8 B with write-allocate)"
                         + (f", {batch} repetitions per sample" if batch > 1 else ""),
                path=path, path_class=cls,
                verification=f"every element of the arrays used within {hostkernels.EPSILON:g} (relative) of the "
                             "replayed gold values, arrays poisoned with NaN first"
                             + ("; sum within the same bound of n*a" if k == "sum" else ""),
                peak=share.gbs if share else None, peak_source=share.source if share else "",
                notes=(isa_note(isa),) + cache_caution(words * ELEMENT * n, llc),
            ))
        return out

    def progress(self, results: list[Result]) -> str:
        return f"{self.label}: {len(self.cpus)} threads" if self.benchmark == "memory" else super().progress(results)


def measure(topo: Topology, cpus: Sequence[int], n: int, kernels: Sequence[str], reps: int,
            **kw: Any) -> list[Result]:
    """One Stream case of `reps` samples through the driver (tests, scripts)."""
    return driver.measure_case(Stream(topo, cpus, n, kernels, **kw), Repeats(count=reps))


def node_share(topo: Topology, cpus: CpuSet, mem_nodes: CpuSet, peak: Peak | None) -> Peak | None:
    """The share of the machine's DRAM peak the memory nodes used can give:
    their part of the nodes with memory (DIMMs spread evenly over them)."""
    if peak is None:
        return None
    with_memory = [n.os_index for n in topo.numa_nodes if n.memory > 0]
    used = [i for i in (mem_nodes or topo.numa_of(cpus)) if i in with_memory]
    if not with_memory or not used or len(used) == len(with_memory):
        return peak
    frac = len(used) / len(with_memory)
    return Peak(peak.gbs * frac, f"{peak.source}; NUMA {CpuSet(used).format()}: {len(used)} of "
                                 f"{len(with_memory)} memory nodes' share")


def cache_caution(footprint: int, llc: int) -> tuple[str, ...]:
    """Arrays that fit in the last-level caches measure cache, not DRAM."""
    if not llc or footprint > llc:
        return ()
    return (f"caution: the kernel's arrays ({format_size(footprint)}) fit in the last-level caches of these CPUs "
            f"({format_size(llc)}): this is cache bandwidth, not DRAM; give a larger --size",)


def host_peak(given: float | None) -> tuple[Peak | None, str]:
    """--peak, else SMBIOS; with the note to print when unknown."""
    if given is not None:
        from ...errors import NodemapError

        if not 0 < given < 1e6:
            raise NodemapError(f"--peak {given:g}: give the DRAM peak in GB/s, e.g. 204.8")
        return Peak(given, f"--peak {given:g} GB/s"), ""
    peak = dram_peak()
    return peak, "" if peak else PEAK_UNKNOWN


def isa_note(isa: str) -> str:
    how = f"forced by {hostkernels.ISA_ENV}" if os.environ.get(hostkernels.ISA_ENV) else "the best this CPU runs"
    return f"{isa} kernels ({how})"


# --- tables -------------------------------------------------------------------------


def kernel_table(results: Sequence[Result]) -> str:
    from ...text import number, percent, table

    rows = [[r.metric, number(r.stats.best), number(r.stats.median), f"{100 * r.stats.spread:.1f}%",
             number(r.params["write_allocate_best_gbps"]), percent(r.efficiency), r.path] for r in results]
    return table(["kernel", "best GB/s", "median", "spread", "with WA GB/s", "of peak", "path"], rows)


def by_thread_order(results: Sequence[Result]) -> dict[str, dict[str, Result]]:
    rows: dict[str, dict[str, Result]] = {}
    for r in results:
        rows.setdefault(r.params["thread_order"], {})[r.metric] = r
    return rows


def recommend(results: Sequence[Result], stat: str = "best") -> tuple[str, Result] | None:
    """Highest triad within 2% using the fewest threads: (thread order, Result).
    `stat` is the figure compared: "best" (STREAM's), or "median"."""
    metric = "triad" if any(r.metric == "triad" for r in results) else (results[0].metric if results else None)
    cands = [r for r in results if r.metric == metric]
    if not cands:
        return None
    value = lambda r: getattr(r.stats, stat)
    top = max(value(r) for r in cands)
    good = [r for r in cands if value(r) >= (1 - RECOMMEND_WITHIN) * top]
    best = min(good, key=lambda r: (r.params["threads"], -value(r)))
    return best.params["thread_order"], best


def sweep_table(results: Sequence[Result], kernels: Sequence[str]) -> str:
    from ...text import number, percent, table

    rows_by = by_thread_order(results)
    ref = "triad" if "triad" in kernels else kernels[0]
    top = max((r.stats.best for r in results if r.metric == ref), default=0)
    rows = []
    for name, ks in rows_by.items():
        first = next(iter(ks.values()))
        rows.append([first.params["threads"], name, first.params["cpus"]]
                    + [number(ks[k].stats.best) if k in ks else "-" for k in kernels]
                    + [percent(ks[ref].stats.best / top) if ref in ks and top else "-"])
    return table(["threads", "thread order", "cpus"] + [f"{k} GB/s" for k in kernels] + [f"{ref} vs best"], rows,
                 right=[True, False, False] + [True] * (len(kernels) + 1))


def recommendation_text(results: Sequence[Result]) -> str:
    rec = recommend(results)
    if rec is None:
        return ""
    name, r = rec
    env = thread_orders.omp_env(tuple(r.params["cpu_order"]))
    lines = [f"recommended: {name} ({r.params['threads']} threads, {r.metric} {r.stats.best:.1f} GB/s, "
             f"within {RECOMMEND_WITHIN:.0%} of the best with the fewest threads)"]
    lines += [f"  export {k}=\"{v}\"" for k, v in env.items() if k != "GOMP_CPU_AFFINITY"]
    lines.append(f"  or (GNU OpenMP) export OMP_NUM_THREADS={env['OMP_NUM_THREADS']} "
                 f"GOMP_CPU_AFFINITY=\"{env['GOMP_CPU_AFFINITY']}\"")
    other = recommend(results, "median")
    if other and other[0] != name:
        # a 2% decision the noise can overturn: say so rather than look exact
        lines.append(f"caution: on median GB/s the choice would be {other[0]} ({other[1].params['threads']} threads): "
                     "this machine's noise exceeds the 2% the choice rests on; rerun with more --repeats, "
                     "or on an exclusive node")
    return "\n".join(lines)


# --- the command ----------------------------------------------------------------------


def environment(topo: Topology) -> dict[str, str]:
    thp = ""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().strip()
    except OSError:
        pass
    model = next((p.cpu_model for p in topo.packages if p.cpu_model), "")
    return {"cpu_model": model, "topology_source": topo.source, "transparent_hugepage": thp}


def plan(opts: Options) -> Plan:
    check_count("--batch", opts.batch, 1, "repetition per sample")
    isa = hostkernels.stream_isa()  # a bad NODEMAP_STREAM_ISA fails before any work
    if opts.threads is not None:
        check_count("--threads", opts.threads, 1, "thread")
    kernels = parse_kernels(opts.kernels)
    topo = thread_orders.load_topology(opts.topology)
    mem = parse_mem(topo, opts.mem)
    allowed = thread_orders.usable_cpus(topo)
    orders = (thread_orders.sweep(topo, allowed) if opts.sweep
              else [thread_orders.choose(topo, opts.cpus, opts.threads, opts.order)])
    used = CpuSet.union_all(CpuSet(p.cpus) for p in orders)
    n_bytes, notes = array_size(topo, used, mem, opts.size)
    n = n_bytes // ELEMENT
    peak, unknown = host_peak(opts.peak)
    cases: list[Case] = [Stream(topo, p.cpus, n, kernels, nt_stores=opts.nt_stores, mem_nodes=mem,
                                thread_order=p.name, batch=opts.batch, peak=peak) for p in orders]
    samples = f"{opts.repeats} samples of {opts.batch} back-to-back repetitions" if opts.batch > 1 else str(opts.repeats)
    head = f"STREAM, {format_size(n_bytes)} per array, best of {samples}" + (
        ", non-temporal stores" if opts.nt_stores else "") + f", {isa_note(isa)}"

    def text(rs: ResultSet) -> str:
        if opts.sweep:
            return "\n".join([head, sweep_table(rs.results, kernels), "", recommendation_text(rs.results)])
        return f"{head}, thread order {orders[0].name}\n" + kernel_table(rs.results)

    return Plan("bench memory", cases, text, environment=environment(topo),
                messages=notes + list(topo.notes) + [unknown] * bool(unknown))


def figures(results: list[Result], given: Given) -> list[Figure]:
    """The all-cores (one thread per core) triad against the best placement
    the sweep found, and, when the DRAM peak is known (SMBIOS, --peak, or a
    site file's `stream` row: `given.dram_peak`), that best placement against it."""
    triads = [r for r in results if r.metric == "triad"]
    if not triads:
        return []
    core = next((r for r in triads if "1/core" in r.params.get("thread_order", "").split(" = ")), None)
    core = core or max(triads, key=lambda r: r.params.get("threads", 0))
    best = max(triads, key=lambda r: r.stats.best)
    out = [figure(core, "host/stream/triad", "host memory",
                  f"STREAM triad, {core.params.get('threads')} threads (1/core)", kind="placement", part="DRAM",
                  peak=best.stats.best, peak_source="best placement of the sweep: "
                  + thread_orders.in_words(best.params.get("thread_order", ""), best.params.get("threads")),
                  setting=omp_setting(triads), peak_spread=best.stats.spread, **_peak_interval(best))]
    if best.peak or given.dram_peak:
        site = {} if best.peak else {"peak": given.dram_peak, "peak_source": "the site expectations' stream peak"}
        out.append(figure(best, "host/stream/best", "host memory",
                          f"STREAM triad, best placement {best.params.get('thread_order')}", kind="stream", part="DRAM",
                          **site))
    return out


def _peak_interval(r: Result) -> dict[str, float]:
    iv = interval(r)
    return {"peak_median": r.stats.median, "peak_low": iv["low"], "peak_high": iv["high"]}


def omp_setting(triads: list[Result]) -> str:
    """The OpenMP environment of the placement `bench memory --sweep`
    recommends (the fewest threads within 2% of the best), '' without CPUs."""
    rec = recommend(triads)
    cpus = tuple(rec[1].params.get("cpu_order") or ()) if rec else ()
    if not cpus:
        return ""
    env = thread_orders.omp_env(cpus)
    return " ".join(f'{k}="{env[k]}"' if k == "OMP_PLACES" else f"{k}={env[k]}"
                    for k in ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND"))


def one_numa_node(figs: list[Figure], topo: Topology | None) -> list[Figure]:
    """On one NUMA node the NUMA matrix's cell and STREAM's all-cores triad
    are the same path (every core of node 0 on its memory): peers."""
    if topo is None or len(topo.numa_nodes) != 1:
        return figs
    return [replace(f, group="numa/bw/local") if f.key == "host/stream/triad" else f for f in figs]


def steps(node: Node) -> list[Step]:
    """The STREAM sweep, the triad only (the one judged). quick keeps full's
    arrays with fewer repetitions: a best of fewer repetitions is a slightly
    worse best, inside the run-to-run noise of the VMs measured, for an
    estimated 12 s less (benchmarks/check_quick_vs_full.py)."""
    quick = {"repeats": 3} if node.level == "quick" else {}
    return [Step(what="STREAM placement sweep",
                 options=Options(sweep=True, kernels="triad", size="2M" if node.tiny else None, **quick))]


class Params(ResultParams):
    threads: Positive
    thread_order: str
    cpu_order: list[Count] = []
    cpus: str = ""


STORY = Story(params=Params, figures=figures, related=one_numa_node,
              areas=("host memory",), steps=steps, priority=40,  # host DIMMs and placement (check/budget.py)
              # quick 9.4-10.3 s on one H100 node (benchmarks/results/check_h100_20261125), full 14.7 s on two
              # H200s (verdicts_h200x2_20261128); tiny 0.1-0.2 s on the 2-vCPU CI VM (2026-11-28, load 9)
              cost={"quick": Cost(base=10.0), "full": Cost(base=15.0), "tiny": Cost(base=0.5)},
              # compare: the triad with the rank's threads
              probes=(Probe("stream", "GB/s", lambda threads, size: Options(threads=threads, kernels="triad", repeats=5,
                                                                            size=size),
                            lambda rs, node: next((r for r in rs.results if r.metric == "triad"), None)),))
