"""hwloc's `lstopo --of console` output as a comparable summary.

    parse_console(path) -> ConsoleSummary      # what hwloc printed
    summarize_topology(topo) -> ConsoleSummary  # the same shape from a nodemap Topology
    tree_diff(topo, want) -> [str]              # what `nodemap topo` prints against it

Compare the two with `==`, or field by field (`a.diff(b)` lists the fields
that differ). The summary holds what both sides can say:

- packages: (P#, PUs, CPU model) per package; P# is -1 where hwloc printed
  none (s390); the model is the package's CPUModel, else the Machine's;
- numa: (P#, local memory in bytes) per NUMA node;
- caches: (level, "data"/"instruction"/"unified", size, PUs) per cache;
- groups: (kind, PUs) for Die and for Groups with a subtype (Book, Drawer,
  Cluster...); hwloc's unnamed Groups (built from NUMA distances) are left
  out: nodemap does not synthesize them;
- cores: the PU set of each core; cores_per_package: (package PUs, count);
- pus: PU OS indexes;
- pci: (bus id, class) of non-bridge PCI devices of the classes hwloc keeps
  by default ("important" I/O: storage, network, display, processors,
  accelerators, InfiniBand, fibre channel, CXL memory, unclassified);
- gpus: bus ids of PCI GPUs; nics: (name, bus id, netdevs) per NIC, named
  by the RDMA device (OpenFabrics) or else by the first netdev.

Sizes are compared as hwloc prints them: rounded to the unit it picks
(bytes, KiB, MiB, GiB, TiB: the largest whose value stays above 10).
Only what hwloc shows by default is summarized from a Topology: online
allowed PUs and allowed NUMA nodes, and objects holding some of them.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ConsoleSummary", "parse_console", "summarize_topology", "tree_diff", "hwloc_rounded", "parse_tree", "Obj"]


@dataclass(frozen=True)
class ConsoleSummary:
    packages: tuple[tuple[int, str, str], ...] = ()
    numa: tuple[tuple[int, int], ...] = ()
    caches: tuple[tuple[int, str, int, str], ...] = ()
    groups: tuple[tuple[str, str], ...] = ()
    cores: tuple[str, ...] = ()
    cores_per_package: tuple[tuple[str, int], ...] = ()
    pus: tuple[int, ...] = ()
    pci: tuple[tuple[str, int], ...] = ()
    gpus: tuple[str, ...] = ()
    nics: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    # (bus id, PUs of the nearest CPU-side object) of each GPU and NIC
    io_locality: tuple[tuple[str, str], ...] = ()

    def diff(self, other: "ConsoleSummary") -> list[str]:
        """Names of the fields that differ, with both values, for assertion messages."""
        out = []
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if a != b:
                out.append(f"{f.name}: {a!r} != {b!r}")
        return out

    def without_package_ids(self) -> "ConsoleSummary":
        return dataclasses.replace(self, packages=tuple(sorted((-1, c, m) for _, c, m in self.packages)))


# --- sizes ---------------------------------------------------------------------------------

_UNITS = {"B": 1, "KB": 1 << 10, "KiB": 1 << 10, "MB": 1 << 20, "MiB": 1 << 20, "GB": 1 << 30, "GiB": 1 << 30,
          "TB": 1 << 40, "TiB": 1 << 40}


def hwloc_rounded(size: int) -> int:
    """`size` bytes rounded the way lstopo prints it, back in bytes."""
    for shift in (40, 30, 20, 10):
        if size > 10 << shift:
            return ((size + (1 << (shift - 1))) >> shift) << shift
    return size


def _size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMGT]i?B|B)?", text)
    if not m:
        raise ValueError(f"unreadable size {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2) or "B"]


# --- the console tree ----------------------------------------------------------------------


@dataclass
class Obj:
    type: str  # "Package", "L2Cache", "Group0", "PCI", "OSDev", "Net"...
    subtype: str = ""  # "(Drawer)", "[Storage]" contents
    attrs: dict[str, str] = field(default_factory=dict)
    os_index: int = -1  # P#, -1 when not printed
    logical: int = -1  # L#, -1 when not printed
    name: str = ""  # OS device name ("eth0")
    children: list["Obj"] = field(default_factory=list)
    pus: frozenset[int] = frozenset()

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


_HEAD = re.compile(r"(?P<type>[A-Za-z][A-Za-z0-9]*)(?:\[(?P<osdev>[^\]]*)\])?(?:\((?P<sub>[^)]*)\))?"
                   r"(?: L#(?P<lid>\d+))?(?P<rest>.*)")


def parse_tree(path: str | Path) -> Obj:
    """The object tree lstopo printed (the lines before the depth summary)."""
    # split on \n only: DMI strings may hold a bare \r (8em64t-2s2ca2c-buggynuma)
    lines = Path(path).read_bytes().decode("utf-8", "replace").split("\n")
    if not lines or not lines[0].startswith("Machine"):
        raise ValueError(f"{path}: not lstopo console output (first line is not the Machine)")
    root = _object(lines[0])
    stack = [(0, root)]
    for line in lines[1:]:
        body = line.lstrip(" ")
        if not body or re.match(r"(depth \d+:|Special depth|Relative|\d+ processors|Topology|CPU kind)", body):
            break
        depth = (len(line) - len(body)) // 2
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if not stack:
            raise ValueError(f"{path}: bad indentation at {line!r}")
        parent = stack[-1][1]
        collapsed = re.fullmatch(r"(\d+) x \{ (.*) \}", body)
        if collapsed:  # identical PCI functions: "3 x { PCI L#3-5 (busid=0b:00.1-3 ...) }"
            inner = re.sub(r" L#(\d+)-\d+", r" L#\1", collapsed.group(2))
            parent.children += _expand(int(collapsed.group(1)), _object(inner))
            stack.append((depth, parent.children[-1]))
            continue
        # hwloc 1.x merges single-child chains: "Package L#0 + L3 L#0 (4096KiB)"
        for part in _chain(body):
            obj = _object(part)
            parent.children.append(obj)
            parent = obj
        stack.append((depth, parent))
    _fill_pus(root)
    return root


def _expand(n: int, obj: Obj) -> list[Obj]:
    """The n objects of a collapsed line; busid "0b:00.1-3" (domain 0 left out) -> 0000:0b:00.1 .. .3."""
    m = re.fullmatch(r"(?:([0-9a-f]{4,}):)?([0-9a-f]{2}):([0-9a-f]{2})\.(\d)-(\d)", obj.attrs.get("busid", ""))
    if not m:
        return [dataclasses.replace(obj, attrs=dict(obj.attrs)) for _ in range(n)]
    dom, bus, dev, lo, hi = m.groups()
    return [dataclasses.replace(obj, attrs={**obj.attrs, "busid": f"{dom or '0000'}:{bus}:{dev}.{f}"})
            for f in range(int(lo), int(hi) + 1)]


def _chain(text: str) -> list[str]:
    parts, depth, quoted, start = [], 0, False, 0
    for k, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "()":
            depth += 1 if ch == "(" else -1
        elif not quoted and depth == 0 and text.startswith(" + ", k):
            parts.append(text[start:k])
            start = k + 3
    return parts + [text[start:]]


# hwloc 1.x console names
_ALIASES = {"Socket": "Package", "L1": "L1Cache", "L1d": "L1dCache", "L1i": "L1iCache", "L2": "L2Cache",
            "L2d": "L2dCache", "L2i": "L2iCache", "L3": "L3Cache", "L4": "L4Cache", "L5": "L5Cache"}


def _object(text: str) -> Obj:
    m = _HEAD.fullmatch(text)
    if not m:
        raise ValueError(f"unreadable console line {text!r}")
    kind = _ALIASES.get(m.group("type"), m.group("type"))
    obj = Obj(kind, m.group("osdev") or m.group("sub") or "")
    if m.group("lid") is not None:
        obj.logical = int(m.group("lid"))
    if m.group("osdev") is not None:  # OSDev[Net](subtype): the kind is what matters
        obj.subtype = m.group("osdev")
    rest = m.group("rest").strip()
    if rest.startswith("("):
        inner, rest = _parens(rest)
        obj.attrs = _attrs(inner)
        bare = [w for w in inner.split() if re.fullmatch(r"\d+([KMGT]i?B)", w)]
        if bare:  # hwloc 1.x: "L2 L#0 (1024KiB)", "NUMANode L#0 (P#0 16GB)"
            obj.attrs.setdefault("local" if kind == "NUMANode" else "size", bare[0])
        p = re.match(r"P#(\d+)", inner)
        if p:
            obj.os_index = int(p.group(1))
    n = re.fullmatch(r'"(.*)"', rest.strip())
    if n:
        obj.name = n.group(1)
    return obj


def _parens(text: str) -> tuple[str, str]:
    """Split '(a=1 b="x (y)") rest' at the parenthesis closing the first one."""
    depth, quoted = 0, False
    for k, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
            if depth == 0:
                return text[1:k], text[k + 1:]
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _attrs(inner: str) -> dict[str, str]:
    return {k: v[1:-1] if v.startswith('"') else v
            for k, v in re.findall(r'([A-Za-z][\w.]*)=("(?:[^"\\]|\\.)*"|\S*)', inner)}


def _fill_pus(obj: Obj) -> frozenset[int]:
    below = frozenset([obj.os_index]) if obj.type == "PU" else frozenset()
    for c in obj.children:
        below |= _fill_pus(c)
    obj.pus = below
    return below


# --- console -> summary -----------------------------------------------------------------------

_CACHE = re.compile(r"L(\d)([di]?)Cache")
_CACHE_KINDS = {"": "unified", "d": "data", "i": "instruction"}
_NET_OSDEVS = ("Net", "Network")
_GPU_OSDEV = re.compile(r"(cuda|nvml|rsmi|ze|opencl)\d")


def parse_console(path: str | Path) -> ConsoleSummary:
    root = parse_tree(path)
    objs = list(root.walk())
    machine_model = root.attrs.get("CPUModel", "")
    packages = [o for o in objs if o.type == "Package"]
    pcis = [o for o in objs if o.type == "PCI"]
    return ConsoleSummary(
        packages=tuple(sorted((p.os_index, _fmt(p.pus), p.attrs.get("CPUModel", machine_model)) for p in packages)),
        numa=tuple(sorted((n.os_index, _size(n.attrs["local"]) if "local" in n.attrs else 0)
                          for n in objs if n.type == "NUMANode")),
        caches=tuple(sorted((int(m.group(1)), _CACHE_KINDS[m.group(2)], _size(o.attrs.get("size", "0")), _fmt(o.pus))
                            for o in objs if (m := _CACHE.fullmatch(o.type)))),
        groups=tuple(sorted((o.subtype or o.type, _fmt(o.pus)) for o in objs
                            if o.type == "Die" or (o.type.startswith("Group") and o.subtype))),
        cores=tuple(sorted(_fmt(o.pus) for o in objs if o.type == "Core")),
        cores_per_package=_per_package([(_fmt(p.pus), sum(1 for o in p.walk() if o.type == "Core")) for p in packages],
                                       sum(1 for o in objs if o.type == "Core")),
        pus=tuple(sorted(o.os_index for o in objs if o.type == "PU")),
        pci=tuple(sorted((_bus(p), _class(p)) for p in pcis if _important(_class(p)))),
        gpus=tuple(sorted(_bus(p) for p in pcis if _console_gpu(p))),
        nics=tuple(sorted(n for p in pcis if (n := _console_nic(p)))),
        io_locality=tuple(sorted((_bus(p), _fmt(place.pus)) for p, place in _io_places(root)
                                 if _console_gpu(p) or _console_nic(p))),
    )


_IO_OBJS = ("PCI", "PCIBridge", "HostBridge", "Bridge", "OSDev")


def _io_places(root: Obj):
    """(PCI object, nearest ancestor that is no I/O object) pairs."""
    stack = [(root, root)]
    while stack:
        obj, place = stack.pop()
        for c in obj.children:
            if c.type == "PCI":
                yield c, place
            stack.append((c, place if c.type in _IO_OBJS or c.type.startswith(("Net", "Block", "GPU")) else c))


def _fmt(pus) -> str:
    """List syntax of a PU set ("0-3,8")."""
    out, run = [], []
    for i in sorted(pus):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(_run(run))
        run = [i]
    if run:
        out.append(_run(run))
    return ",".join(out)


def _run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def _per_package(counts: list[tuple[str, int]], total: int) -> tuple[tuple[str, int], ...]:
    loose = total - sum(n for _, n in counts)
    return tuple(sorted(counts + ([("", loose)] if loose else [])))


def _bus(p: Obj) -> str:
    return p.attrs["busid"].lower()


def _class(p: Obj) -> int:
    return int(p.attrs.get("class", "0")[:4], 16)


def _vendor(p: Obj) -> int:
    return int(p.attrs.get("id", "0:0").split(":")[0], 16)


def _osdev_kind(o: Obj) -> str:
    return o.subtype.split(",")[0] if o.type == "OSDev" else o.type


def _console_gpu(p: Obj) -> bool:
    names = [c.name for c in p.children if _osdev_kind(c) in ("GPU", "CoProc", "Co-Processor")]
    return is_gpu_class(_class(p), _vendor(p)) or any(_GPU_OSDEV.match(n) for n in names)


def _console_nic(p: Obj):
    fabric = sorted(c.name for c in p.children if _osdev_kind(c) == "OpenFabrics")
    nets = tuple(sorted(c.name for c in p.children if _osdev_kind(c) in _NET_OSDEVS))
    if not fabric and not nets:
        return None
    return ((fabric or nets)[0], _bus(p), nets)


# --- the rules both sides share ---------------------------------------------------------------------

# lstopo's default I/O filter keeps PCI devices of these classes (hwloc's
# hwloc_filter_check_pcidev_subtype_important); bridges are left out here.
_IMPORTANT_BASES = (0x00, 0x01, 0x02, 0x03, 0x0B, 0x12)
_IMPORTANT_CLASSES = (0x0C04, 0x0C06, 0x0502)


def _important(cls: int) -> bool:
    return cls >> 8 in _IMPORTANT_BASES or cls in _IMPORTANT_CLASSES


def is_gpu_class(cls: int, vendor: int) -> bool:
    """A GPU by PCI identity alone: NVIDIA VGA/3D, AMD accelerators, Intel 0380."""
    return cls in {0x10DE: (0x0300, 0x0302), 0x1002: (0x0302, 0x0380, 0x1200), 0x8086: (0x0380,)}.get(vendor, ())


# --- Topology -> summary ----------------------------------------------------------------------


def summarize_topology(topo) -> ConsoleSummary:
    from nodemap.topology.cpuset import CpuSet
    from nodemap.topology.paths import cpu_affinity

    cpus = topo.allowed_cpus
    mems = topo.allowed_mems if topo.allowed_mems else topo.nodeset
    nodes = [n for n in topo.numa_nodes if n.os_index in mems]

    def shown(pus) -> bool:
        return bool(pus & cpus)

    # a package without CPUs comes from a restricted hwloc XML, which keeps it
    # for its allowed memory
    packages = [p for p in topo.packages
                if shown(p.cpuset) or not p.cpuset or any(n.cpuset and n.cpuset.issubset(p.cpuset) for n in nodes)]
    cores = [c for c in topo.cores if shown(c.cpuset)]
    counts = [(str(p.cpuset & cpus), sum(1 for c in cores if c.cpuset.issubset(p.cpuset))) for p in packages]
    important = [d for d in topo.pci_devices if _important(d.class_id) and d.class_id >> 8 != 0x06]
    return ConsoleSummary(
        packages=tuple(sorted((p.os_index, str(p.cpuset & cpus), p.cpu_model) for p in packages)),
        numa=tuple(sorted((n.os_index, hwloc_rounded(n.memory)) for n in nodes)),
        caches=tuple(sorted((c.level, c.kind, hwloc_rounded(c.size), str(c.cpuset & cpus))
                            for c in topo.caches if shown(c.cpuset))),
        groups=tuple(sorted((g.kind, str(g.cpuset & cpus)) for g in topo.groups if g.kind != "Group" and shown(g.cpuset))),
        cores=tuple(sorted(str(c.cpuset & cpus) for c in cores)),
        cores_per_package=_per_package(counts, len(cores)),
        pus=tuple(sorted(CpuSet(cpus))),
        pci=tuple(sorted((d.bus_id, d.class_id) for d in important)),
        gpus=tuple(sorted(g.pci_bus_id for g in topo.gpus if g.pci_bus_id)),
        nics=tuple(sorted((n.name, n.pci_bus_id, tuple(sorted(n.netdevs))) for n in topo.nics)),
        io_locality=tuple(sorted((d.pci_bus_id, str(cpu_affinity(topo, d.key) & cpus))
                                 for d in (*topo.gpus, *topo.nics) if d.pci_bus_id)),
    )


# --- nodemap's printed tree ----------------------------------------------------------------

_PRINTED_PUS = re.compile(r"(?<!not allowed: )\bPUs ([0-9][0-9,-]*)")


def tree_diff(topo, want: ConsoleSummary) -> list[str]:
    """Where the tree `nodemap topo` prints (render.tree) leaves out what
    hwloc shows: a NUMA node, or an allowed PU, or shows a PU hwloc hides.
    The data (summarize_topology) can agree while the printed tree drops
    objects (40intel64-4n10c+pci-conflicts lost a NUMA node and 10 PUs)."""
    from nodemap.topology.cpuset import CpuSet
    from nodemap.topology.render import tree

    lines = tree(topo).splitlines()
    body = [line for line in lines[1:len(next((lines[:i] for i in range(1, len(lines))
                                                 if not lines[i].startswith(" ")), lines))]]
    numa = {int(x) for line in body for x in re.findall(r"NUMANode P#(\d+)", line)}
    pus = CpuSet.union_all(CpuSet.parse(x) for line in body for x in _PRINTED_PUS.findall(line))
    out = []
    if missing := sorted({i for i, _ in want.numa} - numa):
        out.append(f"printed tree: NUMA node(s) {missing} missing")
    if list(pus) != list(want.pus):
        out.append(f"printed tree: PUs {pus} != {CpuSet(want.pus)}")
    return out
