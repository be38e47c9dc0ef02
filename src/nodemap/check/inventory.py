"""Inventory and health: what the node has, and whether it is set up right.

Each item is a Check: a value, what was expected, a verdict, the cause
(configuration or hardware) and a fix. Sources: the Topology only for the
hardware (PCIe links current and maximum included, so a snapshot replays
every inventory item), NVML's health counters where readable (through
topology/nvml.py, the project's one NVML source), and the environment. What cannot be read is skipped
with its reason, never failed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping

from ..bench.endpoints import Endpoint
from ..bench.story import Skipped  # what a kind skips and what check does: one record
from ..finding import AREAS, Cause
from ..env import GPU_ORDER_VARS, GPU_VISIBILITY_VARS
from ..topology.model import GPU, NIC, Topology
from ..text import is_decimal
from ..units import gib
from .verdicts import VERDICTS

# Variables that change what a measurement means (CONTEXT.md: "a forced
# UCX_TLS=tcp flagged a healthy node"): recorded; risky values warned.
ENV_PREFIXES = ("UCX_", "NCCL_", "OMPI_MCA_", "MPICH_", "I_MPI_", "FI_", "CUDA_", "OMP_", "GOMP_", "KMP_",
                "SLURM_CPU_BIND", "SLURM_GPUS", "NODEMAP_") + GPU_VISIBILITY_VARS + tuple(GPU_ORDER_VARS)
RISKY_ENV: dict[str, tuple[Callable[[str], bool], str]] = {
    "UCX_TLS": (lambda v: "tcp" in v and not any(t in v for t in ("rc", "dc", "ud", "all")),
                "UCX is limited to TCP: MPI will not use InfiniBand/RoCE"),
    "NCCL_P2P_DISABLE": (lambda v: v.strip() == "1", "NCCL peer-to-peer is off: GPU<->GPU traffic is staged"),
    "NCCL_SHM_DISABLE": (lambda v: v.strip() == "1", "NCCL shared memory transport is off"),
    "NCCL_IB_DISABLE": (lambda v: v.strip() == "1", "NCCL will not use InfiniBand between nodes"),
    "CUDA_LAUNCH_BLOCKING": (lambda v: v.strip() == "1", "every CUDA launch is synchronous: GPU figures drop"),
    "NCCL_ALGO": (lambda v: bool(v.strip()), "NCCL's algorithm is forced"),
    "NCCL_PROTO": (lambda v: bool(v.strip()), "NCCL's protocol is forced"),
}


# Key prefix of the checks a measured step's own output gives (check/failed.py:
# wrong data is judged): the step ran, so they count as measured.
VERIFICATION = "verification/"


@dataclass(frozen=True)
class Check:
    key: str  # "inventory/pcie/gpu0", stable across nodes
    label: str
    value: str
    expected: str
    verdict: Literal[VERDICTS]
    rule: str
    cause: Cause = ""
    fix: str = ""
    area: Literal[AREAS] = "inventory"


def collect(topo: Topology, env: Mapping[str, str], nvml: bool = True,
            affinity: Iterable[int] | None = None) -> tuple[list[Check], list[Skipped]]:
    checks: list[Check] = []
    skipped: list[Skipped] = []
    checks += devices(topo)
    checks += binding(topo, os.sched_getaffinity(0) if affinity is None else affinity)
    checks += pcie_links(topo)
    checks += cpus(topo)
    checks += numa_balance(topo)
    checks += nics(topo)
    checks += nic_rails(topo, env)
    checks += environment(env)
    if nvml:
        got, why = nvml_health(topo)
        checks += got
        if why:
            skipped.append(Skipped("GPU health from NVML (ECC, retired/remapped pages, throttling, persistence, MIG)",
                                   why))
    return checks, skipped


def devices(topo: Topology) -> list[Check]:
    gpus = [g for g in topo.gpus]
    hidden = [g.key for g in gpus if not g.visible]
    out = [Check("inventory/gpus", "GPUs", f"{len(gpus)}" + (f" ({', '.join(sorted({g.model for g in gpus}))})" if gpus
                                                                else ""),
                 "as the topology reports", "info", "counted from the topology", "", "")]
    if hidden:
        out.append(Check("inventory/gpus_hidden", "GPUs hidden from this process", ", ".join(hidden), "none",
                         "warn", "CUDA_VISIBLE_DEVICES (or ROCR_VISIBLE_DEVICES) hides them: they are not measured",
                         "configuration", "unset CUDA_VISIBLE_DEVICES to check every GPU"))
    links = [ln for ln in topo.links if ln.kind == "NVLink"]
    if links:
        out.append(Check("inventory/nvlinks", "NVLink connections", f"{len(links)} ({sum(ln.count for ln in links)} links)",
                         "as NVML reports them up", "info", "counted from NVML", "", ""))
    return out


def binding(topo: Topology, affinity: Iterable[int]) -> list[Check]:
    """The binding this process was started with (the launcher's default)
    against the GPUs' NUMA nodes: a process confined away from every GPU's
    node copies through the socket link."""
    from ..topology.cpuset import CpuSet

    cpus = CpuSet(affinity)
    gpus = [g for g in topo.gpus if g.visible and g.numa_node >= 0]
    if not gpus or not cpus or topo.allowed_cpus.issubset(cpus):
        return []
    home = topo.numa_of(cpus)
    far = [g for g in gpus if g.numa_node not in home]
    value = f"CPUs {cpus.format()} (NUMA {home.format()})"
    if not far:
        return [Check("inventory/binding", "this process's binding", value, "near its GPUs", "pass",
                      "every GPU's NUMA node is among the bound CPUs' nodes")]
    names = ", ".join(f"{g.key} (NUMA{g.numa_node})" for g in far)
    return [Check("inventory/binding", "this process's binding", value, "near its GPUs", "warn",
                  f"the launcher bound this process away from {names}: host<->GPU copies of a rank bound so "
                  "cross the socket link (see the h2d figures from remote NUMA nodes)", "configuration",
                  "bind each rank near its GPU: `nodemap plan --tasks N` shows the plan, `nodemap run` applies it")]


# --- PCIe links ---------------------------------------------------------------------


def read_link(topo: Topology, dev: "GPU | NIC") -> dict[str, int] | None:
    """{gen, width, max_gen, max_width} of a device's PCIe link, from the
    Topology (the sources read sysfs, so a snapshot replays it); None when a
    source did not say what the link can train at."""
    pci = topo.pci_of(dev)
    if pci is None or not (pci.link_max_gen and pci.link_max_width and pci.link_width):
        return None
    return {"gen": pci.link_gen, "width": pci.link_width, "max_gen": pci.link_max_gen,
            "max_width": pci.link_max_width}


def link_check(key: str, label: str, link: dict[str, int], is_gpu: bool) -> Check:
    """A link trained below its maximum: width always a fault; a GPU's
    generation may drop while it idles (power saving), so only a warning."""
    now = f"Gen{link['gen']} x{link['width']}"
    top = f"Gen{link['max_gen']} x{link['max_width']}"
    if link["width"] < link["max_width"]:
        return Check(key, label, now, top, "fail", f"trained at x{link['width']} of x{link['max_width']} lanes",
                     "hardware", "reseat the card or check the slot and riser (lspci -vv: LnkSta vs LnkCap)")
    if link["gen"] < link["max_gen"]:
        idle = " (an idle GPU lowers its generation to save power: the host<->GPU figures decide)" if is_gpu else ""
        return Check(key, label, now, top, "warn" if is_gpu else "fail",
                     f"trained at Gen{link['gen']} of Gen{link['max_gen']}{idle}", "hardware",
                     "check the slot's generation in the BIOS and the riser; reseat the card")
    return Check(key, label, now, top, "pass", "trained at its maximum generation and width")


def pcie_links(topo: Topology) -> list[Check]:
    out = []
    for g in topo.gpus:
        link = read_link(topo, g)
        if link is not None:
            out.append(link_check(f"inventory/pcie/{Endpoint('gpu', g.index).key}", f"{g.key} PCIe link", link, True))
    for n in topo.nics:
        link = read_link(topo, n)
        if link is not None:
            out.append(link_check(f"inventory/pcie/{n.name}", f"{n.name} PCIe link", link, False))
    return out


# --- CPUs, memory, NICs -------------------------------------------------------------


def cpus(topo: Topology) -> list[Check]:
    out = []
    offline = [p.os_index for p in topo.pus if not p.online]
    hidden = [p.os_index for p in topo.pus if p.online and not p.allowed]
    from ..topology.cpuset import CpuSet

    total = len(topo.pus)
    out.append(Check("inventory/cpus_offline", "offline CPUs", CpuSet(offline).format() or "none", "none",
                     "warn" if offline else "pass",
                     f"{len(offline)} of {total} CPUs are offline" if offline else f"all {total} CPUs online",
                     "configuration" if offline else "",
                     "bring them online (echo 1 > /sys/devices/system/cpu/cpuN/online) or check the BIOS SMT setting"
                     if offline else ""))
    out.append(Check("inventory/cpus_hidden", "CPUs outside this process's cgroup/affinity",
                     CpuSet(hidden).format() or "none", "none", "info",
                     f"{len(hidden)} CPUs are not allowed here (cgroup cpuset or taskset): host figures use the rest"
                     if hidden else "every online CPU is allowed", "configuration" if hidden else "",
                     "run the check outside the job's cpuset to measure the whole node" if hidden else ""))
    return out


def numa_balance(topo: Topology) -> list[Check]:
    nodes = [n for n in topo.numa_nodes if n.cpuset and n.memory > 0]
    if len(nodes) < 2:
        return []
    mem = [n.memory for n in nodes]
    lo, hi = min(mem), max(mem)
    desc = ", ".join(f"NUMA{n.os_index} {gib(n.memory, 0)} GiB" for n in nodes)
    if lo >= 0.9 * hi:
        return [Check("inventory/numa_balance", "memory per NUMA node", desc, "within 10% of each other", "pass",
                      f"smallest node has {lo / hi:.0%} of the largest")]
    return [Check("inventory/numa_balance", "memory per NUMA node", desc, "within 10% of each other", "warn",
                  f"smallest node has {lo / hi:.0%} of the largest: unbalanced DIMM population or a failed DIMM",
                  "hardware", "check the DIMMs per channel (dmidecode -t 17) and the BIOS memory log")]


def nics(topo: Topology) -> list[Check]:
    out = []
    for n in topo.nics:
        for p in n.ports:
            up = p.state.upper() in ("ACTIVE", "UP", "4: ACTIVE")
            out.append(Check(f"inventory/nic/{n.name}/port{p.number}", f"{n.name} port {p.number}",
                             f"{p.state or '?'} {p.rate_gbps:g} Gb/s {p.link_layer}".strip(), "ACTIVE",
                             "pass" if up else "warn", "port up" if up else "port not active",
                             "" if up else "hardware", "" if up else "check the cable and the switch port (ibstat)"))
    return out


def nic_rails(topo: Topology, env: Mapping[str, str]) -> list[Check]:
    """More NICs than the default plan has tasks: each task should drive its
    nearest NICs (multi-rail); UCX left alone drives the ones it finds first
    from every task (CONTEXT.md: Leonardo, 2 of 4 used). From the default
    plan (`nodemap plan`, --nic-rails auto), so the advice is what `run` does.
    The planner is imported here: `report` loads this module and never plans."""
    from ..mapping import emit
    from ..mapping.plan import default_tasks, plan
    from ..mapping.request import Request

    try:
        tasks, _ = default_tasks(topo)
        p = plan(topo, Request(tasks))
    except Exception:  # a topology the planner refuses: the plan command says why
        return []
    envs = [dict(emit.task_env(topo, p, b)) for b in p.tasks]
    rails = max((int(e.get("UCX_MAX_RNDV_RAILS", 1)) for e in envs), default=1)
    if rails < 2:
        return []
    per_task = "; ".join(f"task {i}: UCX_NET_DEVICES={e['UCX_NET_DEVICES']}" for i, e in enumerate(envs)
                         if e.get("UCX_NET_DEVICES"))
    label = f"{tasks} tasks, {len(topo.nics)} NICs"
    want = f"bind {rails} NICs per task and set UCX_MAX_RNDV_RAILS={rails}"
    asked = env.get("UCX_MAX_RNDV_RAILS", "").strip()
    if env.get("UCX_NET_DEVICES") and (int(asked) if is_decimal(asked) else 2) >= rails:  # UCX's default is 2
        return [Check("inventory/nic_rails", label, f"UCX_NET_DEVICES={env['UCX_NET_DEVICES']}", want, "pass",
                      "the NICs are chosen per task here", "", "", "MPI")]
    return [Check("inventory/nic_rails", label, want, "", "warn",
                  f"the default plan ({tasks} tasks) gives each task its {rails} nearest NICs; without "
                  "UCX_NET_DEVICES UCX drives the NICs it finds first from every task", "configuration",
                  f"{per_task} (nodemap run sets these, and NCCL_IB_HCA)", "MPI")]


def environment(env: Mapping[str, str]) -> list[Check]:
    out = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIXES):
            continue
        value = env[name]
        risky = RISKY_ENV.get(name)
        if risky and risky[0](value):
            out.append(Check(f"inventory/env/{name}", name, value, "unset", "warn", risky[1], "configuration",
                             f"unset {name} unless the site needs it"))
        else:
            out.append(Check(f"inventory/env/{name}", name, value, "", "info", "changes how results are produced",
                             "configuration"))
    return out


def relevant_environment(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}


# --- NVML ---------------------------------------------------------------------------


def nvml_health(topo: Topology) -> tuple[list[Check], str]:
    """ECC, retired/remapped pages, throttle reasons, persistence, MIG per GPU."""
    if not any(g.vendor == "NVIDIA" for g in topo.gpus):
        return [], "no NVIDIA GPU in the topology"
    from ..topology import nvml

    nv, why = nvml.start()
    if nv is None:
        return [], why if why.startswith("nvidia-ml-py") else f"NVML does not start here ({why})"
    try:
        index = {g.pci_bus_id: g.index for g in topo.gpus if g.pci_bus_id}
        out = []
        for i, h, bus_id in nvml.handles(nv):
            out += gpu_health(nv, h, index.get(bus_id, i), bus_id)
        return out, ""
    finally:
        nvml.stop(nv)


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # not supported on this GPU/driver, or no permission
        return None


THROTTLE_BAD = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                0x80: "hardware power brake", 0x4: "software power cap"}


def gpu_health(nv: Any, h: Any, i: int, bus_id: str = "") -> list[Check]:
    """The health counters of GPU `i` (the topology's index, matched by bus id). A fix names the GPU
    by `bus_id`: nvidia-smi -i takes NVML's index, which counts only NVIDIA's GPUs a cgroup shows."""
    out = []
    gpu = Endpoint("gpu", i)
    k, name = f"inventory/nvml/{gpu.key}", gpu.label
    ecc = _try(lambda: nv.nvmlDeviceGetEccMode(h))
    if ecc is not None:
        on = bool(ecc[0])
        out.append(Check(f"{k}/ecc", f"{name} ECC", "on" if on else "off", "on", "pass" if on else "warn",
                         "ECC enabled" if on else "ECC off: memory errors go unnoticed", "" if on else "configuration",
                         "" if on else f"nvidia-smi -i {bus_id or i} -e 1, then reboot"))
        dbe = _try(lambda: nv.nvmlDeviceGetTotalEccErrors(h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                         nv.NVML_VOLATILE_ECC))
        if dbe is not None:
            out.append(Check(f"{k}/ecc_uncorrected", f"{name} uncorrected ECC errors (since boot)", str(dbe), "0",
                             "fail" if dbe else "pass", "uncorrected memory errors" if dbe else "none",
                             "hardware" if dbe else "", "drain the node; nvidia-smi -q -d ECC; RMA if they recur"
                             if dbe else ""))
    remap = _try(lambda: nv.nvmlDeviceGetRemappedRows(h))
    if remap is not None:
        corr, unc, pending, failed = remap
        bad = "fail" if failed else "warn" if pending else "pass"
        out.append(Check(f"{k}/remapped_rows", f"{name} remapped rows", f"{corr} correctable, {unc} uncorrectable"
                         + (", remap pending" if pending else "") + (", remap FAILED" if failed else ""),
                         "no pending or failed remap", bad, "row remapping state from NVML",
                         "hardware" if bad != "pass" else "",
                         "reset the GPU (pending remap applies at reset); RMA when a remap failed" if bad != "pass"
                         else ""))
    else:
        pages = _try(lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(h))
        if pages is not None:
            out.append(Check(f"{k}/retired_pages", f"{name} retired pages pending", "yes" if pages else "no", "no",
                             "warn" if pages else "pass", "page retirement pending a reset" if pages else "none",
                             "hardware" if pages else "", "reset the GPU or reboot" if pages else ""))
    reasons = _try(lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h))
    if reasons is None:
        reasons = _try(lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
    if reasons is not None:
        bad = [name for bit, name in THROTTLE_BAD.items() if reasons & bit]
        out.append(Check(f"{k}/throttle", f"{name} clock throttling", ", ".join(bad) or "none", "none",
                         "warn" if bad else "pass", "clocks held down now" if bad else "no throttle reason active",
                         "hardware" if bad else "", "check cooling and power (nvidia-smi -q -d PERFORMANCE,TEMPERATURE)"
                         if bad else ""))
    pers = _try(lambda: nv.nvmlDeviceGetPersistenceMode(h))
    if pers is not None:
        out.append(Check(f"{k}/persistence", f"{name} persistence mode", "on" if pers else "off", "on",
                         "pass" if pers else "info", "driver stays loaded between jobs" if pers else
                         "off: each job pays driver start-up (seconds) and clocks may reset",
                         "" if pers else "configuration", "" if pers else "nvidia-smi -pm 1 (or nvidia-persistenced)"))
    mig = _try(lambda: nv.nvmlDeviceGetMigMode(h))
    if mig is not None:
        on = bool(mig[0])
        out.append(Check(f"{k}/mig", f"{name} MIG mode", "on" if on else "off", "as the site intends", "info",
                         "MIG partitions: each instance gets a slice of SMs and memory bandwidth" if on else "off",
                         "configuration" if on else ""))
    return out
