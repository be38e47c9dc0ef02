"""AMD SMI enrichment against a fake `amdsmi` package shaped like the real
one (ROCm's py-interface: dicts with "N/A" for what a device does not
report, handles that are opaque objects)."""

from __future__ import annotations

import enum
import sys
import types

import pytest

from nodemap.errors import InputError
from nodemap.topology.amdsmi import enrich
from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import GPU, Link, NumaNode, PU, Topology, replace
from nodemap.topology.nvml import apply_visible
from nodemap.topology.paths import path


class AmdSmiLibraryException(Exception):
    pass


class AmdSmiMemoryType(enum.IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiIoLinkType(enum.IntEnum):
    UNDEFINED = 0
    PCIEXPRESS = 1
    XGMI = 2


class Handle:
    """An opaque processor handle (ctypes c_void_p in the real package)."""

    def __init__(self, i: int) -> None:
        self.i = i


def fake_amdsmi(gpus: list[dict], links: dict | None = None, fail_init: bool = False) -> types.ModuleType:
    """gpus[i]: bus, name, serial, vram (bytes), numa, pcie (speed MT/s, width, max width);
    links[(i, j)] = (type, hops, weight, max MB/s) for i < j, PCIe otherwise."""
    m = types.ModuleType("amdsmi")
    m.AmdSmiLibraryException = AmdSmiLibraryException
    m.AmdSmiMemoryType = AmdSmiMemoryType
    m.AmdSmiIoLinkType = AmdSmiIoLinkType
    m.calls = []
    links = links or {}
    handles = [Handle(i) for i in range(len(gpus))]

    def init(flag=None):
        m.calls.append("init")
        if fail_init:
            raise AmdSmiLibraryException("Error code:\n\t8 | AMDSMI_STATUS_INIT_ERROR - Device not initialized")

    def link(a, b):
        i, j = sorted((a.i, b.i))
        return links.get((i, j), (AmdSmiIoLinkType.PCIEXPRESS, 2, 40, 0))

    def memory_total(h, kind):
        assert kind == AmdSmiMemoryType.VRAM
        vram = gpus[h.i].get("vram")
        if vram is None:
            raise AmdSmiLibraryException("AMDSMI_STATUS_NOT_SUPPORTED")
        return vram

    def pcie(h):
        speed, width, max_width = gpus[h.i].get("pcie", ("N/A", "N/A", 16))
        return {"pcie_static": {"max_pcie_width": max_width, "max_pcie_speed": 32000, "pcie_interface_version": 5,
                                "slot_type": "OAM"},
                "pcie_metric": {"pcie_width": width, "pcie_speed": speed, "pcie_bandwidth": "N/A"}}

    m.amdsmi_init = init
    m.amdsmi_shut_down = lambda: m.calls.append("shut_down")
    m.amdsmi_get_processor_handles = lambda: handles
    m.amdsmi_get_gpu_device_bdf = lambda h: gpus[h.i]["bus"]
    m.amdsmi_get_gpu_asic_info = lambda h: {"market_name": gpus[h.i]["name"], "vendor_id": "0x1002",
                                            "asic_serial": gpus[h.i].get("serial", "N/A"), "oam_id": "N/A"}
    m.amdsmi_get_gpu_board_info = lambda h: {"product_name": gpus[h.i].get("board", "N/A")}
    m.amdsmi_get_gpu_device_uuid = lambda h: f"{h.i:02x}ff74a1-0000-1000-80e9-000000000000"
    m.amdsmi_get_gpu_memory_total = memory_total
    m.amdsmi_get_gpu_vram_info = lambda h: {"vram_type": 9, "vram_vendor": 0, "vram_size": gpus[h.i].get("vram_mb", 0),
                                            "vram_bit_width": 8192}
    m.amdsmi_get_pcie_info = pcie
    m.amdsmi_topo_get_numa_node_number = lambda h: gpus[h.i].get("numa", 0xFFFFFFFF)
    m.amdsmi_topo_get_link_type = lambda a, b: {"hops": link(a, b)[1], "type": int(link(a, b)[0])}
    m.amdsmi_topo_get_link_weight = lambda a, b: link(a, b)[2]
    m.amdsmi_get_minmax_bandwidth_between_processors = lambda a, b: {"min_bandwidth": 0, "max_bandwidth": link(a, b)[3]}
    return m


def mi250x(n: int = 4) -> list[dict]:
    """GCDs of MI250X OAMs: 64 GiB each, PCIe Gen4 x16 (ESM), NUMA node of each pair."""
    return [dict(bus=f"0000:{0xc1 + 0x10 * i:02x}:00.0", name="AMD Instinct MI250X", serial=f"0x{0x5f3e00 + i:016X}",
                 vram=64 << 30, numa=i // 2, pcie=(16000, 16, 16)) for i in range(n)]


def sysfs_view(buses: tuple[str, ...]) -> Topology:
    """What sysfs and KFD read: AMD GPUs by bus id with no model, memory or UUID."""
    nodes = (NumaNode(0, CpuSet.parse("0-15"), 1 << 38), NumaNode(1, CpuSet.parse("16-31"), 1 << 38))
    gpus = tuple(GPU(i, "AMD", pci_bus_id=b, os_names=(f"card{i}",)) for i, b in enumerate(buses))
    return Topology(numa_nodes=nodes, pus=tuple(PU(i) for i in range(32)), gpus=gpus, source="sysfs:/")


@pytest.fixture
def use(monkeypatch):
    def install(module):
        monkeypatch.setitem(sys.modules, "amdsmi", module)
        return module
    return install


def test_gpus_get_model_vram_uuid_numa_and_pcie(use):
    gpus = mi250x(2)
    gpus[1].update(name="N/A", board="Instinct MI250X OAM", vram=None, vram_mb=65520, pcie=("N/A", "N/A", 16))
    smi = use(fake_amdsmi(gpus))
    t = enrich(sysfs_view(tuple(g["bus"] for g in gpus)))
    g0, g1 = t.gpus
    assert (g0.model, g0.memory, g0.uuid) == ("AMD Instinct MI250X", 64 << 30, "GPU-00000000005f3e00")
    assert (g0.pcie_gen, g0.pcie_width, g0.numa_node, g0.os_names) == (4, 16, 0, ("card0", "amdsmi0"))
    assert g0.cpuset == CpuSet.parse("0-15")  # from its NUMA node: sysfs had no local_cpulist here
    # market name N/A: the board's product name; memory_total unsupported: vram_info's MiB;
    # current link N/A: the maximum (Gen 5 x16 from pcie_static)
    assert (g1.model, g1.memory, g1.pcie_gen, g1.pcie_width) == ("Instinct MI250X OAM", 65520 << 20, 5, 16)
    assert t.source == "sysfs:/+amdsmi" and t.notes == ()
    assert smi.calls == ["init", "shut_down"]


def test_uuid_is_the_one_rocr_visible_devices_takes(use):
    gpus = mi250x(3)
    gpus[2]["serial"] = "N/A"  # no unique_id: AMD SMI's own UUID
    use(fake_amdsmi(gpus))
    t = enrich(sysfs_view(tuple(g["bus"] for g in gpus)))
    assert t.gpus[2].uuid == "02ff74a1-0000-1000-80e9-000000000000"
    shown = apply_visible(t, env={"ROCR_VISIBLE_DEVICES": "GPU-00000000005f3e01"})
    assert [g.visible for g in shown.gpus] == [False, True, False]


def test_xgmi_links_with_hops_replace_kfd_ones(use):
    gpus = mi250x(4)
    x = AmdSmiIoLinkType.XGMI
    # GCD pairs of one OAM: 1 hop; across OAMs: 2 hops reported only by the weight (hops 0)
    use(fake_amdsmi(gpus, links={(0, 1): (x, 1, 15, 200000), (2, 3): (x, 1, 15, 200000), (0, 2): (x, 0, 30, 50000)}))
    base = sysfs_view(tuple(g["bus"] for g in gpus))
    stale = Link("GPU0", "GPU1", "xGMI", bandwidth=100.0, hops=3)
    t = enrich(replace(base, links=(stale,)))
    assert stale not in t.links
    assert set(t.links) == {Link("GPU0", "GPU1", "xGMI", 1, 200.0, hops=1), Link("GPU2", "GPU3", "xGMI", 1, 200.0, hops=1),
                            Link("GPU0", "GPU2", "xGMI", 1, 50.0, hops=2)}
    assert path(t, "GPU1", "GPU0").label == "XGMI1" and path(t, "GPU2", "GPU0").label == "XGMI2"
    assert path(t, "GPU1", "GPU3").kind != "XGMI"  # PCIe type: the PCI tree's path


def test_gpus_matched_by_bus_id_when_amdsmi_sees_a_subset(use, monkeypatch):
    """A container given GPUs 1 and 3 of 4 (ROCR_VISIBLE_DEVICES=1,3 and a device cgroup):
    AMD SMI's processors 0 and 1 are the node's GPUs 1 and 3, found by BDF, not by index."""
    gpus = mi250x(4)
    seen = [dict(g, bus=g["bus"].upper()) for g in (gpus[3], gpus[1])]  # its own order and spelling
    use(fake_amdsmi(seen, links={(0, 1): (AmdSmiIoLinkType.XGMI, 1, 15, 50000)}))
    t = apply_visible(enrich(sysfs_view(tuple(g["bus"] for g in gpus))), env={"ROCR_VISIBLE_DEVICES": "1,3"})
    assert [(g.index, g.visible, g.model) for g in t.gpus] == [
        (0, False, ""), (1, True, "AMD Instinct MI250X"), (2, False, ""), (3, True, "AMD Instinct MI250X")]
    assert [g.os_names for g in t.gpus] == [("card0",), ("card1", "amdsmi1"), ("card2",), ("card3", "amdsmi0")]
    assert t.gpus[3].uuid == "GPU-00000000005f3e03" and t.links == (Link("GPU1", "GPU3", "xGMI", 1, 50.0, hops=1),)
    assert "ROCR_VISIBLE_DEVICES=1,3 shows GPUs 1,3" in t.notes


def test_gpu_only_amdsmi_sees_is_appended_and_partitions_count_once(use):
    gpus = mi250x(2)
    use(fake_amdsmi(gpus + [dict(gpus[1], name="partition")]))  # a second processor on GPU 1's bus
    t = enrich(sysfs_view((gpus[0]["bus"], "0000:05:00.0")))  # sysfs: GPU 1 on another bus
    assert [(g.index, g.pci_bus_id, g.model) for g in t.gpus] == [
        (0, gpus[0]["bus"], "AMD Instinct MI250X"), (1, "0000:05:00.0", ""), (2, gpus[1]["bus"], "AMD Instinct MI250X")]


def test_narrowed_link_is_noted(use):
    gpus = mi250x(2)
    gpus[1]["pcie"] = (16000, 8, 16)
    use(fake_amdsmi(gpus))
    t = enrich(sysfs_view(tuple(g["bus"] for g in gpus)))
    assert t.gpus[1].pcie_width == 8
    assert t.notes == ("GPU 1 PCIe link runs x8 of its x16 lanes (AMD SMI): check the slot or riser",)


def test_missing_package_or_failed_init_keeps_sysfs_silently(use, monkeypatch):
    base = sysfs_view(tuple(g["bus"] for g in mi250x(2)))
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import fails
    assert enrich(base) is base
    smi = use(fake_amdsmi(mi250x(2), fail_init=True))
    assert enrich(base) is base and smi.calls == ["init"]  # no shut_down after a failed init


def test_no_amd_gpu_does_not_import_amdsmi(use):
    smi = use(fake_amdsmi(mi250x(2)))
    nvidia = Topology(gpus=(GPU(0, "NVIDIA"),), source="sysfs:/")
    assert enrich(nvidia) is nvidia and smi.calls == []


def test_required_without_amdsmi_is_one_line_error(use, monkeypatch):
    base = sysfs_view(tuple(g["bus"] for g in mi250x(2)))
    use(fake_amdsmi(mi250x(2), fail_init=True))
    with pytest.raises(InputError, match=r"^--source amdsmi: AMD SMI cannot be used: Error code: 8 \| AMDSMI_STATUS_INIT_ERROR") as e:
        enrich(base, required=True)
    assert "--source sysfs" in str(e.value) and "\n" not in str(e.value)  # the package's message is multi-line
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    with pytest.raises(InputError, match="amdsmi package cannot be imported.*nodemap\\[amd\\]"):
        enrich(Topology(), required=True)


# --- through discover: the sources `auto` and `amdsmi` -------------------------------


@pytest.fixture
def live_node(monkeypatch, use):
    """discover() of this machine reading a 4-GCD sysfs view and the fake AMD SMI."""
    import nodemap.topology.discover as discover

    gpus = mi250x(4)
    monkeypatch.setattr(discover, "_read_sysfs", lambda: sysfs_view(tuple(g["bus"] for g in gpus)))
    monkeypatch.setattr(discover, "_has_sysfs", lambda: True)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    for var in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    return gpus


@pytest.mark.parametrize("source", ["auto", "amdsmi"])
def test_discover_enriches_and_applies_rocr_visible_devices_once(live_node, use, monkeypatch, source):
    from nodemap.topology.discover import discover

    use(fake_amdsmi(live_node))
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "2")
    t = discover(source=source)
    assert t.source == "sysfs:/+amdsmi" and {g.model for g in t.gpus} == {"AMD Instinct MI250X"}
    assert [g.visible for g in t.gpus] == [False, False, True, False]
    assert t.notes.count("ROCR_VISIBLE_DEVICES=2 shows GPUs 2") == 1


def test_discover_source_amdsmi_without_it_exits_2(live_node, monkeypatch):
    from nodemap.topology.discover import discover

    monkeypatch.setitem(sys.modules, "amdsmi", None)
    assert discover().source == "sysfs:/"  # auto: silent
    with pytest.raises(InputError, match="^--source amdsmi: ") as e:
        discover(source="amdsmi")
    assert e.value.exit_code == 2
