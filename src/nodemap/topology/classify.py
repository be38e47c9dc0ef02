"""What a PCI device is: the one classifier every discovery source uses.

A source says what it knows of a device (PCI class, vendor and device ids;
the driver bound, or whether a render node exists; its RDMA name and port
link layers) and asks here whether it is a GPU, whose it is, and what kind
of NIC it is. sysfs and hwloc XML once decided this apart and disagreed
(Intel's class 0380 data-center GPUs were GPUs in one and not the other).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

NVIDIA, AMD, INTEL, HPE_CRAY, CISCO = 0x10DE, 0x1002, 0x8086, 0x17DB, 0x1137
VENDORS = {NVIDIA: "NVIDIA", AMD: "AMD", INTEL: "Intel"}

# Classes that are GPUs by identity alone: NVIDIA VGA and 3D controllers,
# AMD 3D/display-other/processing accelerators (Instinct), Intel's
# display-other (Data Center GPU Max / Flex).
GPU_CLASSES = {NVIDIA: (0x0300, 0x0302), AMD: (0x0302, 0x0380, 0x1200), INTEL: (0x0380,)}
# Other display-class (03xx) functions of these vendors are GPUs only with a
# compute driver bound: on-board server VGA is not a GPU.
GPU_DRIVERS = {AMD: ("amdgpu",), INTEL: ("i915", "xe")}
# ATI ES1000 (Radeon 7000 family) on server boards: display only, whatever is bound
ONBOARD_DISPLAY = {AMD: (0x515E, 0x5969)}


def vendor_name(vendor_id: int, fallback: str = "") -> str:
    """'NVIDIA', 'AMD', 'Intel' from the PCI vendor id, else from a source's
    vendor text ("Advanced Micro Devices, Inc. [AMD/ATI]"), else that text."""
    if vendor_id in VENDORS:
        return VENDORS[vendor_id]
    low = fallback.lower()
    if "nvidia" in low:
        return "NVIDIA"
    if "advanced micro devices" in low or low.startswith("amd"):
        return "AMD"
    if "intel" in low:
        return "Intel"
    return fallback


def rocr_uuid(unique_id: object) -> str:
    """The name ROCr and HIP print for an AMD GPU and ROCR_VISIBLE_DEVICES
    accepts: "GPU-" and the device's 64-bit unique_id in 16 hex digits.
    Sources give the id bare: hwloc's RSMI backend writes AMDUUID as "%llx"
    ("7a3c15e2d1"), AMD SMI its asic_serial as "0x...". "" when unknown
    ("N/A": a GPU without unique_id, gfx8 and older)."""
    text = str(unique_id or "").strip()
    if text[:4].upper() == "GPU-":
        text = text[4:]
    try:
        uid = int(text, 16)
    except ValueError:
        return ""
    return f"GPU-{uid:016x}" if 0 < uid < 1 << 64 else ""


def is_gpu(class_id: int, vendor_id: int, device_id: int = 0, *, driver: Callable[[], str] | None = None,
           render_node: bool = False) -> bool:
    """Whether a PCI function is a GPU. `driver`: reads the bound driver's
    name when the source can (sysfs; called only when the class leaves it
    open); else `render_node`: a DRM render node exists (hwloc XML), which
    only a compute-capable driver creates."""
    if class_id in GPU_CLASSES.get(vendor_id, ()):
        return True
    if class_id >> 8 != 0x03 or vendor_id not in GPU_DRIVERS or device_id in ONBOARD_DISPLAY.get(vendor_id, ()):
        return False
    if driver is not None:
        return driver() in GPU_DRIVERS[vendor_id]
    return render_node


def nic_kind(name: str, vendor_id: int, link_layers: Iterable[str] = (), *, driver: str = "",
             rdma: bool = True, ipoib: bool = False) -> str:
    """Slingshot, OmniPath, InfiniBand or Ethernet for a NIC named `name`
    (its RDMA device, else its netdev) with its ports' link layers."""
    if name.startswith("cxi") or vendor_id == HPE_CRAY:
        return "Slingshot"
    if name.startswith("hfi1") or driver in ("hfi1", "opx"):
        return "OmniPath"  # OPA ports say link_layer InfiniBand: the driver tells (QLogic qib* is InfiniBand)
    if name.startswith("usnic") or vendor_id == CISCO:
        return "Ethernet"  # Cisco usNIC: verbs over UDP/Ethernet; old drivers give its ports no link_layer
    layers = {x for x in link_layers if x}
    if layers:
        return "InfiniBand" if "InfiniBand" in layers else "Ethernet"
    return "InfiniBand" if rdma or ipoib else "Ethernet"
