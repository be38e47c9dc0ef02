"""hwloc XML (v1, v2, v3) -> Topology.

`read(path)` and `parse(data, where)` turn what `lstopo --of xml` writes into
the one model. One expat pass (entity declarations are refused, so a
billion-laughs or XXE file is an InputError, never a hang or a read of
/etc/passwd: a file that declares none goes to expat, building elements as
ElementTree would, any other to defusedxml) followed by an iterative walk
over <object> elements.

What hwloc means and how it lands in the model (NUMA nodes, I/O, OS
devices, NVLink and xGMI bandwidths, v1/v2/v3 differences): docs/topology.md.
"""

from __future__ import annotations

import functools
import os
import re
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterator

from ..errors import InputError
from ..text import is_decimal, natural_key, shown
from . import classify
from .cpuset import MAX_INDEX, CpuSet, CpuSetError
from .model import (
    GPU, NIC, PU, Cache, Core, Group, Link, Machine, NumaNode, Package, PciDevice, Port, Topology, gpu_order,
    norm_bus_id,
)

__all__ = ["read", "parse"]

_CACHE_KINDS = {0: "unified", 1: "data", 2: "instruction"}
# hwloc 1.x/2.x hwloc_obj_osdev_type_e; 3.x writes a bit mask instead.
_OSDEV_ENUM = {0: "storage", 1: "gpu", 2: "network", 3: "openfabrics", 4: "dma", 5: "coproc", 6: "memory"}
_OSDEV_BITS = ("storage", "memory", "gpu", "coproc", "network", "openfabrics", "dma")
# OS devices that are a GPU's compute or management interface, best first
# (the first one present names the model).
_GPU_APIS = ("nvml", "cuda", "rsmi", "ze", "levelzero", "opencl")
_MEMORY_INFOS = ("CUDAGlobalMemorySize", "RSMIVRAMSize", "LevelZeroHBMSize", "OpenCLGlobalMemorySize")
_UUID_INFOS = ("NVIDIAUUID", "AMDUUID", "LevelZeroUUID")
# Each as its runtime's visibility variable names the GPU: NVML's is "GPU-..." already, RSMI's bare hex.
_UUID_FORMS = {"AMDUUID": classify.rocr_uuid}
_IB_PORT_STATES = {"1": "DOWN", "2": "INIT", "3": "ARMED", "4": "ACTIVE", "5": "ACTIVE_DEFER"}
# hwloc's NVLinkBandwidth counts this many MB/s per link (topology-nvml.c).
_HWLOC_LINK_MBS = {1: 20000, 5: 50000}
# NVLinks per GPU by generation (P100, V100, A100, H100, B200)
_MAX_NVLINKS = {1: 4, 2: 6, 3: 12, 4: 18, 5: 18}
_HWLOC_LINK_MBS_LATER = 25000
_NVLINK_GEN_BY_ARCH = {"P": 1, "V": 2, "A": 3, "H": 4, "B": 5}
_GPU_ARCH = re.compile(r"\bG?([PVAHB])\d{2,4}\b")
_BUS_ID = re.compile(r"[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}\.[0-7]")
_MEMORY_SUBTYPES = ("HBM", "GPUMemory", "CXL", "SPM", "NVM", "DRAM-CXL", "MCDRAM")


def read(path: str | os.PathLike) -> Topology:
    where = os.fspath(path)
    try:
        with open(where, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(where, f"cannot read: {e.strerror or e}") from None
    return parse(data, where)


def parse(data: bytes, where: str) -> Topology:
    root = _xml(data, where)
    try:
        return _Reader(root).topology(f"hwloc-xml:{where}")
    except _Bad as e:
        raise InputError(where, e.located(data)) from None


# --- XML ------------------------------------------------------------------------


def _xml(data: bytes, where: str):
    try:
        root = _plain_tree(data) if _declares_nothing(data) else _defused_tree(data)
    except _Malformed as e:
        raise InputError(where, f"not well-formed XML, truncated or damaged ({e})") from None
    except _Refused as e:
        raise InputError(where, f"XML declares entities or external references, which hwloc never writes; "
                                f"refusing to expand them ({type(e.args[0]).__name__})") from None
    if root.tag not in ("topology", "root"):
        raise InputError(where, f"not an hwloc topology: root element is <{root.tag}>, expected <topology> "
                                "(write one with `lstopo --of xml`)")
    return root


class _Refused(Exception):
    """defusedxml refused an entity declaration or external reference."""


# A document in UTF-8 or ASCII whose bytes hold no "<!ENTITY" declares no
# entity, so it can neither expand one (billion laughs) nor read a file
# (XXE); expat fetches no external DTD. Such a file, every file hwloc writes,
# goes to expat (_plain_tree); anything else to defusedxml, whose parser
# is ElementTree's pure-Python one (4x slower: 44 of 67 ms reading a 192-PU
# file, benchmarks/results/topo_vs_lstopo.md).
_ENCODING = re.compile(rb"<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._-]+)")


def _declares_nothing(data: bytes) -> bool:
    if b"<!ENTITY" in data or data[:2] in (b"\xfe\xff", b"\xff\xfe") or b"\x00" in data[:4]:
        return False
    m = _ENCODING.match(data.removeprefix(b"\xef\xbb\xbf")[:200])
    return m is None or m.group(1).lower() in (b"utf-8", b"utf8", b"us-ascii", b"ascii")


class _Malformed(Exception):
    """Not well-formed XML, as expat says (ElementTree's ParseError from defusedxml)."""


def _plain_tree(data: bytes) -> _Element:
    """The document's elements, built from expat's events as ElementTree's
    C parser builds them (namespaced names as {uri}name, an undefined
    entity refused), without importing ElementTree: its import (ElementPath,
    copy, weakref) was 3.5 ms of `nodemap topo --input X.xml`, building the
    elements here costs 0.2 ms more than its C builder."""
    from pyexpat import ExpatError, ParserCreate

    parser, stack, top = ParserCreate(namespace_separator=_SEP), [], []
    spaced = b"xmlns" in data  # else no name holds _SEP (no XML name can): hwloc's files

    def start(tag: str, attrib: dict[str, str]) -> None:
        el = _Element(_qualified(tag), {_qualified(k): v for k, v in attrib.items()}) if spaced else \
            _Element(tag, attrib)
        (stack[-1].children if stack else top).append(el)
        stack.append(el)

    def text(data: str) -> None:
        el = stack[-1]
        if not el.children:  # ElementTree's text: what comes before the first child
            el.text = data if el.text is None else el.text + data

    def other(data: str) -> None:  # ElementTree refuses an entity it was not told of
        if data.startswith("&"):
            raise _Malformed(f"undefined entity {data}: line {parser.CurrentLineNumber}, "
                             f"column {parser.CurrentColumnNumber}")

    parser.StartElementHandler, parser.EndElementHandler = start, lambda tag: stack.pop()
    parser.CharacterDataHandler, parser.DefaultHandlerExpand = text, other
    try:
        parser.Parse(data, True)
    except ExpatError as e:
        raise _Malformed(str(e)) from None
    return top[0]


_SEP = "}"


def _qualified(name: str) -> str:
    """expat's "uri}name" as ElementTree writes it, "{uri}name"."""
    return "{" + name if _SEP in name else name


class _Element:
    """An element as _plain_tree builds it: the part of ElementTree's
    Element that the reader uses (tag, text, get, find, findall, iterfind,
    iter), which defusedxml's elements also have."""

    __slots__ = ("tag", "attrib", "text", "children")

    def __init__(self, tag: str, attrib: dict[str, str]) -> None:
        self.tag, self.attrib, self.text, self.children = tag, attrib, None, []

    def get(self, key: str, default=None):
        return self.attrib.get(key, default)

    def iterfind(self, tag: str) -> Iterator[_Element]:
        return (c for c in self.children if c.tag == tag)

    def findall(self, tag: str) -> list[_Element]:
        return [c for c in self.children if c.tag == tag]

    def find(self, tag: str) -> _Element | None:
        return next(self.iterfind(tag), None)

    def iter(self, tag: str) -> Iterator[_Element]:
        """This element and every one below it named `tag`, in document order."""
        stack = [self]
        while stack:
            el = stack.pop()
            if el.tag == tag:
                yield el
            stack.extend(reversed(el.children))


def _defused_tree(data: bytes):
    from xml.etree.ElementTree import ParseError

    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import fromstring

    try:
        return fromstring(data, forbid_dtd=False, forbid_entities=True, forbid_external=True)
    except DefusedXmlException as e:
        raise _Refused(e) from None
    except ParseError as e:
        raise _Malformed(str(e)) from None


_NL = b"\n"


class _Bad(Exception):
    """A malformed attribute; `needle` finds its line in the raw bytes."""

    def __init__(self, problem: str, needle: str = "") -> None:
        super().__init__(problem)
        self.problem, self.needle = problem, needle

    def located(self, data: bytes) -> str:
        pos = data.find(self.needle.encode()) if self.needle else -1
        if pos < 0:
            return self.problem
        return f"{self.problem} (line {data.count(_NL, 0, pos) + 1})"


def _attr(el, name: str) -> str:
    value = el.get(name)
    if value is None:
        raise _Bad(f"{_label(el)} has no {name} attribute", _needle(el))
    return value


def _parsed(el, name: str, default, parse, what: str):
    """Attribute `name` parsed, `default` when absent (None: required); a
    value `parse` refuses is reported by `what` (a template of name and value)."""
    value = el.get(name)
    if value is None:
        return _attr(el, name) if default is None else default
    try:
        return parse(value)
    except (ValueError, CpuSetError) as e:
        why = str(e).rpartition(": ")[2] if isinstance(e, CpuSetError) else ""  # e.g. the index limit
        raise _Bad(f"{_label(el)} has {what.format(name=name, value=shown(value, 60))}" + (f": {why}" if why else ""),
                   f'{name}="{value[:200]}') from None


_BAD_OS_INDEX = f"an os_index={{value}} that is not a number within 0..{MAX_INDEX} (nodemap's limit)"


def _int(el, name: str, default: int | None = None) -> int:
    # ~3700 calls on a 384-PU file: no message or function is built per call
    if name == "os_index":  # bounded: a set holding index 4e9 would cost 500 MB
        return _parsed(el, name, default, _os_index, _BAD_OS_INDEX)
    return _parsed(el, name, default, int, "a non-numeric {name}={value}")


def _os_index(text: str) -> int:
    value = int(text[:20])  # int() refuses over 4300 digits with an error of its own
    if not 0 <= value <= MAX_INDEX or len(text) > 20:
        raise ValueError(text)
    return value


def _float(el, name: str) -> float:
    return _parsed(el, name, 0.0, float, "a non-numeric {name}={value}")


def _mask(el, name: str, default: CpuSet | None = None) -> CpuSet:
    return _parsed(el, name, default, _parse_mask, "an unreadable {name}={value} (expected hwloc's 0x... mask)")


@functools.lru_cache(maxsize=4096)
def _parse_mask(text: str) -> CpuSet:
    # Objects repeat their parents' masks (a core's and its L2's, a NUMA
    # node's and its package's); CpuSet is immutable, so share the parse.
    return CpuSet.parse_mask(text)


def _label(el) -> str:
    kind = (el.get("type") or el.tag)[:40]
    for key in ("os_index", "name", "pci_busid", "gp_index"):
        if el.get(key) is not None:
            return f"{kind} object {key}={el.get(key)[:40]}"
    return f"{kind} object"


def _needle(el) -> str:
    gp = el.get("gp_index")
    return f'gp_index="{gp}"' if gp is not None else f'type="{el.get("type", "")}"'


def _infos(el) -> dict[str, str]:
    return {i.get("name", ""): i.get("value", "") for i in el.iterfind("info")}


def _uuid(info: dict[str, str]) -> str:
    """The GPU's UUID from the best API's infos, in the form its runtime takes ("" unknown)."""
    for k in _UUID_INFOS:
        value = _UUID_FORMS.get(k, str)(info.get(k, ""))
        if value:
            return value
    return ""


def _kib(text: str) -> int:
    """Bytes of a GPU memory info: hwloc writes KiB ("16671616KiB"; hwloc
    before 2.10 wrote the bare number of KiB, "16515072" for a 16 GB V100)."""
    m = re.fullmatch(r"\s*(\d+)\s*(KiB|kB|KB)?\s*", text or "")
    return int(m.group(1)) * 1024 if m else 0


# --- the walk -------------------------------------------------------------------


class _Where:
    """What an object inherits from its ancestors."""

    __slots__ = ("package", "place", "pci_path", "pci")

    def __init__(self, package: int = -1, place: object = None, pci_path: tuple[str, ...] = (),
                 pci: "_Pci | None" = None) -> None:
        self.package = package
        self.place = place  # nearest CPU-side object element: the I/O locality
        self.pci_path = pci_path
        self.pci = pci


class _Pci:
    __slots__ = ("el", "place", "path", "osdevs", "bus_id", "_ids")

    def __init__(self, el: object, place: object, path: tuple[str, ...]) -> None:
        self.el, self.place, self.path = el, place, path
        self.osdevs: list = []
        # both read several times per device (GPUs, NICs, PCI devices, duplicates)
        self.bus_id = norm_bus_id(el.get("pci_busid", ""))
        self._ids: tuple[int, int, int] | None = None

    @property
    def ids(self) -> tuple[int, int, int]:
        """(class, vendor, device) of pci_type, parsed on first use (so a
        bad one is reported at the point it always was)."""
        if self._ids is None:
            self._ids = _pci_type(self.el)
        return self._ids


class _Numa:
    __slots__ = ("el", "parent", "depth")

    def __init__(self, el: object, parent: object, depth: int) -> None:
        self.el, self.parent, self.depth = el, parent, depth


_IO_TYPES = ("Bridge", "PCIDev", "OSDev")


class _Reader:
    def __init__(self, root) -> None:
        self.root = root
        version = root.get("version", "1.0")
        self.major = int(version.split(".")[0]) if is_decimal(version.split(".")[0], 3) else 1
        self.numa: list[_Numa] = []
        self.pcis: list[_Pci] = []
        self.loose_osdevs: list[tuple[object, object]] = []  # (osdev, place) without PCI parent
        self.packages, self.groups, self.caches, self.cores, self.pus = [], [], [], [], []
        self.by_gp: dict[str, object] = {}
        self.notes: list[str] = []
        self.counters: dict[str, int] = {}
        self.hidden = CpuSet()
        self.ambiguous: dict[int, int] = {}  # id(PCI element) -> position, where its bus id repeats
        self.localities: dict[object, tuple[int, CpuSet]] = {}  # place element -> _locality

    # --- entry ---------------------------------------------------------------
    def topology(self, source: str) -> Topology:
        top = self.root.find("object")
        if top is None:
            raise _Bad("not an hwloc topology: no Machine object under <topology>")
        self.hidden = self._hidden_pus(top)
        self._walk(top)
        self.ambiguous = self._ambiguous_pci()
        if not self.pus:
            raise _Bad("no PU objects: not a usable hwloc topology (write one with `lstopo --of xml`)")
        numa_nodes = self._numa_nodes()
        gpus, gpu_of = self._gpus(numa_nodes)
        machine = self._machine(top, numa_nodes)
        return Topology(
            machine=machine,
            packages=tuple(self.packages),
            numa_nodes=numa_nodes,
            distances=self._distances(numa_nodes, top),
            groups=tuple(self.groups),
            caches=tuple(self.caches),
            cores=tuple(self.cores),
            pus=self._pus(top),
            pci_devices=self._pci_devices(numa_nodes),
            gpus=gpus,
            nics=self._nics(numa_nodes),
            links=self._links(gpus, gpu_of) + self._xgmi_links(gpu_of),
            allowed_mems=_mask(top, "allowed_nodeset", CpuSet(n.os_index for n in numa_nodes)),
            source=source,
            notes=tuple(self.notes),
        )

    def _walk(self, top) -> None:
        stack = [(top, _Where(place=top), 0)]
        while stack:
            el, where, depth = stack.pop()
            inner = self._visit(el, where, depth)
            stack.extend((c, inner, depth + 1) for c in reversed(el.findall("object")))

    def _visit(self, el, where: _Where, depth: int) -> _Where:
        kind = el.get("type", "")
        if kind in _IO_TYPES:
            return self._visit_io(el, kind, where)
        inner = _Where(package=where.package, place=el)
        if kind in ("Package", "Socket"):
            os_index = self._index(el, "Package")
            self.packages.append(Package(os_index, self._cpus(el), _infos(el).get("CPUModel", "")))
            inner.package = os_index
        elif kind == "NUMANode":
            _int(el, "os_index")
            self.numa.append(_Numa(el, where.place, depth))
            inner.place = el if self.major < 2 else where.place  # v1: NUMA nodes are CPU parents
        elif kind in ("Group", "Die"):
            self.groups.append(Group(el.get("subtype") or kind, self._index(el, el.get("subtype") or kind),
                                     self._cpus(el)))
        elif kind == "Cache" or (kind.endswith("Cache") and kind[:1] == "L"):
            self.caches.append(self._cache(el, kind))
        elif kind == "Core":
            self.cores.append(Core(self._index(el, f"Core{where.package}"), where.package, self._cpus(el)))
        elif kind == "PU":
            self.pus.append(_int(el, "os_index"))
        return inner

    def _hidden_pus(self, top) -> CpuSet:
        """PUs a cgroup hid from an export made without --disallowed: absent
        from the machine's cpuset, yet inside some object's complete_cpuset
        below the machine (hwloc knew their package or core). Offline PUs
        are in no such object: hwloc never learnt their topology."""
        if top.get("online_cpuset") is not None:
            return CpuSet()  # hwloc 1.x says which PUs are online
        absent = _mask(top, "complete_cpuset", CpuSet()) - _mask(top, "cpuset", CpuSet())
        cgroup = next((i.get("value", "") for el in (top, self.root) for i in el.iterfind("info")
                       if i.get("name") == "LinuxCgroup"), "/")
        if not absent or cgroup in ("", "/"):
            return CpuSet()  # no cgroup: absent PUs are offline (older hwloc lists them in packages' complete sets)
        known = CpuSet.union_all(_mask(el, "complete_cpuset", CpuSet()) for el in top.iter("object")
                                 if el.get("type") in ("Package", "Socket", "Core", "Die", "Group", "NUMANode")
                                 or (el.get("type") or "").endswith("Cache"))
        hidden = absent & known
        if hidden:
            self.notes.append(f"PUs {hidden} are outside the cgroup of the hwloc run that wrote this file (exported "
                              "without --disallowed): kept as online but not allowed, without their cores and caches")
        if absent - hidden:
            self.notes.append(f"PUs {absent - hidden} are absent from the file: offline, or outside its cgroup "
                              f"{cgroup} with all of their package (shown as offline)")
        return hidden

    def _cpus(self, el) -> CpuSet:
        """An object's PUs: its cpuset, plus PUs a cgroup hid from the export."""
        cpus = _mask(el, "cpuset")
        if self.hidden:
            cpus = cpus | (_mask(el, "complete_cpuset", CpuSet()) & self.hidden)
        return cpus

    def _index(self, el, counter: str) -> int:
        """os_index, or the logical index when hwloc did not know it."""
        n = self.counters.get(counter, 0)
        self.counters[counter] = n + 1
        if el.get("os_index") is None:
            # Groups never have one; a package or core without one is worth saying
            note = f"{el.get('type')} objects without os_index are numbered in document order"
            if el.get("type") not in ("Group", "Die") and note not in self.notes:
                self.notes.append(note)
            return n
        return _int(el, "os_index")

    def _cache(self, el, kind: str) -> Cache:
        level = _int(el, "depth", int(kind[1]) if is_decimal(kind[1:2]) else 0)
        return Cache(
            level=level,
            kind=_CACHE_KINDS.get(_int(el, "cache_type", 0), "unified"),
            size=_int(el, "cache_size", 0),
            cpuset=self._cpus(el),
            line_size=_int(el, "cache_linesize", 0),
            ways=_int(el, "cache_associativity", 0),
        )

    def _visit_io(self, el, kind: str, where: _Where) -> _Where:
        if kind == "OSDev":
            if where.pci is not None:
                where.pci.osdevs.append(el)
            else:
                self.loose_osdevs.append((el, where.place))
            return where
        if kind == "Bridge" and el.get("bridge_type", "").startswith("0-"):
            return _Where(where.package, where.place, (self._host_bridge(el),))
        bus = _attr(el, "pci_busid")
        if not _BUS_ID.fullmatch(bus):
            raise _Bad(f"{_label(el)} has an unreadable pci_busid (expected 'dddd:bb:dd.f')", f'pci_busid="{bus}"')
        path = where.pci_path or (_root_port_of(el),)
        pci = _Pci(el, where.place, path)
        self.pcis.append(pci)
        below = path + (pci.bus_id,) if kind == "Bridge" else path
        return _Where(where.package, where.place, below, pci)

    def _host_bridge(self, el) -> str:
        text = el.get("bridge_pci", "")
        m = re.fullmatch(r"([0-9a-fA-F]+):\[([0-9a-fA-F]+)-[0-9a-fA-F]+\]", text)
        if not m:
            raise _Bad(f"{_label(el)} has an unreadable bridge_pci={text!r} (expected 'dddd:[bb-bb]')",
                       f'bridge_pci="{text}"')
        return f"pci{m.group(1).lower().rjust(4, '0')}:{m.group(2).lower().rjust(2, '0')}"

    # --- CPU side --------------------------------------------------------------
    def _numa_nodes(self) -> tuple[NumaNode, ...]:
        own: dict[int, CpuSet] = {}
        taken = CpuSet()
        # Deepest attachment first: a node below a Group owns its CPUs before
        # the package-level node that also spans them.
        for nodes in _by_parent(sorted(self.numa, key=lambda n: -n.depth), self.major):
            primary = _primary(nodes)
            for n in nodes:
                os_index = int(n.el.get("os_index"))
                own[os_index] = (self._cpus(n.el) - taken) if n is primary else CpuSet()
            taken |= own[int(primary.el.get("os_index"))]
        out = [
            NumaNode(int(n.el.get("os_index")), own[int(n.el.get("os_index"))], _int(n.el, "local_memory", 0),
                     n.el.get("subtype", ""), _gpu_memory_bus(n.el))
            for n in self.numa
        ]
        if not out:
            out = [self._machine_as_numa()]
        homeless = CpuSet(self.pus) - CpuSet.union_all(n.cpuset for n in out)
        if homeless:
            self.notes.append(f"PUs {homeless} are in no NUMA node (hwloc left their node out, "
                              "e.g. its memory is not allowed)")
        return tuple(sorted(out, key=lambda n: n.os_index))

    def _machine_as_numa(self) -> NumaNode:
        top = self.root.find("object")
        self.notes.append("no NUMANode objects: the machine is one NUMA node 0")
        return NumaNode(0, _mask(top, "cpuset"), _int(top, "local_memory", 0))

    def _pus(self, top) -> tuple[PU, ...]:
        online = _mask(top, "online_cpuset", _mask(top, "cpuset"))
        allowed = _mask(top, "allowed_cpuset", online)
        # complete_cpuset holds the PUs hwloc could not use (offline, or
        # removed as disallowed): keep them, marked unusable.
        absent = _mask(top, "complete_cpuset", online) - CpuSet(self.pus)
        pus = [PU(i, online=i in online, allowed=i in allowed and i in online) for i in self.pus]
        pus += [PU(i, online=i in self.hidden, allowed=False) for i in absent]
        return tuple(sorted(pus, key=lambda p: p.os_index))

    def _machine(self, top, numa_nodes) -> Machine:
        pairs = [(i.get("name", ""), i.get("value", "")) for i in top.iterfind("info")]
        pairs += [(i.get("name", ""), i.get("value", "")) for i in self.root.iterfind("info")]
        info = dict(pairs)
        return Machine(
            hostname=info.get("HostName", ""),
            arch=info.get("Architecture", ""),
            memory=sum(n.memory for n in numa_nodes if not n.is_gpu_memory) or _int(top, "local_memory", 0),
            info=tuple(pairs),
        )

    def _distances(self, numa_nodes, top) -> tuple[tuple[int, ...], ...]:
        found = self._distances_v2() if self.major >= 2 else self._distances_v1(top)
        if found is None:
            return ()
        order, values = found
        want = [n.os_index for n in numa_nodes]
        if sorted(order) != sorted(want):
            self.notes.append(f"NUMA distances cover nodes {CpuSet(order)} of {CpuSet(want)}: left out")
            return ()
        pos = {os_index: k for k, os_index in enumerate(order)}
        n = len(order)
        return tuple(tuple(values[pos[a] * n + pos[b]] for b in want) for a in want)

    def _distances_v2(self) -> tuple[list[int], list[int]] | None:
        cands = [d for d in self.root.iterfind("distances2") if d.get("type") == "NUMANode"]
        named = [d for d in cands if d.get("name") == "NUMALatency"]
        latency = [d for d in cands if d.get("name") is None and _int(d, "kind", 0) & 4]
        chosen = (named or latency or [None])[0]
        if chosen is None:
            return None
        indexes, values = _matrix(chosen)
        if chosen.get("indexing") == "gp":
            indexes = [str(self._gp(f"NUMANode:{i}", chosen).get("os_index")) for i in indexes]
        try:
            return [int(i) for i in indexes], [int(v) for v in values]
        except ValueError:
            raise _Bad("NUMALatency distances hold a non-numeric value", "NUMALatency") from None

    def _distances_v1(self, top) -> tuple[list[int], list[int]] | None:
        nodes = [int(n.el.get("os_index")) for n in self.numa]
        for d in top.iterfind("distances"):
            lat = [_float(v, "value") for v in d.iterfind("latency")]
            if _int(d, "nbobjs", 0) == len(nodes) and len(lat) == len(nodes) ** 2:
                base = _float(d, "latency_base") or 1.0
                return nodes, [round(v * base) for v in lat]
        return None

    def _gp(self, key: str, near) -> object:
        if not self.by_gp:  # built on first use: only distance matrices refer to gp indexes
            self.by_gp = {f"{el.get('type')}:{el.get('gp_index')}": el for el in self.root.iter("object")
                          if el.get("gp_index") is not None}
        el = self.by_gp.get(key)
        if el is None:
            raise _Bad(f"{near.get('name') or near.tag} refers to {key}, which is no object of the file",
                       key.split(":")[-1])
        return el

    # --- devices ---------------------------------------------------------------
    def _osdev_kinds(self, el) -> set[str]:
        t = _int(el, "osdev_type", -1)
        if t < 0:
            return set()
        if self.major >= 3:
            return {name for bit, name in enumerate(_OSDEV_BITS) if t >> bit & 1}
        return {_OSDEV_ENUM.get(t, "")}

    def _locality(self, place, numa_nodes) -> tuple[int, CpuSet]:
        """NUMA node (-1: none or several) and cpuset of a device's place;
        devices share a few places (a DGX-2: 84 PCI devices, 2 places), so
        each place is worked out once."""
        found = self.localities.get(place)
        if found is None:
            found = self.localities[place] = self._place_locality(place, numa_nodes)
        return found

    def _place_locality(self, place, numa_nodes) -> tuple[int, CpuSet]:
        cpus = _mask(place, "cpuset", CpuSet())
        nodeset = _mask(place, "nodeset", CpuSet()) if place.get("nodeset") else None
        cands = [n for n in numa_nodes if (n.os_index in nodeset if nodeset is not None else n.cpuset & cpus)]
        with_cpus = [n for n in cands if n.cpuset & cpus]
        pick = with_cpus if with_cpus else cands
        return (pick[0].os_index if len(pick) == 1 else -1), cpus

    def _pci_devices(self, numa_nodes) -> tuple[PciDevice, ...]:
        return tuple(self._pci_device(p, numa_nodes) for p in self.pcis)

    def _ambiguous_pci(self) -> dict[int, int]:
        """Position in pci_devices of each PCI element whose bus id the file
        repeats (hand-edited files): its GPU or NIC keeps that position
        (pci_index) so paths follow the device's own place in the tree."""
        seen: set[str] = set()
        twice = sorted({p.bus_id for p in self.pcis if p.bus_id in seen or seen.add(p.bus_id)})
        if not twice:
            return {}
        self.notes.append(f"PCI bus id(s) {', '.join(twice)} appear more than once in the file; GPUs and NICs "
                          "keep their own PCI device by its place in the tree (a lookup by bus id alone finds "
                          "the first)")
        return {id(p.el): k for k, p in enumerate(self.pcis) if p.bus_id in twice}

    def _pci_device(self, p: _Pci, numa_nodes) -> PciDevice:
        el = p.el
        cls, vendor, device = p.ids
        info = _infos(el)
        numa, cpus = self._locality(p.place, numa_nodes)
        return PciDevice(
            bus_id=p.bus_id, class_id=cls, vendor_id=vendor, device_id=device,
            name=" ".join(x for x in (info.get("PCIVendor", ""), info.get("PCIDevice", "")) if x),
            numa_node=numa, cpuset=cpus, pci_path=p.path, link_speed=_float(el, "pci_link_speed"),
        )

    def _is_gpu_osdev(self, el) -> bool:
        kinds = self._osdev_kinds(el)
        name = (el.get("name") or "").lower()
        api = (el.get("subtype") or "").lower()
        if not kinds & {"gpu", "coproc"}:
            return False
        if api == "opencl" or name.startswith("opencl"):
            return _infos(el).get("OpenCLDeviceType", "GPU") == "GPU"
        return api in _GPU_APIS or name.startswith(_GPU_APIS)

    def _gpus(self, numa_nodes) -> tuple[tuple[GPU, ...], dict[int, str]]:
        """GPUs in PCI bus order, and the GPU key of each OS device element."""
        owners: list[tuple[tuple, list, _Pci | None, object]] = []
        for p in self.pcis:
            cls, vendor, device = p.ids
            compute = [o for o in p.osdevs if self._is_gpu_osdev(o)]
            # a render node: hwloc exported the GPU only as DRM devices (an MI50 without RSMI: class 0300,
            # card1 and renderD128); on-board display chips have card0 alone
            render = any((o.get("name") or "").startswith("renderD") for o in p.osdevs)
            if compute or classify.is_gpu(cls, vendor, device, render_node=render):
                owners.append((_bus_key(p.bus_id), p.osdevs, p, p.place))
        loose = [(o, place) for o, place in self.loose_osdevs if self._is_gpu_osdev(o)]
        owners += [((1 << 64, k), [o], None, place) for k, (o, place) in enumerate(_one_api(loose))]
        gpus, gpu_of = [], {}
        for index, (_, osdevs, pci, place) in enumerate(sorted(owners, key=lambda o: o[0])):
            gpus.append(self._gpu(index, osdevs, pci, place, numa_nodes))
            gpu_of.update((id(o), f"GPU{index}") for o in osdevs)
            if pci is not None:
                gpu_of[id(pci.el)] = f"GPU{index}"
        return tuple(gpus), gpu_of

    def _gpu(self, index: int, osdevs: list, pci: _Pci | None, place, numa_nodes) -> GPU:
        ranked = sorted(osdevs, key=_api_rank)
        info: dict[str, str] = {}
        for o in reversed(ranked):  # the best API's values win
            info.update(_infos(o))
        vendor = 0
        if pci is not None:
            _, vendor, _ = pci.ids
        numa, cpus = self._locality(place, numa_nodes)
        pci_model = _infos(pci.el).get("PCIDevice", "") if pci is not None else ""
        return GPU(
            index=index,
            vendor=classify.vendor_name(vendor, info.get("GPUVendor", "")),
            model=info.get("GPUModel") or pci_model,
            memory=next((_kib(info[k]) for k in _MEMORY_INFOS if k in info), 0) or self._gpu_node_memory(pci),
            pci_bus_id=pci.bus_id if pci is not None else "",
            uuid=_uuid(info),
            numa_node=numa,
            cpuset=cpus,
            os_names=tuple(o.get("name", "") for o in osdevs),
            pci_index=self.ambiguous.get(id(pci.el), -1) if pci is not None else -1,
        )

    def _gpu_node_memory(self, pci: "_Pci | None") -> int:
        """Size of the GPU memory NUMA node naming this GPU, 0 if none."""
        if pci is None:
            return 0
        return sum(_int(n.el, "local_memory", 0) for n in self.numa if _gpu_memory_bus(n.el) == pci.bus_id)

    def _nics(self, numa_nodes) -> tuple[NIC, ...]:
        nics = []
        for p in self.pcis:
            fabric = [o for o in p.osdevs if "openfabrics" in self._osdev_kinds(o)]
            nets = [o for o in p.osdevs if "network" in self._osdev_kinds(o) and o not in fabric]
            if not fabric and not nets:
                continue
            ports = _ports(_infos(fabric[0])) if fabric else ()
            name = (fabric or nets)[0].get("name", "")
            numa, cpus = self._locality(p.place, numa_nodes)
            nics.append(NIC(name=name, kind=_nic_kind(name, p.ids[1], ports, nets, bool(fabric)),
                            pci_bus_id=p.bus_id, numa_node=numa, cpuset=cpus, ports=ports,
                            netdevs=tuple(o.get("name", "") for o in nets),
                            pci_index=self.ambiguous.get(id(p.el), -1)))
        # RDMA devices first in name order (mlx5_2 before mlx5_10), as
        # nvidia-smi numbers NICs; then plain netdevs in PCI order.
        return tuple(sorted(nics, key=lambda n: (n.name in n.netdevs, natural_key(n.name) if n.name not in n.netdevs
                                                 else ())))

    def _links(self, gpus, gpu_of: dict[int, str]) -> tuple[Link, ...]:
        matrices = [d for d in self.root.iterfind("distances2hetero") if d.get("name") == "NVLinkBandwidth"]
        if not matrices:
            return ()
        indexes, values = _matrix(matrices[0])
        keys = [self._link_end(self._gp(i, matrices[0]), gpu_of) for i in indexes]
        n = len(keys)
        totals: dict[tuple[str, str], int] = {}
        for i in range(n):
            for j in range(i + 1, n):
                a, b = keys[i], keys[j]
                mbs = int(values[i * n + j]) or int(values[j * n + i])
                if not mbs or not a or not b or a == b:
                    continue
                if not a.startswith("GPU"):
                    a, b = b, a
                if not a.startswith("GPU"):
                    continue  # a switch-to-CPU entry says nothing about a GPU
                if b.startswith("GPU") and gpu_order(b) < gpu_order(a):
                    a, b = b, a
                totals[(a, b)] = totals.get((a, b), 0) + mbs
        models = {g.key: g.model for g in gpus}
        old = self._old_nvlink_convention(totals, models)
        return tuple(self._link(a, b, mbs, models[a], old) for (a, b), mbs in sorted(totals.items()))

    def _xgmi_links(self, gpu_of: dict[int, str]) -> tuple[Link, ...]:
        """xGMI links from hwloc's RSMI matrices between GPU OS devices:
        XGMIBandwidth (MB/s per direction; RSMI writes 100000 for every
        xGMI pair, amdsmi the pair's maximum; the diagonal is local memory)
        and XGMIHops (hops of the xGMI path, 0 where there is none)."""
        bandwidth, hops = self._gpu_matrix("XGMIBandwidth", gpu_of), self._gpu_matrix("XGMIHops", gpu_of)
        pairs = sorted(set(bandwidth) | set(hops), key=lambda p: (gpu_order(p[0]), gpu_order(p[1])))
        return tuple(Link(a, b, "xGMI", count=1, bandwidth=bandwidth.get((a, b), 0) / 1000, hops=hops.get((a, b), 0))
                     for a, b in pairs)

    def _gpu_matrix(self, name: str, gpu_of: dict[int, str]) -> dict[tuple[str, str], int]:
        """Nonzero values between distinct GPUs of the distance matrix `name`,
        by (lower, higher) GPU key; a pair's two directions, the larger."""
        found = next((d for tag in ("distances2", "distances2hetero") for d in self.root.iterfind(tag)
                      if d.get("name") == name), None)
        if found is None:
            return {}
        indexes, values = _matrix(found)
        # distances2 of OS devices index them by gp_index; hetero ones by "Type:gp"
        refs = indexes if found.tag == "distances2hetero" else [f"{found.get('type')}:{i}" for i in indexes]
        keys = [gpu_of.get(id(self._gp(r, found)), "") for r in refs]
        out: dict[tuple[str, str], int] = {}
        n = len(keys)
        for i, j in ((i, j) for i in range(n) for j in range(n) if keys[i] and keys[j] and keys[i] != keys[j]):
            value = _number(values[i * n + j], name)
            pair = tuple(sorted((keys[i], keys[j]), key=gpu_order))
            if value:
                out[pair] = max(out.get(pair, 0), value)
        return out

    def _old_nvlink_convention(self, totals: dict[tuple[str, str], int], models: dict[str, str]) -> bool:
        """Whether this file counts NVLink 3/4 links at 50000 MB/s (hwloc 2.9.0)
        rather than 25000 (2.9.1 and later; 2.5-2.8 wrote no NVLink 3/4
        links). The hwlocVersion info decides; without it, a GPU with more
        links at 25000 than its generation has (A100 12, H100 18) means the
        older convention. A note says which was assumed."""
        gens = {a: _nvlink_generation(models[a]) for a, _ in totals}
        if not any(g in (3, 4) for g in gens.values()):
            return False  # NVLink 1, 2 and 5 were counted alike by every version
        version = _version(self._info("hwlocVersion"))
        if version is not None:
            old = version[:3] == (2, 9, 0)
            self.notes.append(f"NVLink counts: written by hwloc {self._info('hwlocVersion')} (hwlocVersion), which "
                              f"counts {50000 if old else 25000} MB/s per NVLink 3/4 link")
            return old
        per_gpu: dict[str, int] = {}
        for (a, b), mbs in totals.items():
            for end in (a, b):
                if end.startswith("GPU"):
                    per_gpu[end] = per_gpu.get(end, 0) + mbs
        over = sorted(k for k, mbs in per_gpu.items() if gens.get(k) in _MAX_NVLINKS
                      and mbs / _HWLOC_LINK_MBS_LATER > _MAX_NVLINKS[gens[k]])
        if over:
            gen = gens[over[0]]
            self.notes.append(f"NVLink counts: the file does not say which hwloc wrote it, and {over[0]} would have "
                              f"{per_gpu[over[0]] // _HWLOC_LINK_MBS_LATER} links at 25000 MB/s, more than NVLink "
                              f"{gen} GPUs have ({_MAX_NVLINKS[gen]}): counted at 50000 MB/s per link, as hwloc 2.9.0 "
                              "wrote them")
            return True
        self.notes.append("NVLink counts: the file does not say which hwloc wrote it; assumed 25000 MB/s per "
                          "NVLink 3/4 link (hwloc 2.9.1 and later; 2.9.0 wrote 50000)")
        return False

    def _info(self, name: str) -> str:
        top = self.root.find("object")
        for el in (top, self.root):
            for i in el.iterfind("info"):
                if i.get("name") == name:
                    return i.get("value", "")
        return ""

    def _link_end(self, el, gpu_of: dict[int, str]) -> str:
        kind = el.get("type")
        if id(el) in gpu_of:
            return gpu_of[id(el)]
        if kind in ("Package", "NUMANode", "Machine", "Group", "Die"):
            return "CPU"
        if kind == "PCIDev":
            cls, vendor, _ = _pci_type(el)
            if el.get("subtype") == "NVSwitch" or (cls >> 8 == 0x06 and vendor == 0x10DE):
                return "NVSwitch"
        return ""

    def _link(self, a: str, b: str, mbs: int, model: str, old: bool = False) -> Link:
        from .nvml import NVLINK_GBS

        gen = _nvlink_generation(model)
        if not gen:
            gen = 0 if mbs % _HWLOC_LINK_MBS_LATER == 0 else 1 if mbs % _HWLOC_LINK_MBS[1] == 0 else 0
        per_link = _HWLOC_LINK_MBS.get(gen, _HWLOC_LINK_MBS_LATER)
        if gen in (3, 4) and old:
            per_link = 50000
        count = max(1, round(mbs / per_link))
        exact = count * per_link == mbs
        bandwidth = count * NVLINK_GBS[gen] if gen in NVLINK_GBS and exact else mbs / 1000
        if not exact or not gen:
            self.notes.append(f"NVLink {a}-{b}: {mbs} MB/s from hwloc, generation unknown: "
                              f"{count} link(s) assumed")
        return Link(a, b, "NVLink", count=count, bandwidth=round(bandwidth, 4), version=gen)


# --- helpers -----------------------------------------------------------------------


def _gpu_memory_bus(el) -> str:
    """Bus id of the GPU whose memory a GPUMemory node is (hwloc's PCIBusID info)."""
    if el.get("subtype") != "GPUMemory":
        return ""
    bus = _infos(el).get("PCIBusID", "")
    return norm_bus_id(bus) if bus else ""


def _by_parent(nodes: list[_Numa], major: int) -> Iterator[list[_Numa]]:
    """NUMA nodes that hang off one object (v1: each node is a CPU parent of its own)."""
    groups: dict[int, list[_Numa]] = {}
    for n in nodes:
        groups.setdefault(id(n.parent if major >= 2 else n), []).append(n)
    return iter(groups.values())


def _primary(nodes: list[_Numa]) -> _Numa:
    """The node of a parent that owns the CPUs: no memory subtype, lowest os_index."""
    plain = [n for n in nodes if not (n.el.get("subtype") or "").startswith(_MEMORY_SUBTYPES)]
    return min(plain or nodes, key=lambda n: int(n.el.get("os_index")))


def _matrix(d) -> tuple[list[str], list[str]]:
    indexes = " ".join(i.text or "" for i in d.iterfind("indexes")).split()
    values = " ".join(v.text or "" for v in d.iterfind("u64values")).split()
    n = _int(d, "nbobjs")
    if len(indexes) != n or len(values) != n * n:
        name = d.get("name") or d.get("type") or "distances"
        raise _Bad(f"{name} matrix has {len(indexes)} indexes and {len(values)} values for nbobjs={n} "
                   f"(expected {n} and {n * n})", f'name="{name}"' if d.get("name") else "<distances2")
    return indexes, values


def _number(text: str, matrix: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _Bad(f"{matrix} matrix holds a non-numeric value {text[:20]!r}", f'name="{matrix}"') from None


def _pci_type(el) -> tuple[int, int, int]:
    text = el.get("pci_type")
    if text is None:
        return 0, 0, 0
    m = re.match(r"\s*([0-9a-fA-F]{4})\s*\[([0-9a-fA-F]{4}):([0-9a-fA-F]{4})\]", text)
    if not m:
        raise _Bad(f"{_label(el)} has an unreadable pci_type={text!r} (expected 'CLASS [VEN:DEV] ...')",
                   f'pci_type="{text}"')
    return int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16)


def _root_port_of(el) -> str:
    """A host bridge name for a PCI device hwloc placed without one."""
    dom, bus, _ = norm_bus_id(el.get("pci_busid")).split(":")
    return f"pci{dom}:{bus}"


def _bus_key(bus_id: str) -> tuple:
    return (0, *(int(x, 16) for x in re.split(r"[:.]", bus_id)))


def _api_rank(el) -> int:
    name = (el.get("subtype") or el.get("name") or "").lower()
    return next((k for k, api in enumerate(_GPU_APIS) if name.startswith(api)), len(_GPU_APIS))


def _one_api(loose: list[tuple[object, object]]) -> list[tuple[object, object]]:
    """GPU OS devices without a PCI parent cannot be matched to each other:
    keep one API's devices (the best present), one GPU each."""
    if not loose:
        return []
    best = min(_api_rank(o) for o, _ in loose)
    return [(o, p) for o, p in loose if _api_rank(o) == best]


def _ports(info: dict[str, str]) -> tuple[Port, ...]:
    numbers = sorted({int(m.group(1)) for k in info if (m := re.fullmatch(r"Port(\d+)State", k))})
    return tuple(
        Port(number=n, state=_IB_PORT_STATES.get(info[f"Port{n}State"], info[f"Port{n}State"]),
             link_layer=info.get(f"Port{n}LinkLayer", ""))
        for n in numbers
    )


def _nic_kind(name: str, vendor: int, ports: tuple[Port, ...], nets: list, rdma: bool) -> str:
    # 20-byte hardware addresses are IPoIB netdevs
    ipoib = any(_infos(o).get("Address", "").count(":") == 19 for o in nets)
    return classify.nic_kind(name, vendor, (p.link_layer for p in ports), rdma=rdma, ipoib=ipoib)


def _version(text: str) -> tuple[int, ...] | None:
    """'2.9.0' -> (2, 9, 0); '3.0.0a1-git' -> (3, 0, 0); None if no version."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(x or 0) for x in m.groups()) if m else None


def _nvlink_generation(model: str) -> int:
    m = _GPU_ARCH.search(model or "")
    return _NVLINK_GEN_BY_ARCH.get(m.group(1), 0) if m else 0
