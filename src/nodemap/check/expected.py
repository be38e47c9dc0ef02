"""This node against the node it should be: a saved Topology of its node
class (`nodemap topo --export node-class.json`, `check --expect-topology`).

A GPU, NIC, NVLink, NUMA node, core or memory that the expected node has and
this one lacks, a GPU with less memory or in another MIG mode, a PCIe link
narrower or of a lower generation than the expected one, a NIC port down or
slower: each is a failed Check with a hardware cause (the node must be
drained and repaired), except CPUs that exist but are offline, which someone
configured. What this node has beyond the expected one passes: the
expectation is a floor. Pure: (expected, actual) -> checks, so snapshots and
fixtures test it.

Host memory is judged by the node's total, the kernel's MemTotal: per-NUMA
figures from sysfs undercount on VMs (4.6 GiB of 125.8 on a GPU VM; 9.5 then
16 GiB within 20 minutes on another, as the hypervisor initialises memory
lazily), so they are judged only where they add up to the node's MemTotal on
both sides (a machine's own, or a source without MemTotal such as hwloc XML).
"""

from __future__ import annotations

from collections import Counter

from ..errors import NodemapError
from ..topology.model import PciDevice, Topology
from ..topology.sysfs import nodes_undercount
from ..units import format_size
from .inventory import Check

KEY = "inventory/expected"


def compare(expected: Topology, actual: Topology, floor: float) -> list[Check]:
    """`floor`: memory below this fraction of the class's fails ([node_class] memory_floor of the expectations)."""
    return (devices(expected, actual) + gpus(expected, actual, floor) + nvlinks(expected, actual)
            + links(expected, actual) + nic_ports(expected, actual) + memory(expected, actual, floor)
            + cpus(expected, actual))


def validate(cls: Topology, where: str) -> None:
    """A node class that cannot be any node is refused before anything runs
    (NodemapError naming the field): judged, it would fail every node of the
    class for "hardware", and with --slurm-drain drain them all. Sizes past any
    machine's are refused when the file is read (topology/discover.absurd)."""
    def refuse(field: str, why: str) -> None:
        raise NodemapError(f"--expect-topology {where}: {field}: {why}; not a node class (save one with "
                           "nodemap topo --export FILE on a good node of the class)")

    if not cls.cpuset:
        refuse("pus", "no CPU online")
    if not [n for n in cls.host_numa_nodes if n.cpuset]:
        refuse("numa_nodes", "no NUMA node with CPUs")
    in_nodes = sum(n.memory for n in cls.host_numa_nodes)
    if cls.machine.mem_total and in_nodes > 1.1 * cls.machine.mem_total:
        refuse("numa_nodes[].memory", f"the NUMA nodes hold {format_size(in_nodes)}, more than the machine's "
               f"MemTotal {format_size(cls.machine.mem_total)} (machine.mem_total)")
    for i, nic in enumerate(cls.nics):
        if len({p.number for p in nic.ports}) != len(nic.ports):
            refuse(f"nics[{i}].ports", f"{nic.name} lists a port number twice")


def _count(key: str, label: str, want: int, have: int, what: str, fix: str) -> Check:
    if have >= want:
        return Check(f"{KEY}/{key}", label, str(have), f">= {want}", "pass", f"{what}: as the expected node")
    return Check(f"{KEY}/{key}", label, str(have), str(want), "fail",
                 f"{want - have} {what} of the expected {want} missing", "hardware", fix)


def devices(expected: Topology, actual: Topology) -> list[Check]:
    out = []
    want, have = Counter(g.model for g in expected.gpus), Counter(g.model for g in actual.gpus)
    for model in sorted(want):
        out.append(_count(f"gpus/{model or 'unknown'}", f"GPUs {model}".strip(), want[model], have[model],
                          "GPU(s)", "a GPU fell off the bus or its driver did not bind: nvidia-smi, dmesg | grep -i "
                          "xid; reseat or replace it"))
    out.append(_count("nics", "NICs", len(expected.nics), len(actual.nics), "NIC(s)",
                      "a NIC is missing: check its driver (ibstat, ip link) and seat"))
    names = {n.name for n in actual.nics}
    lost = [n.name for n in expected.nics if n.name not in names]
    if lost and len(actual.nics) >= len(expected.nics):
        out.append(Check(f"{KEY}/nic_names", "NICs by name", ", ".join(sorted(names)), ", ".join(
            n.name for n in expected.nics), "warn", f"{', '.join(lost)} renamed or replaced", "configuration",
            "the device naming changed (udev rules, firmware): update the expected topology if intended"))
    return out


def _nvlink_count(topo: Topology) -> int:
    return sum(ln.count for ln in topo.links if ln.kind.startswith("NVLink"))


def nvlinks(expected: Topology, actual: Topology) -> list[Check]:
    want = _nvlink_count(expected)
    if not want:
        return []
    return [_count("nvlinks", "NVLinks up", want, _nvlink_count(actual), "NVLink(s)",
                   "an NVLink is down: nvidia-smi nvlink -s; reset the GPU or check the NVSwitch tray")]


def _device_pci(topo: Topology) -> dict[str, tuple[str, PciDevice]]:
    """Device key -> (label, its PCI function), for GPUs and NICs with one."""
    out = {}
    for dev in (*topo.gpus, *topo.nics):
        pci = topo.pci_of(dev)
        if pci is not None:
            out[dev.key] = (dev.key, pci)
    return out


def links(expected: Topology, actual: Topology) -> list[Check]:
    """Each device's PCIe link against the expected node's: what it can train
    at (max, else the current link the expected node was saved with)."""
    have = _device_pci(actual)
    out = []
    for key, (label, want) in _device_pci(expected).items():
        gen, width = want.link_max_gen or want.link_gen, want.link_max_width or want.link_width
        if key not in have or not (gen and width):
            continue  # a missing device is counted above; an unknown link cannot be compared
        got = have[key][1]
        now = f"Gen{got.link_gen} x{got.link_width}"
        top = f"Gen{gen} x{width}"
        ck = f"{KEY}/pcie/{key.lower()}"
        if got.link_width and got.link_width < width:
            out.append(Check(ck, f"{label} PCIe link", now, top, "fail",
                             f"x{got.link_width} where the node class has x{width}", "hardware",
                             "reseat the card or check the slot and riser (lspci -vv: LnkSta vs LnkCap)"))
        elif got.link_max_gen and got.link_max_gen < gen:
            out.append(Check(ck, f"{label} PCIe link", f"{now} (max Gen{got.link_max_gen})", top, "fail",
                             f"can train at Gen{got.link_max_gen} only, the node class at Gen{gen}", "hardware",
                             "check the slot's generation in the BIOS and the riser; reseat the card"))
        else:
            out.append(Check(ck, f"{label} PCIe link", now, top, "pass", "as wide as the node class's"))
    return out


def _state(state: str) -> str:
    """'4: ACTIVE' (RDMA ports) -> 'ACTIVE'; 'up' (netdev operstate) as it is."""
    return state.split(":")[-1].strip()


def _up(state: str) -> bool:
    return _state(state).upper() in ("ACTIVE", "UP")


def nic_ports(expected: Topology, actual: Topology) -> list[Check]:
    """Ports up in the expected node must be up here, at its rate."""
    out = []
    have = {n.name: {p.number: p for p in n.ports} for n in actual.nics}
    for nic in expected.nics:
        for want in nic.ports:
            got = have.get(nic.name, {}).get(want.number)
            if got is None or not _up(want.state):
                continue
            key, label = f"{KEY}/nic/{nic.name}/port{want.number}", f"{nic.name} port {want.number}"
            value = f"{_state(got.state) or '?'} {got.rate_gbps:g} Gb/s"
            up = f"{_state(want.state)} {want.rate_gbps:g} Gb/s"
            if not _up(got.state):
                out.append(Check(key, label, value, up, "fail", "port down", "hardware",
                                 "check the cable and the switch port (ibstat, ip link)"))
            elif got.rate_gbps and got.rate_gbps < want.rate_gbps:
                out.append(Check(key, label, value, f"{want.rate_gbps:g} Gb/s", "fail",
                                 f"port trained at {got.rate_gbps:g} of {want.rate_gbps:g} Gb/s", "hardware",
                                 "check the cable and the switch port's speed (ibstat, ethtool)"))
            else:
                out.append(Check(key, label, value, up, "pass", "up at its rate"))
    return out


def _floor(key: str, label: str, got: int, want: int, what: str, fix: str, floor: float) -> Check:
    """`got` bytes against the class's `want`: below `floor` of it fails for hardware."""
    whose = " ".join(("the node class's", what)).strip()
    if got < floor * want:
        return Check(key, label, format_size(got), format_size(want), "fail", f"{got / want:.0%} of {whose}",
                     "hardware", fix)
    return Check(key, label, format_size(got), format_size(want), "pass", f"at least {floor:.0%} of {whose}")


def host_total(topo: Topology) -> int:
    """The node's host memory: the kernel's MemTotal, else its NUMA nodes' sum."""
    return topo.machine.mem_total or sum(n.memory for n in topo.host_numa_nodes)


def per_node_trusted(topo: Topology) -> bool:
    """Whether the NUMA nodes' memory adds up to the kernel's MemTotal (or nothing contradicts it)."""
    return not nodes_undercount(sum(n.memory for n in topo.host_numa_nodes), topo.machine.mem_total)


DIMM_FIX = "a DIMM is missing or disabled: dmidecode -t 17, the BMC's memory log"


def memory(expected: Topology, actual: Topology, floor: float) -> list[Check]:
    """NUMA layout (nodes with CPUs), memory in total, and per node where
    both sides' per-node figures can be trusted (module doc)."""
    out = []
    want_nodes = [n for n in expected.host_numa_nodes if n.cpuset]
    have = {n.os_index: n for n in actual.host_numa_nodes if n.cpuset}
    out.append(_count("numa_nodes", "NUMA nodes with CPUs", len(want_nodes), len(have), "NUMA node(s)",
                      "check the BIOS NUMA setting (NPS, SNC) and the memory log"))
    if host_total(expected):
        out.append(_floor(f"{KEY}/memory/total", "host memory", host_total(actual), host_total(expected), "total",
                          DIMM_FIX, floor))
    untrusted = [t for t, ok in (("this node's", per_node_trusted(actual)), ("the node class's",
                                                                            per_node_trusted(expected))) if not ok]
    for n in want_nodes:
        got = have.get(n.os_index)
        if got is None or not n.memory:
            continue
        key, label = f"{KEY}/memory/numa{n.os_index}", f"NUMA{n.os_index} memory"
        if untrusted:
            out.append(Check(key, label, format_size(got.memory), format_size(n.memory), "info",
                             f"not judged: {' and '.join(untrusted)} NUMA nodes add up to less than 90% of "
                             "its MemTotal (a VM's sysfs undercounts): the total is judged instead"))
        else:
            out.append(_floor(key, label, got.memory, n.memory, "", DIMM_FIX, floor))
    return out


def gpus(expected: Topology, actual: Topology, floor: float) -> list[Check]:
    """Each GPU's memory against the class's for its model (a smaller SKU of
    one name), and its MIG mode against the class's (a GPU left in MIG mode
    hands jobs slices, or nothing CUDA can use)."""
    out = []
    same = {w.index: w for w in expected.gpus}
    for g in actual.gpus:
        known = [w.memory for w in expected.gpus if w.model == g.model and w.memory]
        if known and g.memory:
            out.append(_floor(f"{KEY}/gpu_memory/{g.key.lower()}", f"{g.key} memory", g.memory, min(known),
                              g.model or "GPUs'", "another SKU, or memory disabled: nvidia-smi -q -d MEMORY; "
                              "replace the GPU, or save the class again if it is intended", floor))
        w = same.get(g.index)  # MIG is set per GPU: the class's GPU of this index, if of this model
        if w is not None and w.model == g.model and bool(w.mig) != bool(g.mig):
            want = "on" if w.mig else "off"
            out.append(Check(f"{KEY}/mig/{g.key.lower()}", f"{g.key} MIG mode", "on" if g.mig else "off", want,
                             "fail", f"MIG mode {'on' if g.mig else 'off'} where the node class has it {want}",
                             "hardware", f"nvidia-smi -i {g.pci_bus_id or g.index} -mig {int(want == 'on')}, then "
                             "reset the GPU (or save the class again if it is intended)"))
    return out


def cpus(expected: Topology, actual: Topology) -> list[Check]:
    """CPUs online: a PU the kernel lists but keeps offline is configuration
    (SMT off, an admin's hotplug); a PU the kernel does not list is gone."""
    want = len(expected.cpuset)
    online = len(actual.cpuset)
    if online >= want:
        return [Check(f"{KEY}/cpus", "CPUs online", str(online), f">= {want}", "pass", "as the expected node")]
    listed = len(actual.pus)
    cause, fix = (("configuration", "bring them online (echo 1 > /sys/devices/system/cpu/cpuN/online) or check "
                   "the BIOS SMT setting") if listed >= want else
                  ("hardware", "CPUs missing from the kernel: check the BIOS (cores disabled) and the BMC log"))
    return [Check(f"{KEY}/cpus", "CPUs online", str(online), str(want), "fail",
                  f"{want - online} of the expected {want} CPUs not online", cause, fix)]
