"""The peaks table: GPU memory, NVLink and PCIe limits."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from nodemap.bench.peaks import HBM, PCIE_LANE_GBS, Peak, hbm_peak, path_peak, pcie_peak
from nodemap.topology import paths

GIB = 2**30


@pytest.mark.parametrize("name, mem_gib, gbs", [
    ("NVIDIA H200", 141, 4800.0),
    ("NVIDIA H200 NVL", 141, 4800.0),
    ("NVIDIA H100 80GB HBM3", 80, 3350.0),
    ("NVIDIA H100 PCIe", 80, 2000.0),
    ("NVIDIA H100 NVL", 94, 3900.0),
    ("NVIDIA GH200 480GB", 96, 4000.0),
    ("NVIDIA GH200 144G HBM3e", 144, 4900.0),
    ("NVIDIA A100-SXM4-40GB", 40, 1555.0),
    ("NVIDIA A100-SXM4-80GB", 80, 2039.0),
    ("Tesla V100-SXM2-32GB", 32, 900.0),
    ("Tesla P100-SXM2-16GB", 16, 732.0),
    ("AMD Instinct MI250X", 64, 3276.8),
    ("AMD Instinct MI300X", 192, 5300.0),
])
def test_hbm_datasheets(name, mem_gib, gbs):
    p = hbm_peak(name, mem_gib * GIB)
    assert p is not None and p.gbs == gbs
    assert p.source  # every number says where it comes from


def test_unknown_gpu_has_no_peak():
    assert hbm_peak("NVIDIA GeForce GT 710", 2 * GIB) is None


def test_table_sources_name_a_bandwidth():
    for _, _, gbs, source in HBM:
        assert gbs > 0 and ("TB/s" in source or "GB/s" in source)


@pytest.mark.parametrize("gen, width, gbs", [(3, 16, 15.754), (4, 16, 31.504), (5, 16, 63.008), (5, 8, 31.504)])
def test_pcie(gen, width, gbs):
    assert pcie_peak(gen, width).gbs == pytest.approx(gbs)


def test_pcie_agrees_with_paths():
    # The efficiency of a copy and `nodemap topo`'s link figure must be one number.
    assert PCIE_LANE_GBS == paths._LANE_GBS


@given(st.integers(1, 5), st.sampled_from([1, 2, 4, 8, 16]))
def test_pcie_grows_with_generation_and_width(gen, width):
    p = pcie_peak(gen, width)
    assert pcie_peak(gen + 1, width).gbs > p.gbs
    if width < 16:
        assert pcie_peak(gen, width * 2).gbs == pytest.approx(2 * p.gbs, abs=2e-3)  # 3-decimal rounding


def test_path_peak():
    nv = path_peak("NV18", 478.125)
    assert nv.gbs == 478.125 and "NV18" in nv.source
    sys_ = path_peak("SYS", 63.0, pcie=Peak(63.008, "PCIe Gen5 x16"))
    assert sys_.gbs == 63.008 and "Gen5" in sys_.source
    assert path_peak("PIX", 0.0) is None


def test_an_xgmi_path_is_judged_by_its_own_bandwidth_not_pcie():
    """An AMD pair on xGMI moves more than their PCIe links: the PCIe peak
    would put the copy above 100% of its limit."""
    gen4 = Peak(31.5, "PCIe Gen4 x16")
    p = path_peak("XGMI2", 64.0, None)
    assert p.gbs == 64.0 and "xGMI" in p.source
    assert path_peak("PXB", 0.0, gen4).gbs == 31.5
