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
from collections import Counter
from itertools import compress
from operator import attrgetter, itemgetter

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
    if len(pus) == 1:  # a place of one PU: one shift
        return _from_mask(1 << pus[0])
    return _from_mask(_mask(pus))


_from_mask = CpuSet.from_mask


def _mask(pus: list[int]) -> int:
    """The bitmask of `pus`. Work is done on the span min..max and shifted
    into place once: a block of PUs near PU 16,000 costs no more than one
    near PU 0."""
    if not pus:
        return 0
    lo = min(pus)
    if len(pus) < 32:
        m = 0
        for p in pus:
            m |= 1 << (p - lo)
        return m << lo
    # Many PUs: one C-level conversion instead of a big-int operation per PU.
    bits = bytearray(max(pus) - lo + 1)  # bit i of the span as byte i
    if lo:
        for p in pus:
            bits[p - lo] = 1
    else:
        for p in pus:
            bits[p] = 1
    return int(bits[::-1].translate(_DIGITS), 2) << lo


_BITS = bytes.maketrans(b"01", b"\x00\x01")
_DIGITS = bytes.maketrans(b"\x00\x01", b"01")


def members(cs: CpuSet | int) -> list[int]:
    """Members in ascending order; fast for big sets of high indexes."""
    m = cs if isinstance(cs, int) else cs.mask
    if m <= 0:
        return []
    # Bits low to high as 0/1 bytes; compress keeps the indexes of the ones. All in C.
    return list(compress(range(m.bit_length()), bin(m)[:1:-1].encode().translate(_BITS)))


class Level:
    __slots__ = ("name", "starts")

    def __init__(self, name: str, starts: list[int]) -> None:
        self.name = name  # "L3", "Group", "Core"...
        self.starts = starts  # index of the first core of each object (in domain order)

    def __repr__(self) -> str:
        return f"Level({self.name!r}, {self.starts!r})"


class Domain:
    def __init__(self, numa: int, package: int, cores: list[list[int]], levels: list[Level] | None = None) -> None:
        self.numa = numa  # NUMA os_index, -1 when the node has no NUMA information
        self.package = package  # index of its package in hierarchy order, -1 unknown
        self.cores = cores  # usable PUs of each core, in hierarchy order
        self.levels = [] if levels is None else levels  # finer than the domain, coarse first

    def __repr__(self) -> str:
        return f"Domain(numa={self.numa}, package={self.package}, {len(self.cores)} cores)"

    @property
    def npus(self) -> int:
        return sum(len(c) for c in self.cores)

    @property
    def cpus(self) -> CpuSet:
        if getattr(self, "_cpus", None) is None:
            self._cpus = mask_of([p for c in self.cores for p in c])
        return self._cpus


def _families(topo: Topology, skip: int) -> list[tuple[str, list, bool]]:
    """Every CPU grouping the model knows, coarse kinds first, as (name,
    objects with a .cpuset, whether they are labelled by position (caches)
    rather than by .os_index). Families of `skip` objects other than NUMA
    (one per core: L1, L2) are left out, before their list is made."""
    fams = [("Package", list(topo.packages), False),
            ("NUMA", [n for n in topo.numa_nodes if n.cpuset], False)]
    kinds: dict[str, list] = {}
    for g in topo.groups:
        kinds.setdefault(g.kind, []).append(g)
    fams += [(k, kinds[k], False) for k in sorted(kinds)]
    caches = topo.caches
    if set(map(_KIND, caches)) <= _DATA_KINDS:  # no instruction caches: count levels in C
        count = Counter(map(_LEVEL, caches))
    else:
        caches = [c for c in caches if c.kind in _DATA_KINDS]
        count = Counter(c.level for c in caches)
    for lv in sorted(count, reverse=True):
        if count[lv] != skip:
            # In the model's order, as Topology.caches_at lists them.
            fams.append((f"L{lv}", [c for c in caches if c.level == lv], True))
    return [f for f in fams if f[0] == "NUMA" or len(f[1]) != skip]


_KIND, _LEVEL = attrgetter("kind"), attrgetter("level")
_DATA_KINDS = frozenset(("unified", "data"))


def _core_pus(m: int) -> list[int]:
    """PUs of a core's mask. Cores hold 1-2 PUs mostly: two big-int steps."""
    h = m.bit_length() - 1
    if h < 0:
        return []
    r = m ^ (1 << h)
    if not r:
        return [h]
    low = r.bit_length() - 1
    if r == 1 << low:
        return [low, h]
    return few_members(m)


def _core_sets(topo: Topology, usable: CpuSet) -> list[list[int]]:
    """Usable PUs of every core, each core's in ascending order."""
    cores = [pus for pus in (_core_pus(c.cpuset.mask) for c in topo.cores) if pus]
    if _mask([p for c in cores for p in c]) == usable.mask:
        return cores  # every PU of every core is usable, and no usable PU is outside a core
    uset = set(members(usable))  # membership by hashing: no big-int work per PU
    cores = [kept for kept in ([p for p in c if p in uset] for c in cores) if kept]
    # PUs no core claims (sources without core objects) become cores of one PU.
    claimed = {p for c in cores for p in c}
    return cores + [[p] for p in sorted(uset - claimed)]


class _Family:
    __slots__ = ("name", "rank", "labels")

    def __init__(self, name: str, rank: list[int], labels: list[int]) -> None:
        self.name = name
        self.rank = rank  # rank of the object holding each core's first PU (heads in order), -1: none
        self.labels = labels  # rank -> os index (objects in first-PU order)


def _family(name: str, inside: list[tuple[CpuSet, int]], firsts: int, heads: list[int]) -> _Family:
    """Rank of the object holding each core's first PU (`heads`, a sorted
    list; `firsts`, the same as a mask). `inside`: the objects' usable PUs
    and labels."""
    # In CpuSet order (first PU, then mask), each key computed once.
    inside = sorted(inside, key=lambda x: (x[0].first(), x[0].mask))
    rank = [-1] * len(heads)
    for r in range(len(inside) - 1, -1, -1):  # backwards: the first object wins overlaps
        x = inside[r][0].mask & firsts
        if not x:
            continue
        low = (x & -x).bit_length() - 1
        top = x.bit_length() - 1
        if x.bit_count() == top - low + 1:  # one run of PUs: one slice of the sorted heads
            spans = [(low, top)]
        else:
            spans = [(h, h) for h in members(x)]
        for a, b in spans:
            lo, hi = bisect.bisect_left(heads, a), bisect.bisect_right(heads, b)
            rank[lo:hi] = [r] * (hi - lo)
    return _Family(name, rank, [label for _, label in inside])


def _kept_families(topo: Topology, usable: CpuSet, heads: list[int]) -> list[_Family]:
    """Families that group the usable cores (`heads`: their first PUs,
    sorted) in a new way, coarse first."""
    kept: list[_Family] = []
    counts = {1, len(heads)}
    firsts = _mask(heads)
    u = usable.mask
    # Levels as numerous as cores (L1/L2 per core) are skipped before any set work.
    for name, objs, by_position in _families(topo, len(topo.cores)):
        labels = range(len(objs)) if by_position else [o.os_index for o in objs]
        inside = [(CpuSet.from_mask(m), label) for m, label in zip((o.cpuset.mask & u for o in objs), labels) if m]
        if name != "NUMA" and len(inside) in counts:
            continue  # same grouping as a kept level, or no grouping at all
        counts.add(len(inside))
        kept.append(_family(name, inside, firsts, heads))
    kept.sort(key=lambda f: len(f.labels))  # stable: Package before NUMA on ties
    return kept


def domains(topo: Topology, usable: CpuSet) -> list[Domain]:
    """The NUMA domains holding usable PUs, in hierarchy order."""
    cores = _core_sets(topo, usable)
    n = len(cores)
    if not n:
        return []
    cores.sort(key=_HEAD)  # stable: cores with the same first PU (overlaps) keep their order
    heads = list(map(_HEAD, cores))
    fams = _kept_families(topo, usable, heads)
    names = [f.name for f in fams]
    keys = list(zip(*[f.rank for f in fams], heads))
    # Cores in no object of a level (CPUs whose package hwloc left out) come
    # after that level's objects, as in hwloc's tree and `nodemap topo`.
    last = [[r if r >= 0 else len(f.labels) for r in f.rank] if -1 in f.rank else f.rank for f in fams]
    order = sorted(range(n), key=list(zip(*last, heads)).__getitem__)
    keys = list(map(keys.__getitem__, order))
    cores = list(map(cores.__getitem__, order))
    inuma = names.index("NUMA") if "NUMA" in names else -1
    ipkg = names.index("Package") if "Package" in names else -1
    if inuma >= 0:
        labels = fams[inuma].labels
        nids = [labels[r] if r >= 0 else -1 for r in (k[inuma] for k in keys)]
    else:
        nids = [-1] * n
    # A domain is a run of cores of one NUMA node.
    cuts = [0, *(j for j in range(1, n) if nids[j] != nids[j - 1]), n]
    out: list[Domain] = []
    for a, b in zip(cuts, cuts[1:]):
        ks = keys[a:b]
        d = Domain(nids[a], ks[0][ipkg] if ipkg >= 0 else -1, cores[a:b])
        for i in range(inuma + 1, len(fams)):
            col = [k[i] for k in ks]
            starts = [0, *(j for j in range(1, len(col)) if col[j] != col[j - 1])]
            if 1 < len(starts) < len(ks):
                d.levels.append(Level(names[i], starts))
        out.append(d)
    return _merge_split_domains(out)


_HEAD = itemgetter(0)


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
