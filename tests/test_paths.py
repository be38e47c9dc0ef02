"""Path classes (nvidia-smi topo -m) on hand-built nodes covering every class."""

from __future__ import annotations


import pytest
from hypothesis import given, strategies as st

from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import GPU, NIC, Cache, Core, Link, NumaNode, Package, PciDevice, Port, PU, Topology, replace
from nodemap.topology.paths import (
    LEGEND, Path, cpu_affinity, device_keys, device_numa, path, path_matrix, pcie_gbs,
)

S = CpuSet.parse
NV4 = 25.0


def _pci(bus, numa, cpus, *bridges, cls=0x0302, gen=5, width=16):
    return PciDevice(bus, cls, numa_node=numa, cpuset=S(cpus), pci_path=tuple(bridges), link_gen=gen, link_width=width)


def sample_node(links=(), **over) -> Topology:
    """2 sockets x 24 cores x 2 threads, NUMA 0/1; a PCIe tree with every class.

    NUMA 0, host bridge pci0000:15, root port 15:01.0, switch 16:00.0:
      down port 17:00.0 -> GPU0 18:00.0; 17:01.0 -> mlx5_0 19:00.0;
      17:02.0 -> second switch 1a:00.0/1b:00.0 -> GPU1 1c:00.0
    pci0000:15 root port 15:02.0 -> mlx5_1 1d:00.0
    NUMA 0, host bridge pci0000:30 -> mlx5_2 31:00.0
    NUMA 1, host bridge pci0000:97 -> GPU2 98:00.0
    """
    c0, c1 = "0-23,48-71", "24-47,72-95"
    hb = ("pci0000:15", "0000:15:01.0", "0000:16:00.0")
    pci = (
        _pci("0000:18:00.0", 0, c0, *hb, "0000:17:00.0"),
        _pci("0000:19:00.0", 0, c0, *hb, "0000:17:01.0", cls=0x0207),
        _pci("0000:1c:00.0", 0, c0, *hb, "0000:17:02.0", "0000:1a:00.0", "0000:1b:00.0"),
        _pci("0000:1d:00.0", 0, c0, "pci0000:15", "0000:15:02.0", cls=0x0207),
        _pci("0000:31:00.0", 0, c0, "pci0000:30", "0000:30:01.0", cls=0x0207),
        _pci("0000:98:00.0", 1, c1, "pci0000:97", "0000:97:01.0"),
    )
    gpus = tuple(
        GPU(i, "NVIDIA", "NVIDIA H200", 141 << 30, bus, f"GPU-{i}aaa", numa, S(c), 5, 16)
        for i, (bus, numa, c) in enumerate([("0000:18:00.0", 0, c0), ("0000:1c:00.0", 0, c0), ("0000:98:00.0", 1, c1)])
    )
    port = (Port(1, "ACTIVE", "InfiniBand", 400.0),)
    nics = (
        NIC("mlx5_0", "InfiniBand", "0000:19:00.0", 0, S(c0), port, ("ib0",)),
        NIC("mlx5_1", "InfiniBand", "0000:1d:00.0", 0, S(c0), port, ("ib1",)),
        NIC("mlx5_2", "Ethernet", "0000:31:00.0", 0, S(c0), (Port(1, "ACTIVE", "Ethernet", 100.0),), ("eth0",)),
    )
    cores = tuple(Core(i % 24, i // 24, CpuSet([i, i + 48])) for i in range(48))
    topo = Topology(
        packages=(Package(0, S(c0), "Intel Xeon"), Package(1, S(c1), "Intel Xeon")),
        numa_nodes=(NumaNode(0, S(c0), 256 << 30), NumaNode(1, S(c1), 256 << 30)),
        distances=((10, 21), (21, 10)),
        caches=(Cache(3, "unified", 36 << 20, S(c0)), Cache(3, "unified", 36 << 20, S(c1))),
        cores=cores,
        pus=tuple(PU(i) for i in range(96)),
        pci_devices=pci,
        gpus=gpus,
        nics=nics,
        links=tuple(links),
        allowed_mems=S("0-1"),
        source="test",
    )
    return replace(topo, **over)


def test_every_pcie_class():
    t = sample_node()
    assert path(t, "GPU0", "GPU0") == Path("X", label="X")
    assert path(t, "GPU0", "mlx5_0").label == "PIX"
    assert path(t, "GPU0", "GPU1").label == "PXB"
    assert path(t, "GPU0", "mlx5_1").label == "PHB"
    assert path(t, "GPU0", "mlx5_2").label == "NODE"
    assert path(t, "GPU0", "GPU2").label == "SYS"
    assert path(t, "mlx5_2", "GPU2").label == "SYS"


def test_functions_of_one_device_share_everything_and_are_pix():
    t = sample_node()
    twin = replace(t.pci("0000:19:00.0"), bus_id="0000:19:00.1")
    t = replace(t, pci_devices=t.pci_devices + (twin,),
                            nics=t.nics + (NIC("mlx5_9", "InfiniBand", "0000:19:00.1", 0),))
    assert path(t, "mlx5_0", "mlx5_9").label == "PIX"


def test_direct_nvlink_counts_and_bandwidth():
    t = sample_node(links=[Link("GPU0", "GPU2", count=18, bandwidth=18 * NV4, version=4)])
    p = path(t, "GPU2", "GPU0")
    assert (p.kind, p.nvlinks, p.label) == ("NV", 18, "NV18")
    assert p.bandwidth_gbs == pytest.approx(450.0)
    assert path(t, "GPU0", "GPU1").label == "PXB"  # GPU1 has no NVLink


def test_pair_written_once_per_direction_is_not_counted_twice():
    t = sample_node(links=[Link("GPU0", "GPU2", count=4, bandwidth=100.0), Link("GPU2", "GPU0", count=4, bandwidth=100.0)])
    assert path(t, "GPU0", "GPU2").label == "NV4" and path(t, "GPU0", "GPU2").bandwidth_gbs == 100.0


def test_nvswitch_gives_the_smaller_link_count():
    links = [Link("GPU0", "NVSwitch", count=18, bandwidth=18 * 25.0),
             Link("GPU1", "NVSwitch", count=12, bandwidth=12 * 25.0),
             Link("NVSwitch", "GPU2", count=18, bandwidth=18 * 25.0)]
    t = sample_node(links=links)
    assert path(t, "GPU0", "GPU1").label == "NV12"
    assert path(t, "GPU1", "GPU0").bandwidth_gbs == pytest.approx(300.0)
    assert path(t, "GPU0", "GPU2").label == "NV18"  # link written switch-first
    assert path(t, "GPU0", "mlx5_0").label == "PIX"  # NICs never take NVLink


def test_links_of_other_kinds_are_not_nvlink():
    t = sample_node(links=[Link("GPU0", "GPU2", kind="Unknown", count=4)])
    assert path(t, "GPU0", "GPU2").label == "SYS"


def test_xgmi_is_its_own_class_with_hops():
    t = sample_node(links=[Link("GPU0", "GPU2", kind="xGMI", bandwidth=50.0, hops=1),
                           Link("GPU1", "GPU2", kind="xGMI", bandwidth=50.0)])
    assert [path(t, a, b).label for a, b in (("GPU2", "GPU0"), ("GPU1", "GPU2"))] == ["XGMI1", "XGMI"]
    assert path(t, "GPU0", "GPU2").rank < path(t, "GPU0", "GPU1").rank


def test_unknown_pci_path_falls_back_to_numa_and_says_so():
    t = sample_node()
    t = replace(t, pci_devices=tuple(d for d in t.pci_devices if d.bus_id != "0000:19:00.0"))
    p = path(t, "GPU0", "mlx5_0")
    assert p.label == "NODE" and "PCI path unknown" in p.note
    assert path(t, "GPU2", "mlx5_0").label == "SYS"


def test_unknown_numa_on_multi_numa_node_is_sys_with_note():
    t = sample_node()
    nic = NIC("hsn0", "Slingshot")  # no PCI id, no locality at all
    t = replace(t, nics=t.nics + (nic,))
    p = path(t, "GPU0", "hsn0")
    assert p.label == "SYS" and "assumed" in p.note
    assert device_numa(t, "hsn0") == -1
    assert cpu_affinity(t, "hsn0") == CpuSet()


def test_single_numa_node_makes_different_host_bridges_node():
    t = sample_node()
    t = replace(t, numa_nodes=t.numa_nodes[:1])
    t = replace(t, pci_devices=tuple(replace(d, pci_path=()) for d in t.pci_devices))
    assert path(t, "GPU0", "GPU2").label == "NODE"


def test_device_numa_from_cpuset_when_numa_node_is_minus_one():
    t = sample_node()
    g = replace(t.gpu(2), numa_node=-1)
    pci = tuple(replace(d, numa_node=-1) for d in t.pci_devices)
    t = replace(t, gpus=t.gpus[:2] + (g,), pci_devices=pci)
    assert device_numa(t, "GPU2") == 1
    # ...but not when the CPUs span both nodes
    g = replace(g, cpuset=S("0-95"))
    pci = tuple(replace(d, cpuset=S("0-95")) for d in pci)
    t = replace(t, gpus=t.gpus[:2] + (g,), pci_devices=pci)
    assert device_numa(t, "GPU2") == -1


def test_cpu_affinity_falls_back_to_the_numa_node():
    t = sample_node()
    g = replace(t.gpu(2), cpuset=CpuSet())
    pci = tuple(replace(d, cpuset=CpuSet()) for d in t.pci_devices)
    t = replace(t, gpus=t.gpus[:2] + (g,), pci_devices=pci)
    assert cpu_affinity(t, "GPU2") == S("24-47,72-95")


def test_pcie_bandwidth_from_generation_and_width():
    t = sample_node()
    assert pcie_gbs(t, "GPU0") == pytest.approx(63.0, rel=1e-3)
    assert path(t, "GPU0", "GPU2").bandwidth_gbs == pytest.approx(63.0, rel=1e-3)


def test_unknown_device_names_the_known_ones():
    with pytest.raises(KeyError, match="GPU0, GPU1, GPU2, mlx5_0"):
        path(sample_node(), "GPU0", "GPU7")


def test_matrix_keys_and_order():
    t = sample_node()
    assert device_keys(t) == ["GPU0", "GPU1", "GPU2", "mlx5_0", "mlx5_1", "mlx5_2"]
    m = path_matrix(t)
    assert list(m) == device_keys(t) and m["GPU0"]["mlx5_0"].label == "PIX"
    assert path_matrix(t, ["GPU2"]) == {"GPU2": {"GPU2": Path("X", label="X")}}


def test_legend_is_nvidia_smis():
    assert [s for s, _ in LEGEND] == ["X", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#"]


@given(st.sampled_from(["GPU0", "GPU1", "GPU2", "mlx5_0", "mlx5_1", "mlx5_2"]),
       st.sampled_from(["GPU0", "GPU1", "GPU2", "mlx5_0", "mlx5_1", "mlx5_2"]),
       st.booleans())
def test_path_is_symmetric_and_x_only_on_the_diagonal(a, b, nvlink):
    links = [Link("GPU0", "NVSwitch", count=18), Link("GPU2", "NVSwitch", count=18)] if nvlink else []
    t = sample_node(links=links)
    assert path(t, a, b) == path(t, b, a)
    assert (path(t, a, b).label == "X") == (a == b)
