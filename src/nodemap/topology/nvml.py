"""NVML enrichment: GPU model, memory, UUID, PCIe link, affinity, NVLinks,
MIG devices.

`enrich(topo)` reads NVIDIA's management library through nvidia-ml-py
(`pynvml`, imported only here and only when called) and returns a new
Topology. Without the package, the driver or any GPU it returns the
topology unchanged plus a note saying why: a node without NVIDIA GPUs is a
normal input.

GPUs are matched to the topology's by PCI bus id; NVML's own index is PCI
bus order too but counts only the GPUs this container sees. NVML ignores
CUDA_VISIBLE_DEVICES, so `apply_visible` marks hidden GPUs by UUID.
"""

from __future__ import annotations

import os

from ..env import GPU_VISIBILITY_OF, HIP_VISIBILITY, gpu_family
from ..text import decoded
from .cpuset import CpuSet
from .model import GPU, HIDDEN_BUS_ID, Link, PciDevice, Topology, gpu_order, norm_bus_id, replace

TYPE_CHECKING = False  # typing costs ~5 ms to import; `nodemap topo` always comes here
if TYPE_CHECKING:
    from typing import Any, Callable, Mapping, Sequence

__all__ = ["enrich", "start", "stop", "session", "handles", "gpu_activity", "apply_visible", "hidden_gpus", "visibility_vars",
           "parse_visible", "NVLINK_GBS", "nvlink_generation"]

# GB/s per link per direction by NVLink generation: the data rate after line
# coding (NVIDIA's and hwloc's figures), as PCIe rates are counted after
# 128b/130b. `nvidia-smi nvlink -s` prints the raw signalling rate instead
# (Hopper: 26.5625 GB/s = 53.125 GBd PAM4 x 2 lanes / 8, before coding).
NVLINK_GBS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}

# nvmlDeviceGetArchitecture -> NVLink generation. The architecture decides
# because nvmlDeviceGetNvLinkVersion's value changed meaning between driver
# releases (a generation number, later the NVML_NVLINK_VERSION_x_y enum).
_ARCH_GEN = {4: 1, 5: 2, 7: 3, 9: 4, 10: 5}  # Pascal, Volta, Ampere, Hopper, Blackwell
# NVML_NVLINK_VERSION_* enum -> generation (1_0, 2_0, 2_2, 3_0, 3_1, 4_0, 5_0).
_ENUM_GEN = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5}

_REMOTE_GPU, _REMOTE_NPU, _REMOTE_SWITCH = 0, 1, 2  # nvmlIntNvLinkDeviceType_t


class _SmiGpu:
    """One GPU as a management library (NVML, AMD SMI) reports it, by its handle and PCI bus id."""

    def __init__(self, index: int, handle: Any, bus_id: str) -> None:
        self.index, self.handle, self.bus_id = index, handle, bus_id
        self.name = self.uuid = ""
        self.memory = 0
        self.gen = self.width = 0  # the PCIe link now
        self.max_width = 0  # what the link can train at (an idle GPU trains down: the peak is this)
        self.numa = -1


class _NvGpu(_SmiGpu):
    """One GPU as NVML reports it (filled in by _read_gpus)."""

    def __init__(self, index: int, handle: Any, bus_id: str) -> None:
        super().__init__(index, handle, bus_id)
        self.max_gen = 0  # as max_width
        self.cpuset = CpuSet()
        self.arch = -1
        self.links: list[tuple[str, int, int]] = []  # (remote bus id, type, version)
        self.mig: tuple[str, ...] | None = None  # MIG device UUIDs when MIG mode is on


def enrich(topo: Topology, env: Mapping[str, str] | None = None, required: bool = False) -> Topology:
    """Topology with NVML's view of the NVIDIA GPUs merged in; without NVML,
    a note (or, when `required`, as for --source nvml, an error)."""
    nvml, why = start()
    if nvml is None:
        return _without(topo, env, required, why)
    try:
        gpus = _read_gpus(nvml, _cpu_words(topo))
        p2p = _p2p_notes(nvml, gpus)
        merged = _merge(topo, gpus, p2p)
        return apply_visible(merged, env, resolve=lambda u: _mig_parent(nvml, u))
    finally:
        stop(nvml)


def start() -> tuple[Any, str]:
    """(the initialised pynvml module, "") or (None, why NVML cannot be used):
    the one place nodemap opens NVML (topology enrichment, the check's health
    counters, busy samples, watch); close it with `stop`. Inside `session`,
    the session's."""
    if _held:
        return _held[-1]
    try:
        import pynvml as nvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install 'nodemap[nvml]')"
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded...
        return None, decoded(e) or type(e).__name__
    return nvml, ""


def stop(nvml: Any) -> None:
    if _held and _held[-1][0] is nvml:  # the session's: it closes it
        return
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


_held: list[tuple[Any, str]] = []  # what `session` started (or why it could not), innermost last


def session(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with one NVML start for all of it: a check asks NVML for the
    topology, the health counters and a busy sample around every step, and
    each started and shut NVML down (without persistence mode every start
    pays the driver's initialisation). A failure to start is kept too."""
    import functools

    @functools.wraps(fn)
    def held(*args: Any, **kwargs: Any) -> Any:
        got = _held[-1] if _held else start()
        _held.append(got)
        try:
            return fn(*args, **kwargs)
        finally:
            _held.pop()
            if got[0] is not None and not _held:
                stop(got[0])

    return held


def _without(topo: Topology, env, required: bool, why: str) -> Topology:
    if required:
        from ..errors import InputError

        raise InputError("--source nvml", f"NVML cannot be used: {why}; on a machine without an NVIDIA driver "
                                          "use --source sysfs (or auto)")
    return apply_visible(_note(topo, f"NVML not used: {why}"), env)


# --- reading NVML -----------------------------------------------------------


def gpu_activity(ours: set[int] | frozenset[int] = frozenset()) -> list[dict[str, Any]] | None:
    """Per GPU NVML sees: its index, bus id, utilisation (%) and the other
    processes on it (pid, name, memory) - every process not in `ours`. None
    without NVML (no package, driver or GPU): nothing to say about GPUs."""
    nvml, _ = start()
    if nvml is None:
        return None
    try:
        out = []
        for i, h, bus_id in handles(nvml):
            util = _try(nvml.nvmlDeviceGetUtilizationRates, h)
            others = {int(p.pid): int(getattr(p, "usedGpuMemory", 0) or 0) for p in processes(nvml, h)
                      if int(p.pid) not in ours}
            out.append({"index": i, "bus_id": bus_id, "utilization": int(util.gpu) if util is not None else None,
                        "others": [{"pid": pid, "comm": process_name(pid), "memory": mem} for pid, mem in sorted(others.items())]})
        return out
    except Exception:
        return None
    finally:
        stop(nvml)


def processes(nvml: Any, h: Any) -> list:
    """The compute and graphics processes on the GPU of handle `h` ([] where NVML cannot say)."""
    return list(_try(nvml.nvmlDeviceGetComputeRunningProcesses, h, default=[]) or []) + list(
        _try(getattr(nvml, "nvmlDeviceGetGraphicsRunningProcesses", None), h, default=[]) or [])


def process_name(pid: int) -> str:
    """/proc/PID/comm, '' when the process is gone or hidden (another PID namespace)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def handles(nvml: Any) -> list[tuple[int, Any, str]]:
    """(NVML index, handle, normalised PCI bus id) of every GPU NVML sees: under a device cgroup that is not
    every GPU of the node, so match GPUs by bus id, never by index."""
    out = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        out.append((i, h, norm_bus_id(decoded(nvml.nvmlDeviceGetPciInfo(h).busId))))
    return out


def _read_gpus(nvml: Any, cpu_words: int) -> list[_NvGpu]:
    out = []
    for i, h, bus_id in handles(nvml):
        g = _NvGpu(i, h, bus_id)
        g.name = decoded(_try(nvml.nvmlDeviceGetName, h, default=""))
        g.uuid = decoded(_try(nvml.nvmlDeviceGetUUID, h, default=""))
        mem = _try(nvml.nvmlDeviceGetMemoryInfo, h)
        g.memory = int(mem.total) if mem is not None else 0
        g.gen = int(_try(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h, default=0))
        g.width = int(_try(nvml.nvmlDeviceGetCurrPcieLinkWidth, h, default=0))
        g.max_gen = int(_try(getattr(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", None), h, default=0))
        g.max_width = int(_try(getattr(nvml, "nvmlDeviceGetMaxPcieLinkWidth", None), h, default=0))
        g.cpuset = _words(_try(nvml.nvmlDeviceGetCpuAffinity, h, cpu_words, default=()))
        g.numa = _numa(nvml, h)
        g.arch = int(_try(getattr(nvml, "nvmlDeviceGetArchitecture", None), h, default=-1))
        g.links = _links(nvml, h)
        g.mig = _mig_devices(nvml, h)
        out.append(g)
    return out


def _numa(nvml: Any, h: Any) -> int:
    # Memory affinity = the NUMA node(s) near the GPU (what nvidia-smi prints
    # as NUMA Affinity); a single node is the GPU's local node.
    scope = getattr(nvml, "NVML_AFFINITY_SCOPE_NODE", 0)
    nodes = _words(_try(getattr(nvml, "nvmlDeviceGetMemoryAffinity", None), h, 64, scope, default=()))
    return nodes.first() if len(nodes) == 1 else -1


def _links(nvml: Any, h: Any) -> list[tuple[str, int, int]]:
    links = []
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    remote_type = getattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        if _try(nvml.nvmlDeviceGetNvLinkState, h, link, default=None) != enabled:
            continue  # absent (NOT_SUPPORTED / INVALID_ARGUMENT) or down
        pci = _try(nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
        remote = norm_bus_id(decoded(pci.busId)) if pci is not None else ""
        kind = int(_try(remote_type, h, link, default=-1))
        version = int(_try(nvml.nvmlDeviceGetNvLinkVersion, h, link, default=0))
        links.append((remote, kind, version))
    return links


def _p2p_notes(nvml: Any, gpus: list[_NvGpu]) -> list[str]:
    """One note per GPU pair whose peer reads NVML reports as not OK."""
    index = getattr(nvml, "NVML_P2P_CAPS_INDEX_READ", 0)
    if isinstance(index, tuple):  # some pynvml releases define it as `0,`
        index = index[0]
    ok = getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    notes = []
    for a in gpus:
        for b in gpus:
            if a.index < b.index:
                status = _try(nvml.nvmlDeviceGetP2PStatus, a.handle, b.handle, index, default=None)
                if status is not None and status != ok:
                    notes.append(f"P2P read nvml{a.index}<->nvml{b.index} not available (NVML status {status})")
    return notes


def _mig_devices(nvml: Any, h: Any) -> tuple[str, ...] | None:
    """UUIDs of the GPU's MIG devices (slices) when MIG mode is on, else None."""
    mode = _try(getattr(nvml, "nvmlDeviceGetMigMode", None), h, default=None)
    if not mode or mode[0] != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return None
    out = []
    for i in range(int(_try(nvml.nvmlDeviceGetMaxMigDeviceCount, h, default=0))):
        mig = _try(nvml.nvmlDeviceGetMigDeviceHandleByIndex, h, i)  # NOT_FOUND: no device at this index
        uuid = decoded(_try(nvml.nvmlDeviceGetUUID, mig, default="")) if mig is not None else ""
        if uuid:
            out.append(uuid)
    return tuple(out)


def _mig_parent(nvml: Any, mig_uuid: str) -> str:
    """UUID of the GPU that holds MIG device `mig_uuid`, "" when unknown."""
    try:
        h = nvml.nvmlDeviceGetHandleByUUID(mig_uuid)
        return decoded(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h)))
    except Exception:
        return ""


# --- merging into the Topology ----------------------------------------------


def merged_gpus(topo: Topology, found: Sequence[_SmiGpu], vendor: str,
                update: Callable[[GPU, Any], GPU]) -> tuple[tuple[GPU, ...], dict[str, GPU]]:
    """The topology's GPUs with a management library's `found` merged in by PCI bus id (`update`: the
    topology's GPU with the library's view), and the library's GPUs by bus id. A GPU the library sees
    that the other source did not is appended; with no GPUs from the other source the library's order
    is the bus order, otherwise existing indexes are kept."""
    by_bus = {g.pci_bus_id: g for g in topo.gpus if g.pci_bus_id}
    next_index = max((g.index for g in topo.gpus), default=-1) + 1
    mine: dict[str, GPU] = {}
    for f in found:
        old = by_bus.get(f.bus_id)
        if old is None:
            old = GPU(index=f.index if not topo.gpus else next_index, vendor=vendor, pci_bus_id=f.bus_id)
            next_index += 1
        mine[f.bus_id] = update(old, f)
    keep = [g for g in topo.gpus if g.pci_bus_id not in mine]
    return tuple(sorted(keep + list(mine.values()), key=lambda g: g.index)), mine


def _merge(topo: Topology, nv: list[_NvGpu], notes: list[str]) -> Topology:
    gpus, mine = merged_gpus(topo, nv, "NVIDIA", _update)
    keys = {bus: g.key for bus, g in mine.items()}
    notes += [f"GPU {mine[n.bus_id].index} is in MIG mode with no MIG device: CUDA cannot use it"
              for n in nv if n.mig == ()]
    links, link_notes = _nvlinks(nv, keys)
    nvml_keys = set(keys.values())
    old_links = tuple(l for l in topo.links if not (l.kind == "NVLink" and {l.a, l.b} & nvml_keys))
    return replace(
        topo,
        gpus=gpus,
        pci_devices=_pci_links(topo, gpus, {n.bus_id: n for n in nv}),
        links=old_links + links,
        source=(topo.source + "+nvml") if topo.source else "nvml",
        notes=topo.notes + tuple(link_notes) + tuple(notes),
    )


def _pci_links(topo: Topology, gpus: tuple[GPU, ...], nv: dict[str, _NvGpu]) -> tuple[PciDevice, ...]:
    """The PCI functions with NVML's link state where the other source left it out
    (hwloc XML says the current link only): the GPU's PCIe peak and the
    check's link inventory read the maximum from the model, never NVML."""
    devices = list(topo.pci_devices)
    for g in gpus:
        n = nv.get(g.pci_bus_id)
        pci = topo.pci_of(g) if n is not None else None
        if pci is None or pci.link_max_gen or not (n.max_gen and n.max_width):
            continue
        i = g.pci_index if 0 <= g.pci_index < len(devices) else devices.index(pci)
        devices[i] = replace(pci, link_gen=pci.link_gen or n.gen, link_width=pci.link_width or n.width,
                             link_max_gen=n.max_gen, link_max_width=n.max_width)
    return tuple(devices)


def _update(g: GPU, n: _NvGpu) -> GPU:
    name = f"nvml{n.index}"
    return replace(
        g,
        vendor="NVIDIA",
        model=n.name or g.model,
        memory=n.memory or g.memory,
        uuid=n.uuid or g.uuid,
        numa_node=n.numa if n.numa >= 0 else g.numa_node,
        cpuset=n.cpuset or g.cpuset,
        pcie_gen=n.gen or g.pcie_gen,
        pcie_width=n.width or g.pcie_width,
        os_names=g.os_names if name in g.os_names else g.os_names + (name,),
        mig=n.mig or (),
    )


def nvlink_generation(version: int, arch: int) -> int:
    """NVLink generation from NVML's architecture, else its version value."""
    return _ARCH_GEN.get(arch) or _ENUM_GEN.get(version, 0)


def _nvlinks(nv: list[_NvGpu], keys: dict[str, str]) -> tuple[tuple[Link, ...], list[str]]:
    """Links per (GPU, remote): GPU pairs once (from the lower key), switches per GPU."""
    groups: dict[tuple[str, str], list[int]] = {}
    hidden = False
    for n in nv:
        a = keys[n.bus_id]
        for remote, kind, version in n.links:
            b = _remote_key(remote, kind, keys)
            hidden |= remote == HIDDEN_BUS_ID
            if b in keys.values() and gpu_order(b) < gpu_order(a):
                continue  # the other GPU reports this pair
            groups.setdefault((a, b), []).append(nvlink_generation(version, n.arch))
    links = tuple(
        Link(a, b, "NVLink", count=len(gens), bandwidth=round(sum(NVLINK_GBS.get(x, 0.0) for x in gens), 4),
             version=max(gens))
        for (a, b), gens in groups.items()
    )
    notes = ["NVSwitches are hidden from this system (NVML reports bus id FFFFFFFF:FF:FF.0)"] if hidden else []
    return links, notes


def _remote_key(remote: str, kind: int, keys: dict[str, str]) -> str:
    if kind == _REMOTE_NPU:
        return "CPU"
    if kind != _REMOTE_SWITCH and remote in keys:
        return keys[remote]
    # A switch, a hidden switch, or a remote that is no GPU of this node.
    return "NVSwitch"




# --- CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES ----------


def parse_visible(value: str | None, gpus: list[GPU], resolve: Callable[[str], str] | None = None) -> tuple[set[int] | None, str]:
    """GPU indexes CUDA_VISIBLE_DEVICES lets CUDA see, and a note.

    None when unset (all visible). Entries are indexes (PCI bus order, as
    with CUDA_DEVICE_ORDER=PCI_BUS_ID), UUIDs or unique UUID prefixes
    ("GPU-8f3a"), or MIG devices ("MIG-<uuid>" of a GPU's `mig`, via `resolve`, or the old
    "MIG-GPU-<uuid>/gi/ci"); like CUDA, parsing stops at the first entry
    that names no GPU.
    """
    shown, note = _visible_list(value, sorted(gpus, key=lambda g: g.index), resolve)
    return (None if shown is None else {g.index for g in shown}), note


def _visible_list(value: str | None, gpus: list[GPU], resolve: Callable[[str], str] | None = None,
                  var: str = "CUDA_VISIBLE_DEVICES") -> tuple[list[GPU] | None, str]:
    """The GPUs `value` names, in its order (an index is a position in
    `gpus`); None when unset. Stops at the first entry that names none."""
    if value is None:
        return None, ""
    seen: list[GPU] = []
    for entry in (e.strip() for e in value.split(",")):
        if var == GPU_VISIBILITY_OF["INTEL"]:  # "0.1": tile 1 of device 0, which the process then sees
            entry = entry.partition(".")[0]
        g = _match_entry(entry, gpus, resolve)
        if g is None:
            if entry:
                return seen, f"{var} entry {entry[:40]!r} names no GPU of this node; the runtime ignores it and all after it"
            break
        if g not in seen:
            seen.append(g)
    return seen, ""


def _match_entry(entry: str, gpus: list[GPU], resolve: Callable[[str], str] | None) -> GPU | None:
    if entry.isdecimal() and len(entry) < 10:
        i = int(entry)
        return gpus[i] if i < len(gpus) else None
    if entry.startswith("MIG-"):
        owner = [g for g in gpus if entry in g.mig]  # the topology knows its MIG devices (NVML read them)
        if owner:
            return owner[0]
        rest = entry[4:]
        parent = rest.split("/")[0] if rest.startswith("GPU-") else (resolve(entry) if resolve else "")
        return _by_uuid(parent, gpus) if parent else None
    return _by_uuid(entry, gpus) if entry.startswith("GPU-") else None


def _by_uuid(prefix: str, gpus: list[GPU]) -> GPU | None:
    hits = [g for g in gpus if g.uuid and g.uuid.lower().startswith(prefix.lower())]
    return hits[0] if len(hits) == 1 else None


def visibility_vars(vendor: str, env: Mapping[str, str]) -> tuple[str, ...]:
    """The variables that choose a vendor's GPUs, outermost first: ROCr's
    ROCR_VISIBLE_DEVICES, then HIP's HIP_VISIBLE_DEVICES (HIP takes
    CUDA_VISIBLE_DEVICES as its alias when that is unset), indexing what
    ROCr shows; Level Zero's ZE_AFFINITY_MASK for Intel; CUDA_VISIBLE_DEVICES
    for every other vendor (nodemap.env.GPU_VISIBILITY_OF)."""
    family = gpu_family(vendor)
    if family == "AMD":
        return (GPU_VISIBILITY_OF["AMD"], HIP_VISIBILITY if HIP_VISIBILITY in env else GPU_VISIBILITY_OF["NVIDIA"])
    return (GPU_VISIBILITY_OF[family],)


def hidden_gpus(topo: Topology, env: Mapping[str, str], resolve: Callable[[str], str] | None = None
                ) -> tuple[set[int], list[str], list[str]]:
    """Indexes of the GPUs the visibility variables hide, what each set
    variable shows ("CUDA_VISIBLE_DEVICES=1 shows GPUs 1"), and what is
    wrong with them (an entry naming no GPU)."""
    hidden: set[int] = set()
    shows: list[str] = []
    problems: list[str] = []
    for family in GPU_VISIBILITY_OF:
        gpus = sorted((g for g in topo.gpus if gpu_family(g.vendor) == family), key=lambda g: g.index)
        shown = gpus
        for var in visibility_vars(family, env) if gpus else ():
            narrowed, note = _visible_list(env.get(var), shown, resolve, var)
            if narrowed is None:
                continue
            shown = narrowed
            indexes = ",".join(str(g.index) for g in sorted(shown, key=lambda g: g.index)) or "none"
            shows.append(f"{var}={env[var]} shows GPUs {indexes}")
            problems += [note] if note else []
        kept = {g.index for g in shown}
        hidden |= {g.index for g in gpus if g.index not in kept}
    return hidden, shows, problems


def apply_visible(topo: Topology, env: Mapping[str, str] | None = None,
                  resolve: Callable[[str], str] | None = None) -> Topology:
    """Mark GPUs that CUDA_VISIBLE_DEVICES (AMD: ROCR_VISIBLE_DEVICES, then
    HIP_VISIBLE_DEVICES) hides (GPU.visible = False)."""
    env = os.environ if env is None else env
    hidden, shows, problems = hidden_gpus(topo, env, resolve)
    if not shows:
        return topo
    gpus = tuple(replace(g, visible=g.index not in hidden) for g in topo.gpus)
    return replace(topo, gpus=gpus, notes=topo.notes + tuple(shows + problems))


# --- helpers --------------------------------------------------------------


def _try(fn: Callable | None, *args: Any, default: Any = None) -> Any:
    """Call an NVML function; absent functions and NVML errors give `default`."""
    if fn is None:
        return default
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported, InvalidArgument, ...
        return default


def _words(words: Any) -> CpuSet:
    """NVML affinity arrays: unsigned longs, word i = bits 64*i.. on Linux."""
    import ctypes

    bits = ctypes.sizeof(ctypes.c_ulong) * 8
    mask = 0
    for i, w in enumerate(words or ()):
        mask |= int(w) << (bits * i)
    return CpuSet.from_mask(mask)


def _cpu_words(topo: Topology) -> int:
    import ctypes

    bits = ctypes.sizeof(ctypes.c_ulong) * 8
    ncpu = max((p.os_index for p in topo.pus), default=(os.cpu_count() or 1) - 1) + 1
    return max(1, -(-ncpu // bits))


def _note(topo: Topology, text: str) -> Topology:
    """Add `text` where it matters: only nodes with NVIDIA GPUs miss NVML."""
    if not any(g.vendor == "NVIDIA" for g in topo.gpus):
        return topo
    return replace(topo, notes=topo.notes + (text,))
