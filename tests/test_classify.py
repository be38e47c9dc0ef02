"""One PCI classifier: sysfs and hwloc XML decide GPU, vendor and NIC kind alike."""

from __future__ import annotations

import pytest

from nodemap.topology import classify, sysfs
from test_hwloc_xml import drm_only, node_v2, parse
from test_sysfs import pci, put

# Intel Data Center GPU Max 1550 (Ponte Vecchio): class 0380, bound to i915
INTEL_MAX = ("0000:29:00.0", 0x0380, 0x8086, 0x0BD5)


def test_intel_display_other_class_is_a_gpu_in_every_source(tmp_path):
    # was: a GPU in the sysfs reader, not in the hwloc XML reader
    bus, cls, vendor, device = INTEL_MAX
    root = tmp_path / "snap"
    put(root, "sys/devices/system/cpu/online", "0")
    put(root, "sys/devices/system/cpu/cpu0/online", "1")
    pci(root, f"sys/devices/pci0000:29/{bus}", f"0x{cls:04x}00", f"0x{vendor:04x}", 0, "0")
    by_sysfs = sysfs.read(root)
    xml = (f'<object type="PCIDev" pci_busid="{bus}" pci_type="{cls:04x} [{vendor:04x}:{device:04x}] '
           f'[8086:0000] 2f"/>')
    by_hwloc = parse(node_v2(pcis=xml))
    assert [(g.pci_bus_id, g.vendor) for g in by_sysfs.gpus] == [(bus, "Intel")]
    assert [(g.pci_bus_id, g.vendor) for g in by_hwloc.gpus] == [(bus, "Intel")]


@pytest.mark.parametrize("cls, vendor, device, driver, render, want", [
    (0x0302, 0x10DE, 0x2330, None, False, True),  # H100: by class
    (0x0300, 0x10DE, 0x1DB6, None, False, True),  # a VGA-class Tesla
    (0x0380, 0x8086, 0x0BD5, None, False, True),  # Intel Max: by class
    (0x0380, 0x1002, 0x740C, None, False, True),  # MI250X
    (0x0300, 0x1002, 0x66A1, "amdgpu", False, True),  # MI50 in sysfs: its driver
    (0x0300, 0x1002, 0x66A1, None, True, True),  # MI50 in hwloc: its render node
    (0x0300, 0x1002, 0x66A1, "", False, False),  # no driver bound
    (0x0300, 0x1002, 0x515E, None, True, False),  # ES1000 on-board: never
    (0x0300, 0x1A03, 0x2000, None, True, False),  # ASPEED
    (0x0300, 0x102B, 0x0522, "mgag200", False, False),  # Matrox
    (0x0207, 0x15B3, 0x1021, None, False, False),  # ConnectX-7
])
def test_is_gpu(cls, vendor, device, driver, render, want):
    assert classify.is_gpu(cls, vendor, device, driver=None if driver is None else (lambda: driver),
                           render_node=render) is want


def test_the_driver_is_read_only_when_the_class_leaves_it_open():
    def never() -> str:
        raise AssertionError("read the driver of a device its class decides")

    assert classify.is_gpu(0x0302, 0x10DE, driver=never)
    assert not classify.is_gpu(0x0207, 0x15B3, driver=never)


def test_vendor_names():
    assert classify.vendor_name(0x8086) == "Intel"
    assert classify.vendor_name(0, "Advanced Micro Devices, Inc. [AMD/ATI]") == "AMD"
    assert classify.vendor_name(0, "Moore Threads") == "Moore Threads"


@pytest.mark.parametrize("name, vendor, layers, kw, want", [
    ("cxi0", 0x17DB, (), {}, "Slingshot"),
    ("hsn0", 0x17DB, (), {"rdma": False}, "Slingshot"),
    ("hfi1_0", 0x8086, ("InfiniBand",), {}, "OmniPath"),
    ("mlx5_0", 0x15B3, ("InfiniBand",), {"driver": "opx"}, "OmniPath"),
    ("usnic_0", 0x1137, (), {}, "Ethernet"),
    ("mlx5_1", 0x15B3, ("Ethernet",), {}, "Ethernet"),
    ("mlx5_2", 0x15B3, (), {}, "InfiniBand"),
    ("ib0", 0x15B3, (), {"rdma": False, "ipoib": True}, "InfiniBand"),
    ("eth0", 0x8086, (), {"rdma": False}, "Ethernet"),
])
def test_nic_kind(name, vendor, layers, kw, want):
    assert classify.nic_kind(name, vendor, layers, **kw) == want


def test_hwloc_drm_only_intel_gpu_with_a_render_node(tmp_path):
    # an Intel Flex/Arc at class 0300 seen only as DRM devices counts as sysfs counts it with i915 bound
    t = parse(node_v2(pcis=drm_only("0000:4d:00.0", "8086:56c0")))
    assert [(g.pci_bus_id, g.vendor) for g in t.gpus] == [("0000:4d:00.0", "Intel")]
