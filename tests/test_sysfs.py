"""The sysfs reader, the allowed set and snapshot tarballs, on hand-made roots."""

from __future__ import annotations

import bz2
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time

import pytest
from hypothesis import assume, given, settings, strategies as st

from nodemap.errors import InputError
from nodemap.topology import allowed, paths, snapshot, sysfs
from nodemap.topology.model import Link
from nodemap.topology.cpuset import CpuSet

CPU = "sys/devices/system/cpu"
NODE = "sys/devices/system/node"
GPU_PATH = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"
NIC_PATH = "sys/devices/pci0000:40/0000:40:02.0/0000:41:00.0"
ETH_PATH = "sys/devices/pci0000:40/0000:40:03.0"


def put(root, rel: str, text: str = "") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def link(root, rel: str, target: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, path)


def cpu(root, i: int, package: int, core: int, threads: str, online: bool = True) -> None:
    put(root, f"{CPU}/cpu{i}/online", "1" if online else "0")
    if not online:
        return  # the kernel removes topology/ of an offline CPU
    t = f"{CPU}/cpu{i}/topology"
    put(root, f"{t}/physical_package_id", str(package))
    put(root, f"{t}/core_id", str(core))
    put(root, f"{t}/thread_siblings_list", threads)
    put(root, f"{t}/core_siblings_list", "0-3")
    for k, (level, kind, size, shared) in enumerate([(1, "Data", "32K", threads), (2, "Unified", "1024K", threads),
                                                      (3, "Unified", "30M", "0-3")]):
        c = f"{CPU}/cpu{i}/cache/index{k}"
        for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared),
                            ("coherency_line_size", 64), ("ways_of_associativity", 8)):
            put(root, f"{c}/{name}", str(value))


def pci(root, path: str, cls: str, vendor: str, numa: int, local: str, speed: str = "", width: str = "") -> None:
    bus = path.rsplit("/", 1)[1]
    for name, value in (("class", cls), ("vendor", vendor), ("device", "0x2330"), ("numa_node", numa),
                        ("local_cpulist", local), ("current_link_speed", speed), ("current_link_width", width)):
        if value != "":
            put(root, f"{path}/{name}", str(value))
    # absolute links: they must resolve inside the snapshot, never in the live /sys
    link(root, f"sys/bus/pci/devices/{bus}", "/" + path)


@pytest.fixture
def node(tmp_path):
    """4 online CPUs (2 cores x 2 threads) and 1 offline; node0 holds CPUs 0-1,
    node1 is memory-only, CPUs 2-3 are in no node; a GPU and an HCA report
    numa_node -1; a RoCE NIC; a plain Ethernet NIC; lo is virtual."""
    r = tmp_path / "snap"
    put(r, f"{CPU}/online", "0-3")
    put(r, f"{CPU}/possible", "0-4")
    for i, (core, threads) in enumerate([(0, "0,2"), (1, "1,3"), (0, "0,2"), (1, "1,3")]):
        cpu(r, i, 0, core, threads)
    cpu(r, 4, 0, 0, "", online=False)
    put(r, "proc/cpuinfo", "\n\n".join(f"processor\t: {i}\nmodel name\t: Test CPU 9000  " for i in range(5)))
    put(r, f"{NODE}/node0/cpulist", "0-1")
    put(r, f"{NODE}/node0/meminfo", "Node 0 MemTotal:       16384 kB\nNode 0 MemFree: 1 kB")
    put(r, f"{NODE}/node0/distance", "10 20")
    put(r, f"{NODE}/node1/cpulist", "")
    put(r, f"{NODE}/node1/meminfo", "Node 1 MemTotal:       8192 kB")
    put(r, f"{NODE}/node1/distance", "20 10")
    put(r, "sys/devices/pci0000:00/0000:00:01.0/class", "0x060400")
    put(r, "sys/devices/pci0000:00/0000:00:01.0/numa_node", "1")
    link(r, "sys/bus/pci/devices/0000:00:01.0", "../../../devices/pci0000:00/0000:00:01.0")
    pci(r, GPU_PATH, "0x030200", "0x10de", -1, "0-3", "32.0 GT/s PCIe", "16")
    pci(r, NIC_PATH, "0x020700", "0x15b3", -1, "0-1", "16.0 GT/s PCIe", "16")
    pci(r, ETH_PATH, "0x020000", "0x8086", 0, "0-1", "8.0 GT/s PCIe", "4")
    pci(r, "sys/devices/pci0000:00/0000:00:02.0", "0x030000", "0x1a03", 0, "0-1")  # ASPEED VGA: not a GPU
    link(r, "sys/class/infiniband/mlx5_0", f"../../{NIC_PATH.removeprefix('sys/')}/infiniband/mlx5_0")
    for port, layer in (("1", "InfiniBand"),):
        put(r, f"{NIC_PATH}/infiniband/mlx5_0/ports/{port}/state", "4: ACTIVE")
        put(r, f"{NIC_PATH}/infiniband/mlx5_0/ports/{port}/rate", "200 Gb/sec (4X HDR)")
        put(r, f"{NIC_PATH}/infiniband/mlx5_0/ports/{port}/link_layer", layer)
    link(r, "sys/class/net/ib0", f"/{NIC_PATH}/net/ib0")
    put(r, f"{NIC_PATH}/net/ib0/type", "32")
    link(r, "sys/class/net/eno1", f"../../{ETH_PATH.removeprefix('sys/')}/net/eno1")
    put(r, f"{ETH_PATH}/net/eno1/type", "1")
    link(r, "sys/class/net/lo", "../../devices/virtual/net/lo")
    put(r, "sys/devices/virtual/net/lo/type", "772")
    put(r, "proc/meminfo", "MemTotal:       99999 kB")
    return r


def test_cpus_cores_packages_caches(node):
    t = sysfs.read(node)
    assert [(p.os_index, p.online) for p in t.pus] == [(0, True), (1, True), (2, True), (3, True), (4, False)]
    assert [(c.os_index, c.package, str(c.cpuset)) for c in t.cores] == [(0, 0, "0,2"), (1, 0, "1,3")]
    assert [(p.os_index, str(p.cpuset), p.cpu_model) for p in t.packages] == [(0, "0-3", "Test CPU 9000  ")]
    assert sorted((c.level, c.kind, c.size, str(c.cpuset)) for c in t.caches) == [
        (1, "data", 32 << 10, "0,2"), (1, "data", 32 << 10, "1,3"), (2, "unified", 1 << 20, "0,2"),
        (2, "unified", 1 << 20, "1,3"), (3, "unified", 30 << 20, "0-3")]
    assert t.cpuset == CpuSet.parse("0-3") and t.allowed_cpus == t.cpuset


def test_numa_memory_only_and_homeless_cpus(node):
    t = sysfs.read(node)
    assert [(n.os_index, str(n.cpuset), n.memory) for n in t.numa_nodes] == [(0, "0-1", 16 << 20), (1, "", 8 << 20)]
    assert t.distances == ((10, 20), (20, 10))
    assert t.machine.memory == 24 << 20
    assert any("CPUs 2-3 are in no NUMA node" in n for n in t.notes)


def test_pci_paths_links_and_numa_minus_one(node):
    t = sysfs.read(node)
    gpu_dev = t.pci("0000:01:00.0")
    assert gpu_dev.pci_path == ("pci0000:00", "0000:00:01.0")
    assert (gpu_dev.class_id, gpu_dev.vendor_id, gpu_dev.link_gen, gpu_dev.link_width) == (0x0302, 0x10DE, 5, 16)
    assert gpu_dev.link_speed == pytest.approx(63.02, abs=0.01)
    assert gpu_dev.numa_node == 1  # from its bridge
    assert t.pci("0000:41:00.0").numa_node == 0  # from local_cpulist 0-1 = node 0
    note = next(n for n in t.notes if "numa_node -1" in n)
    assert "0000:01:00.0 (NUMA 1 from bridge 0000:00:01.0)" in note and "0000:41:00.0 (NUMA 0 from local_cpulist)" in note


def test_gpus_in_bus_order_without_onboard_vga(node):
    t = sysfs.read(node)
    assert [(g.index, g.vendor, g.pci_bus_id, g.pcie_gen, g.pcie_width, g.memory, g.uuid) for g in t.gpus] == [
        (0, "NVIDIA", "0000:01:00.0", 5, 16, 0, "")]


def kfd_node(root, n: int, bus: int = -1, simd: int = 0) -> None:
    props = f"simd_count {simd}" + (f"\nlocation_id {bus << 8}\ndomain 0" if bus >= 0 else "")
    put(root, f"sys/class/kfd/kfd/topology/nodes/{n}/properties", props)


def kfd_link(root, n: int, m: int, to: int, kind: int, weight: int, mbs: int = 50000) -> None:
    put(root, f"sys/class/kfd/kfd/topology/nodes/{n}/io_links/{m}/properties",
        f"type {kind}\nversion_major 0\nnode_from {n}\nnode_to {to}\nweight {weight}\nmax_bandwidth {mbs}")


def test_kfd_io_links_become_xgmi_links(node):
    # three MI250X GCDs at c1/c5/d1: KFD node 0 is the CPU, 1-3 the GPUs
    for k, bus in enumerate((0xC1, 0xC5, 0xD1)):
        pci(node, f"sys/devices/pci0000:c0/0000:c0:01.0/0000:{bus:02x}:00.0", "0x038000", "0x1002", 1, "2-3")
        kfd_node(node, k + 1, bus, simd=220)
    kfd_node(node, 0)
    kfd_link(node, 0, 0, 1, kind=2, weight=20)  # CPU-GPU PCIe: no GPU pair
    kfd_link(node, 1, 0, 0, kind=2, weight=20)
    kfd_link(node, 1, 1, 2, kind=11, weight=15, mbs=200000)  # GCDs of one package: direct
    kfd_link(node, 2, 0, 1, kind=11, weight=15, mbs=200000)  # the same pair seen from the other end
    kfd_link(node, 1, 2, 3, kind=11, weight=30)  # two hops
    kfd_link(node, 2, 1, 3, kind=2, weight=40)  # PCIe peer: not xGMI
    t = sysfs.read(node)
    assert [(g.key, g.vendor, g.pci_bus_id) for g in t.gpus][1:] == [
        ("GPU1", "AMD", "0000:c1:00.0"), ("GPU2", "AMD", "0000:c5:00.0"), ("GPU3", "AMD", "0000:d1:00.0")]
    assert t.links == (Link("GPU1", "GPU2", "xGMI", count=1, bandwidth=200.0, hops=1),
                       Link("GPU1", "GPU3", "xGMI", count=1, bandwidth=50.0, hops=2))
    assert [paths.path(t, "GPU1", k).label for k in ("GPU2", "GPU3")] == ["XGMI1", "XGMI2"]
    assert paths.path(t, "GPU2", "GPU3").label == "PIX"


def test_nics_rdma_first_then_plain_netdevs(node):
    t = sysfs.read(node)
    assert [(n.name, n.kind, n.pci_bus_id, n.netdevs, n.numa_node) for n in t.nics] == [
        ("mlx5_0", "InfiniBand", "0000:41:00.0", ("ib0",), 0), ("eno1", "Ethernet", "0000:40:03.0", ("eno1",), 0)]
    (port,) = t.nic("mlx5_0").ports
    assert (port.number, port.state, port.link_layer, port.rate_gbps) == (1, "ACTIVE", "InfiniBand", 200.0)


def virtual_net(root, name: str, flags: str = "0x1003", operstate: str = "up", kind: str = "1", part: str = "") -> None:
    put(root, f"sys/devices/virtual/net/{name}/type", kind)
    put(root, f"sys/devices/virtual/net/{name}/flags", flags)
    put(root, f"sys/devices/virtual/net/{name}/operstate", operstate)
    put(root, f"sys/devices/virtual/net/{name}/speed", "10000")  # veth's constant, whatever tc shapes
    if part:
        (root / f"sys/devices/virtual/net/{name}/{part}").mkdir()
    link(root, f"sys/class/net/{name}", f"../../devices/virtual/net/{name}")


def test_a_namespace_without_pci_nics_has_its_virtual_ones(node):
    """A network namespace (a test cluster's node, a container) sees only veths: those that carry
    its traffic are its NICs, of unknown rate; a rail whose cable is out is a NIC that is down."""
    for name in ("rail0", "rail1", "ctl", "ctl0", "ifb0"):
        virtual_net(node, name, **{"rail1": {"operstate": "down"}, "ctl": {"part": "bridge"},
                                   "ctl0": {"part": "brport"}, "ifb0": {"flags": "0x82", "operstate": "down"}}.get(name, {}))
    t = sysfs.read(node)
    assert [n.name for n in t.nics] == ["mlx5_0", "eno1"]  # PCI NICs seen: veths are views or plumbing
    for name in ("ib0", "eno1"):
        os.remove(node / f"sys/class/net/{name}")
    os.remove(node / "sys/class/infiniband/mlx5_0")
    t = sysfs.read(node)
    assert [(n.name, n.kind, n.pci_bus_id, n.netdevs, n.numa_node) for n in t.nics] == [
        ("rail0", "Ethernet", "", ("rail0",), -1), ("rail1", "Ethernet", "", ("rail1",), -1)]
    assert [(p.state, p.rate_gbps) for n in t.nics for p in n.ports] == [("up", 0.0), ("down", 0.0)]


def test_a_link_without_carrier_is_down_before_operstate_says_so(node):
    """The kernel writes operstate from the carrier up to a second later (its link watch): a rail
    just cut reads "up" without a carrier, and is down; an administratively down interface has no
    readable carrier and says "down" itself."""
    for name in ("rail0", "rail1"):
        virtual_net(node, name)
    put(node, "sys/devices/virtual/net/rail0/carrier", "0")
    put(node, "sys/devices/virtual/net/rail1/carrier", "1")
    for name in ("ib0", "eno1"):
        os.remove(node / f"sys/class/net/{name}")
    os.remove(node / "sys/class/infiniband/mlx5_0")
    t = sysfs.read(node)
    assert [(n.name, [p.state for p in n.ports]) for n in t.nics] == [("rail0", ["down"]), ("rail1", ["up"])]
    put(node, "sys/devices/virtual/net/rail1/operstate", "unknown")  # no link state to judge, whatever the carrier
    put(node, "sys/devices/virtual/net/rail1/carrier", "0")
    assert sysfs.read(node).nic("rail1").ports == ()


def test_roce_omnipath_and_ipoib_kinds(node):
    put(node, f"{NIC_PATH}/infiniband/mlx5_0/ports/1/link_layer", "Ethernet")
    os.remove(node / "sys/class/infiniband/mlx5_0")
    os.rename(node / f"{NIC_PATH}/infiniband/mlx5_0", node / f"{NIC_PATH}/infiniband/hfi1_0")
    link(node, "sys/class/infiniband/hfi1_0", f"/{NIC_PATH}/infiniband/hfi1_0")
    assert sysfs.read(node).nics[0].kind == "OmniPath"
    os.remove(node / "sys/class/infiniband/hfi1_0")
    link(node, "sys/class/infiniband/mlx5_0", f"/{NIC_PATH}/infiniband/hfi1_0")
    assert sysfs.read(node).nics[0].kind == "Ethernet"  # RoCE
    os.remove(node / "sys/class/infiniband/mlx5_0")
    assert sysfs.read(node).nic("ib0").kind == "InfiniBand"  # an IPoIB netdev without its RDMA device


def test_symlinks_never_leave_the_root(node):
    # an absolute link to /proc/self and a '..' chain past the root stay inside the snapshot
    link(node, "sys/class/net/evil", "/proc/self/../../../../../proc/self")
    put(node, "proc/self/type", "1")
    fs = sysfs.Root(node)
    assert fs.resolve("sys/class/net/evil") == "/proc/self"
    assert fs.read("sys/bus/pci/devices/0000:01:00.0/vendor") == "0x10de"
    assert "evil" not in [n.name for n in sysfs.read(node).nics]  # no PCI device behind it


def test_offline_cpu_is_in_no_core_and_not_allowed(node):
    t = sysfs.read(node)
    assert 4 not in CpuSet.union_all(c.cpuset for c in t.cores)
    assert 4 not in t.allowed_cpus and 4 not in t.cpuset


def test_no_numa_directory_gives_one_node_with_meminfo(node):
    import shutil

    shutil.rmtree(node / NODE)
    t = sysfs.read(node)
    assert [(n.os_index, str(n.cpuset), n.memory) for n in t.numa_nodes] == [(0, "0-3", 99999 * 1024)]
    assert any("one NUMA node 0" in n for n in t.notes)


def test_mask_files_win_over_lists(node):
    put(node, f"{CPU}/cpu0/topology/thread_siblings", "00000005")
    put(node, f"{CPU}/cpu0/topology/thread_siblings_list", "0")  # stale
    assert [str(c.cpuset) for c in sysfs.read(node).cores][0] == "0,2"


def test_arm_cpuinfo_with_one_model_for_all(node):
    put(node, "proc/cpuinfo", "Processor\t: ARMv7 Processor rev 1 (v7l)\nprocessor\t: 0\n\nprocessor\t: 1\n\n"
        "Hardware\t: X")
    assert sysfs.read(node).packages[0].cpu_model == "ARMv7 Processor rev 1 (v7l)"


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize("make, problem", [
    (lambda r: None, "is empty"),
    (lambda r: put(r, "proc/cpuinfo", ""), "has no sys/devices/system/cpu"),
    (lambda r: put(r, f"{CPU}/online", "0"), "holds no cpuN directory"),
])
def test_empty_or_partial_snapshot(tmp_path, make, problem):
    make(tmp_path)
    with pytest.raises(InputError, match=problem) as e:
        sysfs.read(tmp_path)
    assert str(tmp_path) in str(e.value) and "\n" not in str(e.value)


def test_damaged_files_are_input_errors(node):
    put(node, f"{CPU}/cpu1/topology/core_id", "banana")
    with pytest.raises(InputError, match=r"cpu1/topology/core_id: expected a number"):
        sysfs.read(node)
    put(node, f"{CPU}/cpu1/topology/core_id", "1")
    put(node, f"{CPU}/cpu1/cache/index2/shared_cpu_list", "3-1")
    with pytest.raises(InputError, match="shared_cpu_list: descending range"):
        sysfs.read(node)


def test_symlink_loop_is_an_input_error(node):
    link(node, f"{CPU}/cpu0/topology/core_id.loop", "core_id.loop")
    os.remove(node / f"{CPU}/cpu0/topology/core_id")
    link(node, f"{CPU}/cpu0/topology/core_id", "core_id.loop")
    with pytest.raises(InputError, match="symbolic links"):
        sysfs.read(node)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_is_an_input_error(node):
    (node / f"{CPU}/cpu0/topology/core_id").chmod(0)
    with pytest.raises(InputError, match="permission denied"):
        sysfs.read(node)


def test_directory_in_place_of_a_file_is_an_input_error(node):
    os.remove(node / f"{CPU}/cpu0/topology/core_id")
    (node / f"{CPU}/cpu0/topology/core_id").mkdir()
    with pytest.raises(InputError, match="is a directory"):
        sysfs.read(node)


# --- the allowed set ------------------------------------------------------------------------


def test_snapshot_status_restricts_and_live_affinity_does_not(node, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert sysfs.read(node).allowed_cpus == CpuSet.parse("0-3")  # live affinity never applies to a snapshot
    put(node, "proc/self/status", "Name:\tx\nCpus_allowed_list:\t1-3\nMems_allowed_list:\t1\n")
    t = sysfs.read(node)
    assert t.allowed_cpus == CpuSet.parse("1-3") and t.allowed_mems == CpuSet([1])
    assert [p.allowed for p in t.pus] == [False, True, True, True, False]
    # asked for, the live affinity {0} joins in: {0} & {1-3} is empty, which is said and ignored
    assert any("hold no online CPU" in n for n in sysfs.read(node, this_process=True).notes)


def test_cgroup_v2_effective_cpuset_of_nearest_ancestor(node):
    put(node, "proc/mounts", "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0")
    put(node, "proc/self/cgroup", "0::/job/step")
    put(node, "sys/fs/cgroup/job/cpuset.cpus.effective", "2-3")
    put(node, "sys/fs/cgroup/job/cpuset.mems.effective", "0")
    (node / "sys/fs/cgroup/job/step").mkdir()
    t = sysfs.read(node)
    assert t.allowed_cpus == CpuSet.parse("2-3") and t.allowed_mems == CpuSet([0])
    assert any("cgroup cpuset /sys/fs/cgroup/job" in n for n in t.notes)


def test_cgroup_v1_noprefix_and_proc_self_cpuset(node):
    put(node, "proc/mounts", "none /dev/cpuset cgroup rw,relatime,cpuset,noprefix 0 0")
    put(node, "proc/self/cpuset", "/batch")
    put(node, "dev/cpuset/batch/cpus", "0,3")
    put(node, "dev/cpuset/batch/mems", "1")
    t = sysfs.read(node)
    assert t.allowed_cpus == CpuSet([0, 3]) and t.allowed_mems == CpuSet([1])


def test_live_allowed_set_is_within_affinity():
    if not os.path.isdir("/sys/devices/system/cpu") or not hasattr(os, "sched_getaffinity"):
        pytest.skip("no Linux sysfs here")
    t = sysfs.read("/")
    assert t.allowed_cpus and t.allowed_cpus.issubset(CpuSet(os.sched_getaffinity(0)))
    whole = sysfs.read("/", this_process=False)
    assert t.allowed_cpus.issubset(whole.allowed_cpus)
    assert allowed.apply(t) == t  # idempotent


def test_live_read_is_fast():
    if not os.path.isdir("/sys/devices/system/cpu"):
        pytest.skip("no Linux sysfs here")
    sysfs.read("/")
    best = min(_timed(lambda: sysfs.read("/")) for _ in range(3))
    assert best < 0.05, f"reading this machine's sysfs took {best * 1e3:.1f} ms"


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# --- snapshots ------------------------------------------------------------------------------


def _tar(path, members) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _file(name: str, data: bytes = b"x") -> tuple:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_tarball_reads_like_the_directory(node, tmp_path):
    path = tmp_path / "snap.tar.bz2"
    with tarfile.open(path, "w:bz2") as tar:
        tar.add(node, arcname="Some-Machine")
    a, b = snapshot.read_tarball(path), snapshot.read_dir(node.parent)
    assert a.source == f"sysfs:{path}"
    assert a.to_dict() | {"source": "", "notes": []} == b.to_dict() | {"source": "", "notes": []}
    assert snapshot.open_input(path).gpus == a.gpus


def test_a_tarball_is_read_in_memory(node, tmp_path, monkeypatch):
    """Nothing is unpacked to disk (creating and removing the members took
    10-40x reading them, issue 37): read with no usable TMPDIR."""
    path = tmp_path / "snap.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(node, arcname="Some-Machine")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    assert snapshot.read_tarball(path).pus == snapshot.read_dir(node.parent).pus


def test_a_tarball_reads_within_twice_its_tree_and_decompression(fixtures, tmp_path):
    """CPU time, best of 3 (a loaded machine stretches all alike): reading
    a tarball costs what reading its tree and decompressing it cost, not
    10-40x the tree (unpacking it to disk, issue 37)."""
    path = fixtures / "hwloc-linux" / "128ia64-17n4s2c.tar.bz2"
    snapshot.unpack(str(path), str(tmp_path))
    tree, packed = snapshot.find_root(str(tmp_path)), path.read_bytes()

    def best(read) -> float:
        times = []
        for _ in range(3):
            t = time.process_time()
            read()
            times.append(time.process_time() - t)
        return min(times)

    floor = best(lambda: snapshot.read_dir(tree)) + best(lambda: bz2.decompress(packed))
    assert best(lambda: snapshot.read_tarball(path)) < 2 * floor


def _tree_of(read) -> object:
    """What a reader made of a tarball: its tree's contents, or its error."""
    try:
        tree = read()
    except InputError as e:
        return str(e)
    if tree is None:
        return None
    return tree.dirs, tree.links, {name: tree.data(name) for name in tree.files}


def test_the_walk_reads_the_fixtures_as_tarfile_reads_them(fixtures):
    for path in sorted((fixtures / "hwloc-linux").glob("*.tar.bz2")):
        walked = _tree_of(lambda: snapshot._walked(str(path)))
        with tarfile.open(path, "r:*", tarinfo=snapshot._counted()) as t:
            assert walked == _tree_of(lambda: snapshot._members(t, str(path))), path.name


@pytest.mark.parametrize("compress", ["bz2", "gz", "xz", ""])
def test_a_tarball_the_walk_reads_is_read_without_tarfile(node, tmp_path, compress):
    """tarfile's import alone cost 4-12 ms of `topo --input X.tar.bz2`, its
    open a second decompression of the first block (issue 37)."""
    path = tmp_path / f"snap.tar.{compress}"
    with tarfile.open(path, f"w:{compress}", format=tarfile.GNU_FORMAT) as tar:  # as GNU tar writes them (hwloc's)
        tar.add(node, arcname="Some-Machine")
        files = sum(m.isfile() for m in tar.getmembers())
    code = ("import sys; from nodemap.topology import snapshot; tree = snapshot.load(sys.argv[1]); "
            "print(len(tree.files), 'tarfile' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(files), "False"]


_PART = st.sampled_from(["sys", "a", "b" * 60, "c" * 120, "..", ".", "", "d\u00e9", "e/"])


@given(members=st.lists(st.tuples(st.lists(_PART, min_size=1, max_size=4).map("/".join),
                                  st.sampled_from(["dir", "file", "old file", "symlink"]),
                                  st.sampled_from(["", "x", "/sys/a", "../" * 40 + "t"])), max_size=8),
       form=st.sampled_from([tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT, tarfile.PAX_FORMAT]))
@settings(max_examples=300, deadline=None)
def test_the_walk_reads_any_tarball_as_tarfile_reads_it(members, form):
    """The walk reads GNU and ustar headers itself; whatever it reads (it
    gives None where tarfile has to) is read or refused as tarfile's
    members are, prefix fields, long names and link targets included."""
    raw = io.BytesIO()
    try:
        with tarfile.open(fileobj=raw, mode="w", format=form) as t:
            for name, kind, value in members:
                info = tarfile.TarInfo(name)
                if kind == "dir":
                    info.type = tarfile.DIRTYPE
                elif kind == "symlink":
                    info.type, info.linkname = tarfile.SYMTYPE, value
                else:  # an old file: type "\0", a directory when its name ends in a slash
                    info.type, info.size = tarfile.REGTYPE if kind == "file" else tarfile.AREGTYPE, len(value)
                t.addfile(info, io.BytesIO(value.encode()) if info.isfile() else None)
    except ValueError:  # a name this format cannot hold
        assume(False)
    data = raw.getvalue()
    walked = _tree_of(lambda: snapshot._walk(io.BytesIO(data), "t"))
    if walked is not None:
        with tarfile.open(fileobj=io.BytesIO(data), tarinfo=snapshot._counted()) as t:
            assert walked == _tree_of(lambda: snapshot._members(t, "t"))


@pytest.mark.parametrize("member, problem", [
    (_file("/etc/evil"), "outside the target"),
    (_file("snap/a"), "comes twice"),
    (_file("snap/a/b"), "below a file member"),
    (_file("snap/../../evil"), "outside the target"),
    ((lambda i: (setattr(i, "type", tarfile.CHRTYPE), (i, None))[1])(tarfile.TarInfo("snap/dev/tty")), "device file"),
    ((lambda i: (setattr(i, "type", tarfile.LNKTYPE), setattr(i, "linkname", "snap/a"), (i, None))[2])(
        tarfile.TarInfo("snap/b")), "hard link"),
])
def test_hostile_tarballs_are_refused(tmp_path, member, problem):
    path = tmp_path / "bad.tar.gz"
    _tar(path, [_file("snap/a"), member])
    with pytest.raises(InputError, match=problem):
        snapshot.read_tarball(path)
    assert not (tmp_path.parent / "evil").exists()


def test_member_below_a_symlink_is_refused(tmp_path):
    path = tmp_path / "bad.tar.gz"
    sym = tarfile.TarInfo("snap/sys")
    sym.type, sym.linkname = tarfile.SYMTYPE, "/etc"
    _tar(path, [(sym, None), _file("snap/sys/evil")])
    with pytest.raises(InputError, match="below a symlink"):
        snapshot.read_tarball(path)


def test_size_limit_and_damaged_archives(tmp_path, monkeypatch):
    path = tmp_path / "big.tar.gz"
    _tar(path, [_file("snap/a", b"x" * 2000)])
    monkeypatch.setattr(snapshot, "MAX_BYTES", 1000)
    with pytest.raises(InputError, match="more than 0 MiB"):
        snapshot.read_tarball(path)
    (tmp_path / "junk.tar.gz").write_bytes(b"\x1f\x8b" + b"junk" * 10)
    with pytest.raises(InputError, match="cannot unpack"):
        snapshot.read_tarball(tmp_path / "junk.tar.gz")


def test_tarball_without_a_snapshot(tmp_path):
    path = tmp_path / "two.tar.gz"
    _tar(path, [_file("a/sys/x"), _file("b/sys/x")])
    with pytest.raises(InputError, match="holds 2 snapshots"):
        snapshot.read_tarball(path)
    _tar(path, [_file("a/proc/x")])
    with pytest.raises(InputError, match="holds no sys/"):
        snapshot.read_tarball(path)


def test_nodes_undercounting_proc_meminfo_get_a_note(node):
    # the fixture's nodes hold 24 MiB, its /proc/meminfo 99999 kB
    (note,) = [n for n in sysfs.read(node).notes if "undercount" in n]
    assert note.startswith("NUMA nodes hold 0.0 GiB in sysfs but /proc/meminfo has 0.1 GiB")
    put(node, "proc/meminfo", "MemTotal:       24576 kB")
    assert not any("undercount" in n for n in sysfs.read(node).notes)


def test_usnic_without_port_link_layers_is_ethernet(node):
    """Cisco usNIC registers an RDMA device; older drivers give its ports no link_layer."""
    os.remove(node / f"{NIC_PATH}/infiniband/mlx5_0/ports/1/link_layer")
    os.remove(node / "sys/class/infiniband/mlx5_0")
    os.rename(node / f"{NIC_PATH}/infiniband/mlx5_0", node / f"{NIC_PATH}/infiniband/usnic_0")
    link(node, "sys/class/infiniband/usnic_0", f"/{NIC_PATH}/infiniband/usnic_0")
    assert sysfs.read(node).nic("usnic_0").kind == "Ethernet"
