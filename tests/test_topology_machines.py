"""Topology on more kinds of machines (issue 17), each on a small hand-made input:
GPU memory exposed as NUMA nodes (Grace Hopper, POWER9 + V100), hwloc's NVLink
conventions by version, GPU memory sizes in KiB, NUL-terminated sysfs files,
NIC kinds from driver and link layer."""

from __future__ import annotations

from test_hwloc_xml import gpu_v2, node_v2, parse
from test_sysfs import cpu, link, put

from nodemap.mapping.plan import plan
from nodemap.mapping.request import Request
from nodemap.topology import paths, render, sysfs

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"

# --- NVLink counts by the hwloc version that wrote the file -----------------------------


def a100_pair(per_link_mbs: int, version: str | None) -> str:
    """Two A100s joined by 12 NVLink 3 links, as hwloc's NVLinkBandwidth writes them."""
    pcis = gpu_v2("0000:07:00.0", 20, "NVIDIA A100-SXM4-40GB") + gpu_v2("0000:0f:00.0", 30, "NVIDIA A100-SXM4-40GB")
    mbs = 12 * per_link_mbs
    hetero = f"""<distances2hetero nbobjs="2" kind="25" name="NVLinkBandwidth"><indexes length="1">OSDev:21 OSDev:31</indexes>
    <u64values length="1">1000000 {mbs} {mbs} 1000000</u64values></distances2hetero>"""
    text = node_v2(pcis=pcis, hetero=hetero)
    if version is not None:
        text = text.replace('gp_index="1">', f'gp_index="1">\n<info name="hwlocVersion" value="{version}"/>', 1)
    return text


def test_hwloc_2_9_0_counts_50000_per_a100_link():
    t = parse(a100_pair(50000, "2.9.0"))
    assert paths.path(t, "GPU0", "GPU1").label == "NV12"
    assert t.links[0].count == 12 and t.links[0].bandwidth == 12 * 25.0 and t.links[0].version == 3
    assert any("hwloc 2.9.0" in n and "50000" in n for n in t.notes)


def test_later_hwloc_counts_25000_per_link():
    t = parse(a100_pair(25000, "2.10.0"))
    assert paths.path(t, "GPU0", "GPU1").label == "NV12"
    assert any("hwloc 2.10.0" in n and "25000" in n for n in t.notes)


def test_without_a_version_the_link_count_rule_decides():
    old = parse(a100_pair(50000, None))  # 24 links at 25000: more than an A100 has
    assert paths.path(old, "GPU0", "GPU1").label == "NV12"
    assert any("does not say which hwloc" in n and "12" in n and "50000" in n for n in old.notes)
    new = parse(a100_pair(25000, None))
    assert paths.path(new, "GPU0", "GPU1").label == "NV12"
    assert any("assumed 25000" in n for n in new.notes)


def test_a_version_wins_over_the_count_rule():
    # hwloc 2.10 with 24 x 25000 would be a 24-link A100: the version is believed, the count kept
    t = parse(a100_pair(50000, "2.10.0"))
    assert paths.path(t, "GPU0", "GPU1").label == "NV24"


# --- GPU memory sizes are KiB -------------------------------------------------------------


def test_cuda_global_memory_size_is_kib_with_or_without_the_suffix():
    v100 = gpu_v2("0000:04:00.0", 20, "Tesla V100-SXM2-16GB").replace("83886080KiB", "16515072")
    h100 = gpu_v2("0000:05:00.0", 30)
    t = parse(node_v2(pcis=v100 + h100))
    assert [g.memory for g in t.gpus] == [16515072 << 10, 83886080 << 10]
    assert "15.8 GiB" in render.tree(t) or "16 GiB" in render.tree(t)


# --- NUL-terminated sysfs files ------------------------------------------------------------


def test_masks_ending_in_nul_read_like_the_kernel_writes_them(tmp_path):
    r = tmp_path / "arm"
    put(r, f"{CPU}/online", "0-3")
    for i in range(4):
        cpu(r, i, 0, i, str(i))
        # 128arm-2pa2n8cluster4co: "00000000,00000001\n\0"
        (r / f"{CPU}/cpu{i}/topology/core_siblings").write_bytes(b"00000000,0000000f\n\x00")
        (r / f"{CPU}/cpu{i}/topology/thread_siblings").write_bytes(f"00000000,{1 << i:08x}\x00".encode())
    t = sysfs.read(r)
    assert [str(p.cpuset) for p in t.packages] == ["0-3"] and len(t.cores) == 4


# --- NIC kinds -------------------------------------------------------------------------------


def rdma_node(tmp_path, name: str, driver: str, layer: str):
    r = tmp_path / name
    put(r, f"{CPU}/online", "0-1")
    for i in range(2):
        cpu(r, i, 0, i, str(i))
    dev = "sys/devices/pci0000:00/0000:00:02.0/0000:03:00.0"
    for attr, value in (("class", "0x0c0600" if driver != "ib_qib" else "0x0c0600"), ("vendor", "0x1077"),
                        ("numa_node", "-1")):
        put(r, f"{dev}/{attr}", value)
    link(r, "sys/bus/pci/devices/0000:03:00.0", "/" + dev)
    link(r, f"{dev}/driver", f"/sys/bus/pci/drivers/{driver}")
    (r / f"sys/bus/pci/drivers/{driver}").mkdir(parents=True)
    put(r, f"{dev}/infiniband/{name}/ports/1/link_layer", layer)
    put(r, f"{dev}/infiniband/{name}/ports/1/state", "4: ACTIVE")
    link(r, f"sys/class/infiniband/{name}", f"/{dev}/infiniband/{name}")
    return sysfs.read(r)


def test_qlogic_qib_is_infiniband_and_hfi1_driver_is_omnipath(tmp_path):
    assert rdma_node(tmp_path, "qib0", "ib_qib", "InfiniBand").nic("qib0").kind == "InfiniBand"
    # an OPA HFI reports link_layer InfiniBand: its driver says Omni-Path
    assert rdma_node(tmp_path, "opa_x", "hfi1", "InfiniBand").nic("opa_x").kind == "OmniPath"


# --- Grace Hopper: GPU memory as a NUMA node ------------------------------------------------


def gh200_pair(tmp_path, vendor_files: bool = True):
    """Two Grace Hopper superchips: Grace k = NUMA k with CPUs 4k..4k+3;
    GPU k's memory is NUMA node 2+k (CPU-less, named by numa_status);
    a NIC on each Grace's PCIe; no PCI vendor files when `vendor_files` is False."""
    r = tmp_path / "gh200"
    put(r, f"{CPU}/online", "0-7")
    for i in range(8):
        cpu(r, i, i // 4, i % 4, str(i))
        put(r, f"{CPU}/cpu{i}/topology/core_siblings_list", "0-3" if i < 4 else "4-7")
        for k in range(3):
            put(r, f"{CPU}/cpu{i}/cache/index{k}/shared_cpu_list", "0-3" if (i < 4 and k == 2) else
                "4-7" if k == 2 else str(i))
    put(r, "proc/cpuinfo", "\n\n".join(f"processor\t: {i}\nCPU implementer\t: 0x41" for i in range(8)))
    sizes = {0: 120 << 20, 1: 120 << 20, 2: 94 << 20, 3: 94 << 20}
    for n, kib in sizes.items():
        put(r, f"{NODE}/node{n}/cpulist", {0: "0-3", 1: "4-7"}.get(n, ""))
        put(r, f"{NODE}/node{n}/meminfo", f"Node {n} MemTotal:       {kib} kB")
        put(r, f"{NODE}/node{n}/distance", " ".join(str(10 if n == m else 40 if n < 2 and m < 2 else 80)
                                                    for m in range(4)))
    put(r, "proc/meminfo", f"MemTotal:       {sum(sizes.values())} kB")
    for k in range(2):
        gpu = f"sys/devices/pci000{9 + 8 * k:x}:00/000{9 + 8 * k:x}:00:00.0/000{9 + 8 * k:x}:01:00.0"
        bus = f"000{9 + 8 * k:x}:01:00.0"
        put(r, f"{gpu}/class", "0x030200")
        if vendor_files:
            put(r, f"{gpu}/vendor", "0x10de")
        put(r, f"{gpu}/numa_node", str(k))
        put(r, f"{gpu}/local_cpulist", "0-3" if k == 0 else "4-7")
        link(r, f"sys/bus/pci/devices/{bus}", "/" + gpu)
        put(r, f"proc/driver/nvidia/gpus/{bus}/numa_status",
            f"Node:      {2 + k}\nStatus:    online\nAddress:   400000000000\nSize:      5e00000000")
        nic = f"sys/devices/pci000{k}:00/000{k}:00:00.0/000{k}:01:00.0"
        nbus = f"000{k}:01:00.0"
        for attr, value in (("class", "0x020700"), ("vendor", "0x15b3"), ("numa_node", str(k)),
                            ("local_cpulist", "0-3" if k == 0 else "4-7")):
            put(r, f"{nic}/{attr}", value)
        link(r, f"sys/bus/pci/devices/{nbus}", "/" + nic)
        put(r, f"{nic}/infiniband/mlx5_{k}/ports/1/link_layer", "InfiniBand")
        link(r, f"sys/class/infiniband/mlx5_{k}", f"/{nic}/infiniband/mlx5_{k}")
    return r


def test_gpu_memory_nodes_belong_to_their_gpu(tmp_path):
    t = sysfs.read(gh200_pair(tmp_path))
    assert [(n.os_index, n.kind, n.pci_bus_id, str(n.cpuset)) for n in t.numa_nodes] == [
        (0, "", "", "0-3"), (1, "", "", "4-7"), (2, "GPUMemory", "0009:01:00.0", ""),
        (3, "GPUMemory", "0011:01:00.0", "")]
    assert t.machine.memory == 240 << 30  # the Graces' memory only
    assert [(g.key, g.numa_node, str(g.cpuset), g.memory) for g in t.gpus] == [
        ("GPU0", 0, "0-3", 94 << 30), ("GPU1", 1, "4-7", 94 << 30)]
    assert [n.os_index for n in t.host_numa_nodes] == [0, 1]
    assert [n.os_index for n in t.gpu_memory_nodes(t.gpus[1])] == [3]
    assert not any("undercount" in n for n in t.notes)


def test_gpus_found_from_the_driver_without_pci_vendor_files(tmp_path):
    t = sysfs.read(gh200_pair(tmp_path, vendor_files=False))
    assert [(g.vendor, g.pci_bus_id) for g in t.gpus] == [("NVIDIA", "0009:01:00.0"), ("NVIDIA", "0011:01:00.0")]


def test_tree_shows_gpu_memory_under_the_gpu_and_matrix_has_c2c(tmp_path):
    t = sysfs.read(gh200_pair(tmp_path))
    tree = render.tree(t)
    assert "memory only" not in tree
    gpu_line = next(line for line in tree.splitlines() if "GPU1" in line)
    assert "memory NUMANode P#3 (GPUMemory, 94 GiB)" in gpu_line
    assert "Machine (240 GiB total)" in tree
    assert paths.path(t, "GPU0", "mlx5_0").label == "C2C"
    assert paths.path(t, "GPU0", "mlx5_1").label == "SYS"
    assert paths.path(t, "mlx5_0", "mlx5_1").label == "SYS"
    m = render.matrix(t)
    header, gpu0 = m.splitlines()[:2]
    assert header.split()[-3:] == ["NUMA", "Affinity", "GPU"] or "GPU NUMA ID" in header
    assert gpu0.split()[-1] == "2"  # GPU NUMA ID: the node holding its memory
    assert "C2C  = Connection traversing NVLink-C2C" in m


def test_plan_keeps_each_rank_on_its_gpus_grace(tmp_path):
    t = sysfs.read(gh200_pair(tmp_path))
    p = plan(t, Request(tasks=2))
    got = sorted((b.gpus, str(b.cpus), str(b.mems)) for b in p.tasks)
    assert got == [((0,), "0-3", "0"), ((1,), "4-7", "1")]


def test_power9_gpu_memory_is_not_host_memory(tmp_path):
    r = gh200_pair(tmp_path)
    put(r, "proc/cpuinfo", "\n\n".join(f"processor\t: {i}\ncpu\t\t: POWER9, altivec supported" for i in range(8)))
    t = sysfs.read(r)
    assert t.machine.memory == 240 << 30 and not t.links  # no C2C on POWER
    assert paths.path(t, "GPU0", "mlx5_0").label == "NODE"


def test_gpu_memory_node_from_hwloc_xml():
    gpu = gpu_v2("0000:04:00.0", 20, "Tesla V100-SXM2-16GB").replace(
        '<info name="CUDAGlobalMemorySize" value="83886080KiB"/>', "")
    mem = ('<object type="NUMANode" os_index="255" subtype="GPUMemory" cpuset="0x00000003" nodeset="0x80,,,,,,,0x0"'
           ' local_memory="16106127360"><info name="PCIBusID" value="0000:04:00.0"/></object>')
    t = parse(node_v2(numa_extra=mem, pcis=gpu))
    node = t.numa(255)
    assert (node.kind, node.pci_bus_id, str(node.cpuset)) == ("GPUMemory", "0000:04:00.0", "")
    assert t.machine.memory == 2048 and t.gpus[0].numa_node == 0
    assert t.gpus[0].memory == 16106127360  # no CUDA size in the file: the node's


def test_topology_json_round_trip_keeps_gpu_memory_nodes(tmp_path):
    from nodemap.topology.model import Topology

    t = sysfs.read(gh200_pair(tmp_path))
    assert Topology.from_json(t.to_json()) == t
