"""Synthetic nodes for planner tests, built from published facts
(../shared/CONTEXT.md): Perlmutter-, Karolina-, CORAL-EA-like nodes, a
2-socket 4-NIC node, and random realistic nodes for hypothesis.

`build()` lays out packages > NUMA nodes > L3 groups > cores > PUs and puts
each GPU/NIC behind a PCIe switch (one switch per `switch` name) under its
NUMA node's host bridge, so path classes (PIX, PHB, NODE, SYS) come out as
on the real machines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import (
    GPU, NIC, PU, Cache, Core, Machine, NumaNode, Package, PciDevice, Port, Topology,
)


@dataclass
class Dev:
    numa: int  # NUMA os index (-1: the source did not say)
    switch: str = ""  # devices with the same switch name share a PCIe switch
    name: str = ""  # NIC name
    kind: str = "InfiniBand"


@dataclass
class Spec:
    packages: int = 1
    numa_per_package: int = 1
    l3_per_numa: int = 1
    cores_per_l3: int = 4
    smt: int = 1
    packed: bool = False  # POWER numbering (core c = PUs c*smt..); else x86 (siblings +ncores)
    l2_per_core: bool = True
    gpus: list[Dev] = field(default_factory=list)  # in PCI bus order = index order
    nics: list[Dev] = field(default_factory=list)
    offline: frozenset[int] = frozenset()
    disallowed: frozenset[int] = frozenset()
    hostname: str = "node"


def _pu(spec: Spec, core: int, thread: int, ncores: int) -> int:
    return core * spec.smt + thread if spec.packed else core + thread * ncores


def build(spec: Spec) -> Topology:
    nnuma = spec.packages * spec.numa_per_package
    cores_per_numa = spec.l3_per_numa * spec.cores_per_l3
    ncores = nnuma * cores_per_numa

    def pus_of(cores: range) -> CpuSet:
        return CpuSet(_pu(spec, c, t, ncores) for c in cores for t in range(spec.smt))

    packages, numas, caches, cores = [], [], [], []
    for p in range(spec.packages):
        per = spec.numa_per_package * cores_per_numa
        packages.append(Package(p, pus_of(range(p * per, (p + 1) * per)), "Synthetic CPU"))
    for n in range(nnuma):
        numas.append(NumaNode(n, pus_of(range(n * cores_per_numa, (n + 1) * cores_per_numa)), 64 << 30))
        for l in range(spec.l3_per_numa):
            first = n * cores_per_numa + l * spec.cores_per_l3
            caches.append(Cache(3, "unified", 32 << 20, pus_of(range(first, first + spec.cores_per_l3))))
    for c in range(ncores):
        pkg = c // (spec.numa_per_package * cores_per_numa)
        cores.append(Core(c, pkg, pus_of(range(c, c + 1))))
        if spec.l2_per_core:
            caches.append(Cache(2, "unified", 1 << 20, pus_of(range(c, c + 1))))
    pus = tuple(PU(i, online=i not in spec.offline, allowed=i not in spec.disallowed)
                for i in range(ncores * spec.smt))
    distances = tuple(tuple(10 if i == j else 12 if i // spec.numa_per_package == j // spec.numa_per_package
                            else 32 for j in range(nnuma)) for i in range(nnuma))
    pci, gpus, nics = _devices(spec, numas)
    return Topology(
        machine=Machine(hostname=spec.hostname, arch="x86_64"),
        packages=tuple(packages), numa_nodes=tuple(numas), distances=distances,
        caches=tuple(caches), cores=tuple(cores), pus=pus, pci_devices=tuple(pci),
        gpus=tuple(gpus), nics=tuple(nics), allowed_mems=CpuSet(range(nnuma)), source="tests/nodes.py")


def _devices(spec: Spec, numas: list[NumaNode]):
    pci, gpus, nics = [], [], []
    switches: dict[str, int] = {}

    def place(d: Dev, bus: int) -> PciDevice:
        hb = max(d.numa, 0)
        sw = switches.setdefault(d.switch or f"own{bus}", len(switches) + 1)
        path = (f"pci0000:{hb:02x}", f"{hb:04x}:00:01.{sw % 8}", f"{hb:04x}:{sw:02x}:00.0",
                f"{hb:04x}:{sw + 1:02x}:{bus % 32:02x}.0")
        cpus = numas[d.numa].cpuset if d.numa >= 0 else CpuSet()
        bus_id = f"{bus // 200:04x}:{bus % 200 + 16:02x}:00.0"
        return PciDevice(bus_id, 0x0302, 0x10DE, numa_node=d.numa, cpuset=cpus, pci_path=path)

    for i, d in enumerate(spec.gpus):
        dev = place(d, i)
        pci.append(dev)
        gpus.append(GPU(i, "NVIDIA", "A100-SXM4-40GB", 40 << 30, dev.bus_id, f"GPU-{i:08d}",
                        d.numa, dev.cpuset))
    for j, d in enumerate(spec.nics):
        dev = place(d, len(spec.gpus) + j)
        pci.append(PciDevice(dev.bus_id, 0x0207, 0x15B3, numa_node=d.numa, cpuset=dev.cpuset, pci_path=dev.pci_path))
        nics.append(NIC(d.name or f"mlx5_{j}", d.kind, dev.bus_id, d.numa, dev.cpuset,
                        (Port(1, "ACTIVE", d.kind, 200.0),)))
    return pci, gpus, nics


# --- nodes of the field ---------------------------------------------------------------


def perlmutter() -> Topology:
    """1x EPYC 7763 (NPS4: 4 NUMA x 16 cores, CCDs of 8), SMT2, 4 A100 with
    GPU k nearest NUMA 3-k, 4 Slingshot NICs: NIC k beside GPU k."""
    gpus = [Dev(3 - k, switch=f"s{k}") for k in range(4)]
    nics = [Dev(3 - k, switch=f"s{k}", name=f"cxi{k}", kind="Slingshot") for k in range(4)]
    return build(Spec(1, 4, 2, 8, smt=2, gpus=gpus, nics=nics, hostname="perlmutter-like"))


KAROLINA_GPU_NUMA = (3, 3, 1, 1, 7, 7, 5, 5)
KAROLINA_NIC_GPUS = {"mlx5_0": (2, 3), "mlx5_1": (0, 1), "mlx5_2": (6, 7), "mlx5_3": (4, 5)}


def karolina() -> Topology:
    """2x EPYC 7763 (8 NUMA x 16 cores, CCDs of 8), SMT2, 8 A100, 4 HDR NICs
    each on the PCIe switch of a GPU pair."""
    gpus = [Dev(n, switch=f"sw{i // 2}") for i, n in enumerate(KAROLINA_GPU_NUMA)]
    nics = [Dev(KAROLINA_GPU_NUMA[g[0]], switch=f"sw{g[0] // 2}", name=name)
            for name, g in KAROLINA_NIC_GPUS.items()]
    return build(Spec(2, 4, 2, 8, smt=2, gpus=gpus, nics=nics, hostname="karolina-like"))


def coral_ea() -> Topology:
    """2x POWER8+ (10 cores, SMT8: 160 PUs), 4 P100 (2 per socket), 1 NIC per socket."""
    gpus = [Dev(k // 2, switch=f"g{k}") for k in range(4)]
    nics = [Dev(s, name=f"mlx5_{s}") for s in range(2)]
    return build(Spec(2, 1, 10, 1, smt=8, packed=True, gpus=gpus, nics=nics, hostname="coral-ea-like"))


def leonardo() -> Topology:
    """Leonardo Booster-like: 1x Xeon (32 cores, one NUMA node), 4 A100, 4 HDR
    NICs, NIC k on the PCIe switch of GPU k (all equally far from the CPU)."""
    gpus = [Dev(0, switch=f"s{k}") for k in range(4)]
    nics = [Dev(0, switch=f"s{k}", name=f"mlx5_{k}") for k in range(4)]
    return build(Spec(1, 1, 1, 32, gpus=gpus, nics=nics, hostname="leonardo-like"))


def two_socket_four_nics() -> Topology:
    """2 sockets x 16 cores SMT2, no GPU, mlx5_0/1 on socket 0, mlx5_2/3 on socket 1."""
    nics = [Dev(k // 2, name=f"mlx5_{k}") for k in range(4)]
    return build(Spec(2, 1, 2, 8, smt=2, nics=nics, hostname="2s4nic"))


def bench_node() -> Topology:
    """The speed benchmark's node: 2 sockets, 256 PUs, 8 GPUs, 4 NICs."""
    return karolina()


def huge_node() -> Topology:
    """16,384 PUs: 16 packages x 4 NUMA x 4 L3 x 32 cores x SMT2, 64 GPUs, 16 NICs."""
    gpus = [Dev(n, switch=f"s{n}") for n in range(64)]
    nics = [Dev(4 * p, switch=f"s{4 * p}", name=f"mlx5_{p}") for p in range(16)]
    return build(Spec(16, 4, 4, 32, smt=2, gpus=gpus, nics=nics, hostname="huge"))


# --- random realistic nodes (hypothesis) -------------------------------------------------


def random_spec(draw, st) -> Spec:
    """Draw a Spec with hypothesis: `draw` and `st` from a @st.composite."""
    packages = draw(st.integers(1, 3))
    npp = draw(st.integers(1, 4))
    l3 = draw(st.integers(1, 3))
    cpl3 = draw(st.integers(1, 6))
    smt = draw(st.sampled_from([1, 1, 2, 4]))
    nnuma = packages * npp
    npus = nnuma * l3 * cpl3 * smt
    gpus = []
    for n in range(nnuma):
        for k in range(draw(st.integers(0, 2))):
            numa = -1 if draw(st.integers(0, 9)) == 0 else n
            gpus.append(Dev(numa, switch=f"g{n}.{k // 2}"))
    nics = [Dev(draw(st.integers(0, nnuma - 1)), switch=draw(st.sampled_from(["", "g0.0", "g1.0"])),
                name=f"mlx5_{j}") for j in range(draw(st.integers(0, 4)))]
    hidden = draw(st.sets(st.integers(0, npus - 1), max_size=npus // 3))
    offline = frozenset(p for p in hidden if p % 3 == 0 and p != 0)
    disallowed = frozenset(hidden) - offline
    if len(offline | disallowed) >= npus:
        offline, disallowed = frozenset(), frozenset()
    return Spec(packages, npp, l3, cpl3, smt, packed=draw(st.booleans()), gpus=gpus, nics=nics,
                offline=offline, disallowed=disallowed)


def with_links(topo: Topology, links: dict[str, tuple[int, int, int, int]]) -> Topology:
    """`topo` with PCIe links set on its PCI devices: bus id -> (gen, width,
    max gen, max width), as the sysfs reader fills them in."""
    from nodemap.topology.model import replace

    return replace(topo, pci_devices=tuple(
        replace(d, link_gen=links[d.bus_id][0], link_width=links[d.bus_id][1], link_max_gen=links[d.bus_id][2],
                link_max_width=links[d.bus_id][3]) if d.bus_id in links else d for d in topo.pci_devices))
