"""The facts of a node's topology that every healthy node of a fleet shares.

A fact is a (name, value) pair whose name does not depend on the node
("GPU3 PCIe" -> "Gen5 x16", "NVLink GPU5-GPU6" -> 12, "NIC mlx5_0 NUMA" -> 1).
The fleet takes, per node class, the value most nodes have; a node that
differs (a GPU missing, an NVLink down or narrower, a NIC on another NUMA
node, a PCIe link trained narrower) is a finding on its own, whatever its
measured figures say. Works on the fleet's typed view of a topology
(fleet/nodefile.py), decoded straight from the bytes: 10,000 saved node
documents skip the parts no fact needs.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .nodefile import NO_PUS, TopologyView, pus_of

Facts = dict[str, int | str]  # fact name -> its value (a count, a size in bytes, a model, a link's width)

# How bad a difference in a fact is: a missing or degraded part is hardware
# to repair (fail: memory too, a DIMM lost); anything else differs from the fleet (warn).
FAIL_PREFIXES = ("GPU", "NVLink", "NIC", "memory")
# Sizes the kernel reports a little differently on identical nodes (its own
# reservations, firmware): the same within this fraction of the fleet's median.
SIZE_TOLERANCE = 0.05


def facts(topo: TopologyView | None) -> Facts:
    """Node-independent facts of one topology (as the fleet reads it); {} when unknown."""
    online, pus = pus_of(topo) if topo is not None else (0, 0)
    if topo is None or (not pus and msgspec.structs.replace(topo, pus=NO_PUS) == TopologyView()):
        return {}  # none, or an empty object: unknown
    out: Facts = {"NUMA nodes": len(topo.numa_nodes), "CPUs online": online}
    if topo.machine is not None and topo.machine.memory:
        out["memory"] = topo.machine.memory
    for numa in topo.numa_nodes:
        if numa.memory:
            out[f"memory NUMA{numa.os_index}"] = numa.memory
    out["GPUs"] = len(topo.gpus)
    for g in topo.gpus:
        name = f"GPU{g.index}"
        out[name] = g.model or "GPU"
        if g.pcie_width:
            out[f"{name} PCIe"] = pcie(g.pcie_gen, g.pcie_width)
        if g.numa_node >= 0:
            out[f"{name} NUMA"] = g.numa_node
    for link in topo.links:
        a, b = sorted((link.a, link.b))
        out[f"{link.kind} {a}-{b}"] = link.count
    pci = {d.bus_id: d for d in topo.pci_devices}
    for nic in topo.nics:
        name = f"NIC {nic.name}"
        out[name] = nic.kind
        if nic.numa_node >= 0:
            out[f"{name} NUMA"] = nic.numa_node
        dev = pci.get(nic.pci_bus_id)
        if dev and dev.link_width:
            out[f"{name} PCIe"] = pcie(dev.link_gen, dev.link_width)
        for port in nic.ports:
            out[f"{name} port {port.number}"] = f"{port.state} {port.rate_gbps:g} Gb/s"
    return out


def pcie(gen: int, width: int) -> str:
    return f"Gen{gen} x{width}" if gen else f"x{width}"


def node_class(topo: TopologyView | None) -> str:
    """What a node is compared with: its GPU model, else its CPU model."""
    if topo is None:
        return "unknown"
    models = [g.model for g in topo.gpus if g.model]
    if models:
        return max(set(models), key=models.count)
    cpus = [p.cpu_model for p in topo.packages if p.cpu_model]
    return cpus[0] if cpus else "unknown"


def verdict(name: str) -> str:
    return "fail" if name.startswith(FAIL_PREFIXES) else "warn"


def differences(node_facts: dict[str, Facts]) -> dict[str, list[tuple[str, str]]]:
    """node -> [(fail | warn, sentence)] for every fact that differs from the
    value most nodes (of these, one class) have; a fact without a majority
    value sets no norm."""
    n = len(node_facts)
    if n < 2:
        return {}
    counts: dict[str, dict[Any, int]] = {}
    for f in node_facts.values():
        for k, v in f.items():
            c = counts.setdefault(k, {})
            c[v] = c.get(v, 0) + 1
    usual = {k: _size_norm(node_facts, k) if k.startswith("memory") else max(c.items(), key=lambda kv: kv[1])
             for k, c in counts.items()}
    # Only a value most nodes share is a norm; without a majority there is none.
    norm = {k: vh for k, vh in usual.items() if vh[1] * 2 > n}
    out: dict[str, list[tuple[str, str]]] = {}
    for node, f in node_facts.items():
        found = []
        for k, (v, held) in norm.items():
            mine = f.get(k)
            if not _same(k, mine, v):
                what = "absent" if mine is None else _show(k, mine)
                found.append((verdict(k), f"{k} {what} where {held} of {n} nodes have {_show(k, v)}"))
        if found:
            out[node] = found
    return out


def _size_norm(node_facts: dict[str, Facts], k: str) -> tuple[Any, int]:
    """A size's norm: the median of the nodes' values, held by those within SIZE_TOLERANCE of it."""
    values = sorted(f[k] for f in node_facts.values() if isinstance(f.get(k), (int, float)))
    med = values[len(values) // 2]
    return med, sum(1 for v in values if _same(k, v, med))


def _same(k: str, mine: Any, norm: Any) -> bool:
    if k.startswith("memory") and isinstance(mine, (int, float)) and isinstance(norm, (int, float)):
        return abs(mine - norm) <= SIZE_TOLERANCE * norm
    return mine == norm


def _show(k: str, v: Any) -> str:
    from ..units import format_size

    return format_size(v) if k.startswith("memory") and isinstance(v, (int, float)) else str(v)
