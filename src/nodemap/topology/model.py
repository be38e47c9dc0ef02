"""The one model of a node: immutable, typed, JSON round-trippable.

Every source (sysfs, hwloc XML, NVML) produces a `Topology`; planning,
rendering and benchmarks read only this. Devices are referred to by stable
keys: GPUs by physical index (PCI bus order, as NVML numbers them), NICs by
name, PCI devices by normalized bus id ("0000:3b:00.0", lower case).

The classes are frozen records that behave as `@dataclass(frozen=True)`
classes do (same __init__, repr, ==, hash, FrozenInstanceError) and work
with `dataclasses.replace/fields/asdict/is_dataclass`, but are written out
here instead of generated: importing `dataclasses` (it pulls in `inspect`)
and generating 13 classes took ~40 ms per `nodemap topo` run, more than
lstopo takes in all. The `dataclasses` view of a class is built on first
use. `replace` below is `dataclasses.replace` without that import.
tests/test_topology_record.py checks every class against a real dataclass.
"""

from __future__ import annotations

from .cpuset import CpuSet

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


# --- frozen records ----------------------------------------------------------


class _New:
    """Default of a field whose default is a new object (a default_factory)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_NEW = _New()


class _DataclassView:
    """`__dataclass_fields__` / `__dataclass_params__` of a record, built on
    first access (from a real dataclass with the same fields), so that the
    dataclasses module works on records without being imported by them."""

    def __init__(self, attr: str) -> None:
        self.attr = attr

    def __get__(self, obj: object, owner: type) -> object:
        import dataclasses

        init = owner.__init__
        code = init.__code__
        names = code.co_varnames[1:code.co_argcount]
        defaults = dict(zip(names[len(names) - len(init.__defaults__ or ()):], init.__defaults__ or ()))
        ns: dict[str, object] = {"__annotations__": dict(owner.__annotations__), "__module__": owner.__module__,
                                 "__qualname__": owner.__qualname__}
        for name, default in defaults.items():
            ns[name] = (dataclasses.field(default_factory=globals()[owner.__annotations__[name]])
                        if default is _NEW else default)
        shadow = dataclasses.dataclass(frozen=True)(type(owner.__name__, (), ns))
        owner.__dataclass_fields__ = shadow.__dataclass_fields__
        owner.__dataclass_params__ = shadow.__dataclass_params__
        return getattr(owner, self.attr)


class _Record:
    """Base of the frozen records: field order is the annotation order, which
    each class's __init__ repeats (checked when the class is created)."""

    __slots__ = ()
    _fields = ()  # type: tuple[str, ...]  (not an annotation: typing.get_type_hints would list it)
    __dataclass_fields__ = _DataclassView("__dataclass_fields__")
    __dataclass_params__ = _DataclassView("__dataclass_params__")

    def __init_subclass__(cls) -> None:
        fields = tuple(cls.__dict__.get("__annotations__", {}))
        code = cls.__init__.__code__
        if code.co_varnames[1:code.co_argcount] != fields or code.co_kwonlyargcount:
            raise TypeError(f"{cls.__name__}.__init__ does not take the fields {fields} in order")
        cls._fields = fields
        cls.__match_args__ = fields

    def _astuple(self) -> tuple:
        d = self.__dict__
        return tuple(d[n] for n in self._fields)

    def __repr__(self) -> str:
        d = self.__dict__
        return f"{self.__class__.__qualname__}({', '.join(f'{n}={d[n]!r}' for n in self._fields)})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._astuple() == other._astuple()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._astuple())

    def __setattr__(self, name: str, value: object) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")


def replace(obj, /, **changes):
    """`dataclasses.replace` (a copy with some fields changed), cheap for records."""
    if isinstance(obj, _Record):
        values = dict(obj.__dict__)
        values.update(changes)
        return obj.__class__(**values)
    import dataclasses

    return dataclasses.replace(obj, **changes)


# --- the model ---------------------------------------------------------------


class Machine(_Record):
    hostname: str
    arch: str
    memory: int  # bytes, sum of NUMA nodes when known
    info: tuple[tuple[str, str], ...]  # (name, value): DMI, OS...

    def __init__(self, hostname: str = "", arch: str = "", memory: int = 0,
                 info: tuple[tuple[str, str], ...] = ()) -> None:
        self.__dict__.update(hostname=hostname, arch=arch, memory=memory, info=info)


class Package(_Record):
    os_index: int
    cpuset: CpuSet
    cpu_model: str

    def __init__(self, os_index: int, cpuset: CpuSet, cpu_model: str = "") -> None:
        self.__dict__.update(os_index=os_index, cpuset=cpuset, cpu_model=cpu_model)


class NumaNode(_Record):
    os_index: int
    cpuset: CpuSet  # may be empty: memory-only nodes (HBM, CXL, GPU memory)
    memory: int  # bytes
    kind: str  # "", "HBM", "CXL", "NVM", "GPUMemory"... when a source says
    # GPUMemory nodes: bus id of the GPU whose memory this is (Grace Hopper,
    # POWER9 + V100). Such a node belongs to its GPU: never host memory, never
    # a CPU domain.
    pci_bus_id: str

    def __init__(self, os_index: int, cpuset: CpuSet, memory: int = 0, kind: str = "", pci_bus_id: str = "") -> None:
        self.__dict__.update(os_index=os_index, cpuset=cpuset, memory=memory, kind=kind, pci_bus_id=pci_bus_id)

    @property
    def is_gpu_memory(self) -> bool:
        return self.kind == "GPUMemory"


class Group(_Record):
    """hwloc Group/Die objects: a level between package and cache/core."""

    kind: str  # "Die", "Group", "Module", "Cluster"
    os_index: int
    cpuset: CpuSet

    def __init__(self, kind: str, os_index: int, cpuset: CpuSet) -> None:
        self.__dict__.update(kind=kind, os_index=os_index, cpuset=cpuset)


class Cache(_Record):
    level: int
    kind: str  # "unified" | "data" | "instruction"
    size: int  # bytes
    cpuset: CpuSet
    line_size: int
    ways: int  # 0 unknown, -1 fully associative

    def __init__(self, level: int, kind: str, size: int, cpuset: CpuSet, line_size: int = 0, ways: int = 0) -> None:
        self.__dict__.update(level=level, kind=kind, size=size, cpuset=cpuset, line_size=line_size, ways=ways)


class Core(_Record):
    os_index: int  # core id within its package (not unique across packages)
    package: int  # package os_index, -1 unknown
    cpuset: CpuSet  # the PUs (hardware threads) of this core

    def __init__(self, os_index: int, package: int, cpuset: CpuSet) -> None:
        self.__dict__.update(os_index=os_index, package=package, cpuset=cpuset)


class PU(_Record):
    os_index: int
    online: bool
    allowed: bool

    def __init__(self, os_index: int, online: bool = True, allowed: bool = True) -> None:
        self.__dict__.update(os_index=os_index, online=online, allowed=allowed)


class PciDevice(_Record):
    bus_id: str  # normalized "dddd:bb:dd.f"
    class_id: int  # e.g. 0x0302 3D controller, 0x0207 InfiniBand
    vendor_id: int
    device_id: int
    name: str  # vendor/device names when a source has them
    numa_node: int  # -1: the source did not say (sysfs numa_node=-1)
    cpuset: CpuSet  # local CPUs
    # Upstream bridges from the root: ("pci0000:00", "0000:00:01.0", ...).
    # The first entry names the host bridge (root complex).
    pci_path: tuple[str, ...]
    link_gen: int  # current PCIe generation, 0 unknown
    link_width: int  # current lanes, 0 unknown
    link_speed: float  # GB/s one direction per hwloc, 0 unknown

    def __init__(self, bus_id: str, class_id: int, vendor_id: int = 0, device_id: int = 0, name: str = "",
                 numa_node: int = -1, cpuset: CpuSet = _NEW, pci_path: tuple[str, ...] = (), link_gen: int = 0,
                 link_width: int = 0, link_speed: float = 0.0) -> None:
        self.__dict__.update(bus_id=bus_id, class_id=class_id, vendor_id=vendor_id, device_id=device_id, name=name,
                             numa_node=numa_node, cpuset=CpuSet() if cpuset is _NEW else cpuset, pci_path=pci_path,
                             link_gen=link_gen, link_width=link_width, link_speed=link_speed)


class GPU(_Record):
    index: int  # physical index: PCI bus order among GPUs of the node
    vendor: str  # "NVIDIA", "AMD", "Intel"
    model: str
    memory: int  # bytes
    pci_bus_id: str
    uuid: str
    numa_node: int
    cpuset: CpuSet
    pcie_gen: int
    pcie_width: int
    os_names: tuple[str, ...]  # cuda0, nvml0, card1, rsmi0, opencl0d0...
    visible: bool  # False when CUDA/ROCR_VISIBLE_DEVICES hides it

    def __init__(self, index: int, vendor: str, model: str = "", memory: int = 0, pci_bus_id: str = "",
                 uuid: str = "", numa_node: int = -1, cpuset: CpuSet = _NEW, pcie_gen: int = 0, pcie_width: int = 0,
                 os_names: tuple[str, ...] = (), visible: bool = True) -> None:
        self.__dict__.update(index=index, vendor=vendor, model=model, memory=memory, pci_bus_id=pci_bus_id,
                             uuid=uuid, numa_node=numa_node, cpuset=CpuSet() if cpuset is _NEW else cpuset,
                             pcie_gen=pcie_gen, pcie_width=pcie_width, os_names=os_names, visible=visible)

    @property
    def key(self) -> str:
        return f"GPU{self.index}"


class Port(_Record):
    number: int
    state: str  # "ACTIVE", "DOWN", "up", "down"...
    link_layer: str  # "InfiniBand", "Ethernet"
    rate_gbps: float  # Gb/s as the device reports it

    def __init__(self, number: int, state: str = "", link_layer: str = "", rate_gbps: float = 0.0) -> None:
        self.__dict__.update(number=number, state=state, link_layer=link_layer, rate_gbps=rate_gbps)


class NIC(_Record):
    name: str  # "mlx5_0", "cxi0", "hfi1_0", or netdev "eth0" if no RDMA device
    kind: str  # "InfiniBand" | "Ethernet" | "Slingshot" | "OmniPath" | "unknown"
    pci_bus_id: str
    numa_node: int
    cpuset: CpuSet
    ports: tuple[Port, ...]
    netdevs: tuple[str, ...]  # ib0, hsn0, eth0

    def __init__(self, name: str, kind: str, pci_bus_id: str = "", numa_node: int = -1, cpuset: CpuSet = _NEW,
                 ports: tuple[Port, ...] = (), netdevs: tuple[str, ...] = ()) -> None:
        self.__dict__.update(name=name, kind=kind, pci_bus_id=pci_bus_id, numa_node=numa_node,
                             cpuset=CpuSet() if cpuset is _NEW else cpuset, ports=ports, netdevs=netdevs)

    @property
    def key(self) -> str:
        return self.name


class Link(_Record):
    """A direct device link (NVLink, xGMI): `a` and `b` are device keys.

    `b` may be "NVSwitch" (any switch, hidden ones included) or "CPU" (POWER9
    NVLink to the host). Bandwidth is per direction, GB/s, all links summed.
    """

    a: str
    b: str
    kind: str
    count: int
    bandwidth: float
    version: int

    def __init__(self, a: str, b: str, kind: str = "NVLink", count: int = 1, bandwidth: float = 0.0,
                 version: int = 0) -> None:
        self.__dict__.update(a=a, b=b, kind=kind, count=count, bandwidth=bandwidth, version=version)


class Topology(_Record):
    machine: Machine
    packages: tuple[Package, ...]
    numa_nodes: tuple[NumaNode, ...]
    # SLIT distances, rows/columns in the order of numa_nodes; () unknown
    distances: tuple[tuple[int, ...], ...]
    groups: tuple[Group, ...]
    caches: tuple[Cache, ...]
    cores: tuple[Core, ...]
    pus: tuple[PU, ...]
    pci_devices: tuple[PciDevice, ...]
    gpus: tuple[GPU, ...]
    nics: tuple[NIC, ...]
    links: tuple[Link, ...]
    allowed_mems: CpuSet
    source: str  # "sysfs:/", "hwloc-xml:file.xml", "+nvml"...
    notes: tuple[str, ...]  # what a source had to guess or repair

    def __init__(self, machine: Machine = _NEW, packages: tuple[Package, ...] = (),
                 numa_nodes: tuple[NumaNode, ...] = (), distances: tuple[tuple[int, ...], ...] = (),
                 groups: tuple[Group, ...] = (), caches: tuple[Cache, ...] = (), cores: tuple[Core, ...] = (),
                 pus: tuple[PU, ...] = (), pci_devices: tuple[PciDevice, ...] = (), gpus: tuple[GPU, ...] = (),
                 nics: tuple[NIC, ...] = (), links: tuple[Link, ...] = (), allowed_mems: CpuSet = _NEW,
                 source: str = "", notes: tuple[str, ...] = ()) -> None:
        self.__dict__.update(machine=Machine() if machine is _NEW else machine, packages=packages,
                             numa_nodes=numa_nodes, distances=distances, groups=groups, caches=caches, cores=cores,
                             pus=pus, pci_devices=pci_devices, gpus=gpus, nics=nics, links=links,
                             allowed_mems=CpuSet() if allowed_mems is _NEW else allowed_mems, source=source,
                             notes=notes)

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

    def caches_at(self, level: int, kinds: tuple[str, ...] = ("unified", "data")) -> tuple[Cache, ...]:
        return tuple(c for c in self.caches if c.level == level and c.kind in kinds)

    def last_level_caches(self) -> tuple[Cache, ...]:
        levels = [c.level for c in self.caches if c.kind != "instruction"]
        return self.caches_at(max(levels)) if levels else ()

    # --- serialization ------------------------------------------------------
    def to_dict(self) -> dict[str, object]:
        d = _encode(self)
        d["schema"] = SCHEMA
        return d

    def to_json(self, indent: int | None = 1) -> str:
        import json

        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> "Topology":
        schema = d.get("schema")
        if schema != SCHEMA:
            raise ValueError(f"not a nodemap topology (schema {schema!r}, expected {SCHEMA!r})")
        return _decode(cls, {k: v for k, v in d.items() if k != "schema"})

    @classmethod
    def from_json(cls, text: str) -> "Topology":
        import json

        return cls.from_dict(json.loads(text))


# --- generic record <-> JSON -------------------------------------------------------


def _encode(obj: object) -> object:
    if isinstance(obj, CpuSet):
        return obj.format()
    if isinstance(obj, _Record):
        d = obj.__dict__
        return {n: _encode(d[n]) for n in obj._fields}
    if isinstance(obj, (tuple, list)):
        return [_encode(x) for x in obj]
    if hasattr(type(obj), "__dataclass_fields__"):  # a dataclass of another module
        import dataclasses

        return {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return obj


_HINTS: dict[type, dict[str, object]] = {}


def _hints(tp: type) -> dict[str, object]:
    """The field types of a record: its annotations evaluated here, as
    typing.get_type_hints does ("tuple[Port, ...]" -> tuple[Port, ...])."""
    hints = _HINTS.get(tp)
    if hints is None:
        hints = _HINTS[tp] = {k: eval(v, globals()) if isinstance(v, str) else v  # noqa: S307 (own annotations)
                              for k, v in tp.__annotations__.items()}
    return hints


def _decode(tp: object, value: object) -> object:
    """`value` read from JSON as type `tp`; a value of another type is a
    ValueError naming the field, not a surprise in the renderer."""
    if tp is CpuSet:
        _expect(isinstance(value, str), "a CPU list such as '0-3'", value)
        return CpuSet.parse(value)
    if getattr(tp, "__origin__", None) is tuple:
        _expect(isinstance(value, list), "a list", value)
        args = tp.__args__
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], x) for x in value)
        return tuple(_decode(a, x) for a, x in zip(args, value))
    if isinstance(tp, type) and issubclass(tp, _Record):
        _expect(isinstance(value, dict), f"a {tp.__name__} object", value)
        hints = _hints(tp)
        unknown = set(value) - set(tp._fields)
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)[:5]} in {tp.__name__}")
        out = {}
        for k, v in value.items():
            try:
                out[k] = _decode(hints[k], v)
            except (ValueError, TypeError) as e:
                raise ValueError(f"{tp.__name__}.{k}: {e}") from None
        return tp(**out)
    if tp is float:
        _expect(isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
                and abs(value) != float("inf"), "a finite number", value)
        return float(value)
    if tp is int:
        _expect(isinstance(value, int) and not isinstance(value, bool), "an integer", value)
    elif tp in (str, bool):
        _expect(isinstance(value, tp), "a string" if tp is str else "true or false", value)
    return value


def _expect(ok: bool, what: str, value: object) -> None:
    if not ok:
        text = repr(value)
        raise ValueError(f"expected {what}, found {type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}")
