"""Thread orders derived from a Topology, for host bandwidth sweeps.

A thread order (class ThreadOrder; "thread_order" in Result params, read
from "placement" in files saved before 2026-11-25) is an ordered CPU list:
thread i runs on cpus[i]. Not to be confused with data placement across GPUs
(nodemap.placement, `nodemap bench placement`). "Spread"
order deals CPUs round-robin down the hierarchy (package, NUMA node, last
level cache, core, PU), so its first k CPUs are as far apart as possible;
"compact" fills one domain before the next. The sweep measures one thread
per L3 group, per core, per PU and per NUMA node, and thread counts 1..N in
spread order.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import NodemapError
from ...topology.cpuset import CpuSet
from ...topology.model import PU, Core, NumaNode, Topology


@dataclass(frozen=True)
class ThreadOrder:
    names: tuple[str, ...]  # every sweep label with exactly these CPUs: ("1/core", "spread 8")
    cpus: tuple[int, ...]  # thread i -> cpus[i]

    @property
    def name(self) -> str:
        return " = ".join(self.names)

    @property
    def threads(self) -> int:
        return len(self.cpus)


# sweep labels in words, for sentences: "1/L3" reads as "1 thread per L3 cache"
_PER = {"core": "core", "PU": "hardware thread (PU)", "NUMA": "NUMA node"}


def in_words(label: str, threads: int | None) -> str:
    """A sweep result's thread order ("1/L3 = 1/NUMA = spread 1", the labels
    of one CPU list) as a plain phrase: "1 thread per L3 cache (1 thread)"."""
    first = label.split(" = ")[0]
    count = "" if threads is None else f" ({threads} thread{'' if threads == 1 else 's'})"
    if first.startswith("1/"):
        unit = first[2:]
        return f"1 thread per {_PER.get(unit, unit + ' cache' if unit.startswith('L') else unit)}{count}"
    if first.startswith("spread "):
        n = first.removeprefix("spread ")
        return f"{n} thread{'' if n == '1' else 's'} spread over the node"
    return f"{first}{count}"


# --- the topology a benchmark runs on ------------------------------------------


def load_topology(input: str | None = None) -> Topology:
    """discover(input); for this machine, restricted to this process's CPUs.

    Falls back to a flat model of the allowed CPUs when no discovery source
    can read this machine (placements then only know cores = PUs).
    """
    from ...topology.discover import discover

    if input is not None:
        from ..harness import read_topology

        return read_topology(input)
    try:
        topo = discover()
    except ImportError:  # a discovery source not built yet
        topo = flat_topology(CpuSet(os.sched_getaffinity(0)))
    return topo


def flat_topology(cpus: CpuSet) -> Topology:
    pus = tuple(PU(c) for c in cpus)
    cores = tuple(Core(i, -1, CpuSet([c])) for i, c in enumerate(cpus))
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # MemTotal, without reading /proc
    return Topology(pus=pus, cores=cores, numa_nodes=(NumaNode(0, cpus, memory),), allowed_mems=CpuSet([0]),
                    source="flat:sched_getaffinity", notes=("no topology source: every CPU taken as its own core",))


def usable_cpus(topo: Topology) -> CpuSet:
    """CPUs the topology allows and this process may run on."""
    return topo.allowed_cpus & CpuSet(os.sched_getaffinity(0))


# --- orders --------------------------------------------------------------------


def _levels(topo: Topology) -> list[list[CpuSet]]:
    """Domain partitions, coarse to fine: packages, NUMA, LLC, cores."""
    levels = [
        [p.cpuset for p in topo.packages],
        [n.cpuset for n in topo.numa_nodes if n.cpuset],
        [c.cpuset for c in topo.last_level_caches()],
        [c.cpuset for c in topo.cores],
    ]
    levels = [lv for lv in levels if lv]
    # Sub-NUMA clustering puts NUMA nodes inside an L3: order by domain size.
    return sorted(levels, key=lambda lv: -max(len(d) for d in lv))


def _order(cpus: CpuSet, levels: list[list[CpuSet]], spread: bool) -> list[int]:
    if not levels:
        return cpus.to_list()
    parts = [d & cpus for d in levels[0] if not d.isdisjoint(cpus)]
    rest = cpus - CpuSet.union_all(parts)
    parts = sorted(set(parts) | ({rest} if rest else set()))
    orders = [_order(p, levels[1:], spread) for p in parts]
    if not spread:
        return [c for o in orders for c in o]
    out: list[int] = []
    for i in range(max(len(o) for o in orders)):
        out += [o[i] for o in orders if i < len(o)]
    return out


def spread_order(topo: Topology, cpus: CpuSet) -> list[int]:
    return _order(cpus, _levels(topo), spread=True)


def compact_order(topo: Topology, cpus: CpuSet) -> list[int]:
    return _order(cpus, _levels(topo), spread=False)


def one_per(domains: list[CpuSet], order: list[int]) -> tuple[int, ...]:
    """The first CPU of `order` in each domain, in `order`'s order."""
    picked, seen = [], set()
    for c in order:
        for i, d in enumerate(domains):
            if c in d and i not in seen:
                seen.add(i)
                picked.append(c)
                break
    return tuple(picked)


# --- the sweep -------------------------------------------------------------------


def level_orders(topo: Topology, cpus: CpuSet) -> dict[str, tuple[int, ...]]:
    """One thread per L3 group, per core, per PU and per NUMA node."""
    order = spread_order(topo, cpus)
    out: dict[str, tuple[int, ...]] = {}
    llc = topo.last_level_caches()
    if llc:
        out[f"1/L{llc[0].level}"] = one_per([c.cpuset for c in llc], order)
    out["1/core"] = one_per([c.cpuset for c in topo.cores] or [CpuSet([c]) for c in cpus], order)
    out["1/PU"] = tuple(order)
    numa = [n.cpuset for n in topo.numa_nodes if n.cpuset]
    if numa:
        out["1/NUMA"] = one_per(numa, order)
    return {k: v for k, v in out.items() if v}


def thread_counts(n: int, extra: set[int] = frozenset(), all_up_to: int = 16) -> list[int]:
    """1..n, thinned to powers of 2 plus `extra` (and n) when n is large."""
    if n <= all_up_to:
        return list(range(1, n + 1))
    powers = {1 << i for i in range(n.bit_length()) if 1 << i <= n}
    return sorted(powers | {e for e in extra if 1 <= e <= n} | {n})


def sweep(topo: Topology, cpus: CpuSet) -> list[ThreadOrder]:
    """Every placement the sweep promises, merged where CPUs coincide,
    ordered by thread count."""
    if not cpus:
        raise NodemapError("no CPUs to run on: the allowed set is empty (check taskset/cgroup cpuset)")
    levels = level_orders(topo, cpus)
    order = spread_order(topo, cpus)
    named: dict[tuple[int, ...], list[str]] = {}
    for name, cs in levels.items():
        named.setdefault(cs, []).append(name)
    for k in thread_counts(len(order), {len(v) for v in levels.values()}):
        named.setdefault(tuple(order[:k]), []).append(f"spread {k}")
    return sorted((ThreadOrder(tuple(n), cs) for cs, n in named.items()), key=lambda p: (p.threads, p.name))


def promised_names(topo: Topology, cpus: CpuSet) -> set[str]:
    levels = level_orders(topo, cpus)
    counts = thread_counts(len(cpus), {len(v) for v in levels.values()})
    return set(levels) | {f"spread {k}" for k in counts}


# --- choosing one thread order from the command line -------------------------------


def choose(topo: Topology, cpus: str | None = None, threads: int | None = None, order: str = "spread") -> ThreadOrder:
    """--cpus LIST, or --threads N in spread/compact order (default: 1/core)."""
    allowed = usable_cpus(topo)
    if cpus is not None:
        from ...topology.cpuset import CpuSetError

        try:
            want = CpuSet.parse(cpus)
        except CpuSetError as e:
            raise NodemapError(f"--cpus: {e} (use list syntax like 0-3,8-11)") from None
        outside = want - allowed
        if outside or not want:
            raise NodemapError(f"--cpus {cpus}: CPUs {outside.format() or '(none given)'} are not allowed here; "
                               f"pick from {allowed.format()}")
        return ThreadOrder((f"cpus {want.format()}",), tuple(want))
    cpus_in_order = (compact_order if order == "compact" else spread_order)(topo, allowed)
    if threads is None:
        cs = level_orders(topo, allowed).get("1/core", tuple(cpus_in_order))
        return ThreadOrder(("1/core",), cs)
    if threads < 1:
        raise NodemapError(f"--threads {threads}: need at least 1 thread")
    if threads > len(cpus_in_order):
        raise NodemapError(f"--threads {threads}: only {len(cpus_in_order)} CPUs are allowed here ({allowed.format()}); "
                           "use fewer threads")
    return ThreadOrder((f"{order} {threads}",), tuple(cpus_in_order[:threads]))


def omp_env(cpus: tuple[int, ...]) -> dict[str, str]:
    """Environment that puts OpenMP thread i on cpus[i] (libgomp and others)."""
    return {
        "OMP_NUM_THREADS": str(len(cpus)),
        "OMP_PLACES": ",".join(f"{{{c}}}" for c in cpus),
        "OMP_PROC_BIND": "close",
        "GOMP_CPU_AFFINITY": " ".join(str(c) for c in cpus),
    }
