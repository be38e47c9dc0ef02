"""`nodemap bench numa`: MLC-style matrices over NUMA nodes.

Bandwidth: one thread per core of node i on arrays bound (mbind) to node j.
Idle latency: one thread on node i chasing through a buffer on node j.
The SLIT distances of the Topology are printed beside them.
"""

from __future__ import annotations

import argparse

from ..errors import NodemapError
from ..topology.cpuset import CpuSet
from ..topology.model import Topology
from ..units import parse_size
from . import driver, host_memory, latency, thread_orders
from .driver import Repeats
from .harness import Progress, Stopped, finish, session
from .results import Result, ResultSet

DESCRIPTION = """\
NUMA matrices: bandwidth with the threads of node i (one per core) on
memory of node j, and idle latency of one thread on node i chasing through
memory of node j, beside the SLIT distances the firmware reports."""

EPILOG = """\
examples:
  nodemap bench numa
  nodemap bench numa --kernel sum --size 1G --json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", default="triad", help="STREAM kernel of the bandwidth matrix (default triad)")
    p.add_argument("--latency-size", metavar="BYTES", help="bytes chased for the latency matrix (default 4x the LLC)")
    p.add_argument("--no-latency", action="store_true", help="bandwidth matrix only")
    host_memory.add_common(p)


def parse_kernel(text: str) -> list[str]:
    try:
        return host_memory.parse_kernels(text)
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
    from .report import matrix

    cells = {(r.params["cpu_node"], r.params["mem_node"]): r for r in results}
    return title + "\n" + matrix("cpu\\mem", [f"NUMA{i}" for i in rows], [f"NUMA{j}" for j in cols],
                                 lambda i, j: fmt(cells.get((int(i[4:]), int(j[4:])))))


def slit_text(topo: Topology, rows: list[int], cols: list[int]) -> str:
    from .report import matrix

    if not topo.distances:
        return "SLIT distances: unknown"
    return "SLIT distances\n" + matrix("cpu\\mem", [f"NUMA{i}" for i in rows], [f"NUMA{j}" for j in cols],
                                       lambda i, j: str(topo.distance(int(i[4:]), int(j[4:])) or "-"))


def _tag(r: Result, i: int, j: int) -> Result:
    r.params.update(cpu_node=i, mem_node=j)
    return r


def run(args: argparse.Namespace) -> int:
    kernel = parse_kernel(args.kernel)
    if len(kernel) != 1:
        raise NodemapError(f"--kernel {args.kernel}: give one kernel of copy,scale,add,triad,sum")
    lat_size = parse_size(args.latency_size, "--latency-size", minimum=latency.MIN_SIZE) if args.latency_size else None
    topo = thread_orders.load_topology(args.topology)
    allowed = thread_orders.usable_cpus(topo)
    rows = cpu_nodes(topo, allowed)
    cols = mem_nodes(topo)
    if args.mem:
        cols = list(host_memory.parse_mem(topo, args.mem))
    if not rows or not cols:
        raise NodemapError("no NUMA node with both allowed CPUs and memory found; check the cpuset/mems allowed")
    peak, unknown = host_memory.host_peak(args.peak)
    rs = ResultSet(command="bench numa", environment=host_memory.environment(topo),
                   messages=list(topo.notes) + [unknown] * bool(unknown))
    if len(topo.numa_nodes) == 1:
        rs.messages.append("this machine has one NUMA node: the matrices are 1x1")
    skipped = [n.os_index for n in topo.numa_nodes if n.memory == 0]
    if skipped:
        rs.messages.append(f"NUMA nodes {CpuSet(skipped).format()} have no memory: no column for them")
    pairs = [(i, cs, j) for i, cs in rows for j in cols]
    prog = Progress(len(pairs) * (1 if args.no_latency else 2), "numa", quiet=args.quiet)
    with session(rs, args):
        for i, cs, j in pairs:
            n_bytes, notes = host_memory.array_size(topo, CpuSet(cs), CpuSet([j]), args.size)
            got = host_memory.measure(topo, cs, n_bytes // host_memory.ELEMENT, kernel, args.repeats,
                                      mem_nodes=CpuSet([j]), benchmark="numa", thread_order=f"NUMA{i} 1/core", peak=peak)
            rs.messages += [m for m in notes if m not in rs.messages]
            if not got:  # interrupted before one repetition ended
                raise Stopped
            rs.add(_tag(got[0], i, j))
            prog.step(f"bandwidth NUMA{i} -> NUMA{j}: {got[0].stats.best:.1f} GB/s")
            if not args.no_latency:
                size = lat_size or _latency_size(topo, cs[0], j)
                chase = latency.Chase(topo, cs[0], size, 1 << 20, CpuSet([j]), benchmark="numa")
                lat = driver.measure_case(chase, Repeats(count=min(args.repeats, 3)))[0]
                rs.add(_tag(lat, i, j))
                prog.step(f"latency NUMA{i} -> NUMA{j}: {lat.stats.best:.1f} ns")
    prog.close()
    rnodes = [i for i, _ in rows]
    bw = [r for r in rs.results if r.unit == "GB/s"]
    lat = [r for r in rs.results if r.unit == "ns"]
    parts = [matrix_text(f"{kernel[0]} bandwidth, GB/s (best of {args.repeats})", bw, rnodes, cols,
                         lambda r: f"{r.stats.best:.1f}" if r else "")]
    if not args.no_latency:
        parts.append(matrix_text("idle latency, ns", lat, rnodes, cols, lambda r: f"{r.stats.best:.1f}" if r else ""))
    parts.append(slit_text(topo, rnodes, cols))
    return finish(rs, args, lambda _: "\n\n".join(parts))


def _latency_size(topo: Topology, cpu: int, node: int) -> int:
    caches = latency.cpu_caches(topo, cpu)
    want = 4 * max((s for _, s in caches), default=64 << 20)
    free = host_memory.free_memory(CpuSet([node]))
    return min(want, int(0.6 * free)) if free else want
