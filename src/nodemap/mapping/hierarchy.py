"""The usable part of a node as the planner walks it: NUMA domains, each a
list of cores in hierarchy order, with the cache/group levels above them.

Cores are sorted depth first (package, NUMA, groups, L3, L2... then first
PU), so every object of every level is a run of consecutive cores and a
task can be given "contiguous objects" as a slice. Levels that repeat
another level (an L2 per core, an L3 per NUMA node) are dropped once here,
which keeps a 16k-PU node cheap to prepare.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ..topology.cpuset import CpuSet
from ..topology.model import Topology


def few_members(m: int) -> list[int]:
    """Members of a mask with few bits (a core), ascending. Peeling from the
    top makes the mask small after the first step, even at PU 16,000."""
    out = []
    while m:
        h = m.bit_length() - 1
        out.append(h)
        m ^= 1 << h
    out.reverse()
    return out


def mask_of(pus: list[int]) -> CpuSet:
    return CpuSet.from_mask(_mask(pus))


def _mask(pus: list[int]) -> int:
    if len(pus) < 32:
        m = 0
        for p in pus:
            m |= 1 << p
        return m
    # Many PUs: one C-level conversion instead of a big-int operation per PU.
    bits = bytearray(b"0") * (max(pus) + 1)
    for p in pus:
        bits[-1 - p] = 49  # "1"
    return int(bits, 2)


def members(cs: CpuSet | int) -> list[int]:
    """Members in ascending order; fast for big sets of high indexes."""
    m = cs if isinstance(cs, int) else cs.mask
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
        if getattr(self, "_cpus", None) is None:
            self._cpus = mask_of([p for c in self.cores for p in c])
        return self._cpus


def _families(topo: Topology) -> list[tuple[str, list[tuple[int, CpuSet]]]]:
    """Every CPU grouping the model knows, as (name, [(os index, cpuset)])."""
    fams = [("Package", [(p.os_index, p.cpuset) for p in topo.packages])]
    fams.append(("NUMA", [(n.os_index, n.cpuset) for n in topo.numa_nodes if n.cpuset]))
    for k in sorted({g.kind for g in topo.groups}):
        fams.append((k, [(g.os_index, g.cpuset) for g in topo.groups if g.kind == k]))
    levels = sorted({c.level for c in topo.caches if c.kind in ("unified", "data")}, reverse=True)
    fams += [(f"L{lv}", [(i, c.cpuset) for i, c in enumerate(topo.caches_at(lv))]) for lv in levels]
    return fams


def _core_pus(m: int) -> list[int]:
    """PUs of a core's mask. Cores hold 1-2 PUs mostly: two big-int steps."""
    h = m.bit_length() - 1
    r = m ^ (1 << h)
    if not r:
        return [h]
    low = r.bit_length() - 1
    if r == 1 << low:
        return [low, h]
    return few_members(m)


def _core_sets(topo: Topology, usable: CpuSet) -> list[list[int]]:
    """Usable PUs of every core, each core's in ascending order."""
    uset = set(members(usable))  # membership by hashing: no big-int work per PU
    if len(uset) == len(topo.pus):  # likely the whole node: try without filtering
        cores = [_core_pus(c.cpuset.mask) for c in topo.cores]
        if {p for c in cores for p in c} == uset:
            return cores
    cores = []
    for c in topo.cores:
        pus = [p for p in _core_pus(c.cpuset.mask) if p in uset]
        if pus:
            cores.append(pus)
    # PUs no core claims (sources without core objects) become cores of one PU.
    claimed = {p for c in cores for p in c}
    return cores + [[p] for p in sorted(uset - claimed)]


@dataclass
class _Family:
    name: str
    rank: dict[int, int]  # PU -> rank of its object (objects in first-PU order)
    labels: list[int]  # rank -> os index


def _family(name: str, objs: list[tuple[int, CpuSet]], usable: CpuSet, firsts: int, heads: list[int]) -> _Family:
    """Rank of the object holding each core's first PU (`firsts` as a mask,
    `heads` as a sorted list)."""
    inside = sorted(((s & usable, label) for label, s in objs if not s.isdisjoint(usable)),
                    key=lambda x: x[0])
    rank: dict[int, int] = {}
    for r in range(len(inside) - 1, -1, -1):  # backwards: the first object wins overlaps
        x = inside[r][0].mask & firsts
        if not x:
            continue
        low = (x & -x).bit_length() - 1
        if x.bit_count() == (x >> low).bit_length():  # one run of PUs: slice the sorted heads
            lo = bisect.bisect_left(heads, low)
            hi = bisect.bisect_right(heads, x.bit_length() - 1)
            rank.update(dict.fromkeys(heads[lo:hi], r))
        else:
            rank.update(dict.fromkeys(members(x), r))
    return _Family(name, rank, [label for _, label in inside])


def _kept_families(topo: Topology, usable: CpuSet, cores: list[list[int]]) -> list[_Family]:
    """Families that group the usable cores in a new way, coarse first."""
    kept: list[_Family] = []
    counts = {1, len(cores)}
    heads = sorted(c[0] for c in cores)
    firsts = _mask(heads)
    for name, objs in _families(topo):
        # Levels as numerous as cores (L1/L2 per core) are skipped before any set work.
        if name != "NUMA" and len(objs) == len(topo.cores):
            continue
        count = sum(1 for _, s in objs if not s.isdisjoint(usable))
        if name != "NUMA" and count in counts:
            continue  # same grouping as a kept level, or no grouping at all
        counts.add(count)
        kept.append(_family(name, objs, usable, firsts, heads))
    kept.sort(key=lambda f: len(f.labels))  # stable: Package before NUMA on ties
    return kept


def domains(topo: Topology, usable: CpuSet) -> list[Domain]:
    """The NUMA domains holding usable PUs, in hierarchy order."""
    cores = _core_sets(topo, usable)
    fams = _kept_families(topo, usable, cores)
    names = [f.name for f in fams]
    heads = [c[0] for c in cores]
    keys = list(zip(*[[f.rank.get(h, -1) for h in heads] for f in fams], heads))
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
