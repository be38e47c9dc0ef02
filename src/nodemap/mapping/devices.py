"""GPUs and NICs for tasks: where each device lives and which tasks get it.

GPUs are matched to tasks by locality (the GPU's local CPUs and its PCIe
path), never by the order a source listed them. NICs are chosen by their
path to the task's GPUs (same switch, then same NUMA node, then same
package), balancing tasks over equally near NICs.
"""

from __future__ import annotations

from ..errors import NodemapError
from ..text import natural_key
from ..topology import paths
from ..topology.cpuset import CpuSet
from ..topology.model import GPU, NIC, PciDevice, Topology, norm_bus_id
from ..topology.record import Record
from .spread import blocks

# NIC tiers, nearest first: the order of the policy, not nvidia-smi's legend.
TIERS = {"X": 0, "NV": 0, "PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3}
SAME_PACKAGE, FAR = 4, 5
_FABRIC_KINDS = ("InfiniBand", "Slingshot", "OmniPath")


class GpuInfo(Record):
    gpu: GPU
    home: int  # NUMA os_index the GPU is local to, -1 unknown
    cpus: CpuSet  # its local CPUs (may be empty)
    sort_key: tuple  # locality order: local CPUs, then PCIe path, then bus order


def gpu_infos(topo: Topology) -> list[GpuInfo]:
    """Visible GPUs with their home NUMA node, in locality order."""
    out = []
    for g in topo.gpus:
        if not g.visible:
            continue
        home = paths.device_numa(topo, g.key)
        cpus = paths.cpu_affinity(topo, g.key)
        pci = topo.pci_of(g)
        key = (cpus.first(), pci.pci_path if pci else (), g.pci_bus_id, g.index)
        out.append(GpuInfo(g, home, cpus, key))
    return sorted(out, key=lambda i: i.sort_key)


def _score(cpus: CpuSet, infos: list[GpuInfo]) -> int:
    return sum(len(cpus & i.cpus) for i in infos)


def _match(groups: list[CpuSet], chunks: list[list[GpuInfo]]) -> list[int]:
    """Chunk index for each group: most shared local CPUs first, ties in order."""
    free = list(range(len(chunks)))
    out = []
    for cpus in groups:
        best = max(free, key=lambda c: (_score(cpus, chunks[c]), -c))
        out.append(best)
        free.remove(best)
    return out


def deal(task_cpus: list[CpuSet], gpus: list[GpuInfo], per_task: int) -> list[tuple[int, ...]]:
    """GPU indexes for each task of one domain (tasks in hierarchy order).

    per_task < 0 (auto): with at least as many tasks as GPUs, consecutive
    tasks share a GPU evenly; otherwise the GPUs are cut into one chunk per
    task (neighbours on a PCIe switch stay together). per_task = G: chunks
    of G GPUs, shared evenly by consecutive tasks when there are fewer
    chunks than tasks.
    """
    k, g = len(task_cpus), len(gpus)
    if not g or not k or per_task == 0:
        return [()] * k
    if per_task < 0:
        size = 1 if k >= g else 0
        chunks = [gpus[a:b] for a, b in blocks(g, k)] if k < g else [[x] for x in gpus]
    else:
        size = per_task
        chunks = [gpus[i * size:(i + 1) * size] for i in range(g // size)]
    if not chunks:
        return [()] * k
    if len(chunks) >= k:
        picks = _match(task_cpus, chunks)
        return [_indexes(chunks[c]) for c in picks]
    groups = blocks(k, len(chunks))
    union = [CpuSet.union_all(task_cpus[a:b]) for a, b in groups]
    picks = _match(union, chunks)
    out: list[tuple[int, ...]] = [()] * k
    for (a, b), c in zip(groups, picks):
        out[a:b] = [_indexes(chunks[c])] * (b - a)
    return out


def _indexes(chunk: list[GpuInfo]) -> tuple[int, ...]:
    return tuple(sorted(i.gpu.index for i in chunk))


# --- NICs -----------------------------------------------------------------------


def nic_up(n: NIC) -> bool:
    """A port of it is not down: sysfs says "4: ACTIVE" / "1: DOWN" (RDMA), "up" / "down" /
    "lowerlayerdown" (netdevs); a NIC without ports, or a port of unknown state, counts as up."""
    return not n.ports or any(not any(w in p.state.upper() for w in ("DOWN", "DISABLED")) for p in n.ports)


def fabric_nics(topo: Topology, notes: list[str] | None = None) -> list[NIC]:
    """NICs a rank should use: RDMA-capable fabric ports that are not down;
    all NICs when none is recognizably a fabric NIC. Those left out for being
    down are named in `notes` (a rank bound to one hangs or fails in MPI_Init)."""
    fabric = [n for n in topo.nics if n.kind in _FABRIC_KINDS or (n.netdevs and n.name not in n.netdevs)]
    pool = sorted(fabric or topo.nics, key=lambda n: natural_key(n.name))  # mlx5_2 before mlx5_10
    up = [n for n in pool if nic_up(n)]
    down = [n.name for n in pool if not nic_up(n)]
    if down and up and notes is not None:
        # commands/run.py says it
        notes.append(f"NIC {','.join(down)} down: ranks use {','.join(n.name for n in up)}")
    return up or pool


class NicChooser:
    """Tier of every NIC from every GPU and NUMA node, computed once."""

    def __init__(self, topo: Topology, nics: list[NIC], package_of: dict[int, int], gpus: list[GpuInfo]):
        self.topo = topo
        self.info = {x.gpu.index: x for x in gpus}
        self.nics = nics
        self.package_of = package_of
        self.home = [paths.device_numa(topo, n.key) for n in nics]
        self._pci: dict[str, PciDevice] | None = None
        self.bridge = [self._host_bridge(n) for n in nics]
        self.load = [0] * len(nics)
        self._gpu_tier: dict[int, list[int]] = {}
        self._task_tier: dict[tuple, list[int]] = {}

    def _numa_tier(self, node: int, i: int) -> int:
        h = self.home[i]
        if h < 0 or node < 0:
            return FAR
        if h == node:
            return TIERS["NODE"]
        same = self.package_of.get(h, -1) == self.package_of.get(node, -2)
        return SAME_PACKAGE if same else FAR

    def gpu_tiers(self, gpu: GpuInfo) -> list[int]:
        idx = gpu.gpu.index
        if idx not in self._gpu_tier:
            row = []
            bridge = self._host_bridge(gpu.gpu)
            for i, n in enumerate(self.nics):
                # Only devices under one host bridge can share a switch; the rest
                # are told apart by NUMA node and package (cheap on big nodes).
                kind = paths.path(self.topo, gpu.gpu.key, n.key).kind if bridge and bridge == self.bridge[i] else ""
                row.append(TIERS.get(kind, self._numa_tier(gpu.home, i)))
            self._gpu_tier[idx] = row
        return self._gpu_tier[idx]

    def _host_bridge(self, dev: GPU | NIC) -> str:
        """The host bridge above a device (its PCI path's root), "" unknown.
        One dict of the PCI devices instead of a scan of them per device;
        a device whose bus id is ambiguous knows its own (Topology.pci_of)."""
        if dev.pci_index >= 0 or not dev.pci_bus_id:
            pci = self.topo.pci_of(dev)
        else:
            if self._pci is None:
                self._pci = {}
                for d in self.topo.pci_devices:
                    self._pci.setdefault(d.bus_id, d)  # the first of equals, as Topology.pci
            pci = self._pci.get(norm_bus_id(dev.pci_bus_id))
        return pci.pci_path[0] if pci is not None and pci.pci_path else ""

    def _tiers(self, gpus: list[GpuInfo], mems: CpuSet) -> list[int]:
        """Each NIC's tier for a task: from its nearest GPU, else its memory."""
        if gpus:
            rows = [self.gpu_tiers(g) for g in gpus]
            return [min(col) for col in zip(*rows)]
        nodes = list(mems) or [-1]
        return [min(self._numa_tier(m, i) for m in nodes) for i in range(len(self.nics))]

    def choose(self, gpus: tuple[int, ...], mems: CpuSet, rails: int) -> tuple[str, ...]:
        """`rails` NICs (-1: all of the nearest tier), nearest first, the least
        used first among equally near ones."""
        if rails == 0 or not self.nics:
            return ()
        load = self.load
        groups = self._task_tier.get((gpus, mems.mask)) or self._by_tier(gpus, mems)
        if rails == 1:  # the common case, kept cheap: min() keeps the first of equals
            best = min(groups[0], key=load.__getitem__)
            load[best] += 1
            return (self.nics[best].name,)
        pick: list[int] = []
        for group in groups:
            if rails < 0:
                pick = group
                break
            pick += sorted(group, key=lambda i: (load[i], i))[: rails - len(pick)]
            if len(pick) == rails:
                break
        for i in pick:
            load[i] += 1
        return tuple(self.nics[i].name for i in pick)

    def choose_all(self, shapes: list[tuple[tuple[int, ...], CpuSet]], rails: int) -> list[tuple[str, ...]]:
        """choose(gpus, mems, rails) for each (gpus, mems) in turn."""
        if rails != 1 or not self.nics:
            return [self.choose(g, m, rails) for g, m in shapes]
        # One NIC each, the common case: choose()'s steps without a call per task.
        load, names = self.load, [(n.name,) for n in self.nics]
        nearest: dict[tuple, list[int]] = {}
        near_of = []
        for gpus, mems in shapes:
            key = (gpus, mems.mask)
            near = nearest.get(key)
            if near is None:
                near = nearest[key] = self._by_tier(gpus, mems)[0]
            near_of.append(near)
        # Tasks with one nearest NIC choose first, so those free to choose even
        # out the load (Karolina, 256 CPU-only tasks: 64 a NIC, not 80/48/80/48).
        out: list[tuple[str, ...]] = [()] * len(shapes)
        for i in sorted(range(len(shapes)), key=lambda i: len(near_of[i])):
            best = min(near_of[i], key=load.__getitem__)  # the first of the least used
            load[best] += 1
            out[i] = names[best]
        return out

    def _by_tier(self, gpus: tuple[int, ...], mems: CpuSet) -> list[list[int]]:
        """NIC indexes grouped by tier, nearest group first (cached per task shape)."""
        key = (gpus, mems.mask)
        if key not in self._task_tier:
            tier = self._tiers([self.info[g] for g in gpus], mems)
            self._task_tier[key] = [[i for i in range(len(tier)) if tier[i] == t] for t in sorted(set(tier))]
        return self._task_tier[key]


def check_rails(rails: int, nics: list[NIC]) -> None:
    if rails > 1 and rails > len(nics):
        names = ", ".join(n.name for n in nics) or "none"
        raise NodemapError(f"--nic-rails {rails} asks for more NICs than this node has ({len(nics)}: {names}); "
                           f"use --nic-rails {max(len(nics), 1)} or --nic-rails all")
