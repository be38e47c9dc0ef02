"""The console tree (`nodemap topo`) of restricted, interleaved and NUMA-spanning machines."""

from __future__ import annotations

import re

from conftest import FIXTURES

from nodemap.topology import hwloc_xml, render, snapshot

LINUX = FIXTURES / "hwloc-linux"


def test_interleaved_packages_number_cores_by_package(fixtures):
    """16em64t-4s2c2t-offlines: PU 0,4,8,12 are package 0's; its cores are L#0-1."""
    tree = render.tree(snapshot.read_tarball(LINUX / "16em64t-4s2c2t-offlines.tar.bz2"))
    assert "L3 L#0 (4.0 MiB): Cores 0-1 (2, PUs 0,4,8,12)" in tree


def test_numa_node_spanning_packages_is_printed_once(fixtures):
    tree = render.tree(snapshot.read_tarball(LINUX / "16em64t-4s2c2t.tar.bz2"))  # 1 node, 4 packages
    assert len(re.findall(r"NUMANode P#0 ", tree)) == 1 and tree.count("Package L#") == 4
    lines = tree.splitlines()
    node = lines.index(next(line for line in lines if "NUMANode P#0 " in line))
    assert lines[node + 1].startswith("    Package L#0 P#0")


def test_hidden_pus_are_online_but_not_allowed():
    text = """<?xml version="1.0"?><topology version="2.0">
<object type="Machine" os_index="0" cpuset="0x3" complete_cpuset="0x3ff" allowed_cpuset="0x3" nodeset="0x3" complete_nodeset="0x3" allowed_nodeset="0x3">
 <info name="LinuxCgroup" value="/job"/>
 <object type="Package" os_index="1" cpuset="0x0" complete_cpuset="0xf0" nodeset="0x2">
  <object type="NUMANode" os_index="1" cpuset="0x0" complete_cpuset="0xf0" nodeset="0x2" local_memory="1024"/>
  <object type="L3Cache" cpuset="0x0" complete_cpuset="0xf0" cache_size="1048576" depth="3" cache_type="0"/>
 </object>
 <object type="Package" os_index="0" cpuset="0x3" complete_cpuset="0xf" nodeset="0x1">
  <object type="NUMANode" os_index="0" cpuset="0x3" complete_cpuset="0xf" nodeset="0x1" local_memory="1024"/>
  <object type="L3Cache" cpuset="0x0" complete_cpuset="0xc" cache_size="1048576" depth="3" cache_type="0"/>
  <object type="Core" os_index="0" cpuset="0x1"><object type="PU" os_index="0" cpuset="0x1"/></object>
  <object type="Core" os_index="1" cpuset="0x2"><object type="PU" os_index="1" cpuset="0x2"/></object>
 </object></object></topology>"""
    t = hwloc_xml.parse(text.encode(), "r.xml")
    assert [(p.os_index, p.online, p.allowed) for p in t.pus] == [
        (0, True, True), (1, True, True), *((i, True, False) for i in range(2, 8)), (8, False, False), (9, False, False)]
    assert [str(p.cpuset) for p in t.packages] == ["4-7", "0-3"] and str(t.numa(0).cpuset) == "0-3"
    assert sorted(str(c.cpuset) for c in t.caches) == ["2-3", "4-7"]
    tree = render.tree(t)
    # package P#0 first (lstopo's order), no cache without PUs, hidden PUs are not offline
    assert re.findall(r"Package L#(\d) P#(\d)", tree) == [("0", "0"), ("1", "1")]
    assert "Offline PUs: 8-9" in tree and "Allowed PUs: 0-1 (of 0-7)" in tree and "PUs none" not in tree
    assert any("absent from the file: offline, or outside its cgroup /job" in n for n in t.notes)


def test_disallowed_pus_are_named_apart_not_counted():
    """Core 3 (PUs 6-7) outside the cgroup: the line counts cores 0-2 and their 6 PUs only."""
    cores = "".join(f'<object type="Core" os_index="{c}" cpuset="{hex(3 << 2 * c)}">'
                    f'<object type="PU" os_index="{2 * c}" cpuset="{hex(1 << 2 * c)}"/>'
                    f'<object type="PU" os_index="{2 * c + 1}" cpuset="{hex(2 << 2 * c)}"/></object>' for c in range(4))
    text = f"""<?xml version="1.0"?><topology version="2.0">
<object type="Machine" os_index="0" cpuset="0xff" complete_cpuset="0xff" allowed_cpuset="0x3f" nodeset="0x1" complete_nodeset="0x1" allowed_nodeset="0x1">
 <object type="Package" os_index="0" cpuset="0xff" complete_cpuset="0xff" nodeset="0x1">
  <object type="NUMANode" os_index="0" cpuset="0xff" complete_cpuset="0xff" nodeset="0x1" local_memory="1024"/>
  {cores}
 </object></object></topology>"""
    tree = render.tree(hwloc_xml.parse(text.encode(), "r.xml"))
    assert "Cores 0-2 (3, PUs 0-5), not allowed: PUs 6-7" in tree, tree


def test_numa_node_of_a_left_out_package_is_printed(fixtures):
    """40intel64-4n10c+pci-conflicts: hwloc leaves the 4th package out (its CPUs disagree on
    their siblings) but keeps its NUMA node under the machine; the tree and the plan keep it
    too, last, as hwloc does."""
    from nodemap.mapping.plan import plan
    from nodemap.mapping.request import Request

    topo = snapshot.read_tarball(LINUX / "40intel64-4n10c+pci-conflicts.tar.bz2")
    tree = render.tree(topo)
    assert re.findall(r"NUMANode P#(\d)", tree) == ["0", "1", "2", "3"]
    assert "  NUMANode P#3 (128 GiB)\n    L3 L#2 (30 MiB): Cores 30-39 (10, PUs 3,7,11,15,19,23,27,31,35,39)" in tree
    tasks = plan(topo, Request(tasks=4)).tasks
    assert [str(t.mems) for t in tasks] == ["0", "1", "2", "3"]
