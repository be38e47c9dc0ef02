"""AMD SMI enrichment: GPU model, VRAM, UUID, PCIe link, NUMA node, xGMI
links.

`enrich(topo)` reads ROCm's AMD SMI through its Python package (`amdsmi`,
the `[amd]` extra; imported only here and only when called) and returns a
new Topology. sysfs already found the AMD GPUs and KFD's xGMI links, so
without the package, its library (libamd_smi.so) or the amdgpu driver the
topology comes back unchanged and silent; only `--source amdsmi`
(`required`) makes that an error.

GPUs are matched by PCI bus id (BDF): AMD SMI numbers its processors in its
own order and, in a container, counts only the GPUs it may open. It ignores
ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES; `nvml.apply_visible` applies
them afterwards, as for every source.
"""

from __future__ import annotations

from .model import GPU, Link, Topology, gpu_order, norm_bus_id, replace
from ..text import decoded
from .classify import rocr_uuid
from .nvml import _SmiGpu, _try, merged_gpus
from .sysfs import pcie_generation, xgmi_hops

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["enrich"]

_XGMI = 2  # AMDSMI_IOLINK_TYPE_XGMI, where the package lacks AmdSmiIoLinkType
_NA = "N/A"  # what the package returns for a field the device does not report


class _AmdGpu(_SmiGpu):
    """One GPU as AMD SMI reports it (filled in by _read_gpu; its link now, else the maximum)."""


def enrich(topo: Topology, required: bool = False) -> Topology:
    """Topology with AMD SMI's view of the AMD GPUs merged in; without AMD
    SMI the same topology (or, when `required`, as for --source amdsmi, an
    error). Visibility variables are the caller's (nvml.apply_visible)."""
    if not required and not any(g.vendor == "AMD" for g in topo.gpus):
        return topo  # nothing to enrich: spare `nodemap topo` the import
    try:
        import amdsmi as smi
    except Exception as e:  # ImportError; OSError where the package finds no libamd_smi.so
        return _without(topo, required, f"the amdsmi package cannot be imported ({decoded(e) or type(e).__name__}): "
                                        "pip install 'nodemap[amd]' on a node with ROCm")
    try:
        smi.amdsmi_init()  # GPUs only, the package's default
    except Exception as e:  # AmdSmiLibraryException: no amdgpu driver, no permission...
        return _without(topo, required, decoded(e) or type(e).__name__)
    try:
        try:
            handles = list(smi.amdsmi_get_processor_handles())
        except Exception as e:
            return _without(topo, required, decoded(e) or type(e).__name__)
        gpus = _read_gpus(smi, handles)
        return _merge(topo, gpus, _links(smi, gpus), _notes(topo, gpus))
    finally:
        _try(getattr(smi, "amdsmi_shut_down", None))


def _without(topo: Topology, required: bool, why: str) -> Topology:
    if required:
        from ..errors import InputError

        why = " ".join(why.split())  # AmdSmiLibraryException says "Error code:\n\t8 | ...": one line
        raise InputError("--source amdsmi", f"AMD SMI cannot be used: {why}; on a machine without ROCm "
                                            "use --source sysfs (or auto)")
    return topo  # sysfs and KFD already said what AMD SMI would have enriched


# --- reading AMD SMI ----------------------------------------------------------


def _read_gpus(smi: Any, handles: list[Any]) -> list[_AmdGpu]:
    """Every GPU AMD SMI sees, once per bus id (a partitioned GPU's
    partitions share their device's; the first stands for it)."""
    out: dict[str, _AmdGpu] = {}
    for i, h in enumerate(handles):
        bus_id = norm_bus_id(decoded(_try(smi.amdsmi_get_gpu_device_bdf, h, default="")))
        if bus_id and bus_id not in out:
            out[bus_id] = _read_gpu(smi, _AmdGpu(i, h, bus_id))
    return list(out.values())


def _read_gpu(smi: Any, g: _AmdGpu) -> _AmdGpu:
    asic = _try(smi.amdsmi_get_gpu_asic_info, g.handle, default=None) or {}
    g.name = _name(asic.get("market_name")) or _name(
        (_try(getattr(smi, "amdsmi_get_gpu_board_info", None), g.handle, default=None) or {}).get("product_name"))
    g.memory = _vram(smi, g.handle)
    g.uuid = rocr_uuid(asic.get("asic_serial")) or _name(
        decoded(_try(getattr(smi, "amdsmi_get_gpu_device_uuid", None), g.handle, default="")))
    g.numa = _number(_try(getattr(smi, "amdsmi_topo_get_numa_node_number", None), g.handle), 1 << 16, -1)
    pcie = _try(getattr(smi, "amdsmi_get_pcie_info", None), g.handle, default=None) or {}
    now, most = pcie.get("pcie_metric") or {}, pcie.get("pcie_static") or {}
    gen_now = pcie_generation(_number(now.get("pcie_speed"), 1 << 20) / 1000)  # MT/s
    g.gen = gen_now or _number(most.get("pcie_interface_version"), 16)
    g.max_width = _number(most.get("max_pcie_width"), 64)
    g.width = _number(now.get("pcie_width"), 64) or g.max_width
    return g


def _vram(smi: Any, h: Any) -> int:
    """VRAM bytes: amdsmi_get_gpu_memory_total (bytes), else
    amdsmi_get_gpu_vram_info's vram_size (MiB, the driver's total >> 20)."""
    vram = getattr(getattr(smi, "AmdSmiMemoryType", None), "VRAM", None)
    total = _try(getattr(smi, "amdsmi_get_gpu_memory_total", None), h, vram) if vram is not None else None
    if _number(total, 1 << 60):
        return int(total)
    info = _try(getattr(smi, "amdsmi_get_gpu_vram_info", None), h, default=None) or {}
    return _number(info.get("vram_size"), 1 << 40) << 20


def _name(value: Any) -> str:
    """A string AMD SMI returned, "" for its placeholders ("N/A", a bare
    hex device id where it knows no market name)."""
    text = str(value or "").strip()
    return "" if text == _NA or text.lower().startswith("0x") else text


def _number(value: Any, limit: int, unknown: int = 0) -> int:
    """An integer field, `unknown` for "N/A", the all-ones "not supported"
    values the C library passes through, and anything else at or past `limit`."""
    return value if isinstance(value, int) and 0 <= value < limit else unknown


def _links(smi: Any, gpus: list[_AmdGpu]) -> list[tuple[str, str, int, float]]:
    """(bus id, bus id, hops, GB/s) of each GPU pair AMD SMI joins by xGMI:
    the link type and its hops, else hops from the link weight, and the
    pair's maximum bandwidth (MB/s, as KFD's io_links)."""
    xgmi = int(getattr(getattr(smi, "AmdSmiIoLinkType", None), "XGMI", _XGMI))
    weight = getattr(smi, "amdsmi_topo_get_link_weight", None)
    minmax = getattr(smi, "amdsmi_get_minmax_bandwidth_between_processors", None)
    out = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            link = _try(smi.amdsmi_topo_get_link_type, a.handle, b.handle, default=None) or {}
            if link.get("type") != xgmi:
                continue  # PCIe through the host: the PCI tree already says that path
            hops = _number(link.get("hops"), 64)
            if not hops:
                hops = xgmi_hops(_number(_try(weight, a.handle, b.handle), 1 << 32))
            bw = _try(minmax, a.handle, b.handle, default=None) or {}
            out.append((a.bus_id, b.bus_id, hops, _number(bw.get("max_bandwidth"), 1 << 40) / 1000))
    return out


def _notes(topo: Topology, gpus: list[_AmdGpu]) -> list[str]:
    """Links narrower than the GPU's own maximum: lanes lost (a slot or a
    riser fault). A slower speed is not noted: amdgpu lowers it when idle."""
    index = {g.pci_bus_id: g.index for g in topo.gpus}
    return [f"GPU {index.get(g.bus_id, g.bus_id)} PCIe link runs x{g.width} of its x{g.max_width} lanes "
            "(AMD SMI): check the slot or riser" for g in gpus if 0 < g.width < g.max_width]


# --- merging into the Topology ----------------------------------------------------


def _merge(topo: Topology, amd: list[_AmdGpu], links: list[tuple[str, str, int, float]], notes: list[str]) -> Topology:
    gpus, mine = merged_gpus(topo, amd, "AMD", lambda g, a: _update(topo, g, a))
    keys = {bus: g.key for bus, g in mine.items()}
    new_links = tuple(_link(keys[x], keys[y], hops, gbs) for x, y, hops, gbs in links)
    ours = set(keys.values())
    old_links = tuple(l for l in topo.links if not (l.kind == "xGMI" and {l.a, l.b} <= ours))
    return replace(
        topo,
        gpus=gpus,
        links=old_links + new_links,
        source=(topo.source + "+amdsmi") if topo.source else "amdsmi",
        notes=topo.notes + tuple(notes),
    )


def _link(a: str, b: str, hops: int, gbs: float) -> Link:
    x, y = sorted((a, b), key=gpu_order)  # as KFD's and hwloc's: the lower GPU first
    return Link(x, y, "xGMI", count=1, bandwidth=gbs, hops=hops)


def _update(topo: Topology, g: GPU, a: _AmdGpu) -> GPU:
    name = f"amdsmi{a.index}"
    numa = a.numa if a.numa >= 0 and (not topo.numa_nodes or a.numa in {n.os_index for n in topo.numa_nodes}) \
        else g.numa_node
    cpuset = g.cpuset
    if not cpuset and numa >= 0 and topo.numa_nodes:
        cpuset = topo.numa(numa).cpuset  # the GCD's NUMA node's CPUs where sysfs had no local_cpulist
    return replace(
        g,
        vendor="AMD",
        model=a.name or g.model,
        memory=a.memory or g.memory,
        uuid=a.uuid or g.uuid,
        numa_node=numa,
        cpuset=cpuset,
        pcie_gen=a.gen or g.pcie_gen,
        pcie_width=a.width or g.pcie_width,
        os_names=g.os_names if name in g.os_names else g.os_names + (name,),
    )
