"""Text views of a Topology: a compact tree (like `lstopo --of console`)
and the GPU/NIC path matrix (like `nvidia-smi topo -m`).

The tree condenses cores and PUs into ranges so that a 256-PU node fits a
screen: "L3 L#0 (32 MiB): Cores 0-7 (PUs 0-7,128-135)". Core numbers are
logical (L#, machine-wide in PU order, as lstopo numbers them); PU numbers
are OS indexes (P#), the numbers taskset and numactl take.
"""

from __future__ import annotations

from ..text import table
from ..units import format_size_short
from .cpuset import CpuSet
from .model import GPU, NIC, Cache, NumaNode, Package, Topology
from .paths import C2C_LEGEND, LEGEND, XGMI_LEGEND, cpu_affinity, device_keys, device_numa, path

__all__ = ["tree", "matrix", "logical_cores", "cores_in_order", "logical_pus"]

_IND = "  "


# --- tree ------------------------------------------------------------------


def tree(topo: Topology) -> str:
    lines = [_machine_line(topo)]
    ctx = _Ctx(topo)
    placed = ctx.placed
    packages = sorted(topo.packages or (Package(-1, topo.cpuset),), key=_first_pu)
    # CPUs of no package (a package left out because its CPUs disagree on
    # their siblings) still hold NUMA nodes and cores: hwloc hangs them off
    # the machine, and so does the tree, after the packages
    homeless = topo.cpuset - CpuSet.union_all(p.cpuset for p in packages)
    if homeless:
        packages.append(Package(-1, homeless))
    lid = {id(p): i for i, p in enumerate(packages)}
    done: set[int] = set()
    # A NUMA node spanning several packages (POWER7, old x86 with one node
    # per board) is printed once, holding its packages, as lstopo does.
    for node in _spanning_nodes(topo, packages):
        inside = [p for p in packages if p.cpuset and p.cpuset.issubset(node.cpuset) and id(p) not in done]
        lines.append(f"{_IND}{_numa_line(node)}")
        for p in inside:
            lines += _package(ctx, p, lid[id(p)], _IND * 2, in_node=True)
            done.add(id(p))
        lines += [f"{_IND * 2}{d}" for d in placed.pop(node.os_index, [])]
    for p in packages:
        if id(p) not in done:
            lines += _package(ctx, p, lid[id(p)], _IND)
    gpu_buses = {g.pci_bus_id for g in topo.gpus if g.pci_bus_id}
    for node in topo.numa_nodes:
        if node.is_gpu_memory and node.pci_bus_id in gpu_buses:
            continue  # shown under its GPU
        if not node.cpuset:
            lines.append(f"{_IND}{_numa_line(node)} memory only")
            lines += [f"{_IND * 2}{d}" for d in placed.pop(node.os_index, [])]
    leftovers = [d for ds in placed.values() for d in ds]
    if leftovers:
        lines.append(f"{_IND}Devices of unknown locality")
        lines += [f"{_IND * 2}{d}" for d in leftovers]
    lines += _restrictions(topo)
    if topo.notes:
        lines.append("Notes:")
        lines += [f"{_IND}- {n}" for n in topo.notes]
    return "\n".join(lines) + "\n"


def _first_pu(obj) -> tuple[int, int]:
    """lstopo's order: by first PU; objects without PUs (kept by a restricted
    hwloc export for their memory) last, by OS index."""
    return (obj.cpuset.first(), obj.os_index) if obj.cpuset else (1 << 30, obj.os_index)


def _spanning_nodes(topo: Topology, packages) -> list[NumaNode]:
    """NUMA nodes with CPUs of more than one package."""
    # isdisjoint builds no set per pair (576 pairs on a 24-package node)
    return [n for n in topo.numa_nodes
            if n.cpuset and sum(1 for p in packages if not p.cpuset.isdisjoint(n.cpuset)) > 1]


def _machine_line(topo: Topology) -> str:
    m = topo.machine
    memory = m.memory or sum(n.memory for n in topo.host_numa_nodes)
    bits = [m.hostname, m.arch, f"{format_size_short(memory)} total" if memory else ""]
    src = f"  [source: {topo.source}]" if topo.source else ""
    return f"Machine ({', '.join(b for b in bits if b) or 'unknown'}){src}"


class _Ctx:
    """Machine-wide logical numbering (L#) and device placement for one tree."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.online = topo.cpuset if topo.pus else None  # computed per call by the model
        self.allowed = topo.allowed_cpus if topo.pus else None
        self.llc = [c for c in topo.last_level_caches() if self.online is None or c.cpuset & self.online]
        order = _tree_order(topo)
        self.core_lid = _logical(topo.cores, order)
        self.cache_lid = _logical(self.llc, order)
        self.placed = _devices_by_numa(topo)
        # PU -> the cores holding it, so a line finds its cores from its own
        # PUs (scanning every core per line was quadratic on 256-PU nodes)
        self.cores_of: dict[int, list] = {}
        for c in topo.cores:
            for pu in c.cpuset:
                self.cores_of.setdefault(pu, []).append(c)


def _tree_order(topo: Topology):
    """Sort key giving lstopo's logical order: depth-first through packages,
    NUMA nodes, groups and caches (each level's objects by first PU), so
    cores of package 0 come before those of package 1 even where the OS
    interleaves PU numbers across packages."""
    levels = [topo.packages, [n for n in topo.numa_nodes if n.cpuset], *_group_levels(topo), *_cache_levels(topo)]
    # outer levels first: a Book holds packages, a Die sits inside one
    levels = sorted((lv for lv in levels if lv), key=lambda lv: -sum(len(o.cpuset) for o in lv) / len(lv))
    maps = []
    for objs in levels:
        first: dict[int, tuple[int, CpuSet]] = {}
        for o in objs:
            if o.cpuset:
                f = o.cpuset.first()
                for pu in o.cpuset:
                    first.setdefault(pu, (f, o.cpuset))
        maps.append(first)

    def key(obj) -> tuple[int, ...]:
        if not obj.cpuset:
            return (1 << 30,)
        f = obj.cpuset.first()
        out = []
        for m in maps:
            hit = m.get(f)
            # no container at this level: the object is one of that level's siblings
            out.append(hit[0] if hit is not None and obj.cpuset.issubset(hit[1]) else f)
        return (*out, f)

    return key


def logical_pus(topo: Topology) -> dict[int, int]:
    """OS index -> hwloc's logical index (L#) of every allowed online PU:
    cores in lstopo's order, each core's PUs by OS index, as hwloc numbers
    them in a topology restricted to the allowed CPUs (its default view;
    Open MPI's rankfiles take these numbers)."""
    allowed = topo.allowed_cpus
    pus = [pu for c in cores_in_order(topo) for pu in c.cpuset & allowed]
    pus += sorted(set(allowed) - set(pus))  # PUs of no core (sources without cores)
    return {pu: i for i, pu in enumerate(pus)}


def _group_levels(topo: Topology) -> list[list]:
    kinds: dict[str, list] = {}
    for g in topo.groups:
        kinds.setdefault(g.kind, []).append(g)
    return sorted(kinds.values(), key=lambda gs: -max(len(g.cpuset) for g in gs))


def _cache_levels(topo: Topology) -> list[list]:
    levels: dict[int, list] = {}
    for c in topo.caches:
        if c.kind != "instruction":
            levels.setdefault(c.level, []).append(c)
    return [levels[k] for k in sorted(levels, reverse=True)]


def logical_cores(topo: Topology) -> dict[int, int]:
    """Each core's first PU -> its logical index (Core L#, as lstopo -l and
    Slurm's gres.conf Cores= number them)."""
    return _logical(topo.cores, _tree_order(topo))


def cores_in_order(topo: Topology) -> list:
    """The cores in logical order (Core L#0 first; logical_cores numbers them)."""
    lid = logical_cores(topo)
    return sorted((c for c in topo.cores if c.cpuset), key=lambda c: lid[c.cpuset.first()])


def _logical(objs, order) -> dict[int, int]:
    """First PU -> logical index (L#), objects numbered in lstopo's order."""
    return {o.cpuset.first(): i for i, o in enumerate(sorted((o for o in objs if o.cpuset), key=order))}


def _package(ctx: _Ctx, pkg: Package, lid: int, ind: str, in_node: bool = False) -> list[str]:
    topo, placed = ctx.topo, ctx.placed
    out: list[str] = []
    if pkg.os_index >= 0:
        out.append(f"{ind}Package L#{lid} P#{pkg.os_index}" + (f" {pkg.cpu_model}" if pkg.cpu_model else ""))
        ind += _IND
    nodes = [] if in_node else [n for n in topo.numa_nodes if n.cpuset and n.cpuset.issubset(pkg.cpuset)]
    l3 = [c for c in ctx.llc if c.cpuset.issubset(pkg.cpuset)]
    for c in l3:
        if nodes and not any(c.cpuset.issubset(n.cpuset) for n in nodes):
            out.append(f"{ind}{_cache_name(c)} across NUMA {topo.numa_of(c.cpuset)}")
    rest = pkg.cpuset - CpuSet.union_all(n.cpuset for n in nodes)
    if rest:  # all of it without NUMA nodes inside, else CPUs in none of them
        out += _cpu_lines(ctx, rest, [c for c in l3 if c.cpuset.issubset(rest)], ind)
    for node in nodes:
        out.append(f"{ind}{_numa_line(node)}")
        inner = [c for c in l3 if c.cpuset.issubset(node.cpuset)]
        out += _cpu_lines(ctx, node.cpuset & pkg.cpuset, inner, ind + _IND)
        out += [f"{ind}{_IND}{d}" for d in placed.pop(node.os_index, [])]
    return out


def _cpu_lines(ctx: _Ctx, cpus: CpuSet, caches: list[Cache], ind: str) -> list[str]:
    if not caches:
        return [f"{ind}{_cores(ctx, cpus)}"]
    rest = cpus - CpuSet.union_all(c.cpuset for c in caches)
    lines = [f"{ind}{_cache_name(c, ctx.cache_lid[c.cpuset.first()])}: {_cores(ctx, c.cpuset)}"
             for c in sorted(caches, key=lambda c: ctx.cache_lid[c.cpuset.first()])]
    if rest:
        lines.append(f"{ind}{_cores(ctx, rest)}")
    return lines


def _cache_name(c: Cache, lid: int | None = None) -> str:
    tag = f" L#{lid}" if lid is not None else ""
    return f"L{c.level}{tag} ({format_size_short(c.size)})"


def _cores(ctx: _Ctx, cpus: CpuSet) -> str:
    pus = cpus & ctx.online if ctx.online is not None else cpus
    # PUs outside the allowed set (a cgroup, a Slurm step) are named apart:
    # counted with the usable ones they would overstate what a task can get
    barred = pus - ctx.allowed if ctx.allowed is not None else CpuSet()
    tail = f"not allowed: PUs {barred}" if barred else ""
    pus -= barred
    if not pus and tail:
        return tail
    near = {id(c): c for pu in pus for c in ctx.cores_of.get(pu, ())}
    cores = [c for c in near.values() if c.cpuset.issubset(cpus)]
    if not cores:
        return f"PUs {pus or 'none'}" + (f", {tail}" if tail else "")
    ids = CpuSet(ctx.core_lid[c.cpuset.first()] for c in cores)
    return f"Cores {ids} ({len(cores)}, PUs {pus})" + (f", {tail}" if tail else "")


def _numa_line(node: NumaNode) -> str:
    kind = f"{node.kind}, " if node.kind else ""
    return f"NUMANode P#{node.os_index} ({kind}{format_size_short(node.memory)})"


def _devices_by_numa(topo: Topology) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for g in sorted(topo.gpus, key=lambda g: g.index):
        out.setdefault(device_numa(topo, g.key), []).append(_gpu_line(g, topo.gpu_memory_nodes(g)))
    for n in topo.nics:
        out.setdefault(device_numa(topo, n.key), []).append(_nic_line(n))
    return out


def _gpu_line(g: GPU, memory_nodes: tuple[NumaNode, ...] = ()) -> str:
    model = g.model if g.model.startswith(g.vendor) else f"{g.vendor} {g.model}"
    bits = [f"{g.key} {model}".strip()]
    if g.memory:
        bits.append(format_size_short(g.memory))
    if g.pci_bus_id:
        bits.append(g.pci_bus_id)
    if g.pcie_gen or g.pcie_width:
        bits.append(f"PCIe gen{g.pcie_gen or '?'} x{g.pcie_width or '?'}")
    bits += [f"memory {_numa_line(n)}" for n in memory_nodes]
    text = ", ".join(bits)
    hider = "ROCR/HIP_VISIBLE_DEVICES" if g.vendor == "AMD" else "CUDA_VISIBLE_DEVICES"
    return text if g.visible else f"{text} [hidden by {hider}]"


def _nic_line(n: NIC) -> str:
    bits = [f"NIC {n.name} ({n.kind})"]
    if n.pci_bus_id:
        bits.append(n.pci_bus_id)
    for p in n.ports:
        rate = f" {p.rate_gbps:g} Gb/s" if p.rate_gbps else ""
        bits.append(f"port {p.number} {p.state or '?'}{rate}".rstrip())
    if n.netdevs:
        bits.append("netdev " + " ".join(n.netdevs))
    return ", ".join(bits)


def _restrictions(topo: Topology) -> list[str]:
    out = []
    offline = CpuSet(p.os_index for p in topo.pus if not p.online)
    if offline:
        out.append(f"Offline PUs: {offline}")
    if topo.pus and topo.allowed_cpus != topo.cpuset:
        out.append(f"Allowed PUs: {topo.allowed_cpus or 'none'} (of {topo.cpuset})")
    if topo.allowed_mems and topo.allowed_mems != topo.nodeset:
        out.append(f"Allowed NUMA nodes: {topo.allowed_mems} (of {topo.nodeset})")
    return out


# --- matrix ----------------------------------------------------------------


def _gpu_numa_ids(topo: Topology, key: str) -> CpuSet:
    """nvidia-smi's "GPU NUMA ID": the NUMA node(s) holding the GPU's memory."""
    gpu = next(g for g in topo.gpus if g.key == key)
    return CpuSet(n.os_index for n in topo.gpu_memory_nodes(gpu))


def matrix(topo: Topology) -> str:
    """`nvidia-smi topo -m` layout, space-aligned instead of tab-separated."""
    keys = device_keys(topo)
    if not keys:
        return "No GPUs or NICs found.\n"
    nic_alias = {n.key: f"NIC{i}" for i, n in enumerate(topo.nics)}
    names = [nic_alias.get(k, k) for k in keys]
    header = ["", *names, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    rows = [header]
    for k, name in zip(keys, names):
        cells = [(" X " if a == k else path(topo, k, a).label) for a in keys]
        cpus = cpu_affinity(topo, k)
        node = device_numa(topo, k)
        gpu_numa = "" if k in nic_alias else str(_gpu_numa_ids(topo, k)) or "N/A"
        rows.append([name, *cells, str(cpus) if cpus else "N/A", str(node) if node >= 0 else "N/A", gpu_numa])
    text = table(header, rows[1:], right=False, rule=False).split("\n")
    text += ["", "Legend:", ""]
    cells = {c.rstrip("0123456789") for r in rows[1:] for c in r[1:-3]}
    legend = LEGEND + tuple(extra for extra, sym in ((XGMI_LEGEND, "XGMI"), (C2C_LEGEND, "C2C")) if sym in cells)
    text += [f"  {sym:<4} = {meaning}" for sym, meaning in legend]
    if nic_alias:
        text += ["", "NIC Legend:", ""]
        text += [f"  {alias}: {key}" for key, alias in nic_alias.items()]
    notes = sorted({path(topo, a, b).note for a in keys for b in keys} - {""})
    if notes:
        text += ["", "Notes:"] + [f"  - {n}" for n in notes]
    return "\n".join(text) + "\n"
