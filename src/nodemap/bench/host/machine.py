"""What the host kinds read of this machine beside its Topology: the free
memory of NUMA nodes (array and working-set sizes), the NUMA nodes --mem
names, and the environment a host kind's results record."""

from __future__ import annotations

import os
import re

from ...errors import NodemapError
from ...topology.cpuset import CpuSet, CpuSetError
from ...topology.model import Topology
from ...topology.sysfs import nodes_undercount


def meminfo(path: str) -> dict[str, int]:
    out = {}
    try:
        with open(path) as f:
            for line in f:
                # "MemFree: 123 kB" or per node "Node 0 MemFree: 123 kB"
                m = re.search(r"([\w()]+):\s+(\d+)\s*kB", line)
                if m:
                    out[m.group(1)] = int(m.group(2)) * 1024
    except OSError:
        pass
    return out


def free_memory(nodes: CpuSet, root: str = "/") -> int:
    """Free bytes on `nodes`, or MemAvailable when nodes have no meminfo.

    Per node: MemFree plus the page cache and slab the kernel can drop
    (Inactive(file), SReclaimable), a node-local MemAvailable. Some
    sandboxed or virtualized sysfs trees give nodes far less memory than
    /proc/meminfo gives the machine (a lent 128 GiB VM: one node of 8 GiB);
    when `nodes` are all the nodes there are, MemAvailable is used then."""
    node_dir = os.path.join(root, "sys/devices/system/node")
    try:
        present = {int(d[4:]) for d in os.listdir(node_dir) if d[:4] == "node" and d[4:].isdecimal()}
    except OSError:
        present = set()
    total, known, node_total = 0, False, 0
    for n in present | set(nodes):
        info = meminfo(os.path.join(node_dir, f"node{n}", "meminfo"))
        node_total += info.get("MemTotal", 0)
        if n in nodes and "MemFree" in info:
            total += info["MemFree"] + info.get("Inactive(file)", 0) + info.get("SReclaimable", 0)
            known = True
    machine = meminfo(os.path.join(root, "proc/meminfo"))
    undercounted = nodes_undercount(node_total, machine.get("MemTotal", 0))
    if known and not (undercounted and present <= set(nodes)):
        return total
    return machine.get("MemAvailable", 0)


def parse_mem(topo: Topology, text: str | None) -> CpuSet:
    if text is None:
        return CpuSet()
    try:
        nodes = CpuSet.parse(text)
    except CpuSetError as e:
        raise NodemapError(f"--mem: {e} (use NUMA node numbers like 0 or 0-1)") from None
    known = {n.os_index: n for n in topo.numa_nodes}
    for i in nodes:
        if i not in known:
            raise NodemapError(f"--mem {text}: there is no NUMA node {i}; nodes here: {topo.nodeset.format()}")
        if known[i].memory == 0:
            raise NodemapError(f"--mem {text}: NUMA node {i} has no memory; pick a node with memory")
    if topo.allowed_mems and not nodes.issubset(topo.allowed_mems):
        raise NodemapError(f"--mem {text}: this process may only use NUMA nodes {topo.allowed_mems.format()}")
    return nodes


def environment(topo: Topology) -> dict[str, str]:
    thp = ""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().strip()
    except OSError:
        pass
    model = next((p.cpu_model for p in topo.packages if p.cpu_model), "")
    return {"cpu_model": model, "topology_source": topo.source, "transparent_hugepage": thp}
