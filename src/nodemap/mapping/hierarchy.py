"""The usable part of a node as the planner walks it: NUMA domains, each a
list of cores in hierarchy order, with the cache/group levels above them.

Cores are sorted depth first (package, NUMA, groups, L3, L2... then first
PU), so every object of every level is a run of consecutive cores and a
task can be given "contiguous objects" as a slice. Levels that repeat
another level (an L2 per core, an L3 per NUMA node) are dropped once here,
which keeps a 16k-PU node cheap to prepare.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..topology.cpuset import CpuSet
from ..topology.model import Topology


def members(cs: CpuSet) -> list[int]:
    """Members in ascending order; fast for both small and huge sets."""
    m = cs.mask
    if m.bit_count() <= 8:
        out = []
        while m:
            low = m & -m
            out.append(low.bit_length() - 1)
            m ^= low
        return out
    s = bin(m)
    top = len(s) - 1
    out = []
    i = s.find("1", 2)
    while i != -1:
        out.append(top - i)
        i = s.find("1", i + 1)
    out.reverse()
    return out


@dataclass
class Level:
    name: str  # "L3", "Group", "Core"...
    starts: list[int]  # index of the first core of each object (in domain order)


@dataclass
class Domain:
    numa: int  # NUMA os_index, -1 when the node has no NUMA information
    package: int  # index of its package in hierarchy order, -1 unknown
    cores: list[list[int]]  # usable PUs of each core, in hierarchy order
    levels: list[Level] = field(default_factory=list)  # finer than the domain, coarse first

    @property
    def npus(self) -> int:
        return sum(len(c) for c in self.cores)

    @property
    def cpus(self) -> CpuSet:
        return CpuSet(p for c in self.cores for p in c)


def _families(topo: Topology) -> list[tuple[str, list[tuple[int, CpuSet]]]]:
    """Every CPU grouping the model knows, as (name, [(os index, cpuset)])."""
    fams = [("Package", [(p.os_index, p.cpuset) for p in topo.packages])]
    fams.append(("NUMA", [(n.os_index, n.cpuset) for n in topo.numa_nodes if n.cpuset]))
    for k in sorted({g.kind for g in topo.groups}):
        fams.append((k, [(g.os_index, g.cpuset) for g in topo.groups if g.kind == k]))
    levels = sorted({c.level for c in topo.caches if c.kind in ("unified", "data")}, reverse=True)
    fams += [(f"L{lv}", [(i, c.cpuset) for i, c in enumerate(topo.caches_at(lv))]) for lv in levels]
    return fams


def _core_sets(topo: Topology, usable: CpuSet) -> list[list[int]]:
    cores = []
    covered = 0
    for c in topo.cores:
        s = c.cpuset & usable
        if s:
            cores.append(members(s))
            covered |= s.mask
    # PUs no core claims (sources without core objects) become cores of one PU.
    cores += [[p] for p in members(usable - CpuSet.from_mask(covered))]
    return cores


@dataclass
class _Family:
    name: str
    rank: dict[int, int]  # PU -> rank of its object (objects in first-PU order)
    labels: list[int]  # rank -> os index


def _family(name: str, objs: list[tuple[int, CpuSet]], usable: CpuSet) -> _Family:
    inside = sorted(((s & usable, label) for label, s in objs if not s.isdisjoint(usable)),
                    key=lambda x: x[0])
    rank: dict[int, int] = {}
    for r, (s, _) in enumerate(inside):
        for p in members(s):
            rank.setdefault(p, r)
    return _Family(name, rank, [label for _, label in inside])


def _kept_families(topo: Topology, usable: CpuSet, ncores: int) -> list[_Family]:
    """Families that group the usable cores in a new way, coarse first."""
    kept: list[_Family] = []
    counts = {1, ncores}
    for name, objs in _families(topo):
        count = sum(1 for _, s in objs if not s.isdisjoint(usable))
        if name != "NUMA" and count in counts:
            continue  # same grouping as a kept level, or no grouping at all
        counts.add(count)
        kept.append(_family(name, objs, usable))
    kept.sort(key=lambda f: len(f.labels))  # stable: Package before NUMA on ties
    return kept


def domains(topo: Topology, usable: CpuSet) -> list[Domain]:
    """The NUMA domains holding usable PUs, in hierarchy order."""
    cores = _core_sets(topo, usable)
    fams = _kept_families(topo, usable, len(cores))
    names = [f.name for f in fams]
    keys = [tuple(f.rank.get(c[0], -1) for f in fams) + (c[0],) for c in cores]
    order = sorted(range(len(cores)), key=keys.__getitem__)
    inuma = names.index("NUMA") if "NUMA" in names else -1
    ipkg = names.index("Package") if "Package" in names else -1
    out: list[Domain] = []
    rows: list[list[tuple]] = []
    for ci in order:
        k = keys[ci]
        nid = fams[inuma].labels[k[inuma]] if inuma >= 0 and k[inuma] >= 0 else -1
        if not out or out[-1].numa != nid:
            out.append(Domain(nid, k[ipkg] if ipkg >= 0 else -1, []))
            rows.append([])
        out[-1].cores.append(cores[ci])
        rows[-1].append(k)
    for d, ks in zip(out, rows):
        for i in range(inuma + 1, len(fams)):
            starts = [j for j in range(len(ks)) if j == 0 or ks[j][i] != ks[j - 1][i]]
            if 1 < len(starts) < len(ks):
                d.levels.append(Level(names[i], starts))
    return _merge_split_domains(out)


def _merge_split_domains(ds: list[Domain]) -> list[Domain]:
    """A NUMA node whose cores are not contiguous in hierarchy order (odd
    nesting) would show up twice; fold the pieces together."""
    seen: dict[int, Domain] = {}
    out = []
    for d in ds:
        if d.numa in seen:
            seen[d.numa].cores += d.cores
            seen[d.numa].levels = []  # the pieces' object runs no longer line up
            continue
        seen[d.numa] = d
        out.append(d)
    return out
