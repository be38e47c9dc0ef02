"""NVML enrichment against a fake pynvml shaped like real nodes."""

from __future__ import annotations

import sys
import types

import pytest

from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import GPU, Link, NumaNode, PciDevice, PU, Topology, replace
from nodemap.topology.nvml import apply_visible, enrich, hidden_gpus, nvlink_generation, parse_visible
from nodemap.topology.paths import path

HIDDEN = b"FFFFFFFF:FF:FF.0"


class NVMLError(Exception):
    pass


def fake_nvml(gpus: list[dict], p2p_bad=(), remote_type=True, fail_init=False) -> types.ModuleType:
    """A pynvml stand-in: handles are indexes; links[l] = (remote bus, type, version)."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_NVLINK_MAX_LINKS = 18
    m.NVML_FEATURE_ENABLED = 1
    m.NVML_P2P_CAPS_INDEX_READ = (0,)  # the tuple some releases define
    m.NVML_P2P_STATUS_OK = 0
    m.calls = []

    def init():
        if fail_init:
            raise NVMLError("Driver Not Loaded")

    def link(h, l):
        links = gpus[h].get("links", [])
        if l >= len(links):
            raise NVMLError("Not Supported")
        return links[l]

    def p2p(a, b, index):
        assert isinstance(index, int), "the caps index must be an int, not pynvml's tuple"
        m.calls.append((a, b))
        return 2 if {a, b} in [set(x) for x in p2p_bad] else 0

    def mig_handle(uuid):
        for i, g in enumerate(gpus):
            if uuid in g.get("migs", ()):
                return ("mig", i)
        raise NVMLError("Not Found")

    m.nvmlInit = init
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=gpus[h]["bus"])
    m.nvmlDeviceGetName = lambda h: gpus[h]["name"]
    m.nvmlDeviceGetUUID = lambda h: gpus[h]["uuid"]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=gpus[h]["mem"], free=0, used=0)
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetCpuAffinity = lambda h, n: (gpus[h]["cpus"] + [0] * n)[:n]
    m.nvmlDeviceGetMemoryAffinity = lambda h, n, scope: (gpus[h]["mems"] + [0] * n)[:n]
    m.nvmlDeviceGetArchitecture = lambda h: gpus[h].get("arch", 9)
    m.nvmlDeviceGetNvLinkState = lambda h, l: (link(h, l), 1)[1]
    m.nvmlDeviceGetNvLinkRemotePciInfo = lambda h, l: types.SimpleNamespace(busId=link(h, l)[0])
    m.nvmlDeviceGetNvLinkVersion = lambda h, l: link(h, l)[2]
    if remote_type:
        m.nvmlDeviceGetNvLinkRemoteDeviceType = lambda h, l: link(h, l)[1]
    m.nvmlDeviceGetP2PStatus = p2p
    m.nvmlDeviceGetHandleByUUID = mig_handle
    m.nvmlDeviceGetDeviceHandleFromMigDeviceHandle = lambda h: h[1]
    # MIG mode is on for GPUs with a "migs" entry; MIG device handles are ("mig", gpu, k)
    m.NVML_DEVICE_MIG_ENABLE = 1
    m.nvmlDeviceGetMigMode = lambda h: [1, 1] if "migs" in gpus[h] else [0, 0]
    m.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7 if "migs" in gpus[h] else 0

    def mig_at(h, k):
        if k >= len(gpus[h].get("migs", ())):
            raise NVMLError("Not Found")
        return ("mig", h, k)

    m.nvmlDeviceGetMigDeviceHandleByIndex = mig_at
    m.nvmlDeviceGetUUID = lambda h: gpus[h[1]]["migs"][h[2]] if isinstance(h, tuple) else gpus[h]["uuid"]
    return m


def h200x2() -> list[dict]:
    """Two H200 joined by 18 NVLink 4 links (NVML enum 6 = NVLINK_VERSION_4_0)."""
    bus = [b"00000000:19:00.0", b"00000000:B8:00.0"]
    return [
        dict(bus=bus[i], name="NVIDIA H200", uuid=f"GPU-{i}f3a0000-1111", mem=150754820096,
             cpus=[[0xFFFF_FFFF_FFFF, 0xFFFF << 48][i]],  # CPUs 0-47 / 48-63
             mems=[1 << i], links=[(bus[1 - i], 0, 6)] * 18)
        for i in range(2)
    ]


def dgx_hidden_switches(n=8) -> list[dict]:
    """A DGX H100-like node in a VM: NVSwitches hidden (bus id FFFFFFFF:FF:FF.0)."""
    return [
        dict(bus=f"00000000:{0x18 + 0x10 * i:02X}:00.0".encode(), name="NVIDIA H100 80GB HBM3",
             uuid=f"GPU-{i}0000000-abcd", mem=80 << 30, cpus=[0xFF << (8 * (i // 4))], mems=[1 << (i // 4)],
             links=[(HIDDEN, 255, 4)] * 18)
        for i in range(n)
    ]


def _sysfs_view(buses=("0000:19:00.0", "0000:b8:00.0")) -> Topology:
    nodes = (NumaNode(0, CpuSet.parse("0-47"), 1 << 40), NumaNode(1, CpuSet.parse("48-63"), 1 << 40))
    gpus = tuple(GPU(i, "NVIDIA", pci_bus_id=b) for i, b in enumerate(buses))
    return Topology(numa_nodes=nodes, pus=tuple(PU(i) for i in range(64)), gpus=gpus, source="sysfs:/")


@pytest.fixture
def use(monkeypatch):
    def install(module):
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module
    return install


def test_h200x2_gets_model_uuid_memory_affinity_and_nv18(use):
    nv = use(fake_nvml(h200x2()))
    t = enrich(_sysfs_view(), env={})
    g0, g1 = t.gpus
    assert (g0.model, g0.uuid, g0.memory) == ("NVIDIA H200", "GPU-0f3a0000-1111", 150754820096)
    assert (g0.pcie_gen, g0.pcie_width, g0.os_names) == (5, 16, ("nvml0",))
    assert g0.cpuset == CpuSet.parse("0-47") and g1.cpuset == CpuSet.parse("48-63")
    assert (g0.numa_node, g1.numa_node) == (0, 1)
    assert t.links == (Link("GPU0", "GPU1", "NVLink", 18, 450.0, 4),)
    assert path(t, "GPU0", "GPU1").label == "NV18"
    assert t.source == "sysfs:/+nvml"
    assert nv.calls == [(0, 1)]
    assert not any("P2P" in n for n in t.notes)


def test_dgx_with_hidden_switches_and_no_remote_type_function(use):
    use(fake_nvml(dgx_hidden_switches(), remote_type=False))
    t = enrich(Topology(source="sysfs:/"), env={})
    assert [g.key for g in t.gpus] == [f"GPU{i}" for i in range(8)]
    assert t.gpus[5].pci_bus_id == "0000:68:00.0" and t.gpus[5].numa_node == 1
    switch = [l for l in t.links if l.b == "NVSwitch"]
    assert len(switch) == 8 and {(l.count, l.version, l.bandwidth) for l in switch} == {(18, 4, 450.0)}
    assert path(t, "GPU0", "GPU7").label == "NV18"
    assert any("hidden" in n and "FFFFFFFF:FF:FF.0" in n for n in t.notes)


def test_visible_switch_by_remote_type_and_npu_link(use):
    gpus = dgx_hidden_switches(2)
    gpus[0]["links"] = [(b"00000000:C0:00.0", 2, 4)] * 12 + [(b"00000000:04:00.0", 1, 2)] * 2
    gpus[1]["links"] = [(b"00000000:C1:00.0", 2, 4)] * 12
    use(fake_nvml(gpus))
    t = enrich(Topology(), env={})
    assert Link("GPU0", "NVSwitch", "NVLink", 12, 12 * 25.0, 4) in t.links
    assert any(l.b == "CPU" and l.count == 2 for l in t.links)
    assert path(t, "GPU0", "GPU1").label == "NV12"
    assert not any("hidden" in n for n in t.notes)


def test_gpu_only_nvml_sees_is_appended_and_old_nvlinks_replaced(use):
    use(fake_nvml(h200x2()))
    base = _sysfs_view(buses=("0000:19:00.0",))
    stale = Link("GPU0", "GPU9", count=2)
    t = enrich(replace(base, links=(stale,)), env={})
    assert [(g.key, g.pci_bus_id) for g in t.gpus] == [("GPU0", "0000:19:00.0"), ("GPU1", "0000:b8:00.0")]
    assert stale not in t.links and path(t, "GPU1", "GPU0").label == "NV18"


def test_a_library_gpu_no_source_saw_keeps_the_librarys_index_only_when_the_source_saw_none():
    # one merge for NVML and AMD SMI (nvml.merged_gpus): sysfs saw GPU 4 only, so the library's GPU 0 on
    # another bus is appended after it; with no GPU from sysfs the library's own numbering stands
    from nodemap.topology.nvml import _SmiGpu, merged_gpus

    found = [_SmiGpu(0, None, "0000:19:00.0"), _SmiGpu(1, None, "0000:b8:00.0")]
    seen = replace(_sysfs_view(), gpus=(GPU(4, "NVIDIA", pci_bus_id="0000:b8:00.0"),))
    gpus, mine = merged_gpus(seen, found, "AMD", lambda g, f: replace(g, model=f"m{f.index}"))
    assert [(g.index, g.vendor, g.model, g.pci_bus_id) for g in gpus] == [
        (4, "NVIDIA", "m1", "0000:b8:00.0"), (5, "AMD", "m0", "0000:19:00.0")]
    assert mine["0000:19:00.0"].index == 5
    gpus, _ = merged_gpus(replace(seen, gpus=()), found[::-1], "AMD", lambda g, f: g)
    assert [(g.index, g.pci_bus_id) for g in gpus] == [(0, "0000:19:00.0"), (1, "0000:b8:00.0")]


def test_the_links_maximum_goes_into_the_model_where_the_source_left_it_out(use):
    # hwloc XML says the current PCIe link only; the GPU's PCIe peak and the check's link inventory read the
    # maximum from the model (was: the GPU kinds opened NVML per GPU for it, and never closed it)
    m = use(fake_nvml(h200x2()))
    m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16
    m.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 1  # idle: trained down
    base = _sysfs_view()
    known = PciDevice("0000:b8:00.0", 0x0302, link_gen=4, link_width=16, link_max_gen=4, link_max_width=16)
    pci = (PciDevice("0000:19:00.0", 0x0302, link_gen=1, link_width=16), known)
    t = enrich(replace(base, pci_devices=pci), env={})
    first = t.pci_of(t.gpus[0])
    assert (first.link_gen, first.link_width, first.link_max_gen, first.link_max_width) == (1, 16, 5, 16)
    assert t.pci_of(t.gpus[1]) == known  # a source's own maximum (sysfs) is kept
    del m.nvmlDeviceGetMaxPcieLinkGeneration  # an older nvidia-ml-py: nothing is made up
    t = enrich(replace(base, pci_devices=pci), env={})
    assert t.pci_of(t.gpus[0]).link_max_gen == 0


def test_one_session_starts_nvml_once_for_everything_in_it(use):
    # a check started and shut NVML down for the topology, the health counters and each step's busy sample
    from nodemap.check import inventory, node
    from nodemap.check.expectations import shipped
    from nodemap.topology import nvml

    m = use(fake_nvml(h200x2()))
    calls = []
    m.nvmlInit = lambda: calls.append("init")
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=0)
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: []

    def work():
        inventory.nvml_health(enrich(_sysfs_view(), env={}))
        assert nvml.gpu_activity() is not None and nvml.gpu_activity() is not None

    work()
    assert calls == ["init", "shutdown"] * 4  # each on its own, as outside a session
    calls.clear()
    nvml.session(work)()
    assert calls == ["init", "shutdown"]
    calls.clear()
    doc = node.run_health(shipped())  # this machine, NVML's two GPUs added by the fake
    assert calls == ["init", "shutdown"] and any(c.key.startswith("inventory/nvml/gpu") for c in doc.checks)


def test_p2p_failures_become_notes(use):
    use(fake_nvml(h200x2(), p2p_bad=[(0, 1)]))
    t = enrich(_sysfs_view(), env={})
    assert any("P2P read nvml0<->nvml1 not available" in n for n in t.notes)


def test_no_package_no_driver_leave_the_topology_alone(use, monkeypatch):
    base = _sysfs_view()
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    t = enrich(base, env={})
    assert t.gpus == base.gpus and "nvidia-ml-py is not installed" in t.notes[-1]
    use(fake_nvml(h200x2(), fail_init=True))
    t = enrich(base, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert t.source == "sysfs:/" and "Driver Not Loaded" in t.notes[0]
    assert [g.visible for g in t.gpus] == [False, True]  # visibility still applied
    assert enrich(Topology(source="sysfs:/"), env={}) == Topology(source="sysfs:/")  # no GPU: nothing to say


def test_cuda_visible_devices_by_uuid_prefix_and_index(use):
    use(fake_nvml(dgx_hidden_switches(4)))
    t = enrich(Topology(), env={"CUDA_VISIBLE_DEVICES": "GPU-30,1"})
    assert [g.visible for g in t.gpus] == [False, True, False, True]
    assert "CUDA_VISIBLE_DEVICES=GPU-30,1 shows GPUs 1,3" in t.notes


def test_cuda_visible_devices_mig(use):
    gpus = dgx_hidden_switches(2)
    gpus[1]["migs"] = ("MIG-7c3e0000-0000",)
    use(fake_nvml(gpus))
    t = enrich(Topology(), env={"CUDA_VISIBLE_DEVICES": "MIG-7c3e0000-0000"})
    assert [g.visible for g in t.gpus] == [False, True]


def test_mig_devices_are_read_under_their_gpu(use):
    gpus = dgx_hidden_switches(3)
    gpus[1]["migs"] = ("MIG-aa", "MIG-bb", "MIG-cc")
    gpus[2]["migs"] = ()  # MIG mode on, no instance created
    use(fake_nvml(gpus))
    t = enrich(Topology())
    assert [g.mig for g in t.gpus] == [(), ("MIG-aa", "MIG-bb", "MIG-cc"), ()]
    assert any("GPU 2 is in MIG mode with no MIG device" in n for n in t.notes)
    assert Topology.from_json(t.to_json()).gpus[1].mig == ("MIG-aa", "MIG-bb", "MIG-cc")
    # what nodemap run writes for a task of GPU 1 names GPU 1 (nodemap show checks it without NVML)
    assert parse_visible("MIG-bb", list(t.gpus)) == ({1}, "")


def test_parse_visible_rules():
    gpus = [GPU(i, "NVIDIA", uuid=u) for i, u in enumerate(["GPU-aa11", "GPU-aa22", "GPU-bb33"])]
    assert parse_visible(None, gpus) == (None, "")
    assert parse_visible("", gpus) == (set(), "")
    assert parse_visible("2,0", gpus) == ({0, 2}, "")
    assert parse_visible("GPU-bb", gpus) == ({2}, "")
    assert parse_visible("MIG-GPU-aa22/1/0", gpus) == ({1}, "")
    seen, note = parse_visible("0,GPU-aa,2", gpus)  # ambiguous prefix stops parsing, like CUDA
    assert seen == {0} and "'GPU-aa' names no GPU" in note
    seen, note = parse_visible("1,7,0", gpus)
    assert seen == {1} and "'7'" in note


def test_apply_visible_without_nvml_uses_indexes():
    t = _sysfs_view()
    assert apply_visible(t, env={}) is t
    hidden = apply_visible(t, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert [g.visible for g in hidden.gpus] == [False, True]


def amd_node(*vendors: str) -> Topology:
    return Topology(gpus=tuple(GPU(i, v, uuid=f"GPU-{i}{i}aa") for i, v in enumerate(vendors)))


@pytest.mark.parametrize("env, shown", [
    ({"ROCR_VISIBLE_DEVICES": "3,1,2"}, [1, 2, 3]),
    # HIP indexes what ROCr shows, in ROCr's order: 0 -> GPU3, 2 -> GPU2
    ({"ROCR_VISIBLE_DEVICES": "3,1,2", "HIP_VISIBLE_DEVICES": "0,2"}, [2, 3]),
    ({"ROCR_VISIBLE_DEVICES": "GPU-33,GPU-11", "CUDA_VISIBLE_DEVICES": "1"}, [1]),  # HIP's alias
    ({"ROCR_VISIBLE_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": ""}, []),  # HIP's own wins
    ({"HIP_VISIBLE_DEVICES": "2"}, [2]),
])
def test_rocr_and_hip_visible_devices_hide_amd_gpus(env, shown):
    t = apply_visible(amd_node("AMD", "AMD", "AMD", "AMD"), env=env)
    assert [g.index for g in t.gpus if g.visible] == shown
    assert all(any(n.startswith(f"{k}=") for n in t.notes) for k in env if k != "CUDA_VISIBLE_DEVICES" or
               "HIP_VISIBLE_DEVICES" not in env)


def test_intel_gpus_are_chosen_by_ze_affinity_mask_not_cuda_visible_devices():
    t = Topology(gpus=tuple(GPU(i, "Intel", pci_bus_id=f"0000:{0x29 + i:02x}:00.0") for i in range(3))
                 + (GPU(3, "NVIDIA", pci_bus_id="0000:b8:00.0"),))
    assert hidden_gpus(t, {"ZE_AFFINITY_MASK": "1", "ZE_ENABLE_PCI_ID_DEVICE_ORDER": "1"})[0] == {0, 2}
    assert hidden_gpus(t, {"ZE_AFFINITY_MASK": "0.1,2.0"})[0] == {1}  # tiles of devices 0 and 2
    assert hidden_gpus(t, {"CUDA_VISIBLE_DEVICES": "0"})[0] == set()  # the one NVIDIA GPU is CUDA's 0
    assert hidden_gpus(t, {"CUDA_VISIBLE_DEVICES": ""})[0] == {3}


def test_each_vendor_reads_its_own_variables():
    t = apply_visible(amd_node("NVIDIA", "NVIDIA", "AMD", "AMD"),
                      env={"CUDA_VISIBLE_DEVICES": "1", "ROCR_VISIBLE_DEVICES": "1,7", "HIP_VISIBLE_DEVICES": "0"})
    assert [g.index for g in t.gpus if g.visible] == [1, 3]
    assert "ROCR_VISIBLE_DEVICES entry '7' names no GPU of this node; the runtime ignores it and all after it" in t.notes


@pytest.mark.parametrize("version,arch,gen", [(6, -1, 4), (4, 9, 4), (7, 9, 4), (4, -1, 3), (3, 7, 3), (2, 5, 2), (7, 10, 5), (0, -1, 0)])
def test_nvlink_generation(version, arch, gen):
    assert nvlink_generation(version, arch) == gen
