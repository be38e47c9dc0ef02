"""One entry point to a Topology: a file given by the user, or this machine.

`discover(input, source)` picks the reader. Inputs are recognized by
content, not name: a directory holding sys/ is a sysfs snapshot, bz2/gzip/xz
or tar bytes are a snapshot tarball, '<' starts hwloc XML and '{' a nodemap
JSON export or a check document (the topology it holds). For this machine,
"auto" reads sysfs on Linux (no external program needed), adds the allowed
set, AMD SMI and NVML, and says so in Topology.source; elsewhere it reads
through hwloc's lstopo.
"""

from __future__ import annotations

import functools
import os
import stat
import sys

from .. import infile
from ..errors import InputError, NodemapError
from .model import SCHEMA, Topology, replace
from .record import fields

__all__ = ["discover", "SOURCES", "sniff"]

SOURCES = ("auto", "sysfs", "hwloc", "nvml", "amdsmi")

_HINT = ("give an hwloc XML file, a sysfs snapshot directory or tarball, a nodemap JSON export or a check document "
         "(check.json)")


def discover(input: str | os.PathLike | None = None, source: str = "auto") -> Topology:
    if source not in SOURCES:
        raise InputError("--source", f"unknown source {source!r} (choose one of {', '.join(SOURCES)})")
    if input is not None:
        return _from_input(os.fspath(input), source)
    return _live(source)


# --- files -----------------------------------------------------------------


MAX_OBJECTS = 1 << 17  # PUs, caches, PCI devices... of one topology file (16k PUs x 3 caches is 48k)
MAX_INPUT = 256 << 20  # bytes of one input file: a 16k-PU node's hwloc XML is tens of MB


def sniff(path: str) -> str:
    """What a path holds: "sysfs-dir", "tarball", "xml" or "json"."""
    return _sniff(path, _head(path))


def _head(path: str) -> bytes:
    """The first bytes of a regular file (None for a directory)."""
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            return None
    except FileNotFoundError:
        raise InputError(path, f"no such file or directory ({_HINT})") from None
    except OSError as e:  # a symlink loop, a component that is not a directory
        raise InputError(path, f"cannot open: {e.strerror} ({_HINT})") from None
    fd = infile.open_regular(path, MAX_INPUT, "topology file")
    try:
        return os.read(fd, 512)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _sniff(path: str, head: bytes | None) -> str:
    if head is None:
        return "sysfs-dir"
    if not head:
        raise InputError(path, f"empty file ({_HINT})")
    if head[:3] == b"BZh" or head[:2] == b"\x1f\x8b" or head[:6] == b"\xfd7zXZ\x00" or head[257:262] == b"ustar":
        return "tarball"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] == b"<":
        return "xml"
    if text[:1] in (b"{", b"["):
        return "json"
    raise InputError(path, f"unrecognized format ({_HINT})")


def _from_input(path: str, source: str) -> Topology:
    if _is_stream(path):  # --input <(cat node.xml): read once into a file, then as any file
        from ..scratch import scratch_file

        with scratch_file("nodemap-input-") as (fd, copy):
            _pipe_copy(path, fd)
            return _from_input_file(copy, source, path)
    return _from_input_file(path, source, path)


def _is_stream(path: str) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


_CHUNK = 1 << 20


def _pipe_copy(path: str, fd: int) -> None:
    """Copy a pipe, FIFO or character device into the file open at `fd`
    (sniffing a pipe would consume what the reader needs), refusing it past
    MAX_INPUT bytes: an endless pipe must not fill the disk."""
    try:
        with os.fdopen(fd, "wb") as dst, _opened(path) as src:
            head = _read(path, src, 512)
            _sniff(path, head)  # /dev/zero ends here, not after 256 MiB
            dst.write(head)
            copied = len(head)
            while chunk := _read(path, src, min(_CHUNK, MAX_INPUT + 1 - copied)):
                copied += len(chunk)
                if copied > MAX_INPUT:
                    raise InputError(path, f"more than {MAX_INPUT >> 20} MiB, nodemap's limit for one input: "
                                           f"not a topology file ({_HINT})")
                dst.write(chunk)
    except OSError as e:  # the input's own errors are InputErrors by now: this is the copy's
        raise InputError(path, f"cannot copy it into a temporary file ($TMPDIR): {e.strerror or e}") from None


def _opened(path: str):
    try:
        return open(path, "rb")
    except OSError as e:
        raise InputError(path, f"cannot read it: {e.strerror or e}") from None


def _read(path: str, src, n: int) -> bytes:
    try:
        return src.read(n)
    except OSError as e:
        raise InputError(path, f"cannot read it: {e.strerror or e}") from None


def _from_input_file(path: str, source: str, named: str) -> Topology:
    """Read `path`; errors name `named` (the pipe a copy was made of)."""
    try:
        topo = _read_input(path, source)
        return topo if path == named else replace(topo, source=topo.source.replace(path, named))
    except InputError as e:
        if path == named:
            raise
        raise InputError(named, str(e).replace(path, named, 1).removeprefix(f"{named}: ")) from None


def _read_input(path: str, source: str) -> Topology:
    from . import names

    topo = _read_kind(path, source)
    _check_counts(path, topo)
    problem = absurd(topo)
    if problem:
        raise InputError(path, f"{problem}: no machine reports that; the file is damaged or hand-edited (fix it or "
                               "write it again with the tool that made it)")
    names.check(topo, path)  # a file's names are not the kernel's: they reach environments and configs
    return topo


# Beyond any machine (2026: the largest single-system memory is tens of TiB, a GPU's 288 GB,
# a link's 900 GB/s, a NIC port's 800 Gb/s, NV18 the most links per pair): a figure past
# these is a damaged or hand-edited file, and a node class holding one fails every node.
MAX_MEMORY = 1 << 50  # B (1 PiB): a machine, a NUMA node
MAX_DEVICE_MEMORY = 1 << 44  # B (16 TiB): a GPU, a cache
MAX_BANDWIDTH = 1e5  # GB/s: a link, a PCIe device; Gb/s: a NIC port
MAX_LINKS = 1024  # NVLinks in one device link
MAX_PCIE_GEN, MAX_PCIE_WIDTH = 16, 64
MAX_GPUS = 1024  # GPUs, and NICs, of one node: the largest nodes have 16 (gres.conf, Links= and paths are per pair)


def _check_counts(path: str, topo: Topology) -> None:
    """Refuse a node with more objects of one kind than nodemap reads, whatever the format."""
    long = next((k for k in fields(Topology) if isinstance(v := getattr(topo, k), tuple)
                 and len(v) > MAX_OBJECTS), None)
    if long is not None:
        raise InputError(path, f"{len(getattr(topo, long))} {long} is more than nodemap reads ({MAX_OBJECTS}; the "
                               "largest nodes have tens of thousands): fix the file or export it again")
    many = next((k for k in ("gpus", "nics") if len(getattr(topo, k)) > MAX_GPUS), None)
    if many is not None:
        raise InputError(path, f"{len(getattr(topo, many))} {many[:-1].upper()}s is more than nodemap reads for one "
                               f"node ({MAX_GPUS}; the largest nodes have 16): fix the file or export it again")


def absurd(topo: Topology) -> str:
    """What in a Topology no machine can report (repeated numbers, negative
    sizes, sizes past any machine's), or "". Planning on it would be a
    silent wrong answer; judging a node against it, a drain of every node."""
    from .cpuset import MAX_INDEX

    for what, indexes in (("PU", [p.os_index for p in topo.pus]), ("NUMA node", [n.os_index for n in topo.numa_nodes]),
                          ("GPU", [g.index for g in topo.gpus])):
        wild = next((i for i in indexes if not 0 <= i <= MAX_INDEX), None)
        if wild is not None:
            return f"{what} number {wild} is outside 0..{MAX_INDEX} (nodemap's limit)"
        if len(set(indexes)) != len(indexes):
            seen: set[int] = set()
            twice = next(i for i in indexes if i in seen or seen.add(i))
            return f"{what} number {twice} appears twice"
    m = topo.machine
    sizes = [("machine memory", "machine.memory", m.memory, MAX_MEMORY),
             ("machine MemTotal", "machine.mem_total", m.mem_total, MAX_MEMORY)]
    sizes += [(f"NUMA node {n.os_index} memory", f"numa_nodes[{i}].memory", n.memory, MAX_MEMORY)
              for i, n in enumerate(topo.numa_nodes)]
    sizes += [(f"L{c.level} cache size", f"caches[{i}].size", c.size, MAX_DEVICE_MEMORY)
              for i, c in enumerate(topo.caches)]
    sizes += [(f"GPU {g.index} memory", f"gpus[{i}].memory", g.memory, MAX_DEVICE_MEMORY)
              for i, g in enumerate(topo.gpus)]
    for i, k in enumerate(topo.links):
        sizes += [(f"link {k.a}-{k.b} bandwidth", f"links[{i}].bandwidth", k.bandwidth, MAX_BANDWIDTH),
                  (f"link {k.a}-{k.b} count", f"links[{i}].count", k.count, MAX_LINKS)]
    for i, d in enumerate(topo.pci_devices):
        sizes += [(f"PCI device {d.bus_id} link speed", f"pci_devices[{i}].link_speed", d.link_speed, MAX_BANDWIDTH)]
        sizes += [(f"PCI device {d.bus_id} {what}", f"pci_devices[{i}].{field}", getattr(d, field), top)
                  for what, field, top in (("link generation", "link_gen", MAX_PCIE_GEN),
                                           ("maximum link generation", "link_max_gen", MAX_PCIE_GEN),
                                           ("link width", "link_width", MAX_PCIE_WIDTH),
                                           ("maximum link width", "link_max_width", MAX_PCIE_WIDTH))]
    sizes += [(f"NIC {n.name} port {p.number} rate", f"nics[{i}].ports[{j}].rate_gbps", p.rate_gbps, MAX_BANDWIDTH)
              for i, n in enumerate(topo.nics) for j, p in enumerate(n.ports)]
    for what, field, v, top in sizes:
        if not 0 <= v < float("inf"):  # nan fails both
            return f"{what} is {'negative' if v < 0 else 'not a finite number'} ({v})"
        if v > top:
            return f"{what} ({field}) is {v:.4g}, beyond any machine (at most {top:.4g})"
    return ""


def _read_kind(path: str, source: str) -> Topology:
    kind = sniff(path)
    expected = {"sysfs-dir": "sysfs", "tarball": "sysfs", "xml": "hwloc", "json": "auto"}[kind]
    if source not in ("auto", expected):
        raise InputError(path, f"is {kind.replace('-dir', ' snapshot')} input; --source {source} reads this "
                                    "machine (drop --source, or drop --input)")
    where = path
    try:
        if kind in ("sysfs-dir", "tarball"):
            from . import snapshot

            return snapshot.read_dir(path) if kind == "sysfs-dir" else snapshot.read_tarball(path)
        if kind == "xml":
            from . import hwloc_xml

            return hwloc_xml.read(path)
        return _json(path)
    except NodemapError:
        raise
    except RecursionError:
        raise InputError(where, "nesting too deep to read") from None
    except Exception as e:  # hostile or damaged input must not end in a traceback
        raise InputError(where, f"cannot read ({type(e).__name__}: {e})") from None


# check.document.SCHEMAS (tested equal): a check document holds the node's topology; check is a layer above
CHECK_SCHEMAS = ("nodemap.check/1", "nodemap.check/2")


@functools.cache
def _check() -> type:
    """The part of a check document read here, its node decoded in the same pass as an export is: the rest is
    report's to check (a class made once, on the first check document: msgspec is not on the path of a node
    read live)."""
    import msgspec

    from . import saved

    return msgspec.defstruct("_Check", [("topology", saved.document(Topology, SCHEMA) | None, None)])


def _json(path: str) -> Topology:
    from .. import records

    data = infile.read(path, MAX_INPUT, "topology file")
    schema = records.schema_of(path, data, "topology file")  # read once: from_json checks it, not again
    topo = _in_check(path, data) if schema in CHECK_SCHEMAS else Topology.from_json(data, path, schema)
    n = len(topo.numa_nodes)
    if len(topo.distances) not in (0, n) or any(len(r) != n for r in topo.distances):
        raise InputError(path, f"distances are not a {n} x {n} matrix (one row and column per NUMA node): "
                               "fix the file or export it again")
    return topo


def _in_check(path: str, data: bytes) -> Topology:
    """The topology a check document (nodemap check's check.json) holds, decoded as an export is:
    damage is one InputError naming the field ("topology.numa_nodes[2].cpuset")."""
    from .. import records
    from . import saved

    node = records.decode(path, data, _check(), "check document", dec_hook=saved.cpuset).topology
    if node is None:
        raise InputError(path, "field topology is missing or null: this check document holds no node (give the "
                               "check.json of a nodemap check that read one, or a topo --export file)")
    return saved.record(node)


# --- this machine --------------------------------------------------------


def _live(source: str) -> Topology:
    if source == "hwloc":
        return _visible(_hwloc())
    if source == "auto" and not _has_sysfs():
        topo = _hwloc()
        return _visible(_with(topo, note=f"source auto: no Linux sysfs on {sys.platform}, read through hwloc"))
    topo = _read_sysfs()  # with the allowed set (affinity, cgroup cpuset): sysfs.read applies it
    if source == "sysfs":
        return _visible(topo)
    if source == "amdsmi" or (source == "auto" and any(g.vendor == "AMD" for g in topo.gpus)):
        from . import amdsmi  # only where it has AMD GPUs to enrich: other nodes never import it

        topo = amdsmi.enrich(topo, required=source == "amdsmi")
        if source == "amdsmi":
            return _visible(topo)
    from . import nvml  # nvml.enrich also applies every vendor's visibility

    return nvml.enrich(topo, required=source == "nvml")


def _has_sysfs() -> bool:
    return os.path.isdir("/sys/devices/system/cpu")


def _read_sysfs() -> Topology:
    from . import sysfs

    return sysfs.read(root="/")


def _hwloc() -> Topology:
    from . import live

    if not live.available():
        raise NodemapError("lstopo-no-graphics is not on PATH: install hwloc (apt-get install hwloc) "
                           "or use --source sysfs")
    return live.read()


def _visible(topo: Topology) -> Topology:
    from .nvml import apply_visible

    return apply_visible(topo)


def _with(topo: Topology, note: str) -> Topology:
    return replace(topo, notes=topo.notes + (note,))
