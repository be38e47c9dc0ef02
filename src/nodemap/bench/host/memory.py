"""`nodemap bench memory`: STREAM bandwidth for one thread order, or a sweep.

Bytes are counted the STREAM way (copy/scale 2, add/triad 3 words of 8 B
per element, sum 1); the write-allocate traffic (one more word per written
array unless stores are non-temporal) is recorded beside it. Its command
line (help, Options): memory_options.py.
"""

from __future__ import annotations

from typing import Sequence

from ...topology.cpuset import CpuSet
from ...units import format_size
from . import kernels as hostkernels, thread_orders
from .machine import environment, parse_mem
from .memory_options import Options
from .stream import ELEMENT, Stream, array_size, host_peak, isa_note, parse_kernels
from ..driver import Case, Plan
from ..results import Result, ResultSet
from ..figures import Figure, Given, figure, interval
from dataclasses import replace
from ..story import Cost, Count, Node, Positive, Probe, ResultParams, Seen, Step, Story
from ...finding import Finding
from ...text import number

RECOMMEND_WITHIN = 0.02  # triad within 2% of the best counts as the best


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


class ThreadOrder(Stream):
    """STREAM on one thread order: its progress line names the order and its threads (the sweep's orders
    differ by where the threads are, which a bandwidth alone does not say)."""

    def progress(self, results: list[Result]) -> str:
        return f"{self.label}: {len(self.cpus)} threads"


def plan(opts: Options) -> Plan:
    isa = hostkernels.stream_isa()  # a bad NODEMAP_STREAM_ISA fails before any work
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
    cases: list[Case] = [ThreadOrder(topo, p.cpus, n, kernels, benchmark="memory", nt_stores=opts.nt_stores,
                                     mem_nodes=mem, thread_order=p.name, batch=opts.batch, peak=peak) for p in orders]
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


def finding(seen: Seen) -> Finding | None:
    """The best placement below the DRAM peak's share is the DIMMs'; one thread per core below the best
    placement is where the threads are (a setting)."""
    f = seen.figure
    if f.kind == "placement":
        return _placement(seen)
    if f.kind == "stream":
        return seen.say("hardware", f"{f.label}: {seen.value}, below the expected share of the DRAM peak",
                        "check DIMM population (one DIMM per channel, all channels) and memory speed in the BIOS")
    return None


def beyond_noise(f: Figure) -> bool:
    """The peak (another measurement: STREAM's best placement) beats the
    figure by more than both their spreads together: their ranges do not
    overlap, so the difference is not run-to-run noise."""
    if not f.peak or not f.value:
        return False
    return f.peak / f.value - 1 > f.spread + f.peak_spread


def _placement(seen: Seen) -> Finding:
    f, state = seen.figure, seen.state
    best = f.peak_source.removeprefix("best placement of the sweep: ")
    setting = dict(kv.split("=", 1) for kv in f.setting.replace('"', "").split(" ") if "=" in kv) if f.setting else {}
    if not beyond_noise(f):
        fix = (f"no change recommended: the best placement is {f.peak / f.value - 1:.0%} faster, within the "
               f"noise of the two (spreads {f.spread:.0%} and {f.peak_spread:.0%}); rerun with more --repeats "
               "or on an idle node to decide")
    elif setting and all(state.env.get(k) == v for k, v in setting.items() if k != "OMP_PLACES"):
        fix = (f"the recommended {' '.join(f'{k}={v}' for k, v in setting.items() if k != 'OMP_PLACES')} is "
               "already set: the check's own sweep does not follow it; bind the application's threads to "
               f"OMP_PLACES=\"{setting.get('OMP_PLACES', '')}\" (nodemap run does)")
    else:
        fix = (f"place memory-bound threads as the sweep recommends: {f.setting}" if f.setting else
               "place memory-bound threads as the best placement: `nodemap bench memory --sweep` prints its "
               "OMP_PLACES/OMP_PROC_BIND")
    return seen.say("configuration", f"STREAM peaks at {number(f.peak)} GB/s with {best}; one thread per core "
                    f"gives {number(f.value)} GB/s, {f.value / f.peak:.0%}", fix)


STORY = Story(params=Params, figures=figures, related=one_numa_node, finding=finding,
              areas=("host memory",), steps=steps, priority=40,  # host DIMMs and placement (check/budget.py)
              # quick 9.4-10.3 s on one H100 node (benchmarks/results/check_h100_20261125), full 14.7 s on two
              # H200s (verdicts_h200x2_20261128); tiny 0.1-0.2 s on the 2-vCPU CI VM (2026-11-28, load 9)
              cost={"quick": Cost(base=10.0), "full": Cost(base=15.0), "tiny": Cost(base=0.5)},
              # compare: the triad with the rank's threads
              probes=(Probe("stream", "GB/s", lambda threads, size: Options(threads=threads, kernels="triad", repeats=5,
                                                                            size=size),
                            lambda rs, node: next((r for r in rs.results if r.metric == "triad"), None)),))
