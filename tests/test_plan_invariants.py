"""Properties every plan must have, over generated nodes and real fixtures.

The checks here are written from the topology alone (NUMA cpusets, PCI
paths, packages), not from the planner's own helpers, so a planner bug
cannot hide behind the same bug in the check.
"""

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nodes
from nodemap.mapping.devices import fabric_nics
from nodemap.mapping.plan import plan
from nodemap.mapping.request import Request
from nodemap.topology import paths
from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import replace

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NIC_TIER = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3}


@st.composite
def node_and_request(draw):
    spec = nodes.random_spec(draw, st)
    topo = nodes.build(spec)
    allowed = topo.allowed_cpus
    cpus = mems = None
    if draw(st.integers(0, 4)) == 0:
        cpus = CpuSet(draw(st.sets(st.sampled_from(sorted(allowed)), min_size=1)))
    elif draw(st.integers(0, 4)) == 0:
        mems = CpuSet(draw(st.sets(st.sampled_from(sorted(topo.numa_of(allowed))), min_size=1)))
    npus = len(usable_of(topo, cpus, mems))
    over = draw(st.integers(0, 9)) == 0
    req = Request(
        restrict_cpus=cpus, restrict_mems=mems,
        tasks=draw(st.integers(1, npus * (2 if over else 1))),
        threads=draw(st.sampled_from([0, 0, 1, 2, 4, 8, 16])),
        gpus_per_task=draw(st.sampled_from([-1, -1, -1, 0, 1])) if topo.gpus else -1,
        smt=draw(st.sampled_from([0, 0, 1, 2])),
        nic_rails=draw(st.sampled_from([1, -2, -2, -1, 0, min(2, len(topo.nics))])),
        spread_by=draw(st.sampled_from(["auto", "auto", "pus"])),
        greedy=draw(st.booleans()),
        oversubscribe=over,
    )
    return topo, req


def usable_of(topo, cpus, mems):
    usable = topo.allowed_cpus
    if cpus is not None:
        usable = usable & cpus
    if mems is not None:
        usable = usable & CpuSet.union_all(topo.numa(m).cpuset for m in mems)
    return usable


def check_invariants(topo, req, p):
    usable = usable_of(topo, req.restrict_cpus, req.restrict_mems)
    assert len(p.tasks) == req.tasks
    assert [t.task for t in p.tasks] == list(range(req.tasks))
    seen = CpuSet()
    for t in p.tasks:
        assert t.cpus and t.cpus.issubset(usable)
        if req.tasks <= len(usable):  # no PU shared unless oversubscribed
            assert seen.isdisjoint(t.cpus)
        seen = seen | t.cpus
        assert t.mems == topo.numa_of(t.cpus)  # memory on the task's own NUMA node(s)
        assert t.threads == (req.threads or len(t.cpus))
        assert 1 <= len(t.places) <= t.threads and CpuSet.union_all(t.places) == t.cpus
        if req.gpus_per_task > 0:
            assert len(t.gpus) == req.gpus_per_task
        if req.gpus_per_task == 0:
            assert t.gpus == ()
    check_gpu_locality(topo, req, p)
    check_gpus_beside_cores(topo, req, p, usable)
    check_nics(topo, req, p)
    check_no_crowded_threads_while_cores_idle(topo, req, p, usable)


def thread_room(topo, req, t):
    """Threads a task runs without two sharing a core: a core each, or with
    --smt K the PUs it was given (at most K of a core). Without --threads a
    task runs one thread per PU it was given, by definition."""
    if req.smt or not req.threads:
        return len(t.cpus)
    return sum(1 for c in topo.cores if not c.cpuset.isdisjoint(t.cpus))


def check_no_crowded_threads_while_cores_idle(topo, req, p, usable):
    """A task runs more threads than it has cores (PUs with --smt) only when
    no usable core is left idle (7 tasks x 16 threads: on a 4-GPU EPYC six
    tasks got 3 cores while two NUMA nodes idled; on Karolina six tasks ran
    16 threads on 8 cores' hyperthreads while 64 cores idled)."""
    crowded = [t.task for t in p.tasks if t.threads > thread_room(topo, req, t)]
    if not crowded:
        return False
    busy = CpuSet.union_all(t.cpus for t in p.tasks)
    idle = [c.cpuset for c in topo.cores if not c.cpuset.isdisjoint(usable) and c.cpuset.isdisjoint(busy)]
    assert not idle, (f"tasks {crowded} crowd their threads while {len(idle)} cores idle",
                      [(t.cpus.brief(), t.threads) for t in p.tasks])
    return True


def gpu_room(topo, req, usable):
    """NUMA nodes of the GPUs known to sit beside usable PUs, and how many
    tasks they can hold each with a PU of its own (a core of its own with
    --smt K, as long as the node's cores suffice for the tasks)."""
    homes = {g.numa_node for g in topo.gpus if g.visible and g.numa_node >= 0
             and not topo.numa(g.numa_node).cpuset.isdisjoint(usable)}
    near = usable & CpuSet.union_all(topo.numa(h).cpuset for h in homes) if homes else CpuSet()
    if req.smt > 1:  # --smt K: a task per K PUs of a core (one on a smaller core), while the node has room
        def room(cpus):
            return sum(max(len(c.cpuset & cpus) // req.smt, 1) for c in topo.cores if not c.cpuset.isdisjoint(cpus))

        if req.tasks <= room(usable):
            return homes, room(near)
    return homes, len(near)


def check_gpus_beside_cores(topo, req, p, usable):
    """Whenever every task can have a PU (a core, with --smt) in a GPU's
    NUMA node, every task's GPUs are local to its cores: each GPU's NUMA
    node holds some of the task's PUs (epyc-corona, 7 tasks x 16 threads:
    tasks 0, 3, 4 ran on NUMA 0, 3, 4 with their GPUs on NUMA 1, 2, 5)."""
    if req.gpus_per_task not in (-1, 1) or req.spread_by == "pus" or req.oversubscribe:
        return False
    homes, room = gpu_room(topo, req, usable)
    if not homes or req.tasks > room:
        return False
    for t in p.tasks:
        assert t.gpus, (t.task, "no GPU although every task fits beside one")
        far = [g for g in t.gpus if topo.gpu(g).numa_node >= 0 and topo.gpu(g).numa_node not in topo.numa_of(t.cpus)]
        assert not far, (f"task {t.task} on NUMA {topo.numa_of(t.cpus).brief()} drives GPU(s) {far} "
                         f"of NUMA {[topo.gpu(g).numa_node for g in far]}", p.notes)
    return True


def local_gpus(topo, usable):
    """GPUs with a known NUMA node that holds usable PUs."""
    return [g for g in topo.gpus if g.visible and g.numa_node >= 0
            and not topo.numa(g.numa_node).cpuset.isdisjoint(usable)]


def check_gpu_locality(topo, req, p):
    if req.gpus_per_task != -1 or req.spread_by == "pus":
        return
    if local_gpus(topo, usable_of(topo, req.restrict_cpus, req.restrict_mems)):
        # a GPU beside usable PUs: no task is left without one by default (Karolina, 256 tasks: 128 were)
        assert all(t.gpus for t in p.tasks), [t.task for t in p.tasks if not t.gpus]
    if any("do not fit" in n for n in p.notes):
        return
    wide = any(" extend" in n for n in p.notes)  # tasks wider than their domain: test_plan_policy checks them
    for t in p.tasks:
        homes = {topo.gpu(g).numa_node for g in t.gpus}
        if len(homes) == 1 and -1 not in homes and not wide:
            (h,) = homes
            assert t.cpus.issubset(topo.numa(h).cpuset), (t, h)
            assert t.mems == CpuSet([h])
    used = {g for t in p.tasks for g in t.gpus}
    gl = local_gpus(topo, usable_of(topo, req.restrict_cpus, req.restrict_mems))
    unknown = [g for g in topo.gpus if g.numa_node < 0]
    if req.tasks >= len(gl) + len(unknown) and (req.greedy or req.tasks >= len(gl)):
        assert {g.index for g in gl} <= used  # every GPU used when tasks >= GPUs


def check_nics(topo, req, p):
    if not topo.nics:
        return
    if req.nic_rails == -2 and req.tasks < len(fabric_nics(topo)):  # auto, multi-rail: all of the nearest tier
        pool = fabric_nics(topo)
        for t in p.tasks:
            best = min(tier(topo, t, n.name) for n in pool)
            assert set(t.nics) == {n.name for n in pool if tier(topo, t, n.name) == best}, (t, best)
        return
    if req.nic_rails not in (1, -2):
        return
    pool = fabric_nics(topo)  # the planner's own candidate set: fabric ports before eth0
    for t in p.tasks:
        (nic,) = t.nics
        assert nic in {n.name for n in pool}, (t, nic)
        assert tier(topo, t, nic) == min(tier(topo, t, n.name) for n in pool), (t, nic)


def tier(topo, t, nic):
    if t.gpus:
        return min(_gpu_tier(topo, g, nic) for g in t.gpus)
    node = topo.nic(nic).numa_node
    if node in t.mems:
        return 3
    return 4 if any(_same_package(topo, node, m) for m in t.mems) else 5


def _gpu_tier(topo, g, nic):
    kind = paths.path(topo, f"GPU{g}", nic).kind
    if kind in NIC_TIER:
        return NIC_TIER[kind]
    a, b = topo.gpu(g).numa_node, topo.nic(nic).numa_node
    return 4 if a >= 0 and b >= 0 and _same_package(topo, a, b) else 5


def _same_package(topo, a, b):
    pkg = [p for p in topo.packages if topo.numa(a).cpuset.issubset(p.cpuset)]
    return bool(pkg) and topo.numa(b).cpuset.issubset(pkg[0].cpuset)


def check_balance(topo, req, p):
    """Tasks of one domain differ by at most one object at the chosen level."""
    if req.oversubscribe or p.level not in ("L3", "Core", "PU"):
        return
    l3 = {pu: i for i, c in enumerate(topo.caches_at(3)) for pu in c.cpuset}
    core = {pu: i for i, c in enumerate(topo.cores) for pu in c.cpuset}
    count = {"L3": lambda cs: len({l3[x] for x in cs}), "Core": lambda cs: len({core[x] for x in cs}),
             "PU": len}[p.level]
    by_dom = {}
    for t in p.tasks:
        by_dom.setdefault(t.mems, []).append(count(t.cpus))
    for sizes in by_dom.values():
        assert max(sizes) - min(sizes) <= 1, sizes


@SETTINGS
@given(node_and_request())
def test_invariants_on_generated_nodes(case):
    topo, req = case
    p = plan(topo, req)
    check_invariants(topo, req, p)
    check_balance(topo, req, p)
    assert plan(topo, req) == p  # same input, same plan


@settings(max_examples=40, deadline=None)
@given(node_and_request(), st.randoms(use_true_random=False))
def test_discovery_order_does_not_matter(case, rnd):
    topo, req = case
    shuffled = replace(
        topo, **{f: tuple(rnd.sample(getattr(topo, f), len(getattr(topo, f))))
                 for f in ("gpus", "nics", "cores", "caches", "numa_nodes", "packages", "pci_devices")})
    # distances follow numa_nodes' order; the builder's are symmetric by package, so rebuild them
    shuffled = replace(shuffled, distances=tuple(
        tuple(topo.distance(a.os_index, b.os_index) for b in shuffled.numa_nodes) for a in shuffled.numa_nodes))
    assert plan(shuffled, req) == plan(topo, req)


def _fixture_topologies(root: Path):
    try:
        from nodemap.topology import hwloc_xml
    except ImportError:
        pytest.skip("nodemap.topology.hwloc_xml is not available yet")
    files = sorted((root / "hwloc-xml").glob("*.xml")) + sorted((root / "mpibind" / "topo-xml").glob("*.xml"))
    return [(f.name, hwloc_xml.read(f)) for f in files]


def thread_requests(topo):
    """Task counts around the GPU and NUMA counts (7 x 16 is the held-out case), threads from a few to
    more than a NUMA node's cores, with and without --smt."""
    npus, ngpu, nnuma = len(topo.allowed_cpus), len(topo.gpus), max(len(topo.numa_nodes), 1)
    counts = {1, 2, 3, 7, ngpu, ngpu + 1, 2 * ngpu - 1, nnuma, nnuma + 1}
    for tasks in sorted(n for n in counts if 1 <= n <= npus):
        for threads in (2, 4, 16):
            for kw in ({}, {"smt": 2}, {"greedy": False}, {"gpus_per_task": 1} if ngpu else {"spread_by": "pus"}):
                yield Request(tasks=tasks, threads=threads, **kw)


def test_thread_requests_on_fixtures_keep_gpus_local_and_no_core_idle_while_threads_crowd(fixtures):
    """Issue 36: whenever every task fits beside a GPU its GPUs are local to its cores, and no task
    crowds its threads onto fewer cores while cores idle; on every fixture and Karolina-like node."""
    reached = {"local": 0, "crowded": 0}
    for name, topo in _fixture_topologies(fixtures) + [("karolina", nodes.karolina())]:
        if not topo.allowed_cpus:
            continue
        for req in thread_requests(topo):
            p = plan(topo, req)
            check_invariants(topo, req, p)
            usable = usable_of(topo, None, None)
            reached["local"] += check_gpus_beside_cores(topo, req, p, usable)
            reached["crowded"] += check_no_crowded_threads_while_cores_idle(topo, req, p, usable)
    assert reached["local"] > 100 and reached["crowded"] > 20, reached  # the checks ran, not returned early


def test_invariants_on_fixtures(fixtures):
    topos = _fixture_topologies(fixtures)
    assert topos
    for name, topo in topos:
        if not topo.allowed_cpus:
            continue
        npus = len(topo.allowed_cpus)
        for tasks in sorted({1, 2, 3, max(1, len(topo.gpus)), min(npus, 16), npus}):
            for kw in ({}, {"spread_by": "pus"}, {"nic_rails": -1}):
                req = Request(tasks=tasks, **kw)
                p = plan(topo, req)
                check_invariants(topo, req, p)
                assert plan(topo, req) == p, name
