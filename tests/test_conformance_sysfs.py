"""The sysfs reader against hwloc's own output for hwloc's Linux snapshots.

Every snapshot of fixtures/hwloc-linux whose .test names a .console is a
case: unpacked to tmp_path, read, summarized (tests/lstopo_console.py) and
compared with what `lstopo --of console` printed: packages, NUMA nodes with
memory, caches (L3, L2, L1) with their PU sets, Die/Book/Drawer/Cluster
groups, cores, PUs, PCI devices, GPUs and NICs, restricted to what the
snapshot's cgroup cpuset allows, as hwloc shows it.
"""

from __future__ import annotations

import re
import pytest
from conftest import FIXTURES

import lstopo_console as lc
from nodemap.topology import snapshot, sysfs
from nodemap.topology.cpuset import CpuSet

LINUX = FIXTURES / "hwloc-linux"

# Fixture -> why it cannot match (strict: the test fails the day it matches).
XFAIL: dict[str, str] = {}
# Fixture -> fields compared differently, and why.
PACKAGE_IDS_UNKNOWN = {
    "20s390-2g6s4c": "s390 reports physical_package_id -1: hwloc prints no P#, nodemap numbers packages in order",
}
# .test variables that do not change what lstopo prints
HARMLESS_ENV = {"HWLOC_SHOW_ERRORS"}


def console_cases() -> list:
    found = []
    for test in sorted(LINUX.glob("*.test")):
        target = re.search(r"^target:\s*(\S+)", test.read_text(), re.M)
        if target and target.group(1).endswith(".console") and (LINUX / target.group(1)).exists():
            stem = test.stem
            marks = [pytest.mark.xfail(strict=True, reason=XFAIL[stem])] if stem in XFAIL else []
            found.append(pytest.param(stem, marks=marks, id=stem))
    return found or ["<no fixtures>"]


def _env(stem: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^env:\s*(?:export\s+)?(\w+)", (LINUX / f"{stem}.test").read_text(), re.M)}


@pytest.fixture(scope="session")
def unpacked(tmp_path_factory):
    """Each snapshot unpacked once per session (bz2 is the slow part)."""
    roots: dict[str, str] = {}

    def get(stem: str) -> str:
        if stem not in roots:
            dest = tmp_path_factory.mktemp(re.sub(r"\W", "_", stem))
            snapshot.unpack(str(LINUX / f"{stem}.tar.bz2"), str(dest))
            roots[stem] = snapshot.find_root(str(dest))
        return roots[stem]

    return get


@pytest.mark.parametrize("stem", console_cases())
def test_sysfs_agrees_with_lstopo_console(fixtures, unpacked, stem):
    changing = _env(stem) - HARMLESS_ENV
    assert not changing, f"{stem}: .test sets {changing}; list it in XFAIL with its reason"
    want = lc.parse_console(LINUX / f"{stem}.console")
    topo = sysfs.read(unpacked(stem))
    got = lc.summarize_topology(topo)
    if stem in PACKAGE_IDS_UNKNOWN:
        want, got = want.without_package_ids(), got.without_package_ids()
    diff = want.diff(got) + lc.tree_diff(topo, want)  # the printed tree too, not only the data
    assert not diff, f"{stem}:\n" + "\n".join(d[:400] for d in diff)


def test_cases_cover_the_fixtures(fixtures):
    """Not vacuous: most snapshots have a console, and they hold what matters."""
    stems = [p.values[0] for p in console_cases()]
    assert len(stems) >= 25
    summaries = [lc.parse_console(LINUX / f"{s}.console") for s in stems]
    assert sum(bool(s.pci) for s in summaries) >= 3 and sum(bool(s.nics) for s in summaries) >= 2
    assert sum(any(c[0] == 3 for c in s.caches) for s in summaries) >= 8
    assert sum(bool(s.groups) for s in summaries) >= 2


def test_a_difference_is_seen(fixtures, unpacked):
    from nodemap.topology.model import replace

    topo = sysfs.read(unpacked("16em64t-4s2c2t"))
    want = lc.parse_console(LINUX / "16em64t-4s2c2t.console")
    assert lc.summarize_topology(topo) == want
    fewer = replace(topo, cores=topo.cores[1:])
    assert [d.split(":")[0] for d in want.diff(lc.summarize_topology(fewer))] == ["cores", "cores_per_package"]
    smaller = replace(topo, numa_nodes=(replace(topo.numa_nodes[0], memory=1 << 30),))
    assert [d.split(":")[0] for d in want.diff(lc.summarize_topology(smaller))] == ["numa"]


# --- hard inputs, one by one ---------------------------------------------------------------


def test_offline_cpus(fixtures, unpacked):
    t = sysfs.read(unpacked("16em64t-4s2c2t-offlines"))
    offline = CpuSet(p.os_index for p in t.pus if not p.online)
    assert offline == CpuSet.parse("2,5,13-14")
    assert offline.isdisjoint(CpuSet.union_all(c.cpuset for c in t.cores))
    assert offline.isdisjoint(CpuSet.union_all(c.cpuset for c in t.caches))
    assert len(t.pus) == 16 and t.cpuset == CpuSet.parse("0-1,3-4,6-12,15")


def test_cgroup_cpuset_restriction(fixtures, unpacked):
    t = sysfs.read(unpacked("16amd64-8n2c-cpusets"))
    assert len(t.pus) == 16 and 4 not in t.cpuset  # CPU 4 is offline in that snapshot
    assert t.allowed_cpus == CpuSet.parse("0-3,5-6,12-15") and t.allowed_mems == CpuSet.parse("1-4")
    assert any("cgroup cpuset /dev/cpuset/dummy" in n for n in t.notes)


def test_cpuset_reorder(fixtures, unpacked):
    t = sysfs.read(unpacked("16em64t-4s2ca2c-cpusetreorder"))
    assert t.allowed_cpus == CpuSet.parse("2-11,13") and len(t.pus) == 16


def test_buggy_numa_keeps_one_node(fixtures, unpacked):
    t = sysfs.read(unpacked("8em64t-2s2ca2c-buggynuma"))
    assert [(n.os_index, str(n.cpuset)) for n in t.numa_nodes] == [(0, "0-7")]
    assert any("NUMA nodes 1-7" in n and "buggy" in n for n in t.notes)


def test_hca_and_netdevs_of_a_real_node(fixtures, unpacked):
    t = sysfs.read(unpacked("32em64t-2n8c+dax+nvme+mic+dimms"))
    ib = t.nic("mlx4_0")
    assert (ib.kind, ib.pci_bus_id, ib.netdevs, ib.numa_node, str(ib.cpuset)) == (
        "InfiniBand", "0000:82:00.0", ("ib0",), 1, "8-15")
    assert ib.ports[0].state == "ACTIVE" and ib.ports[0].rate_gbps == 56.0
    assert "scif0" not in [n.name for n in t.nics]  # a virtual RDMA device without PCI function
    assert t.pci("0000:82:00.0").pci_path == ("pci0000:80", "0000:80:02.2")


@pytest.mark.parametrize("stem", console_cases())
def test_core_logical_order_is_lstopos(fixtures, unpacked, stem):
    """`nodemap topo` numbers cores as lstopo does (depth-first through the
    tree), not by first PU: the cores sorted by L# are lstopo's, in order."""
    from nodemap.topology import render

    topo = sysfs.read(unpacked(stem))
    want = [o.pus for o in sorted((o for o in lc.parse_tree(LINUX / f"{stem}.console").walk()
                                   if o.type == "Core" and o.logical >= 0), key=lambda o: o.logical)]
    lid = render._Ctx(topo).core_lid
    allowed = topo.allowed_cpus
    cores = sorted((c for c in topo.cores if c.cpuset & allowed), key=lambda c: lid[c.cpuset.first()])
    assert [frozenset(c.cpuset & allowed) for c in cores] == want
