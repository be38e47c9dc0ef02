"""The one model of a node: immutable, typed, JSON round-trippable.

Every source (sysfs, hwloc XML, NVML) produces a `Topology`; planning,
rendering and benchmarks read only this. Devices are referred to by stable
keys: GPUs by physical index (PCI bus order, as NVML numbers them), NICs by
name, PCI devices by normalized bus id ("0000:3b:00.0", lower case).

The classes are frozen records of plain Python (record.py): a dataclass's
`dataclasses` import and generated methods cost ~19 ms of every `nodemap
topo` (issue 31), msgspec Structs with their msgspec and typing imports ~20
ms (benchmarks/results/topo_vs_lstopo_20261202c.md). A saved Topology is
read back with every field checked (`from_json`, topology/saved.py).
The per-rank launch path never imports this module: ranks read the node's
published plan (benchmarks/results/launch_overhead.md).
"""

# No `from __future__ import annotations` here: the fields' types are objects, not strings that
# names.check (on every --input) and the first decode evaluate one by one (1.5 -> 0.5 ms for the 13 records).
from .cpuset import CpuSet
from .record import Record, replace, to_builtins

__all__ = ["replace"]  # re-exported: callers take it with the model

SCHEMA = "nodemap.topology/1"

# Bus id NVML reports for NVSwitches hidden from the VM/container.
HIDDEN_BUS_ID = "ffffffff:ff:ff.0"


def norm_bus_id(bus_id: str) -> str:
    """'00000000:3B:00.0' (NVML) or '3b:00.0' -> '0000:3b:00.0'."""
    b = bus_id.strip().lower()
    parts = b.split(":")
    if len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3:
        return b
    dom = parts[0][-8:].lstrip("0").rjust(4, "0")
    return f"{dom}:{parts[1].rjust(2, '0')}:{parts[2]}"


# --- the model ---------------------------------------------------------------


class Machine(Record):
    hostname: str = ""
    arch: str = ""
    memory: int = 0  # bytes, sum of NUMA nodes when known
    # bytes: /proc/meminfo MemTotal less GPU memory nodes, the kernel's own total; 0 unknown
    # (hwloc XML). Per-node sysfs figures undercount on some VMs (4.6 GiB of 125.8): this does not.
    mem_total: int = 0
    info: tuple[tuple[str, str], ...] = ()  # (name, value): DMI, OS...


class Package(Record):
    os_index: int
    cpuset: CpuSet
    cpu_model: str = ""


class NumaNode(Record):
    os_index: int
    cpuset: CpuSet  # may be empty: memory-only nodes (HBM, CXL, GPU memory)
    memory: int = 0  # bytes
    kind: str = ""  # "", "HBM", "CXL", "NVM", "GPUMemory"... when a source says
    # GPUMemory nodes: bus id of the GPU whose memory this is (Grace Hopper,
    # POWER9 + V100). Such a node belongs to its GPU: never host memory, never
    # a CPU domain.
    pci_bus_id: str = ""


    @property
    def is_gpu_memory(self) -> bool:
        return self.kind == "GPUMemory"


class Group(Record):
    """hwloc Group/Die objects: a level between package and cache/core."""

    kind: str  # "Die", "Group", "Module", "Cluster"
    os_index: int
    cpuset: CpuSet


class Cache(Record):
    level: int
    kind: str  # "unified" | "data" | "instruction"
    size: int  # bytes
    cpuset: CpuSet
    line_size: int = 0
    ways: int = 0  # 0 unknown, -1 fully associative


class Core(Record):
    os_index: int  # core id within its package (not unique across packages)
    package: int  # package os_index, -1 unknown
    cpuset: CpuSet  # the PUs (hardware threads) of this core


class PU(Record):
    os_index: int
    online: bool = True
    allowed: bool = True


class PciDevice(Record):
    bus_id: str  # normalized "dddd:bb:dd.f"
    class_id: int  # e.g. 0x0302 3D controller, 0x0207 InfiniBand
    vendor_id: int = 0
    device_id: int = 0
    name: str = ""  # vendor/device names when a source has them
    numa_node: int = -1  # -1: the source did not say (sysfs numa_node=-1)
    cpuset: CpuSet = CpuSet()  # local CPUs
    # Upstream bridges from the root: ("pci0000:00", "0000:00:01.0", ...).
    # The first entry names the host bridge (root complex).
    pci_path: tuple[str, ...] = ()
    link_gen: int = 0  # current PCIe generation, 0 unknown
    link_width: int = 0  # current lanes, 0 unknown
    link_speed: float = 0.0  # GB/s one direction per hwloc, 0 unknown
    # What the link can train at (sysfs max_link_speed/max_link_width), 0
    # unknown: a link below it is a reseat, a riser or a slot (check's inventory).
    link_max_gen: int = 0
    link_max_width: int = 0


class GPU(Record):
    index: int  # physical index: PCI bus order among GPUs of the node
    vendor: str  # "NVIDIA", "AMD", "Intel"
    model: str = ""
    memory: int = 0  # bytes
    pci_bus_id: str = ""
    uuid: str = ""
    numa_node: int = -1
    cpuset: CpuSet = CpuSet()
    pcie_gen: int = 0
    pcie_width: int = 0
    os_names: tuple[str, ...] = ()  # cuda0, nvml0, card1, rsmi0, opencl0d0...
    visible: bool = True  # False when CUDA/ROCR_VISIBLE_DEVICES hides it
    mig: tuple[str, ...] = ()  # MIG mode: its MIG devices' UUIDs ("MIG-..."), the only units CUDA can use
    # Position of its own PCI function in Topology.pci_devices when the bus id
    # alone is ambiguous (a hand-edited XML repeating one); -1: look it up by id.
    pci_index: int = -1


    @property
    def key(self) -> str:
        return f"GPU{self.index}"


class Port(Record):
    number: int
    state: str = ""  # "ACTIVE", "DOWN", "up", "down"...
    link_layer: str = ""  # "InfiniBand", "Ethernet"
    rate_gbps: float = 0.0  # Gb/s as the device reports it


def gpu_order(key: str) -> int:
    """The index in a GPU key ("GPU3" -> 3): GPU pairs and links list the lower one first."""
    return int(key[3:])


class NIC(Record):
    name: str  # "mlx5_0", "cxi0", "hfi1_0", or netdev "eth0" if no RDMA device
    kind: str  # "InfiniBand" | "Ethernet" | "Slingshot" | "OmniPath" | "unknown"
    pci_bus_id: str = ""
    numa_node: int = -1
    cpuset: CpuSet = CpuSet()
    ports: tuple[Port, ...] = ()
    netdevs: tuple[str, ...] = ()  # ib0, hsn0, eth0
    pci_index: int = -1  # as GPU.pci_index


    @property
    def key(self) -> str:
        return self.name


class Link(Record):
    """A direct device link (NVLink, xGMI): `a` and `b` are device keys.

    `b` may be "NVSwitch" (any switch, hidden ones included) or "CPU" (POWER9
    NVLink to the host). Bandwidth is per direction, GB/s, all links summed.
    xGMI (AMD Infinity Fabric between GPUs): sources say the path's hops
    (1 = direct) and bandwidth, not how many links make it.
    """

    a: str
    b: str
    kind: str = "NVLink"  # "NVLink", "NVLink-C2C", "xGMI"
    count: int = 1
    bandwidth: float = 0.0
    version: int = 0
    hops: int = 0  # xGMI: GPUs crossed, 1 = direct; 0 unknown or not xGMI


class Topology(Record):
    machine: Machine = Machine()
    packages: tuple[Package, ...] = ()
    numa_nodes: tuple[NumaNode, ...] = ()
    # SLIT distances, rows/columns in the order of numa_nodes; () unknown
    distances: tuple[tuple[int, ...], ...] = ()
    groups: tuple[Group, ...] = ()
    caches: tuple[Cache, ...] = ()
    cores: tuple[Core, ...] = ()
    pus: tuple[PU, ...] = ()
    pci_devices: tuple[PciDevice, ...] = ()
    gpus: tuple[GPU, ...] = ()
    nics: tuple[NIC, ...] = ()
    links: tuple[Link, ...] = ()
    allowed_mems: CpuSet = CpuSet()
    source: str = ""  # "sysfs:/", "hwloc-xml:file.xml", "+nvml"...
    notes: tuple[str, ...] = ()  # what a source had to guess or repair


    # --- derived sets -----------------------------------------------------
    @property
    def cpuset(self) -> CpuSet:
        """All online PUs of the node."""
        return CpuSet(p.os_index for p in self.pus if p.online)

    @property
    def allowed_cpus(self) -> CpuSet:
        return CpuSet(p.os_index for p in self.pus if p.online and p.allowed)

    @property
    def nodeset(self) -> CpuSet:
        return CpuSet(n.os_index for n in self.numa_nodes)

    @property
    def host_numa_nodes(self) -> tuple[NumaNode, ...]:
        """NUMA nodes of host memory: all but GPU memory exposed as nodes."""
        return tuple(n for n in self.numa_nodes if not n.is_gpu_memory)

    def gpu_memory_nodes(self, gpu: GPU) -> tuple[NumaNode, ...]:
        """The NUMA nodes holding `gpu`'s memory (Grace Hopper, POWER9 + V100)."""
        return tuple(n for n in self.numa_nodes if n.is_gpu_memory and n.pci_bus_id and n.pci_bus_id == gpu.pci_bus_id)

    # --- lookups ------------------------------------------------------------
    def numa(self, os_index: int) -> NumaNode:
        for n in self.numa_nodes:
            if n.os_index == os_index:
                return n
        raise KeyError(f"no NUMA node {os_index}")

    def distance(self, i: int, j: int) -> int | None:
        """SLIT distance between NUMA os indexes i and j, None if unknown."""
        if not self.distances:
            return None
        idx = {n.os_index: k for k, n in enumerate(self.numa_nodes)}
        try:
            return self.distances[idx[i]][idx[j]]
        except (KeyError, IndexError):
            return None

    def numa_of(self, cpus: CpuSet) -> CpuSet:
        """NUMA nodes whose CPUs intersect `cpus`."""
        return CpuSet(n.os_index for n in self.numa_nodes if not n.cpuset.isdisjoint(cpus))

    def gpu(self, index: int) -> GPU:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(f"no GPU {index}")

    def nic(self, name: str) -> NIC:
        for n in self.nics:
            if n.name == name:
                return n
        raise KeyError(f"no NIC {name}")

    def pci(self, bus_id: str) -> PciDevice | None:
        b = norm_bus_id(bus_id)
        for d in self.pci_devices:
            if d.bus_id == b:
                return d
        return None

    def pci_of(self, dev: "GPU | NIC") -> PciDevice | None:
        """A device's own PCI function: by position in the tree where its bus
        id is ambiguous (GPU.pci_index), else by bus id."""
        if 0 <= dev.pci_index < len(self.pci_devices):
            return self.pci_devices[dev.pci_index]
        return self.pci(dev.pci_bus_id) if dev.pci_bus_id else None

    def caches_at(self, level: int, kinds: tuple[str, ...] = ("unified", "data")) -> tuple[Cache, ...]:
        return tuple(c for c in self.caches if c.level == level and c.kind in kinds)

    def last_level_caches(self) -> tuple[Cache, ...]:
        levels = [c.level for c in self.caches if c.kind != "instruction"]
        return self.caches_at(max(levels)) if levels else ()

    # --- serialization ------------------------------------------------------
    def to_dict(self) -> dict[str, object]:
        return {**to_builtins(self), "schema": SCHEMA}

    def to_json(self, indent: int | None = 1) -> str:
        import json

        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, data: bytes | str, where: str = "topology", schema: str | None = None) -> "Topology":
        """A saved Topology (`to_json`), every field checked: an InputError
        naming `where` and the field path ("numa_nodes[2].cpuset").
        `schema`: the document's, when the caller has read it already."""
        from . import saved

        return saved.decode(where, data, cls, SCHEMA, WHAT, schema)


WHAT = "nodemap topology export"
