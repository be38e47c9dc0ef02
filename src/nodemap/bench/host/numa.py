"""`nodemap bench numa`: MLC-style matrices over NUMA nodes.

Bandwidth: one thread per core of node i on arrays bound (mbind) to node j.
Idle latency: one thread on node i chasing through a buffer on node j.
The SLIT distances of the Topology are printed beside them. Its command
line (help, Options): numa_options.py.
"""

from __future__ import annotations


from ...errors import NodemapError
from ...topology.cpuset import CpuSet
from ...topology.model import Topology
from ...units import parse_size
from . import thread_orders
from .chase import MIN_SIZE, Chase, cpu_caches
from .machine import environment, free_memory, parse_mem
from .stream import ELEMENT, Stream, array_size, host_peak, parse_kernels
from ..driver import Case, Plan, Repeats
from .numa_options import Options
from ..results import Result, ResultSet
from ..figures import Figure, Given, against_local, figure
from ..story import Cost, Count, Node, ResultParams, Seen, Skipped, Step, Story
from ...finding import Finding


def parse_kernel(text: str) -> list[str]:
    try:
        return parse_kernels(text)
    except NodemapError as e:  # the option here is --kernel
        raise NodemapError(str(e).replace("--kernels", "--kernel", 1)) from None


def cpu_nodes(topo: Topology, allowed: CpuSet) -> list[tuple[int, tuple[int, ...]]]:
    """(node, one CPU per core of it) for every node with allowed CPUs."""
    out = []
    for n in topo.numa_nodes:
        cs = n.cpuset & allowed
        if cs:
            out.append((n.os_index, thread_orders.level_orders(topo, cs)["1/core"]))
    return out


def mem_nodes(topo: Topology) -> list[int]:
    allowed = topo.allowed_mems or topo.nodeset
    return [n.os_index for n in topo.numa_nodes if n.memory > 0 and n.os_index in allowed]


def matrix_text(title: str, results: list[Result], rows: list[int], cols: list[int], fmt) -> str:
    from ...text import matrix

    cells = {(r.params["cpu_node"], r.params["mem_node"]): r for r in results}
    return title + "\n" + matrix("cpu\\mem", [f"NUMA{i}" for i in rows], [f"NUMA{j}" for j in cols],
                                 lambda i, j: fmt(cells.get((int(i[4:]), int(j[4:])))))


def slit_text(topo: Topology, rows: list[int], cols: list[int]) -> str:
    from ...text import matrix

    if not topo.distances:
        return "SLIT distances: unknown"
    return "SLIT distances\n" + matrix("cpu\\mem", [f"NUMA{i}" for i in rows], [f"NUMA{j}" for j in cols],
                                       lambda i, j: str(topo.distance(int(i[4:]), int(j[4:])) or "-"))


def plan(opts: Options) -> Plan:
    kernel = parse_kernel(opts.kernel)
    if len(kernel) != 1:
        raise NodemapError(f"--kernel {opts.kernel}: give one kernel of copy,scale,add,triad,sum")
    lat_size = parse_size(opts.latency_size, "--latency-size", minimum=MIN_SIZE) if opts.latency_size else None
    topo = thread_orders.load_topology(opts.topology)
    allowed = thread_orders.usable_cpus(topo)
    rows = cpu_nodes(topo, allowed)
    cols = mem_nodes(topo)
    if opts.mem:
        cols = list(parse_mem(topo, opts.mem))
    if not rows or not cols:
        raise NodemapError("no NUMA node with both allowed CPUs and memory found; check the cpuset/mems allowed")
    peak, unknown = host_peak(opts.peak)
    messages = list(topo.notes) + [unknown] * bool(unknown)
    if len(topo.numa_nodes) == 1:
        messages.append("this machine has one NUMA node: the matrices are 1x1")
    skipped = [n.os_index for n in topo.numa_nodes if n.memory == 0]
    if skipped:
        messages.append(f"NUMA nodes {CpuSet(skipped).format()} have no memory: no column for them")
    cases: list[Case] = []
    for i, cs, j in [(i, cs, j) for i, cs in rows for j in cols]:
        cell = {"cpu_node": i, "mem_node": j}
        n_bytes, notes = array_size(topo, CpuSet(cs), CpuSet([j]), opts.size)
        cases.append(Stream(topo, cs, n_bytes // ELEMENT, kernel, mem_nodes=CpuSet([j]),
                                        benchmark="numa", thread_order=f"NUMA{i} 1/core", peak=peak,
                                        label=f"bandwidth NUMA{i} -> NUMA{j}", params=cell, messages=notes))
        if not opts.no_latency:
            chase = Chase(topo, cs[0], lat_size or _latency_size(topo, cs[0], j), 1 << 20, CpuSet([j]),
                                  benchmark="numa", params=cell)
            chase.label, chase.repeats = f"latency NUMA{i} -> NUMA{j}", Repeats(count=min(opts.repeats, 3))
            cases.append(chase)
    rnodes = [i for i, _ in rows]

    def text(rs: ResultSet) -> str:
        bw = [r for r in rs.results if r.unit == "GB/s"]
        lat = [r for r in rs.results if r.unit == "ns"]
        parts = [matrix_text(f"{kernel[0]} bandwidth, GB/s (best of {opts.repeats})", bw, rnodes, cols,
                             lambda r: f"{r.stats.best:.1f}" if r else "")]
        if not opts.no_latency:
            parts.append(matrix_text("idle latency, ns", lat, rnodes, cols,
                                     lambda r: f"{r.stats.best:.1f}" if r else ""))
        parts.append(slit_text(topo, rnodes, cols))
        return "\n\n".join(parts)

    return Plan("bench numa", cases, text, environment=environment(topo), messages=messages)


def _latency_size(topo: Topology, cpu: int, node: int) -> int:
    caches = cpu_caches(topo, cpu)
    want = 4 * max((s for _, s in caches), default=64 << 20)
    free = free_memory(CpuSet([node]))
    return min(want, int(0.6 * free)) if free else want


def figures(results: list[Result], given: Given) -> list[Figure]:
    topo, out = given.topology, []
    for r in results:
        i, j = r.params.get("cpu_node"), r.params.get("mem_node")
        if i is None or j is None:
            continue
        dist = topo.distance(i, j) if topo is not None else None
        klass = "local" if i == j else (f"distance {dist}" if dist else "remote")
        if r.unit == "GB/s":
            out.append(figure(r, f"numa/bw/numa{i}->numa{j}", "NUMA", f"NUMA{i} cores -> NUMA{j} memory, {r.metric}",
                              group=f"numa/bw/{klass}", peak=None, peak_source=""))
        else:
            out.append(figure(r, f"numa/latency/numa{i}->numa{j}", "NUMA", f"NUMA{i} CPU -> NUMA{j} memory, latency",
                              kind="latency_DRAM" if i == j else "", part="DRAM", group=f"numa/latency/{klass}"))
    return out


def remote_against_local(figs: list[Figure], topo: Topology | None) -> list[Figure]:
    """A remote NUMA pair's bandwidth is judged against the same CPUs' local
    bandwidth: the local figure becomes the remote one's peak."""
    def cpus_of(f: Figure) -> tuple[int | None, bool] | None:
        if not f.key.startswith("numa/bw/"):
            return None
        a, b = (e.index if e and e.kind == "numa" else None for e in f.endpoints())
        return a, a == b

    return against_local(figs, cpus_of, kind="numa_remote", part="remote NUMA")


def steps(node: Node) -> list[Step | Skipped]:
    """The matrices where there are two NUMA nodes with CPUs or more (quick: fewer repetitions)."""
    if len([n for n in node.topology.numa_nodes if n.cpuset]) < 2:
        return [Skipped("NUMA matrices", "one NUMA node with CPUs: its one cell is the STREAM and latency figures")]
    quick = {"repeats": 3} if node.level == "quick" else {}
    return [Step(what="NUMA bandwidth and latency matrices", options=Options(
        size="2M" if node.tiny else None, latency_size="1M" if node.tiny else None, **quick))]


class Params(ResultParams):
    cpu_node: Count
    mem_node: Count


def finding(seen: Seen) -> Finding | None:
    """Remote bandwidth far below local is the socket interconnect; a node's own bandwidth below its peers',
    its DIMMs (its latency: the node's memory latency rule)."""
    f, v = seen.figure, seen.value
    if f.kind == "numa_remote":
        return seen.say("hardware", f"{f.label}: {v}, {f.value / f.peak:.0%} of local bandwidth" if f.peak else f.label,
                        "check the socket interconnect width/speed in the BIOS (xGMI/UPI links) and NUMA settings")
    if f.higher_is_better:
        return seen.say("hardware", f"{f.label}: {v}{seen.relative}", "check the DIMMs of that node (dmidecode -t "
                        "17: every channel populated, same speed) and the BIOS memory log")
    return None


STORY = Story(params=Params, figures=figures, related=remote_against_local, finding=finding,
              areas=("NUMA",), steps=steps, priority=60,  # n x n cells: the costliest per fault found
              # not recorded on the lent nodes (one NUMA node): a cell is a STREAM and a latency point
              cost={"quick": Cost(cell=2.0), "full": Cost(cell=5.0), "tiny": Cost(cell=0.5)})
