"""Tree and matrix views on hand-built nodes (fixture nodes: test_cli_topo.py)."""

from __future__ import annotations


from test_paths import NV4, sample_node

from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import GPU, Cache, Core, Link, NumaNode, Package, PU, Topology, replace
from nodemap.topology.render import matrix, tree
from nodemap.units import format_size_short


def _after(text: str, first: str, then: str) -> bool:
    i = text.index(first)
    return text.index(then, i) > i


def test_format_size_short():
    assert format_size_short(141 << 30) == "141 GiB"
    assert format_size_short(36 << 20) == "36 MiB"
    assert format_size_short(3 << 29) == "1.5 GiB"
    assert format_size_short(512) == "512 B"


def test_tree_shows_packages_numa_caches_and_condensed_cores():
    out = tree(sample_node())
    assert out.startswith("Machine (512 GiB total)  [source: test]")
    assert "Package L#0 P#0 Intel Xeon" in out and "Package L#1 P#1 Intel Xeon" in out
    assert "NUMANode P#1 (256 GiB)" in out
    assert "L3 L#0 (36 MiB): Cores 0-23 (24, PUs 0-23,48-71)" in out
    assert "L3 L#1 (36 MiB): Cores 24-47 (24, PUs 24-47,72-95)" in out


def test_devices_sit_under_their_numa_node():
    out = tree(sample_node())
    assert _after(out, "NUMANode P#0", "GPU0 NVIDIA H200, 141 GiB, 0000:18:00.0, PCIe gen5 x16")
    assert _after(out, "NUMANode P#1", "GPU2 NVIDIA")
    assert out.index("GPU0") < out.index("NUMANode P#1") < out.index("GPU2")
    assert "NIC mlx5_0 (InfiniBand), 0000:19:00.0, port 1 ACTIVE 400 Gb/s, netdev ib0" in out


def test_unknown_locality_hidden_gpu_restrictions_and_notes():
    t = sample_node()
    lost = GPU(3, "NVIDIA", "A100", visible=False)
    pus = tuple(replace(p, allowed=p.os_index < 8) for p in t.pus[:-1]) + (PU(95, online=False),)
    t = replace(t, gpus=t.gpus + (lost,), pus=pus, allowed_mems=CpuSet([0]), notes=("guessed X",))
    out = tree(t)
    assert _after(out, "Devices of unknown locality", "GPU3 NVIDIA A100 [hidden by CUDA_VISIBLE_DEVICES]")
    assert "Offline PUs: 95" in out
    assert "Allowed PUs: 0-7 (of 0-94)" in out
    assert "Allowed NUMA nodes: 0 (of 0-1)" in out
    assert out.rstrip().endswith("- guessed X")


def test_256_pu_node_fits_a_screen():
    # 2 packages x 4 NUMA x 4 L3 (CCD) x 8 cores x 2 threads = 256 PUs
    cores, caches, nodes = [], [], []
    for c in range(128):
        cores.append(Core(c % 64, c // 64, CpuSet([c, c + 128])))
    for l3 in range(16):
        caches.append(Cache(3, "unified", 32 << 20, CpuSet.union_all(cores[i].cpuset for i in range(l3 * 8, l3 * 8 + 8))))
    for n in range(8):
        nodes.append(NumaNode(n, CpuSet.union_all(c.cpuset for c in caches[n * 2:n * 2 + 2]), 64 << 30))
    pk = [Package(p, CpuSet.union_all(n.cpuset for n in nodes[p * 4:p * 4 + 4]), "AMD EPYC 7763") for p in range(2)]
    t = Topology(packages=tuple(pk), numa_nodes=tuple(nodes), caches=tuple(caches), cores=tuple(cores),
                 pus=tuple(PU(i) for i in range(256)))
    out = tree(t)
    assert len(out.splitlines()) <= 40
    assert "L3 L#1 (32 MiB): Cores 8-15 (8, PUs 8-15,136-143)" in out


def test_memory_only_numa_node_and_spanning_l3():
    t = sample_node()
    one_l3 = (Cache(3, "unified", 64 << 20, CpuSet.parse("0-95")),)
    pkg = (Package(0, CpuSet.parse("0-95")),)
    t = replace(t, packages=pkg, caches=one_l3,
                            numa_nodes=t.numa_nodes + (NumaNode(2, CpuSet(), 16 << 30, "HBM"),))
    out = tree(t)
    assert "L3 (64 MiB) across NUMA 0-1" in out
    assert "NUMANode P#2 (HBM, 16 GiB) memory only" in out


def test_no_packages_no_cores_still_renders():
    t = Topology(pus=tuple(PU(i) for i in range(4)))
    assert "PUs 0-3" in tree(t)


def test_matrix_layout_like_nvidia_smi():
    t = sample_node(links=[Link("GPU0", "GPU2", count=18, bandwidth=18 * NV4)])
    lines = matrix(t).splitlines()
    head = lines[0].split()
    assert head[:6] == ["GPU0", "GPU1", "GPU2", "NIC0", "NIC1", "NIC2"]
    assert " ".join(head[6:]) == "CPU Affinity NUMA Affinity GPU NUMA ID"
    gpu0 = lines[1].split()
    assert gpu0 == ["GPU0", "X", "PXB", "NV18", "PIX", "PHB", "NODE", "0-23,48-71", "0", "N/A"]
    gpu2 = lines[3].split()
    assert gpu2[:4] == ["GPU2", "NV18", "SYS", "X"] and gpu2[-3:] == ["24-47,72-95", "1", "N/A"]
    nic0 = lines[4].split()
    assert nic0[0] == "NIC0" and nic0[-2:] == ["0-23,48-71", "0"]
    text = "\n".join(lines)
    assert "  PIX  = Connection traversing at most a single PCIe bridge" in text
    assert "  NV#  = Connection traversing a bonded set of # NVLinks" in text
    assert text.endswith("NIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n  NIC2: mlx5_2")


def test_matrix_without_devices_and_with_fallback_notes():
    assert matrix(Topology()) == "No GPUs or NICs found.\n"
    t = sample_node()
    t = replace(t, pci_devices=())
    out = matrix(t)
    assert "Notes:\n  - PCI path unknown: class from NUMA locality" in out
