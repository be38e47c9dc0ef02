"""hwloc's own test suite (tests/hwloc/linux and tests/hwloc/xml of
open-mpi/hwloc) as conformance cases for nodemap's readers.

    cases(folder, refs=None) -> [Case]  # every .test of linux/ and xml/ under `folder`,
                                        # + each XML file against refs/<stem>.console
    check(case, unpack) -> [str]   # differences from hwloc's expected output, [] = agrees

Each hwloc .test names a source (a sysfs snapshot tarball or an XML file),
a target (what lstopo printed: a .console, or an .xml export), lstopo
options and environment variables. The comparison is on what both sides
can say (tests/lstopo_console.py's ConsoleSummary), both in the data and in
the tree `nodemap topo` prints (lc.tree_diff): packages, NUMA nodes and
memory, caches, groups, cores, PUs, important PCI devices, GPUs and NICs
with their bus ids and locality (the PUs of the nearest CPU-side object). Targets that are XML are read by nodemap's XML reader
and compared the same way, and each XML source is also compared with an
independent ElementTree walk of the file (tests/test_conformance_xml.py).

hwloc's suite has console targets for few XML files, and Debian's lstopo
2.9 cannot read v3 XML; `refs` is a folder of `<stem>.console` files that a
newer lstopo printed for each XML file of the suite (`lstopo-no-graphics
--if xml --input X.xml -v`, an hwloc 3.0 build): each becomes a case
"ref/<stem>", compared the same way.

EXPECTED lists the cases that cannot agree, each with its reason; a case
there that agrees is reported too (the list must stay true).
benchmarks/hwloc_suite_tally.py runs this over a checkout of hwloc and writes
the tally; tests/test_conformance_hwloc_suite.py runs it under pytest when
NODEMAP_HWLOC_TESTS names the folder.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import lstopo_console as lc

__all__ = ["Case", "cases", "check", "EXPECTED"]

# case name -> why nodemap cannot print what hwloc printed (kept short: one line each)
EXPECTED: dict[str, str] = {
    "linux/16em64t-4s2c2t-nocaches": "--no-caches output: nodemap has no option to hide caches",
    "linux/16em64t-4s2c2t-merge": "--merge output: nodemap does not merge levels that add no structure",
    "linux/16em64t-4s2ca2c-cpusetreorder-merge": "--filter all:structure output: nodemap does not merge levels",
    "linux/16amd64-4n4c-cgroup-distance-merge": "--filter all:structure output: nodemap does not merge levels",
    "linux/16amd64-8n2c-cpusets-disallowed": "--disallowed output: nodemap lists disallowed PUs in its notes, "
                                              "the summary compares the allowed view",
    "xml/irregulargroups-disallowed.console": "--disallowed output (see above)",
    "xml/16intel64-manyVFs.nocollapse.console": "--no-collapse: the console lists each virtual function",
    "linux/fakeheterocpunuma": "HWLOC_DEBUG_ALLOW_OVERLAPPING_NODE_CPUSETS: hwloc is told to keep overlapping "
                               "NUMA cpusets; the model gives each CPU one node",
    "linux/40intel64-2g2n4c+pcilocality": "HWLOC_PCI_LOCALITY overrides sysfs PCI locality (a debug variable)",
    "linux/fakepcilocalities": "HWLOC_PCI_LOCALITY overrides sysfs PCI locality (a debug variable)",
    # references printed by lstopo 3.0 from XML exported without --disallowed
    # (hwloc restricts the topology to the allowed set when it loads the file)
    "ref/32amd64-4s2n4c-cgroup2": "hwloc keeps the L3 caches of cgroup-hidden PUs, as they hold allowed NUMA "
                                  "nodes; nodemap's caches hold PUs only and leave out a cache of no usable PU",
    "ref/irregulargroups-disallowed": "hwloc keeps packages P#4, P#6, P#8 with no allowed PU or NUMA node because "
                                      "they hold PCI devices; nodemap places I/O by CPU locality and keeps no "
                                      "package without usable CPUs or memory",
}
# .test variables that change nothing nodemap compares
_HARMLESS_ENV = {"HWLOC_SHOW_ERRORS", "HWLOC_CPUKINDS", "HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES"}
# lstopo options that change nothing compared (or that the comparison applies itself)
_HARMLESS_OPTIONS = {"-", "-v", "--no-icaches", "--whole-io", "--of", "xml", "--export-xml-flags", "2", "--no-io"}


@dataclass(frozen=True)
class Case:
    name: str  # "linux/16amd64-8n2c" (folder/stem of the .test)
    source: Path
    target: Path
    options: tuple[str, ...]
    env: dict

    @property
    def keeps_gpu_memory_nodes(self) -> bool:
        return self.env.get("HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES", "") not in ("", "0")


def cases(folder: str | Path, refs: str | Path | None = None) -> list[Case]:
    """Every .test under folder/linux and folder/xml whose source and target
    exist; with `refs`, every XML file there that has refs/<stem>.console."""
    out = []
    for sub in ("linux", "xml"):
        for test in sorted((Path(folder) / sub).glob("*.test")):
            text = test.read_text()
            fields = {k: v.strip() for k, v in re.findall(r"^(source|target|options):\s*(.*)$", text, re.M)}
            env = dict(re.findall(r"^env:\s*(\w+)=(\S*)", text, re.M))
            source, target = test.parent / fields.get("source", ""), test.parent / fields.get("target", "")
            if fields.get("source") and fields.get("target") and source.exists() and target.exists():
                out.append(Case(f"{sub}/{test.stem}", source, target, tuple(fields.get("options", "").split()),
                                {k: v.strip('"') for k, v in env.items()}))
    if refs:
        out += [Case(f"ref/{xml.stem}", xml, Path(refs) / f"{xml.stem}.console", (), {})
                for sub in ("linux", "xml") for xml in sorted((Path(folder) / sub).glob("*.xml"))
                if (Path(refs) / f"{xml.stem}.console").exists()]
    return out


def check(case: Case, unpack) -> list[str]:
    """Differences between nodemap's reading of the source and hwloc's target.

    `unpack(tarball) -> root directory` unpacks a snapshot (cached by the caller)."""
    from nodemap.topology import hwloc_xml, sysfs

    if case.source.name.endswith(".tar.bz2"):
        topo = sysfs.read(unpack(case.source))
    else:
        topo = hwloc_xml.read(case.source)
    diffs = []
    harmless = _HARMLESS_OPTIONS | ({"--disallowed"} if case.target.suffix == ".xml" else set())  # both sides read the file
    odd = (set(case.env) - _HARMLESS_ENV) | (set(case.options) - harmless)
    if odd:
        diffs.append(f"the .test sets {sorted(odd)}, which change what hwloc shows")
    got = _summary(topo, case)
    if case.target.suffix == ".console":
        want = lc.parse_console(case.target)
        if want.packages and all(pid == -1 for pid, _, _ in want.packages):
            want, got = want.without_package_ids(), got.without_package_ids()
    else:
        want = _summary(hwloc_xml.read(case.target), case)
        if "--no-io" in case.options:
            got = dataclasses.replace(got, pci=(), gpus=(), nics=(), io_locality=())
        if case.source.suffix == ".xml":
            diffs += _against_the_file(case.source, topo)
    diffs += want.diff(got)
    diffs += lc.tree_diff(topo, want)  # what a user reads, not only the data
    return diffs


def _summary(topo, case: Case) -> lc.ConsoleSummary:
    if not case.keeps_gpu_memory_nodes and _is_power(topo):
        # hwloc drops NVIDIA GPU memory nodes on POWER unless told to keep
        # them; nodemap keeps them, under their GPU (never as host memory)
        from nodemap.topology.model import replace

        topo = replace(topo, numa_nodes=tuple(n for n in topo.numa_nodes if n.kind != "GPUMemory"))
    got = lc.summarize_topology(topo)
    # GPUs nodemap knows from the NVIDIA driver (/proc/driver/nvidia/gpus)
    # where sysfs has no PCI vendor file: hwloc shows a bare PCI device
    unnamed = {d.bus_id for d in topo.pci_devices if not d.vendor_id}
    got = dataclasses.replace(got, gpus=tuple(g for g in got.gpus if g not in unnamed),
                              io_locality=tuple(x for x in got.io_locality if x[0] not in unnamed))
    if "--no-icaches" in case.options:
        got = dataclasses.replace(got, caches=tuple(c for c in got.caches if c[1] != "instruction"))
    return got


def _is_power(topo) -> bool:
    return any("POWER" in p.cpu_model for p in topo.packages) or topo.machine.arch.startswith("ppc")


def _against_the_file(path: Path, topo) -> list[str]:
    import test_conformance_xml as tcx

    want = tcx.walk(path)
    got = tcx.summary(topo, want["pus"])
    return [f"file walk {k}: {want[k]!r} != {got[k]!r}" for k in want if want[k] != got[k]]
