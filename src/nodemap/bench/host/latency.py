"""`nodemap bench latency`: load latency against working-set size.

One pinned thread chases pointers through a random single cycle of 64 B
nodes; sizes double from 4 KiB to at least 4x the largest cache of that CPU.
Each size is labelled with the level the Topology predicts it fits in.
Its command line (help, Options): latency_options.py.
"""

from __future__ import annotations


from ...errors import NodemapError
from ...topology.cpuset import CpuSet
from ...topology.model import Topology
from ...units import KiB, format_size, parse_size
from . import thread_orders
from .chase import MIN_SIZE, Chase, cpu_caches
from ..driver import Case, Plan
from .latency_options import Options
from .machine import environment, free_memory, parse_mem
from ..results import Result
from ..figures import Figure, Given, figure
from ..story import Cost, Node, Positive, ResultParams, Step, Story

def predicted_level(caches: list[tuple[str, int]], size: int) -> str:
    for label, cap in caches:
        if size <= cap:
            return label
    return "DRAM"


def sizes(max_size: int, skip_above: int = 0) -> list[int]:
    """Doubling from MIN_SIZE, then `max_size`; with `skip_above`, none
    between it and `max_size` (the chase over a working set costs time in
    proportion to its size, so the transition is most of a curve's time)."""
    out, s = [], MIN_SIZE
    while s < max_size:
        out.append(s)
        s *= 2
    return [s for s in out if not skip_above or s <= skip_above] + [max_size]


def disagreements(rows: list[tuple[int, str, float]]) -> list[str]:
    """Notes where the measurement contradicts the predicted level: rows
    (working set, predicted level, best ns) closer to the DRAM plateau (the
    largest DRAM row) than to their own level's fastest row. A VM shown a
    host's whole L3, or a cache shared with busy neighbours, looks like
    this: the prediction is the topology's claim, the plateau is what this
    CPU gets."""
    rows = sorted(rows)
    dram = [ns for _, level, ns in rows if level == "DRAM"]
    if not dram:
        return []
    floor, fastest, first = dram[-1], {}, {}
    for size, level, ns in rows:
        if level in ("", "DRAM"):
            continue
        low = fastest.setdefault(level, ns)
        if ns - low > (floor - low) / 2:
            first.setdefault(level, (size, ns))
    return [f"{level}: from {format_size(size)} the latency is nearer DRAM's ({ns:.0f} ns; DRAM {floor:.0f} ns, "
            f"{level} {fastest[level]:.0f} ns) although the topology predicts {level}: this CPU gets less of that "
            "cache than reported (a VM shown the host's cache, neighbours sharing it, or sub-NUMA clustering)"
            for level, (size, ns) in first.items()]


def latency_table(results: list[Result]) -> str:
    from ...text import number, table

    rows = [[format_size(r.params["working_set"]), r.params["level"], number(r.stats.best), number(r.stats.median),
             f"{100 * r.stats.spread:.1f}%"] for r in results]
    return table(["working set", "predicted", "best ns", "median ns", "spread"], rows,
                 right=[True, False, True, True, True])


def plan(opts: Options) -> Plan:
    topo = thread_orders.load_topology(opts.topology)
    allowed = thread_orders.usable_cpus(topo)
    cpu = allowed.first() if opts.cpu is None else opts.cpu
    if cpu not in allowed:
        raise NodemapError(f"--cpu {opts.cpu}: not allowed here; pick from {allowed.format()}")
    mem = parse_mem(topo, opts.mem)
    caches = cpu_caches(topo, cpu)
    free = free_memory(mem or topo.numa_of(CpuSet([cpu])))
    if opts.max_size:
        top = parse_size(opts.max_size, "--max-size", minimum=MIN_SIZE)
        if free and top > free:
            raise NodemapError(f"--max-size {opts.max_size}: only {format_size(free)} free; give a smaller size")
    else:
        top = 4 * max((s for _, s in caches), default=64 << 20)
        top = min(top, int(0.6 * free)) if free else top
    todo = sizes(top, max((s for _, s in caches), default=0) if opts.dram_top_only else 0)
    cases: list[Case] = [Chase(topo, cpu, s, opts.loads, mem, benchmark="latency",
                               level=predicted_level(caches, s) if caches else "") for s in todo]
    caches_txt = ", ".join(f"{label} {format_size(n)}" for label, n in caches) or "unknown"
    return Plan("bench latency", cases, environment=environment(topo),
                messages=list(topo.notes) + ["cache sizes unknown: working sets are not labelled with levels"]
                * (not caches),
                text=lambda rs: f"load latency on CPU {cpu} (caches: {caches_txt})\n" + latency_table(rs.results),
                after=lambda rs: disagreements([(r.params["working_set"], r.params["level"], r.stats.best)
                                                for r in rs.results]))


def figures(results: list[Result], given: Given) -> list[Figure]:
    """One figure per predicted level: the middle working set of the level
    (the largest for DRAM, where the plateau is). A cache level the curve
    contradicts (a VM shown the host's L3: its set's message) is no measure
    of that cache: recorded, not judged."""
    levels: dict[str, list[Result]] = {}
    for r in sorted(results, key=lambda r: r.params.get("working_set", 0)):
        levels.setdefault(r.params.get("level") or "", []).append(r)
    out = []
    for level, rows in levels.items():
        if not level:
            continue
        r = rows[-1] if level == "DRAM" else rows[len(rows) // 2]
        ws = r.params.get("working_set", 0)
        label = f"load latency, {level} ({ws // KiB} KiB working set)"  # whole KiB, as labels always said
        if level != "DRAM" and any(m.startswith(f"{level}: ") for m in given.messages):
            out.append(figure(r, f"host/latency/{level}", "latency", label + " (the curve contradicts the "
                              "predicted level: not judged)", part=level))
        else:
            out.append(figure(r, f"host/latency/{level}", "latency", label, kind=f"latency_{level}", part=level))
    return out


def steps(node: Node) -> list[Step]:
    """quick reads the DRAM latency where full does (4x the largest cache) and skips the curve's
    cache-to-DRAM transition (chasing 1-2x the largest cache is most of its time on a large L3)."""
    quick = {"dram_top_only": True, "repeats": 2} if node.level == "quick" else {}
    return [Step(what="latency against working-set size",
                 options=Options(**quick, max_size="256K" if node.tiny else None))]


class Params(ResultParams):
    working_set: Positive
    level: str = ""


STORY = Story(params=Params, figures=figures,
              areas=("latency",), steps=steps, priority=50,  # rarely shows a fault the sweep did not, costs more
              # quick 13.0-13.4 s on one H100 (check_h100_20261125), full 32.0 s on two H200s
              cost={"quick": Cost(base=14.0), "full": Cost(base=32.0), "tiny": Cost(base=0.5)})
