"""Path classes between devices, as `nvidia-smi topo -m` prints them.

A device is a GPU ("GPU0") or a NIC (its name, "mlx5_0"). The classes
(X, NV#, XGMI#, PIX, PXB, PHB, C2C, NODE, SYS) and how each is decided:
docs/topology.md, "Path classes". Without a PCI path the class falls back
to NUMA locality (NODE or SYS) and the Path says so in its note.
"""

from __future__ import annotations

from .cpuset import CpuSet
from .model import GPU, NIC, Topology, norm_bus_id
from .record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Iterable, Sequence

__all__ = [
    "Path",
    "LEGEND",
    "XGMI_LEGEND",
    "path",
    "path_matrix",
    "device_keys",
    "device_numa",
    "cpu_affinity",
    "pcie_gbs",
    "matrix_to_dict",
    "nvlink",
]

# Best to worst; the order ranks classes (lower index = closer).
ORDER = ("X", "NV", "XGMI", "PIX", "PXB", "PHB", "C2C", "NODE", "SYS")

# nvidia-smi's own wording, in nvidia-smi's order.
LEGEND = (
    ("X", "Self"),
    ("SYS", "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)"),
    ("NODE", "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node"),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    ("PXB", "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)"),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)
# Printed under the legend when the matrix holds it (nvidia-smi has no such class).
C2C_LEGEND = ("C2C", "Connection traversing NVLink-C2C to the GPU's own CPU (Grace), then PCIe within its NUMA node")

XGMI_LEGEND = ("XGMI#", "Connection traversing AMD xGMI (Infinity Fabric) links between GPUs, # hops (1 = direct)")

# PCIe GB/s per lane per direction after line coding (gen1/2 8b/10b,
# gen3-5 128b/130b, gen6 FLIT): x16 gen5 = 63.0 GB/s.
_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.9846, 4: 1.969, 5: 3.938, 6: 7.563}


class Path(Record):
    kind: str  # one of ORDER
    nvlinks: int = 0
    bandwidth_gbs: float = 0.0  # per direction, 0 unknown
    label: str = ""  # "NV18", "PIX", "X"
    note: str = ""  # how it was decided when a source lacked data


    @property
    def rank(self) -> int:
        """Closeness for sorting: 0 is the device itself."""
        return ORDER.index(self.kind)

    def to_dict(self) -> dict:
        return {"label": self.label, "kind": self.kind, "nvlinks": self.nvlinks,
                "bandwidth_gbs": self.bandwidth_gbs, "note": self.note}


def device_keys(topo: Topology) -> list[str]:
    """GPUs in index order, then NICs in the topology's order."""
    return [g.key for g in sorted(topo.gpus, key=lambda g: g.index)] + [n.key for n in topo.nics]


def _device(topo: Topology, key: str) -> GPU | NIC:
    for g in topo.gpus:
        if g.key == key:
            return g
    for n in topo.nics:
        if n.key == key:
            return n
    known = ", ".join(device_keys(topo)) or "none"
    raise KeyError(f"no device {key!r} (known: {known})")


def device_numa(topo: Topology, key: str) -> int:
    """NUMA node a device is local to; -1 when no source says.

    Uses the device's own numa_node, then its PCI record, then its local
    CPUs when they fall in exactly one NUMA node.
    """
    dev = _device(topo, key)
    return _numa(topo, dev, topo.pci_of(dev))


def _numa(topo: Topology, dev: GPU | NIC, pci) -> int:
    """device_numa of `dev`, whose PCI record is `pci` (None: none)."""
    if dev.numa_node >= 0:
        return dev.numa_node
    if pci is not None and pci.numa_node >= 0:
        return pci.numa_node
    nodes = topo.numa_of(_local_cpus(dev, pci))
    return nodes.first() if len(nodes) == 1 else -1


def _local_cpus(dev: GPU | NIC, pci) -> CpuSet:
    if dev.cpuset:
        return dev.cpuset
    return pci.cpuset if pci is not None else CpuSet()


def cpu_affinity(topo: Topology, key: str) -> CpuSet:
    """CPUs local to a device: its own cpuset, its PCI record's, else its
    NUMA node's. Empty when nothing is known (rendered as N/A)."""
    dev = _device(topo, key)
    return _affinity(topo, dev, topo.pci_of(dev))


def cpu_affinities(topo: Topology) -> dict[str, CpuSet]:
    """cpu_affinity of every GPU and NIC by key, in one pass: asked device by
    device, a node of a thousand GPUs costs a million lookups (gres.conf)."""
    by_id: dict[str, object] = {}
    for d in topo.pci_devices:
        by_id.setdefault(d.bus_id, d)  # the first, as Topology.pci finds it

    def pci(dev):
        if 0 <= dev.pci_index < len(topo.pci_devices):
            return topo.pci_devices[dev.pci_index]
        return by_id.get(norm_bus_id(dev.pci_bus_id)) if dev.pci_bus_id else None

    return {d.key: _affinity(topo, d, pci(d)) for d in (*topo.gpus, *topo.nics)}


def _affinity(topo: Topology, dev: GPU | NIC, pci) -> CpuSet:
    cpus = _local_cpus(dev, pci)
    if cpus:
        return cpus
    node = _numa(topo, dev, pci)
    try:
        return topo.numa(node).cpuset if node >= 0 else CpuSet()
    except KeyError:
        return CpuSet()


def pcie_gbs(topo: Topology, key: str) -> float:
    """One-direction PCIe bandwidth of a device's link, 0 when unknown."""
    dev = _device(topo, key)
    pci = topo.pci_of(dev)
    if pci is not None and pci.link_speed:
        return pci.link_speed
    gen, width = (dev.pcie_gen, dev.pcie_width) if isinstance(dev, GPU) else (0, 0)
    if pci is not None:
        gen, width = gen or pci.link_gen, width or pci.link_width
    return round(_LANE_GBS.get(gen, 0.0) * width, 3)


def nvlink(topo: Topology, a: str, b: str) -> tuple[int, float]:
    """(link count, GB/s per direction) between two devices over NVLink."""
    # A source may write a pair once or once per direction (hwloc's
    # bandwidth matrix is directed): count one direction, the larger.
    ab = [l for l in topo.links if l.kind == "NVLink" and (l.a, l.b) == (a, b)]
    ba = [l for l in topo.links if l.kind == "NVLink" and (l.a, l.b) == (b, a)]
    count, bw = max((sum(l.count for l in d), sum(l.bandwidth for l in d)) for d in (ab, ba))
    sa, sb = _switch_links(topo, a), _switch_links(topo, b)
    if sa[0] and sb[0]:
        # Through a switch fabric the pair gets what the thinner side has.
        thin = sa if sa[0] <= sb[0] else sb
        count += thin[0]
        bw += thin[1]
    return count, bw


class NvLinks:
    """nvlink(topo, a, b)[0] for any pair, from one pass over the links:
    asked pair by pair, a node of 2,000 GPUs took 21 s for gres.conf's
    Links= (every pair scans every link)."""

    def __init__(self, topo: Topology) -> None:
        self.direct: dict[tuple[str, str], tuple[int, float]] = {}  # (a, b) as written: summed count, GB/s
        self.switch: dict[str, int] = {}  # device -> its links to switches
        for ln in topo.links:
            if ln.kind != "NVLink":
                continue
            c, bw = self.direct.get((ln.a, ln.b), (0, 0.0))
            self.direct[(ln.a, ln.b)] = (c + ln.count, bw + ln.bandwidth)
            for end, other in {(ln.a, ln.b), (ln.b, ln.a)}:
                if _is_switch(other):
                    self.switch[end] = self.switch.get(end, 0) + ln.count

    def count(self, a: str, b: str) -> int:
        """Links between `a` and `b`: direct ones (one direction, the larger), plus the thinner side's
        switch links when both reach a switch."""
        sa, sb = self.switch.get(a, 0), self.switch.get(b, 0)
        return self._direct(a, b) + (min(sa, sb) if sa and sb else 0)

    def _direct(self, a: str, b: str) -> int:
        return max(self.direct.get((a, b), (0, 0.0)), self.direct.get((b, a), (0, 0.0)))[0]

    def fewest(self, keys: Sequence[str]) -> tuple[int, bool]:
        """(the fewest links between two of `keys`, whether any two are linked) in O(keys + links), not
        pair by pair. In the order of their switch links, a device's count to any later one is its own
        switch links (the thinner side's; 0 without) plus their direct links: so its fewest is its
        switch links, plus the fewest direct ones only when it is directly linked to every later one."""
        order = {k: i for i, k in enumerate(sorted(keys, key=lambda k: self.switch.get(k, 0)))}
        direct: dict[str, dict[str, int]] = {k: {} for k in order}  # device -> later device -> direct links
        for a, b in self.direct:
            if a in order and b in order and a != b:
                first, later = (a, b) if order[a] < order[b] else (b, a)
                direct[first][later] = self._direct(a, b)
        linked = any(n > 0 for d in direct.values() for n in d.values()) or \
            sum(1 for k in order if self.switch.get(k)) > 1
        counts = [self.switch.get(k, 0) + (min(direct[k].values()) if len(direct[k]) == len(order) - 1 - i else 0)
                  for k, i in order.items() if i < len(order) - 1]
        return min(counts, default=0), linked


def _xgmi(topo: Topology, a: str, b: str):
    """The xGMI link between two GPUs, in either direction, None if none."""
    return next((l for l in topo.links if l.kind == "xGMI" and {l.a, l.b} == {a, b}), None)


def _switch_links(topo: Topology, key: str) -> tuple[int, float]:
    links = [l for l in topo.links if l.kind == "NVLink" and key in (l.a, l.b)
             and _is_switch(l.b if l.a == key else l.a)]
    return sum(l.count for l in links), sum(l.bandwidth for l in links)


def _is_switch(key: str) -> bool:
    return key.startswith("NVSwitch")


def _pci_class(pa: Sequence[str], pb: Sequence[str]) -> str:
    if pa[0] != pb[0]:
        return ""  # different host bridges: NUMA decides
    common = 0
    for x, y in zip(pa, pb):
        if x != y:
            break
        common += 1
    if common == 1:
        return "PHB"
    # Below a shared bridge, one more bridge on each side is the switch's
    # downstream port: that is "a single PCIe switch" to nvidia-smi/NCCL.
    if max(len(pa), len(pb)) - common <= 1:
        return "PIX"
    return "PXB"


def path(topo: Topology, a: str, b: str) -> Path:
    """The path class between devices `a` and `b` (keys like "GPU0", "mlx5_0")."""
    da, db = _device(topo, a), _device(topo, b)
    if a == b:
        return Path("X", label="X")
    links, bw = nvlink(topo, a, b)
    if links:
        return Path("NV", nvlinks=links, bandwidth_gbs=round(bw, 4), label=f"NV{links}")
    xgmi = _xgmi(topo, a, b)
    if xgmi is not None:
        return Path("XGMI", bandwidth_gbs=xgmi.bandwidth, label=f"XGMI{xgmi.hops or ''}")
    pcie = min(pcie_gbs(topo, a), pcie_gbs(topo, b))
    pa, pb = _pci_path(topo, da), _pci_path(topo, db)
    kind = _pci_class(pa, pb) if pa and pb else ""
    if kind:
        return Path(kind, bandwidth_gbs=pcie, label=kind)
    na, nb = device_numa(topo, a), device_numa(topo, b)
    note = "" if pa and pb else "PCI path unknown: class from NUMA locality"
    if (na == nb and na >= 0) and (_c2c(topo, a) or _c2c(topo, b)):
        return Path("C2C", bandwidth_gbs=pcie, label="C2C")
    if len(topo.host_numa_nodes) <= 1 or (na == nb and na >= 0):
        kind = "NODE"
    else:
        kind = "SYS"
        if na < 0 or nb < 0:
            note = "NUMA locality unknown: assumed SYS"
    return Path(kind, bandwidth_gbs=pcie, label=kind, note=note)


def _c2c(topo: Topology, key: str) -> bool:
    """Whether the device reaches its CPU over NVLink-C2C (Grace Hopper/Blackwell)."""
    return any(l.kind == "NVLink-C2C" and key in (l.a, l.b) for l in topo.links)


def _pci_path(topo: Topology, dev: GPU | NIC) -> tuple[str, ...]:
    pci = topo.pci_of(dev)
    return pci.pci_path if pci is not None else ()


def path_matrix(topo: Topology, keys: Iterable[str] | None = None) -> dict[str, dict[str, Path]]:
    """Path between every ordered pair of `keys` (default: all GPUs, then NICs)."""
    ks = list(device_keys(topo) if keys is None else keys)
    return {a: {b: path(topo, a, b) for b in ks} for a in ks}


def matrix_to_dict(m: dict[str, dict[str, Path]]) -> dict[str, dict[str, dict]]:
    return {a: {b: p.to_dict() for b, p in row.items()} for a, row in m.items()}
