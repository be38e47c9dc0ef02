"""plan(topology, request) -> Plan: where every task's PUs, memory, GPUs and
NICs go. Pure: no I/O, deterministic, milliseconds.

The policy, step by step, with examples: docs/mapping.md.
"""

from __future__ import annotations

from ..errors import NodemapError
from ..topology.cpuset import CpuSet
from ..topology.model import Topology, replace
from . import devices, hierarchy
from .devices import GpuInfo
from .hierarchy import Domain, mask_of
from .request import RAILS_AUTO, Plan, Request, TaskBinding
from .spread import apportion, blocks, split_balanced

__all__ = ["plan", "default_tasks"]

_from_mask = CpuSet.from_mask


class _Group:
    __slots__ = ("domains", "ntasks", "home", "borrow")

    def __init__(self, domains: list[Domain], ntasks: int, borrow: bool = False) -> None:
        self.domains = domains
        self.ntasks = ntasks
        self.home = domains  # the domains whose GPUs it gets (a wide task's extension brings none)
        self.borrow = borrow  # no GPU at home: take the nearest (tasks spilled off the GPUs' domains)


class _Task:
    __slots__ = ("cpus", "cores", "level", "group", "cpuset")

    def __init__(self, cpus: list[int], cores: list[list[int]] | None, level: str, group: int) -> None:
        self.cpus = cpus  # PUs in hierarchy order
        self.cores = cores  # the PUs used of each core, for places; None: one PU of each (cpus says which)
        self.level = level
        self.group = group
        self.cpuset = mask_of(cpus)


def plan(topo: Topology, req: Request) -> Plan:
    _check_request(req)
    notes: list[str] = []
    usable = _usable(topo, req, notes)
    doms = hierarchy.domains(topo, usable)
    npus = len(usable)
    if req.tasks > npus and not req.oversubscribe:
        raise NodemapError(
            f"{req.tasks} tasks need {req.tasks} PUs but only {npus} are usable ({usable.format()}); "
            "pass --oversubscribe to let tasks share PUs, or run fewer tasks")
    gpus = devices.gpu_infos(topo) if req.gpus_per_task != 0 else []
    if req.gpus_per_task > len(gpus):
        raise NodemapError(
            f"--gpus-per-task {req.gpus_per_task} but this node has {len(gpus)} visible GPU(s); "
            f"use --gpus-per-task {len(gpus)} or fewer" + (" (or --no-gpus)" if not gpus else ""))
    homes = _gpu_homes(doms, gpus, notes)
    groups = _widen_to_threads(topo, _groups(doms, homes, req, notes), doms, req, notes)
    tasks = [t for gi, g in enumerate(groups) for t in _split(g, gi, req, doms)]
    if req.oversubscribe and req.tasks > npus:
        notes.append(f"{req.tasks} tasks share {npus} PUs (oversubscribed)")
    task_gpus = _deal_gpus(topo, doms, groups, tasks, homes, gpus, req, notes)
    bindings = _bind(topo, groups, tasks, task_gpus, gpus, req, notes)
    if req.gpu_order == "index":
        bindings = _by_gpu_index(bindings)
    crowded = [b.task for b in bindings if b.threads > len(b.cpus)]
    if crowded:
        notes.append(f"task(s) {CpuSet(crowded).format()} run more threads than they have PUs")
    notes += _shared_gpus(bindings, req)
    level = ",".join(dict.fromkeys(t.level for t in tasks))
    return Plan(request=req, tasks=tuple(bindings), level=level, notes=tuple(notes))


# --- 1. what may be used ---------------------------------------------------------


def _check_request(req: Request) -> None:
    bad = [
        (req.tasks < 1, f"--tasks must be at least 1 (got {req.tasks})"),
        (req.threads < 0, f"--threads must be 0 (auto) or more (got {req.threads})"),
        (req.smt < 0, f"--smt must be 0 (auto) or more (got {req.smt})"),
        (req.gpus_per_task < -1, f"--gpus-per-task must be -1 (auto), 0 or more (got {req.gpus_per_task})"),
        (req.nic_rails < RAILS_AUTO, f"--nic-rails must be a count, 'all' or 'auto' (got {req.nic_rails})"),
        (req.spread_by not in ("auto", "gpus", "pus"), f"spread_by must be auto, gpus or pus (got {req.spread_by!r})"),
        (req.gpu_order not in ("locality", "index"), f"--gpu-order must be locality or index (got {req.gpu_order!r})"),
        (req.gpu_ids not in ("index", "uuid", "pci"), f"--gpu-ids must be index, uuid or pci (got {req.gpu_ids!r})"),
        (req.reserve_cores < 0, f"--reserve-cores must be 0 or more (got {req.reserve_cores})"),
    ]
    for wrong, msg in bad:
        if wrong:
            raise NodemapError(msg)


def _allowed_cpus(topo: Topology) -> CpuSet:
    """topo.allowed_cpus, built in one step (16,384 PUs: ~1 ms, not ~7)."""
    pus = [p.os_index for p in topo.pus if p.online and p.allowed]
    return mask_of(pus) if not pus or min(pus) >= 0 else topo.allowed_cpus


def default_tasks(topo: Topology, no_gpus: bool = False) -> tuple[int, str]:
    """Tasks when none are asked for, and a note saying so: one per visible
    GPU whose NUMA node holds allowed PUs, else one per such NUMA node."""
    allowed = topo.allowed_cpus
    if not no_gpus:
        n = len([g for g in devices.gpu_infos(topo)
                 if g.home < 0 or not topo.numa(g.home).cpuset.isdisjoint(allowed)])
        if n:
            return n, f"no --tasks: one task per GPU ({n}); pass --tasks N for another count"
    n = max(len(topo.numa_of(allowed)), 1)
    return n, f"no --tasks: one task per NUMA domain ({n}{', no GPU' if not no_gpus else ''}); pass --tasks N"


def _usable(topo: Topology, req: Request, notes: list[str]) -> CpuSet:
    allowed = _allowed_cpus(topo)
    if not allowed:
        raise NodemapError("the topology has no online, allowed PU; check the input (or the cgroup cpuset)")
    if req.reserve_cores:
        allowed = _reserve(topo, allowed, req.reserve_cores, notes)
    usable = allowed
    if req.restrict_cpus is not None:
        cpus = req.restrict_cpus.brief()
        outside = req.restrict_cpus - topo.cpuset
        if outside:
            raise NodemapError(f"--cpus {cpus}: PUs {outside.brief()} are not online on this node; "
                               f"pick CPUs from {topo.cpuset.brief()}")
        usable = usable & req.restrict_cpus
        if not usable:
            raise NodemapError(f"--cpus {cpus}: none of these PUs is allowed to this process "
                               f"(allowed: {allowed.brief()}, e.g. the job's cgroup); pick CPUs from {allowed.brief()}")
        if not req.restrict_cpus.issubset(allowed):
            notes.append(f"--cpus {cpus} cut to the allowed PUs {usable.brief()}")
    if req.restrict_mems is not None:
        mems = req.restrict_mems.brief()
        known = topo.nodeset
        outside = req.restrict_mems - known
        if outside:
            raise NodemapError(f"--mems {mems}: NUMA node(s) {outside.brief()} do not exist; "
                               f"pick from {known.brief() or 'none (no NUMA information)'}")
        cpus = CpuSet.union_all(topo.numa(i).cpuset for i in req.restrict_mems)
        if usable.isdisjoint(cpus):
            raise NodemapError(f"--mems {mems}: these NUMA nodes hold no usable PU "
                               f"(usable: {usable.brief()}); pick nodes with CPUs, e.g. {topo.numa_of(usable).brief()}")
        usable = usable & cpus
    return usable


def _reserve(topo: Topology, allowed: CpuSet, k: int, notes: list[str]) -> CpuSet:
    """`allowed` without the PUs of the first k cores (by first PU) of every
    package: left to the system (daemons, MPI progress threads)."""
    kept = []
    for pkg in topo.packages:
        cores = sorted((c.cpuset for c in topo.cores if c.cpuset.issubset(pkg.cpuset) and not c.cpuset.isdisjoint(
            allowed)), key=lambda cs: cs.first())
        kept += cores[:k]
    if not topo.packages:  # no package information: the node is one socket
        kept = sorted((c.cpuset for c in topo.cores if not c.cpuset.isdisjoint(allowed)), key=lambda cs: cs.first())[:k]
    reserved = CpuSet.union_all(kept) & allowed
    left = allowed - reserved
    if not left:
        raise NodemapError(f"--reserve-cores {k} leaves no PU for tasks (reserved {reserved.format()}); "
                           "reserve fewer cores")
    notes.append(f"--reserve-cores {k}: PUs {reserved.format()} kept free of tasks")
    return left


# --- 2-3. tasks over domains -------------------------------------------------------


def _gpu_homes(doms: list[Domain], gpus: list[GpuInfo], notes: list[str]) -> list[int]:
    """Domain index of every GPU; -1 when its NUMA node has no usable PU."""
    where = {d.numa: i for i, d in enumerate(doms)}
    homes, unknown, away = [], [], []
    for g in gpus:
        if g.home >= 0:
            homes.append(where.get(g.home, -1))
            if homes[-1] < 0:
                away.append(g.gpu.index)
        else:
            unknown.append(g)
            homes.append(-1)
    if unknown:
        # No locality known: deal them over domains so no domain hoards them.
        for k, g in enumerate(unknown):
            homes[gpus.index(g)] = k * len(doms) // len(unknown)
        if len(doms) > 1:
            notes.append(f"GPU {','.join(str(g.gpu.index) for g in unknown)}: NUMA locality unknown, "
                         "spread over domains")
    if away:
        notes.append(f"GPU {','.join(map(str, away))}: no usable PU in its NUMA node; used only with --gpus-per-task")
    return homes


def _groups(doms: list[Domain], homes: list[int], req: Request, notes: list[str]) -> list[_Group]:
    ngpu = [0] * len(doms)
    for h in homes:
        if h >= 0:
            ngpu[h] += 1
    caps = _task_room(doms, req, notes)
    by_gpus = req.spread_by != "pus" and any(ngpu)
    if req.spread_by == "gpus" and not any(ngpu):
        notes.append("no usable GPU: tasks spread by PUs")
    spilled = False
    if by_gpus and caps and req.tasks > sum(c for c, n in zip(caps, ngpu) if n):
        unit = f"cores at --smt {req.smt}" if req.smt > 1 else "PUs"
        notes.append(f"{req.tasks} tasks do not fit the {unit} of the GPUs' NUMA nodes: spread over all NUMA "
                     "nodes" + ("; tasks of NUMA nodes without a GPU share the nearest one"
                                if req.gpus_per_task == -1 else ""))
        by_gpus = False
        # the user asked for nothing but tasks: each still gets a GPU, the
        # nearest and least used (Karolina, 256 tasks: 32 a GPU, 64 a NIC)
        spilled = req.gpus_per_task == -1
    weights = ngpu if by_gpus else [d.npus for d in doms]
    live = [i for i, w in enumerate(weights) if w]
    if req.tasks >= len(live):
        counts = apportion(req.tasks, weights, caps)
        return [_Group([doms[i]], n, spilled and not ngpu[i]) for i, n in enumerate(counts) if n]
    if not req.greedy:
        return [_Group([doms[j]], 1, spilled and not ngpu[j]) for j in (live[i * len(live) // req.tasks]
                                                                         for i in range(req.tasks))]
    cuts = split_balanced([weights[i] for i in live], req.tasks)
    spans = [(live[a], live[b - 1]) for a, b in cuts]
    return [_Group(doms[lo:hi + 1], 1, spilled and not any(ngpu[lo:hi + 1])) for lo, hi in _widen(spans, doms)]


def _task_room(doms: list[Domain], req: Request, notes: list[str]) -> list[int] | None:
    """Tasks each domain can hold: one per PU, or with --smt K one per K PUs
    of a core; None when tasks outnumber that (oversubscribed: no caps).
    --smt K that the tasks outnumber is dropped for one PU each, with a note."""
    caps = [d.npus for d in doms]
    if req.smt > 1:
        cores = [sum(max(len(c) // req.smt, 1) for c in d.cores) for d in doms]
        if req.tasks <= sum(cores):
            return cores
        notes.append(f"--smt {req.smt}: {req.tasks} tasks outnumber the {sum(cores)} cores that give "
                     f"{req.smt} PUs each; tasks share cores")
    return caps if req.tasks <= sum(caps) else None


def _widen(spans: list[tuple[int, int]], doms: list[Domain]) -> list[tuple[int, int]]:
    """Give the domains between spans (no GPU there) to a neighbour: cut at a
    package boundary when there is one, else join the next span. A span of
    one GPU domain stays as it is, so its task's CPUs stay beside its GPUs."""
    out = []
    for k, (lo, hi) in enumerate(spans):
        if k == 0:
            lo = 0
        if k + 1 < len(spans):
            nxt = spans[k + 1][0]
            cut = next((j for j in range(hi + 1, nxt + 1) if doms[j].package != doms[j - 1].package), hi + 1)
            hi = cut - 1
        else:
            hi = len(doms) - 1
        if out:
            lo = out[-1][1] + 1
        out.append((lo, hi))
    return [span if span[0] == span[1] else wide for span, wide in zip(spans, out)]


def _widen_to_threads(topo: Topology, groups: list[_Group], doms: list[Domain], req: Request,
                      notes: list[str]) -> list[_Group]:
    """Tasks whose --threads need more cores than their domains give them (T
    threads at one PU per core, or T/smt cores with --smt; k tasks of a
    domain need k times that) extend over the nearest domains no task uses
    (NUMA distance, then the same package), instead of crowding hardware
    threads while those domains idle (Karolina, 7 tasks x 16 threads: two
    tasks of a GPU's NUMA node ran 16 threads on 8 cores while 64 cores
    idled). They keep their GPUs, and every task of the group keeps cores
    in its home domain (`_split` deals each domain of the span among them),
    so no task lands wholly away from its GPUs. Free domains are dealt one
    at a time to the short groups in turn, nearest first, so no group takes
    them all while another crowds its threads. Short of cores in the end,
    a note says the threads share cores."""
    if not req.threads:
        return groups
    used = {id(d) for g in groups for d in g.domains}
    free = [d for d in doms if id(d) not in used]
    per_core = req.smt or 1  # a thread's room: a core, or with --smt K one of K PUs of a core
    span = {id(g): list(g.domains) for g in groups}

    def short(g: _Group) -> bool:
        return _pus_each(span[id(g)], g.ntasks, per_core) < req.threads

    wide = [g for g in groups if short(g)]
    added: dict[int, list[Domain]] = {id(g): [] for g in wide}
    while free:
        takers = [g for g in wide if short(g)]
        if not takers:
            break
        for g in takers:
            if not free:
                break
            d = min(free, key=lambda d: _nearness(topo, g.domains[0], d, doms))
            free.remove(d)
            added[id(g)].append(d)
            span[id(g)].append(d)
    crowded = []
    for g in groups:
        base, more = g.domains[0], added.get(id(g))
        if more:
            g.home = list(g.domains)
            g.domains = g.home + more  # home first: each task's first cores (thread 0) beside its GPUs
            where = f"{_numa_names(more)} (nearest to {_numa_names([base])})"
            notes.append(f"a task of {req.threads} threads extends over {where}; its GPUs stay" if g.ntasks == 1
                         else f"the {g.ntasks} tasks of {req.threads} threads of {_numa_names([base])} extend "
                              f"over {_numa_names(more)}, each keeping cores beside its GPUs")
        if short(g) and not req.smt and any(len(c) > 1 for d in g.domains for c in d.cores):
            crowded.append(base)  # (without SMT the note on threads outnumbering PUs says it)
    if crowded:
        notes.append(f"the tasks of {_numa_names(crowded)} run more threads ({req.threads} each) than they "
                     "have cores: threads share cores' hardware threads; run fewer tasks or threads per node "
                     "(or pass --smt to make it explicit)")
    return groups


def _numa_names(ds: list[Domain]) -> str:
    """'NUMA node 1', 'NUMA nodes 0,2' for notes; PUs that no NUMA node holds (numa -1) said as such."""
    known = [d.numa for d in ds if d.numa >= 0]
    out = [f"NUMA node{'s' if len(known) > 1 else ''} {CpuSet(known).format()}"] if known else []
    return " and ".join(out + (["the PUs outside any NUMA node"] if len(known) < len(ds) else []))


def _pus_each(span: list[Domain], k: int, per_core: int) -> int:
    """PUs each of k tasks is sure to get over `span`, at most `per_core` of
    a core: the fewest cores a task gets times the fewest PUs of a core."""
    cores = [c for d in span for c in d.cores]
    return len(cores) // k * min(min(len(c), per_core) for c in cores)


def _nearness(topo: Topology, a: Domain, b: Domain, doms: list[Domain]) -> tuple:
    d = topo.distance(a.numa, b.numa) if a.numa >= 0 and b.numa >= 0 else None
    return (d if d is not None else 1 << 20, a.package != b.package, abs(doms.index(a) - doms.index(b)),
            doms.index(b))


# --- 4. CPUs within a domain -----------------------------------------------------


def _split(g: _Group, gi: int, req: Request, doms: list[Domain]) -> list[_Task]:
    cores = [c for d in g.domains for c in d.cores]
    k = g.ntasks
    if k == 1:
        return [_task(cores, _span_name(g.domains, doms), gi, req)]
    if len(g.domains) > 1:  # k tasks extended over free domains: each takes a part of every domain
        return [_task(mine, name, gi, req) for mine, name in _deal_domains(g.domains, k)]
    if len(cores) >= k:
        cut = _cut(0, len(cores), k, _levels(g.domains))
        sizes = [b - a for a, b, _ in cut] if cut else []
        if not cut or max(sizes) - min(sizes) > 1:  # uneven objects (a partly allowed cache): plain cores
            cut = [(a, b, "Core") for a, b in blocks(len(cores), k)]
        return [_task(cores[a:b], name, gi, req) for a, b, name in cut]
    leaves = [p for c in cores for p in c]
    return [_Task(leaves[a:b], [leaves[a:b]], "PU", gi) for a, b in blocks(len(leaves), k)]


def _deal_domains(span: list[Domain], k: int) -> list[tuple[list[list[int]], str]]:
    """The cores of k tasks extended over `span` (home domain first): every
    domain is cut into k runs (at its cache/group levels where they divide
    evenly), task i taking run i of the home domain, so each task keeps
    cores beside its GPUs. Runs of the other domains go to the tasks with
    the fewest cores so far, the larger runs first. A home domain of fewer
    cores than tasks is cut into PUs, so each task still gets one there."""
    mine: list[list[list[int]]] = [[] for _ in range(k)]
    name = "Core"
    for j, d in enumerate(span):
        n = len(d.cores)
        if j == 0 and n < k:
            leaves = [[p] for c in d.cores for p in c]
            runs = [leaves[a:b] for a, b in blocks(len(leaves), k)]
            name = "PU"
        elif n >= k:
            cut = _cut(0, n, k, d.levels) or [(a, b, "Core") for a, b in blocks(n, k)]
            if max(b - a for a, b, _ in cut) - min(b - a for a, b, _ in cut) > 1:
                cut = [(a, b, "Core") for a, b in blocks(n, k)]
            runs = [d.cores[a:b] for a, b, _ in cut]
            name = cut[0][2] if j == 0 else name
        else:  # fewer cores than tasks: a core each to the tasks with the fewest
            runs = [[c] for c in d.cores]
        if j == 0:
            order = list(range(len(runs)))
        else:
            order = sorted(range(k), key=lambda i: (sum(map(len, mine[i])), len(mine[i]), i))
            runs = sorted(runs, key=len, reverse=True)
        for i, run in zip(order, runs):
            mine[i] += run
    return [(m, name) for m in mine]


def _levels(span: list[Domain]) -> list[hierarchy.Level]:
    """The objects to cut a group's cores at: its domain's levels, or for a
    group extended over several domains (wide tasks), the domains themselves."""
    if len(span) == 1:
        return span[0].levels
    starts, n = [], 0
    for d in span:
        starts.append(n)
        n += len(d.cores)
    return [hierarchy.Level("NUMA", starts)]


def _cut(lo: int, hi: int, k: int, levels: list, name: str = "Core") -> list[tuple[int, int, str]] | None:
    """k runs of the cores lo..hi, sizes differing by at most one core, each
    inside as few cache/group objects as possible: a level is used only when
    its objects divide evenly among the tasks (m objects, k tasks: m/k each)
    or the tasks among them (k/m tasks in each, cut again inside); otherwise
    the next finer level, and at last plain cores. (lo, hi, level name) each."""
    if k > hi - lo:
        return None
    if k == 1:
        return [(lo, hi, name)]
    for i, lv in enumerate(levels):
        starts = [s for s in lv.starts if lo < s < hi]
        m = len(starts) + 1
        if m == 1:
            continue
        bounds = [lo, *starts, hi]
        if m % k == 0:
            per = m // k
            return [(bounds[j * per], bounds[(j + 1) * per], lv.name) for j in range(k)]
        if k % m == 0:
            out: list[tuple[int, int, str]] = []
            for a, b in zip(bounds, bounds[1:]):
                part = _cut(a, b, k // m, levels[i + 1:], lv.name)
                if part is None:
                    return None
                out += part
            return out
    return [(lo + a, lo + b, "Core") for a, b in blocks(hi - lo, k)]


def _span_name(span: list[Domain], doms: list[Domain]) -> str:
    if len(span) == 1 or len(span) == len(doms) == 1:
        return "NUMA"
    if len(span) == len(doms):
        return "Machine"
    pkgs = {d.package for d in span}
    whole = len(pkgs) == 1 and sum(d.package in pkgs for d in doms) == len(span)
    return "Package" if whole else "NUMA"


def _task(cores: list[list[int]], level: str, gi: int, req: Request) -> _Task:
    if req.smt:
        smt = req.smt
    elif req.all_pus:
        smt = max(map(len, cores))
    elif req.threads:
        smt = -(-req.threads // len(cores))
    else:
        smt = 1
    if len(cores) == 1:  # one core (a task per core): no lists to build over cores
        c = cores[0]
        used = [c[:smt]] if smt < len(c) else cores
        return _Task(used[0], used, level, gi)
    most = max(map(len, cores))
    if smt == 1 or most == 1:  # one PU of each core: no list per core
        return _Task([c[0] for c in cores], None, level, gi)
    used = [c[:smt] for c in cores] if smt < most else cores
    return _Task([p for c in used for p in c], used, level, gi)


def _places(t: _Task, threads: int) -> tuple[CpuSet, ...]:
    """One place per thread: blocks of cores, or of PUs when threads
    outnumber cores; one per PU when threads outnumber PUs."""
    if threads == 1 or len(t.cpus) == 1:
        return (t.cpuset,)
    if t.cores is None:  # one PU of each core: cores and PUs are the same units
        cpus = t.cpus
        if threads >= len(cpus):
            return tuple([_from_mask(1 << p) for p in cpus])
        return tuple([mask_of(cpus[a:b]) for a, b in blocks(len(cpus), threads)])
    units = t.cores if threads <= len(t.cores) else [[p] for p in t.cpus]
    if threads >= len(units):
        return tuple(map(mask_of, units))
    return tuple(mask_of([p for u in units[a:b] for p in u]) for a, b in blocks(len(units), threads))


# --- 5. devices, memory, bindings ------------------------------------------------------


def _deal_gpus(topo: Topology, doms: list[Domain], groups: list[_Group], tasks: list[_Task],
               homes: list[int], gpus: list[GpuInfo], req: Request, notes: list[str]) -> list[tuple[int, ...]]:
    per = req.gpus_per_task
    load = {x.gpu.index: 0 for x in gpus}  # tasks per GPU so far: borrowing spreads over them
    by_group: list[list[_Task]] = [[] for _ in groups]
    for t in tasks:
        by_group[t.group].append(t)
    pools = []
    for g in groups:
        ids = {id(d) for d in g.home}
        pools.append([x for x, h in zip(gpus, homes) if h >= 0 and id(doms[h]) in ids])
    dealt: list[list[tuple[int, ...]]] = [[] for _ in groups]
    wants = [1 if g.borrow and not pool else per for g, pool in zip(groups, pools)]
    # Groups served at home first: borrowers then see every GPU's final home load.
    for gi in sorted(range(len(groups)), key=lambda gi: wants[gi] > len(pools[gi])):
        pool, mine, want = pools[gi], by_group[gi], wants[gi]
        if want > 0:
            pool.sort(key=lambda x: (load[x.gpu.index], x.sort_key))
        if want > len(pool):
            dealt[gi] = _borrow(topo, groups[gi].home[0].numa, pool, gpus, want, mine, load)
            continue
        dealt[gi] = devices.deal([t.cpuset for t in mine], pool, want)
        for d in dealt[gi]:
            for i in d:
                load[i] += 1
    out = [d for ds in dealt for d in ds]
    bare = [i for i, d in enumerate(out) if not d]
    if bare and gpus and per != 0:
        notes.append(f"task(s) {CpuSet(bare).format()} have no GPU in their NUMA domain; "
                     "--gpus-per-task 1 gives them the nearest one")
    return out


def _shared_gpus(bindings, req: Request) -> list[str]:
    """A note when tasks asked for GPUs of their own (--gpus-per-task G)
    but some GPU went to more than one task: sharing must never be silent."""
    if req.gpus_per_task <= 0:
        return []
    users: dict[int, list[int]] = {}
    for b in bindings:
        for g in b.gpus:
            users.setdefault(g, []).append(b.task)
    shared = sorted(g for g, t in users.items() if len(t) > 1)
    if not shared:
        return []
    return [f"GPU(s) {','.join(map(str, shared))} shared by several tasks: {len(bindings)} tasks x "
            f"{req.gpus_per_task} GPUs need {len(bindings) * req.gpus_per_task}, the plan has {len(users)}; "
            "run fewer tasks or lower --gpus-per-task for GPUs of their own"]


def _borrow(topo: Topology, numa: int, pool: list[GpuInfo], gpus: list[GpuInfo], per: int, mine: list[_Task],
            load: dict[int, int]) -> list[tuple[int, ...]]:
    """Too few GPUs at home for --gpus-per-task: each task, in turn, takes
    the home ones and borrows the rest from the nearest (NUMA distance), the
    least used among equally near ones, so borrowers spread over them."""
    others = [x for x in gpus if x not in pool]
    out = []
    for _ in mine:
        pick = tuple(sorted(x.gpu.index for x in pool + _nearest(topo, numa, others, per - len(pool), load)))
        for i in pick:
            load[i] += 1
        out.append(pick)
    return out


def _nearest(topo: Topology, numa: int, others: list[GpuInfo], n: int, load: dict[int, int]) -> list[GpuInfo]:
    def dist(x: GpuInfo) -> int:
        d = topo.distance(numa, x.home) if numa >= 0 and x.home >= 0 else None
        return d if d is not None else 1 << 20

    return sorted(others, key=lambda x: (dist(x), load[x.gpu.index], x.sort_key))[:n]


def _bind(topo: Topology, groups: list[_Group], tasks: list[_Task], task_gpus: list[tuple[int, ...]],
          gpus: list[GpuInfo], req: Request, notes: list[str]) -> list[TaskBinding]:
    nics = devices.fabric_nics(topo, notes) if req.nic_rails else []
    devices.check_rails(req.nic_rails, nics)
    rails = req.nic_rails
    if rails == RAILS_AUTO:  # multi-rail when NICs outnumber tasks: each task all its nearest NICs
        rails = -1 if req.tasks < len(nics) else 1
    chooser = devices.NicChooser(topo, nics, _package_of(topo), gpus)
    group_mems = [_mems(topo, g.domains, None) if len(g.domains) == 1 else None for g in groups]
    mems = [group_mems[t.group] or _mems(topo, groups[t.group].domains, t.cpuset) for t in tasks]
    task_nics = chooser.choose_all(list(zip(task_gpus, mems)), rails)
    out = []
    for i, t in enumerate(tasks):
        threads = req.threads or _auto_threads(t, req)
        out.append(TaskBinding(i, t.cpuset, mems[i], task_gpus[i], task_nics[i], threads, _places(t, threads)))
    return out


def _auto_threads(t: _Task, req: Request) -> int:
    """One thread per PU the task gets; with all_pus (every PU bound, no
    --smt) one per core, as numactl users expect of OMP_NUM_THREADS."""
    if req.all_pus and not req.smt and t.cores is not None:
        return len(t.cores)
    return len(t.cpus)


def _mems(topo: Topology, span: list[Domain], cpus: CpuSet | None) -> CpuSet:
    """The NUMA nodes of the task's CPUs, within the allowed memory nodes."""
    mems = CpuSet(d.numa for d in span if d.numa >= 0 and (cpus is None or not d.cpus.isdisjoint(cpus)))
    allowed = topo.allowed_mems
    if allowed and not mems.issubset(allowed):
        mems = (mems & allowed) or allowed
    return mems


def _package_of(topo: Topology) -> dict[int, int]:
    return {n.os_index: next((p.os_index for p in topo.packages if not p.cpuset.isdisjoint(n.cpuset)), -1)
            for n in topo.numa_nodes}


def _by_gpu_index(bindings: list[TaskBinding]) -> list[TaskBinding]:
    """Renumber tasks so task k holds GPU k (codes that pick the GPU by local
    rank); every task keeps its local CPUs, memory and NICs."""
    order = sorted(range(len(bindings)), key=lambda i: (bindings[i].gpus[:1] or (1 << 30,), i))
    return [replace(bindings[j], task=k) for k, j in enumerate(order)]
