import os

import pytest
from hypothesis import given, settings, strategies as st

from nodemap.bench.host import thread_orders as pl
from nodemap.errors import NodemapError
from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import PU, Cache, Core, NumaNode, Package, Topology


def machine(packages=2, numa_per=2, l3_per_numa=2, cores_per_l3=2, smt=2, snc=False):
    """PU numbering like Linux: core c's siblings are c and c + ncores."""
    ncores = packages * numa_per * l3_per_numa * cores_per_l3
    cores, caches, numas, pkgs = [], [], [], []
    per_pkg = numa_per * l3_per_numa * cores_per_l3
    for c in range(ncores):
        cores.append(Core(c, c // per_pkg, CpuSet(c + k * ncores for k in range(smt))))

    def span(lo, n):
        return CpuSet(c + k * ncores for c in range(lo, lo + n) for k in range(smt))

    for p in range(packages):
        pkgs.append(Package(p, span(p * per_pkg, per_pkg)))
    per_numa = l3_per_numa * cores_per_l3
    for n in range(packages * numa_per):
        numas.append(NumaNode(n, span(n * per_numa, per_numa), memory=1 << 34))
    if snc:  # one L3 per package spanning its NUMA nodes (Intel sub-NUMA clustering)
        caches = [Cache(3, "unified", 32 << 20, p.cpuset) for p in pkgs]
    else:
        caches = [Cache(3, "unified", 32 << 20, span(i * cores_per_l3, cores_per_l3))
                  for i in range(ncores // cores_per_l3)]
    pus = tuple(PU(i) for i in range(ncores * smt))
    return Topology(packages=tuple(pkgs), numa_nodes=tuple(numas), caches=tuple(caches), cores=tuple(cores), pus=pus)


def test_spread_order_visits_packages_then_numa_then_l3_first():
    t = machine()
    order = pl.spread_order(t, t.allowed_cpus)
    assert sorted(order) == t.allowed_cpus.to_list()
    pkg = lambda c: c % 16 // 8
    numa = lambda c: c % 16 // 4
    l3 = lambda c: c % 16 // 2
    assert {pkg(c) for c in order[:2]} == {0, 1}
    assert {numa(c) for c in order[:4]} == {0, 1, 2, 3}
    assert {l3(c) for c in order[:8]} == set(range(8))
    assert all(c < 16 for c in order[:16])  # SMT siblings only once every core has a thread


def test_compact_order_fills_one_domain_first():
    t = machine()
    order = pl.compact_order(t, t.allowed_cpus)
    assert order[:4] == [0, 16, 1, 17]  # core 0's two PUs, then core 1's


def test_level_orders_one_per_domain():
    t = machine()
    lv = pl.level_orders(t, t.allowed_cpus)
    assert len(lv["1/L3"]) == 8 and len(lv["1/core"]) == 16 and len(lv["1/PU"]) == 32 and len(lv["1/NUMA"]) == 4
    for name, dom in (("1/L3", t.caches), ("1/NUMA", t.numa_nodes), ("1/core", t.cores)):
        assert all(sum(c in d.cpuset for c in lv[name]) == 1 for d in dom), name


def test_snc_l3_spanning_numa_nodes_still_spreads_over_numa():
    t = machine(snc=True)
    order = pl.spread_order(t, t.allowed_cpus)
    assert {c % 16 // 4 for c in order[:4]} == {0, 1, 2, 3}
    assert len(pl.level_orders(t, t.allowed_cpus)["1/L3"]) == 2


def test_sweep_reports_every_promised_thread_order_once(monkeypatch):
    t = machine()
    ps = pl.sweep(t, t.allowed_cpus)
    names = [n for p in ps for n in p.names]
    assert sorted(names) == sorted(pl.promised_names(t, t.allowed_cpus))
    assert len({p.cpus for p in ps}) == len(ps)  # merged where CPUs coincide
    assert [p.threads for p in ps] == sorted(p.threads for p in ps)
    # 32 PUs: thinned to powers of two plus the per-level counts
    counts = {int(n.split()[1]) for n in names if n.startswith("spread")}
    assert counts == {1, 2, 4, 8, 16, 32}


def test_thread_counts_thin_out_large_counts():
    assert pl.thread_counts(5) == [1, 2, 3, 4, 5]
    assert pl.thread_counts(128, {8, 16, 64, 128, 96}) == [1, 2, 4, 8, 16, 32, 64, 96, 128]
    assert pl.thread_counts(24) == [1, 2, 4, 8, 16, 24]


def test_restricted_cpuset_only_uses_allowed_cpus():
    t = machine()
    allowed = CpuSet.parse("2-5,18-21")
    for p in pl.sweep(t, allowed):
        assert set(p.cpus) <= set(allowed)


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 31), min_size=1))
def test_orders_are_permutations_of_any_allowed_subset(cpus):
    t = machine()
    cs = CpuSet(cpus)
    assert sorted(pl.spread_order(t, cs)) == sorted(cpus)
    assert sorted(pl.compact_order(t, cs)) == sorted(cpus)
    assert set(pl.promised_names(t, cs)) == {n for p in pl.sweep(t, cs) for n in p.names}


def test_choose_checks_input():
    t = pl.flat_topology(CpuSet(os.sched_getaffinity(0)))
    allowed = pl.usable_cpus(t)
    assert pl.choose(t, cpus=str(allowed.first())).cpus == (allowed.first(),)
    with pytest.raises(NodemapError, match="not allowed"):
        pl.choose(t, cpus=str(allowed.last() + 1000))
    with pytest.raises(NodemapError, match="list syntax"):
        pl.choose(t, cpus="a-b")
    with pytest.raises(NodemapError, match="at least 1"):
        pl.choose(t, threads=0)
    with pytest.raises(NodemapError, match="only"):
        pl.choose(t, threads=len(allowed) + 1)
    assert pl.choose(t, threads=1, order="compact").threads == 1


def test_omp_env_places_thread_i_on_cpu_i():
    env = pl.omp_env((0, 8, 16))
    assert env == {"OMP_NUM_THREADS": "3", "OMP_PLACES": "{0},{8},{16}", "OMP_PROC_BIND": "close",
                   "GOMP_CPU_AFFINITY": "0 8 16"}
