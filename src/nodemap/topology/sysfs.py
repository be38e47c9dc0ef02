"""Linux sysfs/procfs source: a node read from a root directory.

`read("/")` reads this machine; `read(dir)` reads a snapshot unpacked to
`dir` (hwloc's tests/hwloc/linux tarballs hold sys/ and proc/) exactly the
same way. Every path, symlinks included, is resolved inside the root: an
absolute link in a snapshot ("/sys/devices/...") means the snapshot's own
sys/, never the live one.

Only small attribute files are read (no PCI config space), so a real node
reads in milliseconds.
"""

from __future__ import annotations

import os

from ..errors import InputError
from ..text import is_decimal, natural_key
from ..units import gib
from . import classify
from .cpuset import CpuSet
from .root import _MAX_CPUINFO, Root
from .model import GPU, NIC, PU, Cache, Core, Group, Machine, NumaNode, Package, PciDevice, Port, Topology, replace

__all__ = ["read", "Root", "xgmi_hops", "pcie_generation"]

_CPU = "sys/devices/system/cpu"
_NODE = "sys/devices/system/node"
_PCI = "sys/bus/pci/devices"


def read(root: str | os.PathLike | Root = "/", *, this_process: bool | None = None) -> Topology:
    """The node under `root` (a directory, or a Root: a tarball read into
    memory). `this_process`: apply this process's affinity and cgroup
    cpuset (None: only when root is "/"; a snapshot's own proc/self and
    cgroup files are applied either way)."""
    fs = root if isinstance(root, Root) else Root(root)
    notes: list[str] = []
    cpus = _read_cpus(fs, notes)
    numa_nodes, distances = _read_numa(fs, cpus.online, notes)
    nvidia = _nvidia_gpus(fs)
    numa_nodes = _gpu_memory_nodes(numa_nodes, nvidia)
    pci = _read_pci(fs, numa_nodes, cpus.online, notes)
    gpus = _gpus(fs, pci, nvidia, numa_nodes)
    nics = _nics(fs, pci)
    topo = Topology(
        machine=_machine(fs, numa_nodes, notes),
        packages=cpus.packages,
        numa_nodes=numa_nodes,
        distances=distances,
        groups=cpus.groups,
        caches=cpus.caches,
        cores=cpus.cores,
        pus=cpus.pus,
        pci_devices=pci,
        gpus=gpus,
        nics=nics,
        links=_c2c_links(gpus, numa_nodes, cpus.packages) + _kfd_links(fs, gpus),
        allowed_mems=CpuSet(n.os_index for n in numa_nodes),
        source=f"sysfs:{fs.root}",
        notes=tuple(notes),
    )
    from . import allowed

    return allowed.apply(topo, fs, this_process=this_process)


# --- text without regular expressions ----------------------------------------------------------
# `re` costs ~4 ms to import, a tenth of what `nodemap topo` may take, and the
# files read here have fixed formats: plain string code reads them, and
# falls back to the regular expression it replaces for anything unusual.
# tests/test_topology_sysfs_text.py checks each against its expression.

_HEX = frozenset("0123456789abcdefABCDEF")


def _is_bus_id(s: str) -> bool:
    r"""re.fullmatch(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", s)"""
    dom, sep, rest = s.partition(":")
    return (bool(sep) and 4 <= len(dom) <= 8 and _HEX.issuperset(dom) and len(rest) == 7 and rest[2] == ":"
            and rest[5] == "." and _HEX.issuperset(rest[:2]) and _HEX.issuperset(rest[3:5]) and rest[6] in "01234567")


def _is_host_bridge(s: str) -> bool:
    """re.fullmatch(r"pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}", s)"""
    dom, sep, bus = s[3:].partition(":")
    return (s[:3] == "pci" and bool(sep) and 4 <= len(dom) <= 8 and len(bus) == 2 and _HEX.issuperset(dom)
            and _HEX.issuperset(bus))


def _ascii_digits(text: str, i: int) -> str:
    """The run of 0-9 at text[i:]."""
    j = i
    while j < len(text) and text[j] in "0123456789":
        j += 1
    return text[i:j]


def _skip_blanks(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t":
        i += 1
    return i


def _blocks(text: str) -> list[list[str]]:
    r"""The lines of each block of `text`, blocks separated by blank lines:
    [block.splitlines() for block in re.split(r"\n\s*\n", text)], less
    empty blocks."""
    blocks: list[list[str]] = []
    lines: list[str] = []
    for segment in text.split("\n"):
        if segment.strip():
            lines += segment.splitlines()
        elif lines:
            blocks.append(lines)
            lines = []
    if lines:
        blocks.append(lines)
    return blocks


def _leading_number(text: str) -> str:
    r"""re.match(r"\s*([\d.]+)", text).group(1), "" when it does not match."""
    i = _skip_blanks(text, 0)
    j = i
    while j < len(text) and text[j] in "0123456789.":
        j += 1
    if j > i and not (j < len(text) and text[j].isdecimal()) and (i == len(text) or not text[i].isspace()):
        return text[i:j]
    import re

    m = re.match(r"\s*([\d.]+)", text)
    return m.group(1) if m else ""


# size suffixes re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", re.I) takes, and their factor
_SIZE_SUFFIXES = {unit + i + b: factor
                  for unit, factor in (("", 1), ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("k", 1 << 10),
                                       ("m", 1 << 20), ("g", 1 << 30))
                  for i in ("", "i", "I") for b in ("", "B", "b")}


# --- CPUs: PUs, cores, packages, groups, caches -------------------------------------------------


class _Cpus:
    __slots__ = ("pus", "online", "cores", "packages", "groups", "caches")

    def __init__(self, pus: tuple[PU, ...], online: CpuSet, cores: tuple[Core, ...], packages: tuple[Package, ...],
                 groups: tuple[Group, ...], caches: tuple[Cache, ...]) -> None:
        self.pus, self.online, self.cores = pus, online, cores
        self.packages, self.groups, self.caches = packages, groups, caches


class _Cpu:
    __slots__ = ("index", "package_id", "package_cpus", "core_id", "threads", "groups")

    def __init__(self, index: int) -> None:
        self.index = index
        self.package_id = -1
        self.package_cpus: CpuSet | None = None
        self.core_id = -1
        self.threads: CpuSet | None = None
        self.groups: dict[str, tuple[int, CpuSet]] = {}


# sysfs topology files that name a level between package and core (or above the package)
_GROUP_FILES = (("Die", "die_id", "die_cpus"), ("Cluster", "cluster_id", "cluster_cpus"),
                ("Book", "book_id", "book_siblings"), ("Drawer", "drawer_id", "drawer_siblings"))


def _read_cpus(fs: Root, notes: list[str]) -> _Cpus:
    if not fs.isdir(_CPU):
        what = "is empty" if not fs.listdir("") else "has no sys/devices/system/cpu directory"
        raise InputError(fs.where(_CPU), f"missing: {fs.root} {what}, so it is not a Linux root or sysfs "
                         "snapshot (give the directory holding sys/ and proc/)")
    indexes = sorted(int(n[3:]) for n in fs.listdir(_CPU) if n[:3] == "cpu" and n[3:].isdecimal())
    if not indexes:
        raise InputError(fs.where(_CPU), "holds no cpuN directory: a partial snapshot (take it again)")
    online = _online(fs, indexes)
    cpus = [_cpu(fs, i) for i in indexes if i in online]
    packages, package_of = _packages(fs, cpus, online, notes)
    models = _cpu_models(fs)
    packages = tuple(Package(p.os_index, p.cpuset, models.get(p.cpuset.first()) or models.get(-1, ""))
                     for p in packages)
    caches = _caches(fs, cpus, online, notes)
    return _Cpus(
        pus=tuple(PU(i, online=i in online) for i in indexes),
        online=online,
        cores=_cores(cpus, online, package_of, notes),
        packages=packages,
        groups=_groups(cpus, online, packages, caches),
        caches=caches,
    )


def _online(fs: Root, indexes: list[int]) -> CpuSet:
    listed = fs.read_set(f"{_CPU}/online")
    if listed is not None:
        return listed & CpuSet(indexes)
    # old kernels: only per-CPU files; cpu0 often has none and is online
    return CpuSet(i for i in indexes if fs.read_int(f"{_CPU}/cpu{i}/online") != 0)


def _cpu(fs: Root, i: int) -> _Cpu:
    top = f"{_CPU}/cpu{i}/topology"
    cpu = _Cpu(i)
    pkg = fs.read_int(f"{top}/physical_package_id")
    cpu.package_id = -1 if pkg is None else pkg
    cpu.package_cpus = fs.read_set(f"{top}/package_cpus_list", f"{top}/package_cpus") or fs.read_set(
        f"{top}/core_siblings_list", f"{top}/core_siblings")
    core = fs.read_int(f"{top}/core_id")
    cpu.core_id = -1 if core is None else core
    cpu.threads = fs.read_set(f"{top}/core_cpus_list", f"{top}/core_cpus") or fs.read_set(
        f"{top}/thread_siblings_list", f"{top}/thread_siblings")
    for kind, id_file, cpus_file in _GROUP_FILES:
        gid = fs.read_int(f"{top}/{id_file}")
        members = fs.read_set(f"{top}/{cpus_file}_list", f"{top}/{cpus_file}")
        if gid is not None and members:
            cpu.groups[kind] = (gid, members | CpuSet([i]))
    return cpu


def _packages(fs: Root, cpus: list[_Cpu], online: CpuSet, notes: list[str]):
    """Packages by their sibling sets (package_cpus, core_siblings), else by
    physical_package_id; P# is the id (ia64 repeats ids across packages)."""
    by_key: dict[object, tuple[int, CpuSet]] = {}
    for c in cpus:
        if c.package_cpus:
            key: object = (c.package_cpus & online) | CpuSet([c.index])
        elif c.package_id >= 0:
            key = ("id", c.package_id)
        else:
            continue
        pid, members = by_key.get(key, (c.package_id, CpuSet()))
        by_key[key] = (pid, members | CpuSet([c.index]))
    bad = _inconsistent(by_key)
    if bad:
        notes.append(f"CPUs {bad} disagree on their package siblings: those packages are left out (as hwloc does)")
    out, package_of = [], {}
    numbered = 0
    for key, (pid, members) in sorted(by_key.items(), key=lambda kv: kv[1][1].first()):
        if isinstance(key, CpuSet) and key != members:
            continue
        if pid < 0:
            pid = numbered
            numbered += 1
        out.append(Package(pid, members))
        package_of.update((i, pid) for i in members)
    if numbered:
        notes.append("physical_package_id is -1 or missing: packages found from their sibling CPUs and numbered "
                     "in order")
    return out, package_of


def _inconsistent(by_key: dict) -> CpuSet:
    """CPUs of sibling sets that some member does not report the same way
    (hand-edited or buggy sysfs): such a set cannot be an object."""
    return CpuSet.union_all(key for key, (_, members) in by_key.items() if isinstance(key, CpuSet) and key != members)


def _cores(cpus: list[_Cpu], online: CpuSet, package_of: dict[int, int], notes: list[str]) -> tuple[Core, ...]:
    """One core per set of thread siblings (core_id is not unique on all
    architectures: s390 repeats it across packages). Siblings with different
    core_ids are cores of one compute unit (AMD Bulldozer): one core each,
    as hwloc does."""
    by_index = {c.index: c for c in cpus}
    seen: dict[CpuSet, _Cpu] = {}
    for c in cpus:
        if c.threads is not None:
            threads = (c.threads & online) | CpuSet([c.index])
            sibling = by_index.get((threads - CpuSet([c.index])).first())
            if sibling is not None and sibling.core_id != c.core_id:
                threads = CpuSet([c.index])
        elif c.core_id >= 0:  # no sibling lists: group by (package, core_id)
            threads = CpuSet(o.index for o in cpus if o.core_id == c.core_id and o.package_id == c.package_id)
        else:
            continue
        seen.setdefault(threads, c)
    cores, counters = [], {}
    unnumbered = False
    for threads, c in sorted(seen.items(), key=lambda kv: kv[0].first()):
        pkg = package_of.get(c.index, -1)
        os_index = c.core_id
        if os_index < 0:
            os_index = counters.get(pkg, 0)
            unnumbered = True
        counters[pkg] = counters.get(pkg, 0) + 1
        cores.append(Core(os_index, pkg, threads))
    if unnumbered:
        notes.append("core_id is missing: cores numbered in order within their package")
    return tuple(cores)


def _groups(cpus: list[_Cpu], online: CpuSet, packages: tuple[Package, ...],
            caches: tuple[Cache, ...] = ()) -> tuple[Group, ...]:
    """Dies, clusters, books, drawers that actually split something: a level
    equal to its package, or a cluster equal to a core, is no level (hwloc
    drops those too), nor a cluster equal to a cache (hybrid E-core
    clusters sharing one L2: hwloc keeps the cache)."""
    package_sets = {p.cpuset for p in packages}
    cache_sets = {c.cpuset for c in caches if c.kind != "instruction"}
    thread_sets = {(c.threads & online) | CpuSet([c.index]) for c in cpus if c.threads is not None}
    found: dict[tuple[str, CpuSet], int] = {}
    for c in cpus:
        for kind, (gid, members) in c.groups.items():
            found.setdefault((kind, members & online), gid)
    out = []
    for (kind, members), gid in found.items():
        if not members or members in package_sets or members in thread_sets or members == online:
            continue
        if kind == "Cluster" and members in cache_sets:
            continue
        out.append(Group(kind, gid, members))
    return tuple(sorted(out, key=lambda g: (_GROUP_ORDER.index(g.kind), g.cpuset.first())))


_GROUP_ORDER = ("Drawer", "Book", "Die", "Cluster")
_CACHE_TYPES = {"unified": "unified", "data": "data", "instruction": "instruction"}
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _caches(fs: Root, cpus: list[_Cpu], online: CpuSet, notes: list[str]) -> tuple[Cache, ...]:
    found: dict[tuple[int, str, CpuSet], tuple[Cache, CpuSet]] = {}
    for c in cpus:
        base = f"{_CPU}/cpu{c.index}/cache"
        for name in sorted(fs.listdir(base)):
            if not name.startswith("index"):
                continue
            cache = _cache(fs, f"{base}/{name}", c, online)
            if cache is not None:
                key = (cache.level, cache.kind, cache.cpuset)
                first, members = found.get(key, (cache, CpuSet()))
                found[key] = (first, members | CpuSet([c.index]))
    kept = [cache for cache, members in found.values() if cache.cpuset == members]
    if len(kept) < len(found):
        bad = CpuSet.union_all(k[2] for k, (_, m) in found.items() if k[2] != m)
        notes.append(f"CPUs {bad} disagree on which CPUs share a cache: those caches are left out (as hwloc does)")
    return tuple(sorted(kept, key=lambda k: (-k.level, k.kind, k.cpuset.first())))


def _cache(fs: Root, d: str, cpu: _Cpu, online: CpuSet) -> Cache | None:
    level = fs.read_int(f"{d}/level")
    kind = _CACHE_TYPES.get((fs.read(f"{d}/type") or "").lower())
    size = _size(fs, f"{d}/size")
    if level is None or kind is None or not size:
        return None  # hwloc skips caches without a size too
    shared = (fs.read_set(f"{d}/shared_cpu_list", f"{d}/shared_cpu_map") or CpuSet()) & online
    if not shared and cpu.threads:
        shared = cpu.threads & online  # ia64 gives empty maps for core-private caches
    ways = fs.read_int(f"{d}/ways_of_associativity") or 0
    return Cache(level=level, kind=kind, size=size, cpuset=shared | CpuSet([cpu.index]),
                 line_size=fs.read_int(f"{d}/coherency_line_size") or 0, ways=ways)


def _size(fs: Root, rel: str) -> int:
    text = fs.read(rel)
    if not text:
        return 0
    digits = _ascii_digits(text, 0)
    unit = _SIZE_SUFFIXES.get(text[len(digits):].lstrip(" ")) if digits else None
    if unit is not None:  # the usual "32K", "1024 KiB"
        return int(digits) * unit
    import re

    m = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", text, re.I)
    if not m:
        raise InputError(fs.where(rel), f"unreadable cache size {text[:40]!r} (expected e.g. '32K')")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]


def _cpu_models(fs: Root) -> dict[int, str]:
    """CPU model of each processor from /proc/cpuinfo (x86/ia64 'model name',
    POWER 'cpu', ARM 'Processor' or 'model name', MIPS 'cpu model'); key -1
    holds a model given once for all processors (old ARM kernels)."""
    text = fs.read("proc/cpuinfo", _MAX_CPUINFO) or ""
    models: dict[int, str] = {}
    for block in _blocks(text):
        fields: dict[str, str] = {}
        for line in block:
            key, sep, value = line.partition(":")
            if sep:  # hwloc keeps trailing blanks of a model name; so do we
                fields.setdefault(key.strip(), value.lstrip())
        model = next((fields[k] for k in ("model name", "cpu model", "Processor", "cpu") if fields.get(k)), "")
        proc = fields.get("processor", "")
        if is_decimal(proc, 7):
            models[int(proc)] = model
        elif model:
            models[-1] = model
    return models


# --- NUMA nodes ------------------------------------------------------------------------------


def _read_numa(fs: Root, online: CpuSet, notes: list[str]):
    indexes = sorted(int(n[4:]) for n in fs.listdir(_NODE) if n[:4] == "node" and n[4:].isdecimal())
    if not indexes:
        memory = _meminfo_total(fs, "proc/meminfo")
        notes.append("no NUMA nodes in sysfs: one NUMA node 0 holds every CPU"
                     + ("" if memory else " (memory size unknown: no /proc/meminfo)"))
        return (NumaNode(0, online, memory),), ()
    nodes, claimed, dropped = [], CpuSet(), []
    for i in indexes:
        d = f"{_NODE}/node{i}"
        cpus = (fs.read_set(f"{d}/cpulist", f"{d}/cpumap") or CpuSet()) & online
        if cpus and cpus.issubset(claimed):
            dropped.append(i)  # the same CPUs as earlier nodes: a kernel bug, not a node
            continue
        nodes.append(NumaNode(i, cpus - claimed, _meminfo_total(fs, f"{d}/meminfo")))
        claimed |= cpus
    if dropped:
        notes.append(f"NUMA nodes {CpuSet(dropped)} list only CPUs of lower nodes (buggy NUMA information): "
                     "left out, as hwloc does")
    homeless = online - claimed
    if homeless:
        notes.append(f"CPUs {homeless} are in no NUMA node")
    return tuple(nodes), _distances(fs, [n.os_index for n in nodes], indexes)


def _meminfo_total(fs: Root, rel: str) -> int:
    text = fs.read(rel) or ""
    at = text.find("MemTotal:")
    if at < 0:
        return 0
    i = _skip_blanks(text, at + 9)
    digits = _ascii_digits(text, i)
    if digits and text.startswith("kB", _skip_blanks(text, i + len(digits))):
        return int(digits) * 1024  # the first MemTotal line, as re.search finds it
    import re

    m = re.search(r"MemTotal:\s*(\d+)\s*kB", text)
    return int(m.group(1)) * 1024 if m else 0


def _distances(fs: Root, kept: list[int], all_nodes: list[int]) -> tuple[tuple[int, ...], ...]:
    """SLIT rows (columns follow all nodes in index order), for the kept nodes."""
    pos = {n: k for k, n in enumerate(all_nodes)}
    rows = []
    for i in kept:
        text = fs.read(f"{_NODE}/node{i}/distance")
        if not text:
            return ()
        values = text.split()
        if len(values) != len(all_nodes) or not all(is_decimal(v, 9) for v in values):
            return ()
        rows.append(tuple(int(values[pos[j]]) for j in kept))
    return tuple(rows)


# --- PCI devices ------------------------------------------------------------------------------

# PCIe generation from the current link speed (GT/s), and payload bits per transfer
_GENERATIONS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def pcie_generation(gts: float) -> int:
    """PCIe generation of a link running at `gts` GT/s, 0 when unknown."""
    return _GENERATIONS.get(gts, 0)


def _read_pci(fs: Root, numa_nodes, online: CpuSet, notes: list[str]) -> tuple[PciDevice, ...]:
    names = sorted((n for n in fs.listdir(_PCI) if _is_bus_id(n)), key=_bus_key)
    devices: dict[str, PciDevice] = {}
    guessed: list[str] = []
    for name in names:
        dev = _pci_device(fs, name, online)
        if dev.numa_node < 0:
            dev, how = _locate(dev, devices, numa_nodes)
            if how:
                guessed.append(f"{dev.bus_id} ({how})")
        devices[dev.bus_id] = dev
    if guessed:
        shown = ", ".join(guessed[:4]) + (f" and {len(guessed) - 4} more" if len(guessed) > 4 else "")
        notes.append(f"{len(guessed)} PCI device(s) report numa_node -1: {shown}")
    return tuple(devices.values())


def _pci_device(fs: Root, name: str, online: CpuSet) -> PciDevice:
    d = f"{_PCI}/{name}"
    real = fs.resolve(d)
    parts = real.split("/")
    start = max((k for k, p in enumerate(parts) if _is_host_bridge(p)), default=len(parts) - 1)
    path = tuple(p.lower() for p in parts[start:-1] if _is_host_bridge(p) or _is_bus_id(p))
    cls = fs.read_int(f"{d}/class", 16) or 0
    speed, gen = _link_speed(fs.read(f"{d}/current_link_speed"))
    width = fs.read_int(f"{d}/current_link_width") or 0
    # What the link can train at: the lower of both ends' maximum (a Gen3 NIC
    # behind a Gen1 switch port runs Gen1, as it should).
    max_gen, max_width = _link_max(fs, real.lstrip("/")), 0
    if max_gen:
        max_gen, max_width = max_gen
        up = real.rstrip("/").rpartition("/")[0]
        if _is_bus_id(up.rpartition("/")[2]):
            cap = _link_max(fs, up.lstrip("/"))
            if cap:
                max_gen, max_width = min(max_gen, cap[0]), min(max_width, cap[1])
    numa = fs.read_int(f"{d}/numa_node")
    cpus = fs.read_set(f"{d}/local_cpulist", f"{d}/local_cpus")
    return PciDevice(
        bus_id=_norm(name), class_id=cls >> 8, vendor_id=fs.read_int(f"{d}/vendor", 16) or 0,
        device_id=fs.read_int(f"{d}/device", 16) or 0, numa_node=-1 if numa is None else numa,
        cpuset=(cpus & online) if cpus is not None else CpuSet(), pci_path=path, link_gen=gen, link_width=width,
        link_speed=round(speed * width * (0.8 if gen in (1, 2) else 128 / 130) / 8, 2) if width and speed else 0.0,
        link_max_gen=max_gen or 0, link_max_width=max_width,
    )


def _link_max(fs: Root, d: str) -> tuple[int, int] | None:
    """(max generation, max width) of the PCI function at `d`, None unknown."""
    gen = _link_speed(fs.read(f"{d}/max_link_speed"))[1]
    width = fs.read_int(f"{d}/max_link_width") or 0
    return (gen, width) if gen and width else None


def _link_speed(text: str | None) -> tuple[float, int]:
    text = text or ""
    if "GT/s" not in text:
        return 0.0, 0  # no match: the attribute is absent (virtual devices) or says "Unknown"
    i = _skip_blanks(text, 0)
    j = i
    while j < len(text) and text[j] in "0123456789.":
        j += 1
    if j > i and text.startswith("GT/s", _skip_blanks(text, j)):
        number = text[i:j]  # the usual "16.0 GT/s PCIe"
    else:
        import re

        m = re.match(r"\s*([\d.]+)\s*GT/s", text)
        if not m:
            return 0.0, 0
        number = m.group(1)
    gts = float(number)
    return gts, pcie_generation(gts)


def _locate(dev: PciDevice, earlier: dict[str, PciDevice], numa_nodes) -> tuple[PciDevice, str]:
    """numa_node -1: the only node, else the parent bridge's, else the one node
    of its local CPUs. Returns the device and how it was placed ('' silently)."""
    hosts = [n for n in numa_nodes if not n.is_gpu_memory]
    if len(hosts) == 1:
        n = hosts[0]
        return replace(dev, numa_node=n.os_index, cpuset=dev.cpuset or n.cpuset), ""
    parent = next((earlier[b] for b in reversed(dev.pci_path) if b in earlier and earlier[b].numa_node >= 0), None)
    if parent is not None:
        return replace(dev, numa_node=parent.numa_node, cpuset=dev.cpuset or parent.cpuset), \
            f"NUMA {parent.numa_node} from bridge {parent.bus_id}"
    near = [n for n in numa_nodes if dev.cpuset and n.cpuset and n.cpuset.issubset(dev.cpuset)]
    if len(near) == 1:
        return replace(dev, numa_node=near[0].os_index), f"NUMA {near[0].os_index} from local_cpulist"
    return dev, "locality unknown"


def _norm(bus_id: str) -> str:
    dom, bus, devfn = bus_id.lower().split(":")
    return f"{dom.lstrip('0').rjust(4, '0')}:{bus}:{devfn}"


def _bus_key(bus_id: str) -> tuple[int, ...]:
    return tuple(int(x, 16) for x in bus_id.replace(".", ":").split(":"))


# --- GPUs ---------------------------------------------------------------------------------------

def _nvidia_gpus(fs: Root) -> dict[str, int]:
    """NVIDIA GPUs the driver lists in /proc/driver/nvidia/gpus/<bus id>, with
    the NUMA node holding each one's memory (numa_status "Node:", -1 none),
    as hwloc reads them. Found even where sysfs lacks PCI vendor files."""
    base = "proc/driver/nvidia/gpus"
    found = {}
    for name in fs.listdir(base):
        if not _is_bus_id(name):
            continue
        node = -1
        for line in (fs.read(f"{base}/{name}/numa_status") or "").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Node" and is_decimal(value.strip().removeprefix("-"), 7):
                node = int(value)
        found[_norm(name)] = node
    return found


def _gpu_memory_nodes(numa_nodes, nvidia: dict[str, int]):
    """GPU memory exposed as a NUMA node (Grace Hopper, POWER9 + V100):
    kind GPUMemory, owned by its GPU, never a CPU domain."""
    owner = {node: bus for bus, node in nvidia.items() if node >= 0}
    if not owner:
        return numa_nodes
    return tuple(replace(n, kind="GPUMemory", pci_bus_id=owner[n.os_index], cpuset=CpuSet())
                 if n.os_index in owner else n for n in numa_nodes)


def _c2c_links(gpus: tuple[GPU, ...], numa_nodes, packages) -> tuple:
    """A GPU whose memory is a NUMA node on a Grace (not POWER) machine is
    joined to its CPU by NVLink-C2C: one link to "CPU", of its own kind."""
    from .model import Link

    if any("POWER" in p.cpu_model.upper() for p in packages):
        return ()  # POWER9: NVLink 2.0 to the CPU, counted only by NVML/hwloc
    memory_of = {n.pci_bus_id for n in numa_nodes if n.is_gpu_memory}
    return tuple(Link(g.key, "CPU", kind="NVLink-C2C", count=1) for g in gpus if g.pci_bus_id in memory_of)


# AMD's KFD lists its GPUs and their links: nodes/N/properties ("key value"
# lines; a GPU has simd_count > 0 and its PCI address as domain + location_id
# = bus << 8 | devfn), nodes/N/io_links/M/properties (type, node_from,
# node_to, weight, max_bandwidth in MB/s). Type 11 is xGMI (kfd_crat.h
# CRAT_IOLINK_TYPE_XGMI); KFD weighs an xGMI hop 15 (KFD_CRAT_XGMI_WEIGHT).
_KFD = "sys/class/kfd/kfd/topology/nodes"
_KFD_XGMI = 11
_KFD_XGMI_WEIGHT = 15


def _kfd_links(fs: Root, gpus: tuple[GPU, ...]) -> tuple:
    """xGMI links between AMD GPUs from KFD's io_links: one per GPU pair,
    with the path's hops (weight / 15, at least 1) and bandwidth."""
    from .model import Link, gpu_order

    key_of = {g.pci_bus_id: g.key for g in gpus}
    gpu_of: dict[str, str] = {}
    for node in fs.listdir(_KFD):
        props = _kfd_properties(fs.read(f"{_KFD}/{node}/properties"))
        if props.get("simd_count", 0) > 0 and "location_id" in props:
            loc = props["location_id"]
            bus = f"{props.get('domain', 0):04x}:{loc >> 8 & 0xff:02x}:{loc >> 3 & 0x1f:02x}.{loc & 7}"
            gpu_of.setdefault(node, key_of.get(bus, ""))  # a partitioned GPU: several nodes, one device
    pairs: dict[tuple[str, str], Link] = {}
    for node, a in gpu_of.items():
        for link in fs.listdir(f"{_KFD}/{node}/io_links"):
            p = _kfd_properties(fs.read(f"{_KFD}/{node}/io_links/{link}/properties"))
            b = gpu_of.get(str(p.get("node_to", -1)), "")
            if p.get("type") != _KFD_XGMI or not a or not b or a == b:
                continue
            x, y = sorted((a, b), key=gpu_order)
            pairs.setdefault((x, y), Link(x, y, "xGMI", count=1, bandwidth=p.get("max_bandwidth", 0) / 1000,
                                          hops=xgmi_hops(p.get("weight", 0))))
    return tuple(pairs[k] for k in sorted(pairs, key=lambda k: (gpu_order(k[0]), gpu_order(k[1]))))


def xgmi_hops(weight: int) -> int:
    """Hops of an xGMI path from KFD's link weight (AMD SMI's too): 15 a hop, at least 1."""
    return max(1, -(-weight // _KFD_XGMI_WEIGHT))


def _kfd_properties(text: str | None) -> dict[str, int]:
    out = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if is_decimal(value.strip()):
            out[key] = int(value)
    return out


def _driver(fs: Root, bus_id: str) -> str:
    """Name of the driver bound to a PCI function, '' if none."""
    return os.path.basename(fs.resolve(f"{_PCI}/{bus_id}/driver"))


def _is_gpu(fs: Root, dev: PciDevice) -> bool:
    return classify.is_gpu(dev.class_id, dev.vendor_id, dev.device_id, driver=lambda: _driver(fs, dev.bus_id))


def _gpus(fs: Root, pci: tuple[PciDevice, ...], nvidia: dict[str, int], numa_nodes) -> tuple[GPU, ...]:
    found = [d for d in pci if d.bus_id in nvidia or _is_gpu(fs, d)]
    memory = {n.pci_bus_id: n.memory for n in numa_nodes if n.is_gpu_memory}
    return tuple(
        GPU(index=k, vendor="NVIDIA" if d.bus_id in nvidia else classify.vendor_name(d.vendor_id), memory=memory.get(d.bus_id, 0),
            pci_bus_id=d.bus_id, numa_node=_host_node(d, numa_nodes), cpuset=d.cpuset,
            pcie_gen=d.link_gen, pcie_width=d.link_width,
            os_names=tuple(sorted(n for n in fs.listdir(f"{_PCI}/{d.bus_id}/drm") if n.startswith(("card", "render")))))
        for k, d in enumerate(found)
    )


def _host_node(dev: PciDevice, numa_nodes) -> int:
    """The device's NUMA node, never a GPU memory node: a GPU whose PCI
    numa_node names its own memory is local to the node of its CPUs."""
    gpu_memory = {n.os_index for n in numa_nodes if n.is_gpu_memory}
    if dev.numa_node not in gpu_memory:
        return dev.numa_node
    near = [n.os_index for n in numa_nodes if n.cpuset and not n.cpuset.isdisjoint(dev.cpuset)]
    return near[0] if len(near) == 1 else -1


# --- NICs ---------------------------------------------------------------------------------------


def _pci_owner(fs: Root, rel: str) -> str:
    """Bus id of the PCI function a class device (net/ib/cxi) belongs to, '' if none."""
    parts = fs.resolve(rel).split("/")
    if "virtual" in parts:
        return ""
    ids = [p for p in parts if _is_bus_id(p)]
    return _norm(ids[-1]) if ids else ""


def _nics(fs: Root, pci: tuple[PciDevice, ...]) -> tuple[NIC, ...]:
    by_bus = {d.bus_id: d for d in pci}
    netdevs: dict[str, list[str]] = {}
    for name in sorted(fs.listdir("sys/class/net")):
        owner = _pci_owner(fs, f"sys/class/net/{name}")
        if owner in by_bus:
            netdevs.setdefault(owner, []).append(name)
    rdma = []
    for cls in ("infiniband", "cxi"):
        for name in fs.listdir(f"sys/class/{cls}"):
            owner = _pci_owner(fs, f"sys/class/{cls}/{name}")
            if owner in by_bus:
                rdma.append(_rdma_nic(fs, cls, name, by_bus[owner], netdevs.get(owner, [])))
    taken = {n.pci_bus_id for n in rdma}
    plain = [_net_nic(fs, by_bus[b], names) for b, names in netdevs.items() if b not in taken]
    rdma.sort(key=lambda n: natural_key(n.name))
    plain.sort(key=lambda n: _bus_key(n.pci_bus_id))
    return tuple(rdma + plain) or _virtual_nics(fs)


_ARPHRD_ETHER, _IFF_UP = 1, 0x1


def _virtual_nics(fs: Root) -> tuple[NIC, ...]:
    """The NICs of a node that sees no PCI NIC: a network namespace or a container, whose NICs are
    veth pairs (a test cluster's rails, a pod's eth0). Those that carry the node's traffic count:
    Ethernet, administratively up (a rail whose cable is out is up without a carrier, and is a NIC
    that is down), not the loopback, not a bridge nor a bridge's or bond's port (plumbing that
    carries another interface's traffic). Where a PCI NIC is visible, virtual interfaces are views
    of it or plumbing (VLANs, bonds, bridges, containers' veths) and are left out."""
    out = []
    for name in sorted(fs.listdir("sys/class/net"), key=natural_key):
        base = f"sys/class/net/{name}"
        if fs.read_int(f"{base}/type") != _ARPHRD_ETHER or not (fs.read_int(f"{base}/flags", 16) or 0) & _IFF_UP:
            continue
        if any(fs.isdir(f"{base}/{part}") for part in ("bridge", "brport", "bonding", "bonding_slave")):
            continue
        # A virtual NIC's speed is its driver's constant (veth says 10000 Mb/s whatever tc shapes): unknown
        state = link_state(fs, name)
        ports = (Port(1, state, "Ethernet", 0.0),) if state not in ("", "unknown") else ()
        out.append(NIC(name=name, kind="Ethernet", ports=ports, netdevs=(name,)))
    return tuple(out)


def _rdma_nic(fs: Root, cls: str, name: str, dev: PciDevice, netdevs: list[str]) -> NIC:
    ports = []
    base = f"sys/class/{cls}/{name}/ports"
    for p in sorted((p for p in fs.listdir(base) if is_decimal(p, 9)), key=int):
        state = (fs.read(f"{base}/{p}/state") or "").split(":")[-1].strip()
        rate = _leading_number(fs.read(f"{base}/{p}/rate") or "")
        ports.append(Port(int(p), state, fs.read(f"{base}/{p}/link_layer") or "", float(rate) if rate else 0.0))
    kind = classify.nic_kind("cxi" if cls == "cxi" else name, dev.vendor_id, (p.link_layer for p in ports),
                             driver=_driver(fs, dev.bus_id))
    return NIC(name=name, kind=kind, pci_bus_id=dev.bus_id, numa_node=dev.numa_node, cpuset=dev.cpuset,
               ports=tuple(ports), netdevs=tuple(netdevs))


def _net_nic(fs: Root, dev: PciDevice, names: list[str]) -> NIC:
    # ARPHRD_INFINIBAND (32): an IPoIB netdev whose RDMA device is not exposed
    ipoib = fs.read_int(f"sys/class/net/{names[0]}/type") == 32
    kind = classify.nic_kind(names[0], dev.vendor_id, rdma=False, ipoib=ipoib)
    return NIC(name=names[0], kind=kind, pci_bus_id=dev.bus_id, numa_node=dev.numa_node, cpuset=dev.cpuset,
               ports=_net_port(fs, names[0], kind), netdevs=tuple(names))


def _net_port(fs: Root, name: str, kind: str) -> tuple[Port, ...]:
    """A netdev's link as its one port: operstate ("up", "down") and speed
    (Mb/s; -1 or absent while the link is down or on virtual NICs), so the
    health check sees an Ethernet link down or slow as it sees an RDMA port's."""
    state = link_state(fs, name)
    if state in ("", "unknown"):  # virtual and some firmware NICs: no link state to judge
        return ()
    speed = fs.read_int(f"sys/class/net/{name}/speed")
    return (Port(1, state, kind, speed / 1000 if speed and speed > 0 else 0.0),)


def link_state(fs: Root, name: str) -> str:
    """A netdev's operstate ("up", "down", "unknown"), "down" the moment its carrier is lost: the
    kernel writes operstate from the carrier later, in its link watch, which runs at most once a
    second (a link cut while another changed reads "up" without a carrier for up to a second; a rank
    planned onto it then binds MPI to a NIC no peer reaches). carrier is unreadable while the
    interface is administratively down (operstate says "down" then)."""
    state = (fs.read(f"sys/class/net/{name}/operstate") or "").strip()
    if (fs.read(f"sys/class/net/{name}/carrier") or "").strip() == "0" and state not in ("", "unknown"):
        return "down"
    return state


# --- machine ------------------------------------------------------------------------------------

_DMI = ("product_name", "product_version", "board_vendor", "board_name", "sys_vendor", "bios_vendor",
        "bios_version", "bios_date")


def nodes_undercount(in_nodes: int, machine: int) -> bool:
    """Whether the NUMA nodes' sysfs MemTotal (summed) is well below the
    machine's /proc/meminfo MemTotal: seen on sandboxed and lent VMs (one
    8 GiB node on a 128 GiB machine), where per-node figures mislead."""
    return 0 < in_nodes < 0.9 * machine


def _machine(fs: Root, numa_nodes, notes: list[str]) -> Machine:
    info = []
    for name in _DMI:
        value = fs.read(f"sys/class/dmi/id/{name}")
        if value:
            info.append(("DMI" + "".join(w.capitalize() if w != "bios" else "BIOS" for w in name.split("_")), value))
    hostname = fs.read("proc/sys/kernel/hostname") or (_gethostname() if fs.live else "")
    # GPU memory nodes are the GPUs' memory, not the host's
    in_nodes = sum(n.memory for n in numa_nodes if not n.is_gpu_memory)
    total = _meminfo_total(fs, "proc/meminfo") - sum(n.memory for n in numa_nodes if n.is_gpu_memory)
    if nodes_undercount(in_nodes, total):
        notes.append(f"NUMA nodes hold {gib(in_nodes, 1)} GiB in sysfs but /proc/meminfo has "
                     f"{gib(total, 1)} GiB: the per-node figures undercount this machine (lstopo shows them "
                     "too); bench sizes arrays from /proc/meminfo when every node is used")
    memory = in_nodes or total
    return Machine(hostname=hostname, arch=os.uname().machine if fs.live else "", memory=memory,
                   mem_total=max(total, 0), info=tuple(info))


def _gethostname() -> str:
    import socket

    return socket.gethostname()
