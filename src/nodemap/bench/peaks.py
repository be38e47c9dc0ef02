"""Hardware limits a measured number is compared with.

Two tables: GPU model -> memory bandwidth (datasheets), PCIe generation x
width -> GB/s per direction. GB = 1e9 bytes, as every bandwidth in nodemap.

NVLink peaks are the bandwidth the topology's paths carry (`path_peak`),
at the per-link rate of nodemap.topology.nvml.NVLINK_GBS: the data rate
after line coding, as for PCIe (NVLink 4: 25 GB/s per link and direction,
18 links = 450 GB/s, NVIDIA's "900 GB/s bidirectional"), not the 26.5625
GB/s raw signalling rate `nvidia-smi nvlink -s` prints.

PCIe rates are after line coding (8b/10b for gen 1-2, 128b/130b for 3-5,
FLIT for 6) and before packet overhead: x16 gen5 = 63.0 GB/s; real DMA
reaches 80-90% of it (TLP headers, flow control).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..topology.model import Topology
    from .gpu.devices import Gpu

__all__ = ["Peak", "HBM", "PCIE_LANE_GBS", "hbm_peak", "pcie_peak", "path_peak", "dram_peak", "parse_dimm",
           "d2d_path", "host_class"]


@dataclass(frozen=True)
class Peak:
    gbs: float  # GB/s, one direction for links
    source: str  # where the number comes from, printed next to efficiencies


# (name pattern, minimum memory GiB or 0, GB/s, source). First match wins:
# specific variants (PCIe, NVL, 80GB) before the family name. Patterns match
# the CUDA/NVML product name ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB").
HBM: tuple[tuple[str, int, float, str], ...] = (
    (r"GH200", 120, 4900.0, "GH200 144GB datasheet HBM3e 4.9 TB/s"),
    (r"GH200", 0, 4000.0, "GH200 96GB datasheet HBM3 4.0 TB/s"),
    (r"H200", 0, 4800.0, "H200 datasheet HBM3e 4.8 TB/s"),
    (r"H100.*PCIe", 0, 2000.0, "H100 PCIe datasheet HBM2e 2.0 TB/s"),
    (r"H100 NVL", 0, 3900.0, "H100 NVL datasheet HBM3 3.9 TB/s"),
    (r"H100|H800", 0, 3350.0, "H100 SXM datasheet HBM3 3.35 TB/s"),
    (r"B200", 0, 8000.0, "B200 datasheet HBM3e 8.0 TB/s"),
    (r"A100.*PCIe.*80|A100 80GB PCIe", 0, 1935.0, "A100 80GB PCIe datasheet HBM2e 1.935 TB/s"),
    (r"A100", 70, 2039.0, "A100 80GB SXM datasheet HBM2e 2.039 TB/s"),
    (r"A100", 0, 1555.0, "A100 40GB datasheet HBM2 1.555 TB/s"),
    (r"A30\b", 0, 933.0, "A30 datasheet HBM2 933 GB/s"),
    (r"V100S", 0, 1134.0, "V100S datasheet HBM2 1134 GB/s"),
    (r"V100", 0, 900.0, "V100 datasheet HBM2 900 GB/s"),
    (r"P100", 14, 732.0, "P100 16GB datasheet HBM2 732 GB/s"),
    (r"P100", 0, 549.0, "P100 12GB datasheet HBM2 549 GB/s"),
    (r"L40S|L40\b", 0, 864.0, "L40/L40S datasheet GDDR6 864 GB/s"),
    (r"A10\b", 0, 600.0, "A10 datasheet GDDR6 600 GB/s"),
    (r"T4\b", 0, 320.0, "T4 datasheet GDDR6 320 GB/s"),
    (r"MI300X", 0, 5300.0, "MI300X datasheet HBM3 5.3 TB/s"),
    (r"MI300A", 0, 5300.0, "MI300A datasheet HBM3 5.3 TB/s"),
    (r"MI250X?", 0, 3276.8, "MI250X datasheet HBM2e 3.2768 TB/s"),
    (r"MI210", 0, 1638.4, "MI210 datasheet HBM2e 1.6384 TB/s"),
    (r"MI100", 0, 1228.8, "MI100 datasheet HBM2 1.2288 TB/s"),
)

# GB/s per lane per direction after line coding; the same figures as
# nodemap.topology.paths uses for a GPU's PCIe link.
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.9846, 4: 1.969, 5: 3.938, 6: 7.563}


def hbm_peak(model: str, memory_bytes: int = 0) -> Peak | None:
    """Datasheet memory bandwidth of a GPU model; None when not in the table."""
    gib = memory_bytes / 2**30
    for pattern, min_gib, gbs, source in HBM:
        if re.search(pattern, model, re.IGNORECASE) and gib >= min_gib:
            return Peak(gbs, source)
    return None


def pcie_peak(generation: int, width: int) -> Peak | None:
    per = PCIE_LANE_GBS.get(generation)
    if not per or width <= 0:
        return None
    return Peak(round(per * width, 3), f"PCIe Gen{generation} x{width} ({per:g} GB/s per lane per direction)")


LINK_LABELS = ("NV", "XGMI")  # path labels (topology.paths) of GPU links that carry their own bandwidth


def path_peak(label: str, bandwidth_gbs: float, pcie: Peak | None = None) -> Peak | None:
    """The peak of a topology path (nodemap.topology.paths.Path fields).

    NVLink and xGMI paths carry their own bandwidth; PCIe paths are limited
    by the slower device link, given as `pcie` when known.
    """
    if label.startswith(LINK_LABELS) and bandwidth_gbs > 0:
        fabric = "NVLink" if label.startswith("NV") else "xGMI"
        return Peak(bandwidth_gbs, f"{label} {fabric}, {bandwidth_gbs:g} GB/s per direction")
    if pcie is not None:
        return Peak(pcie.gbs, f"{label} via {pcie.source}")
    if bandwidth_gbs > 0:
        return Peak(bandwidth_gbs, f"{label} PCIe link, {bandwidth_gbs:g} GB/s per direction")
    return None


# --- host DRAM --------------------------------------------------------------------
# SMBIOS type 17 (Memory Device) offsets, DMTF DSP0134 3.x: data width in
# bits (0x0A), size (0x0C; 0 = empty slot), speed in MT/s (0x15, since 2.3),
# configured speed (0x20, since 2.7; what the controller really runs).
DMI_ENTRIES = "sys/firmware/dmi/entries"


@dataclass(frozen=True)
class Dimm:
    data_bits: int
    mts: int  # transfers per second, millions (configured speed when known)


def parse_dimm(raw: bytes) -> Dimm | None:
    """A populated DIMM from one raw type-17 record; None for an empty slot
    or a record too short or unknown to say."""
    if len(raw) < 0x17 or raw[0] != 17:
        return None
    length = raw[1]
    word = lambda off: int.from_bytes(raw[off:off + 2], "little") if off + 2 <= length else 0  # noqa: E731
    size, width = word(0x0C), word(0x0A)
    speed = word(0x20) or word(0x15)
    if size in (0, 0xFFFF) or width in (0, 0xFFFF) or speed in (0, 0xFFFF):
        return None
    return Dimm(width, speed)


def dram_peak(root: str = "/") -> Peak | None:
    """The machine's DRAM peak from its SMBIOS memory records: populated
    DIMMs x data width x configured speed, assuming one DIMM per channel
    (two per channel share it: give --peak then). None where unreadable."""
    import glob
    import os

    dimms = []
    for path in sorted(glob.glob(os.path.join(root, DMI_ENTRIES, "17-*", "raw"))):
        try:
            with open(path, "rb") as f:
                d = parse_dimm(f.read(256))
        except OSError:
            return None  # root-only on most systems: unknown, not zero
        if d is not None:
            dimms.append(d)
    if not dimms:
        return None
    gbs = sum(d.data_bits // 8 * d.mts for d in dimms) / 1000
    speeds = "/".join(sorted({str(d.mts) for d in dimms}))
    return Peak(gbs, f"SMBIOS: {len(dimms)} DIMMs x {dimms[0].data_bits} bit x {speeds} MT/s "
                     "(one DIMM per channel assumed; --peak overrides)")


PEAK_UNKNOWN = ("DRAM peak unknown: SMBIOS memory records (/sys/firmware/dmi/entries/17-*) are not readable "
                "here (root only, or a VM); give it with --peak GB/s (channels x MT/s x 8 B / 1000)")


# --- GPU paths ---------------------------------------------------------------


def host_class(gpu: Gpu, node: int) -> str:
    """NODE when the memory is on the GPU's NUMA node, SYS across nodes."""
    if node < 0 or gpu.numa < 0:
        return "NODE" if node < 0 else "?"
    return "NODE" if node == gpu.numa else "SYS"


def d2d_path(topo: Topology | None, a: Gpu, b: Gpu) -> tuple[str, Peak | None, str]:
    """(class label, peak, note) between two GPUs from the Topology."""
    pcie = min((p for p in (a.pcie, b.pcie) if p), key=lambda p: p.gbs, default=None)
    if topo is None or a.key.startswith("cuda") or b.key.startswith("cuda"):
        return "?", None, "GPU not found in the topology: no path class"
    from ..topology.paths import path

    p = path(topo, a.key, b.key)
    return p.label, path_peak(p.label, p.bandwidth_gbs, None if p.label.startswith(LINK_LABELS) else pcie), p.note
