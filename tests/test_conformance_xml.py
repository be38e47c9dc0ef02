"""Conformance of the hwloc XML reader: against the file itself (an independent
ElementTree walk), against hwloc's own console output, and against the sysfs
reader on the snapshots that carry both.

Every XML fixture is a case; one that cannot match is listed in XFAIL with
its reason (strict: it fails the day it starts matching).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET  # fixtures are trusted data, read without defusedxml on purpose
from pathlib import Path

import pytest
from conftest import FIXTURES

from nodemap.topology import hwloc_xml
from nodemap.topology.cpuset import CpuSet

XML_DIRS = ("hwloc-xml", "mpibind/topo-xml", "hwloc-linux")
XFAIL: dict[str, str] = {}  # fixture name -> why it cannot match


def xml_files() -> list[str]:
    files = [f"{d}/{p.name}" for d in XML_DIRS for p in sorted((FIXTURES / d).glob("*.xml"))]
    return files or ["<no fixtures>"]


def case(fixtures: Path, name: str) -> Path:
    if name in XFAIL:
        pytest.xfail(XFAIL[name])
    return fixtures / name


# --- the independent walk ------------------------------------------------------------


def _mask(el) -> int:
    # hwloc masks: 32-bit words, most significant first, empty words are zero
    return int("".join(w.removeprefix("0x").rjust(8, "0") for w in el.get("cpuset", "").split(",")), 16)


def _osdev_kind(el, version: int) -> str:
    t = int(el.get("osdev_type", "-1"))
    if version >= 3:
        return "fabric" if t & 32 else "net" if t & 16 else ""
    return {3: "fabric", 2: "net"}.get(t, "")


def walk(path: Path) -> dict:
    """Counts and sets read straight from the file, the way hwloc writes it."""
    root = ET.parse(path).getroot()
    version = int(root.get("version", "1").split(".")[0])
    objs = list(root.iter("object"))
    by_type = lambda *types: [o for o in objs if o.get("type") in types]  # noqa: E731

    def caches(level: int) -> list:
        named = by_type(f"L{level}Cache") + [c for c in by_type("Cache") if c.get("depth") == str(level)]
        return sorted((int(c.get("cache_size", 0)), _mask(c)) for c in named if c.get("cache_type") != "2")

    gpus, nics = set(), set()
    for dev in by_type("PCIDev"):
        bus = dev.get("pci_busid").lower()
        osdevs = dev.findall("object[@type='OSDev']")
        names = [o.get("name") for o in osdevs]
        compute = [n for n in names if re.match(r"(cuda|nvml|rsmi)\d+$", n)] + [
            o.get("name") for o in osdevs if o.get("name", "").startswith("opencl")
            and any(i.get("value") == "GPU" for i in o.iter("info") if i.get("name") == "OpenCLDeviceType")]
        pci_type = dev.get("pci_type", "")
        if compute or pci_type.startswith("0302") or pci_type.startswith("0300 [10de:"):  # NVIDIA VGA: GeForce/Quadro
            gpus.add(bus)
        fabric = [o.get("name") for o in osdevs if _osdev_kind(o, version) == "fabric"]
        net = [o.get("name") for o in osdevs if _osdev_kind(o, version) == "net"]
        if fabric or net:
            nics.add((fabric or net)[0])
    return {
        "packages": {int(p.get("os_index")): _mask(p) for p in by_type("Package", "Socket")},
        "numa": {int(n.get("os_index")): int(n.get("local_memory", 0)) for n in by_type("NUMANode")},
        "L3": caches(3),
        "L2": caches(2),
        "cores": sorted(_mask(c) for c in by_type("Core")),
        "pus": {int(p.get("os_index")) for p in by_type("PU")},
        "gpus": gpus,
        "nics": nics,
    }


def summary(topo, file_pus: set[int] | None = None) -> dict:
    """The walk's shape from a Topology; CPU sets cut to `file_pus`, the PUs the
    file lists (the model adds PUs a cgroup hid from a restricted export)."""
    keep = CpuSet(file_pus) if file_pus is not None else topo.cpuset | CpuSet(p.os_index for p in topo.pus)

    def caches(level: int) -> list:
        return sorted((c.size, (c.cpuset & keep).mask) for c in topo.caches
                      if c.level == level and c.kind != "instruction")

    return {
        "packages": {p.os_index: (p.cpuset & keep).mask for p in topo.packages},
        "numa": {n.os_index: n.memory for n in topo.numa_nodes},
        "L3": caches(3),
        "L2": caches(2),
        "cores": sorted((c.cpuset & keep).mask for c in topo.cores),
        "pus": {p.os_index for p in topo.pus if p.online and p.os_index in keep},
        "gpus": {g.pci_bus_id for g in topo.gpus},
        "nics": {n.name for n in topo.nics},
    }


@pytest.mark.parametrize("name", xml_files())
def test_reader_agrees_with_the_file(fixtures, name):
    path = case(fixtures, name)
    want = walk(path)
    got = summary(hwloc_xml.read(path), want["pus"])
    for key in want:
        assert got[key] == want[key], f"{name}: {key}"


def test_the_walk_sees_what_matters(fixtures):
    """The walk is not vacuous: the fixtures hold GPUs, NICs, L3 and L2 caches."""
    seen = [walk(fixtures / n) for n in xml_files()]
    assert sum(len(s["gpus"]) for s in seen) >= 14
    assert sum(len(s["nics"]) for s in seen) >= 30
    assert all(s["pus"] and s["cores"] for s in seen)
    assert sum(bool(s["L3"]) for s in seen) >= 10 and sum(bool(s["L2"]) for s in seen) >= 10


# --- hwloc's console output --------------------------------------------------------------


def console_cases() -> list[str]:
    found = [f"{d}/{p.stem}" for d in XML_DIRS for p in sorted((FIXTURES / d).glob("*.xml"))
             if p.with_suffix(".console").exists()]
    return found or ["<no fixtures>"]


@pytest.mark.parametrize("stem", console_cases())
def test_reader_agrees_with_lstopo_console(fixtures, stem):
    lc = pytest.importorskip("lstopo_console", reason="tests/lstopo_console.py (console parser) not written yet")
    path = case(fixtures, f"{stem}.xml")
    want = lc.parse_console(path.with_suffix(".console"))
    got = lc.summarize_topology(hwloc_xml.read(path))
    if want.packages and all(pid == -1 for pid, _, _ in want.packages):
        got = got.without_package_ids()  # hwloc 1.x consoles print no package P#
    assert got == want, stem


# --- the same machine through sysfs ------------------------------------------------------


def snapshot_pairs() -> list[str]:
    linux = FIXTURES / "hwloc-linux"
    found = [p.stem for p in sorted(linux.glob("*.xml")) if (linux / f"{p.stem}.tar.bz2").exists()]
    return found or ["<no fixtures>"]


def comparable(topo, numa_cpus: bool) -> dict:
    return {
        "packages": {(p.os_index, p.cpuset) for p in topo.packages},
        "numa": {(n.os_index, n.memory, n.cpuset if numa_cpus else None) for n in topo.numa_nodes},
        # --no-icaches in some .test files: instruction caches are not in every XML
        "caches": {(c.level, c.kind, c.size, c.cpuset) for c in topo.caches if c.kind != "instruction"},
        "cores": {(c.package, c.cpuset) for c in topo.cores},
        "pus": {(p.os_index, p.online) for p in topo.pus},
    }


def disjoint(sets) -> bool:
    return sum(len(s) for s in sets) == len(CpuSet.union_all(sets))


@pytest.mark.parametrize("stem", snapshot_pairs())
def test_sysfs_and_xml_agree(fixtures, stem):
    snapshot = pytest.importorskip("nodemap.topology.snapshot",
                                   reason="nodemap.topology.snapshot (sysfs tarball reader) not written yet")
    xml = case(fixtures, f"hwloc-linux/{stem}.xml")
    from_sysfs = snapshot.read_tarball(fixtures / "hwloc-linux" / f"{stem}.tar.bz2")
    from_xml = hwloc_xml.read(xml)
    # A faked snapshot may give NUMA nodes overlapping cpumaps, which no
    # kernel does; hwloc (and the model) give each CPU one node.
    numa_cpus = disjoint([n.cpuset for n in from_sysfs.numa_nodes])
    a, b = comparable(from_sysfs, numa_cpus), comparable(from_xml, numa_cpus)
    for key in a:
        assert a[key] == b[key], f"{stem}: {key}"
