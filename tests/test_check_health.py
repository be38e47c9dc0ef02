"""`nodemap check --level health`: nothing measured, the node against its
node class (--expect-topology) on replayed sysfs snapshots with injected
faults (one NIC more expected; a GPU link trained at x8 in a copy of a
snapshot), and on a node with no GPU, no NVML and no NIC."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from conftest import FIXTURES

import nodes
from nodemap.bench import harness
from nodemap.check import expectations
from nodemap.check import expected as exp
from nodemap.cli import main
from nodemap.slurm import verdict
from nodemap.topology import snapshot
from nodemap.topology.model import NIC, Port, Topology, replace

SNAP = FIXTURES / "hwloc-linux" / "32intel64-2p8co2t+8ve.tar.bz2"
# An NEC vector engine of that snapshot, x16 Gen3 behind a x16 switch port,
# made an NVIDIA GPU in the copy so the GPU rules apply to a real tree.
FLOOR = expectations.shipped().table(expectations.NodeClassRules).memory_floor
VE = "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/0000:3c:04.0/0000:3d:00.0"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    if not SNAP.exists():
        pytest.skip(f"fixture {SNAP} not found")
    dest = tmp_path_factory.mktemp("snap")
    snapshot.unpack(str(SNAP), str(dest))
    return snapshot.find_root(str(dest))


@pytest.fixture
def gpu_tree(tree, tmp_path):
    root = tmp_path / "node"
    shutil.copytree(tree, root, symlinks=True)
    (root / VE / "class").write_text("0x030200\n")
    (root / VE / "vendor").write_text("0x10de\n")
    return root


def check(capsys, *argv):
    code = main(["check", "--level", "health", *argv, "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else None), out.err


def export(capsys, src, path):
    assert main(["topo", "--input", str(src), "--export", str(path)]) == 0
    capsys.readouterr()
    return str(path)


def test_a_node_that_matches_its_class_passes_and_measures_nothing(tree, tmp_path, capsys):
    cls = export(capsys, tree, tmp_path / "class.json")
    t0 = time.monotonic()
    code, doc, _ = check(capsys, "--input", tree, "--expect-topology", cls)
    assert time.monotonic() - t0 < 10
    assert code == 0 and doc["level"] == "health" and doc["results"] == [] and doc["figures"] == []
    keys = {c["key"]: c for c in doc["checks"]}
    assert keys["inventory/expected/nics"]["verdict"] == "pass"
    assert keys["inventory/pcie/enp96s0f0"]["verdict"] == "pass"  # Gen1 x1 behind a Gen1 port: its maximum
    assert keys["inventory/pcie/enp96s0f0"]["value"] == "Gen1 x1"
    assert not list(tmp_path.glob("nodemap-check-*"))  # health writes files only when -o is given


def test_one_nic_more_expected_is_a_hardware_failure(tree, tmp_path, capsys):
    topo = Topology.from_json(open(export(capsys, tree, tmp_path / "real.json")).read())
    extra = NIC("mlx5_9", "InfiniBand", ports=(Port(1, "ACTIVE", "InfiniBand", 200.0),))
    cls = tmp_path / "class.json"
    cls.write_text(replace(topo, nics=topo.nics + (extra,)).to_json())
    code, doc, _ = check(capsys, "--input", tree, "--expect-topology", str(cls))
    assert code == 1
    c = {c["key"]: c for c in doc["checks"]}["inventory/expected/nics"]
    assert (c["verdict"], c["cause"], c["value"], c["expected"]) == ("fail", "hardware", "2", "3")
    assert doc["findings"][0]["cause"] == "hardware"


def test_a_gpu_link_at_half_width_in_a_snapshot_copy(gpu_tree, tmp_path, capsys):
    cls = export(capsys, gpu_tree, tmp_path / "class.json")
    assert json.load(open(cls))["gpus"][0]["pci_bus_id"] == "0000:3d:00.0"
    code, doc, _ = check(capsys, "--input", str(gpu_tree), "--expect-topology", cls)
    assert code == 0
    (gpu_tree / VE / "current_link_width").write_text("8\n")
    harness._TOPOLOGIES.clear()  # read once per process by path and mtime: the folder's mtime did not change
    code, doc, _ = check(capsys, "--input", str(gpu_tree), "--expect-topology", cls)
    assert code == 1
    c = {c["key"]: c for c in doc["checks"]}
    assert c["inventory/pcie/gpu0"]["value"] == "Gen3 x8" and c["inventory/pcie/gpu0"]["verdict"] == "fail"
    assert c["inventory/expected/pcie/gpu0"]["expected"] == "Gen3 x16"
    assert c["inventory/expected/pcie/gpu0"]["cause"] == "hardware"


def test_an_ethernet_link_down_in_a_snapshot_copy(tree, tmp_path, capsys):
    root = tmp_path / "node"
    shutil.copytree(tree, root, symlinks=True)
    cls = export(capsys, root, tmp_path / "class.json")
    assert [p["state"] for p in json.load(open(cls))["nics"][0]["ports"]] == ["up"]  # operstate, 1000 Mb/s
    net = root / "sys/class/net/enp96s0f0"
    (net.resolve() / "operstate").write_text("down\n")
    (net.resolve() / "speed").write_text("-1\n")
    harness._TOPOLOGIES.clear()
    code, doc, _ = check(capsys, "--input", str(root), "--expect-topology", cls)
    c = {c["key"]: c for c in doc["checks"]}["inventory/expected/nic/enp96s0f0/port1"]
    assert code == 1 and (c["verdict"], c["cause"], c["rule"]) == ("fail", "hardware", "port down")
    assert c["expected"] == "up 1 Gb/s" and c["value"] == "down 0 Gb/s"


def test_the_snapshot_replays_the_link_maximum_capped_by_the_upstream_port(tree):
    from nodemap.topology import sysfs

    t = sysfs.read(tree, this_process=False)
    nic = t.pci_of(t.nic("enp96s0f0"))
    assert (nic.link_gen, nic.link_width, nic.link_max_gen, nic.link_max_width) == (1, 1, 1, 1)  # device says Gen3
    ve = t.pci("0000:3d:00.0")
    assert (ve.link_max_gen, ve.link_max_width) == (3, 16)
    assert Topology.from_json(t.to_json()) == t  # lossless round trip with the new fields


def test_a_node_without_gpu_nvml_or_nic(capsys, tmp_path):
    bare = replace(nodes.two_socket_four_nics(), nics=(), pci_devices=())
    path = tmp_path / "bare.json"
    path.write_text(bare.to_json())
    code, doc, _ = check(capsys, "--input", str(path), "--expect-topology", str(path))
    assert code == 0
    assert all(c["verdict"] != "fail" for c in doc["checks"])
    assert any("saved node" in s["reason"] for s in doc["skipped"])


def test_the_live_node_in_seconds(capsys):
    t0 = time.monotonic()
    code, doc, _ = check(capsys)
    assert time.monotonic() - t0 < 10 and code == 0 and doc["level"] == "health"
    assert any("--expect-topology" in s["reason"] for s in doc["skipped"])


# --- the comparison itself -------------------------------------------------------------


def _by_key(checks):
    return {c.key: c for c in checks}


def test_half_the_memory_a_gpu_missing_and_a_port_down():
    want = nodes.karolina()
    numa = list(want.numa_nodes)
    numa[2] = replace(numa[2], memory=numa[2].memory // 2)
    nics = list(want.nics)
    nics[0] = replace(nics[0], ports=(Port(1, "1: DOWN", "InfiniBand", 0.0),))
    nics[1] = replace(nics[1], ports=(Port(1, "4: ACTIVE", "InfiniBand", 100.0),))
    have = replace(want, numa_nodes=tuple(numa), gpus=want.gpus[:7], nics=tuple(nics))
    c = _by_key(exp.compare(want, have, FLOOR))
    assert c["inventory/expected/memory/numa2"].verdict == "fail" and "50%" in c["inventory/expected/memory/numa2"].rule
    assert c["inventory/expected/memory/numa1"].verdict == "pass"
    gpus = c["inventory/expected/gpus/A100-SXM4-40GB"]
    assert (gpus.value, gpus.expected, gpus.verdict, gpus.cause) == ("7", "8", "fail", "hardware")
    assert c["inventory/expected/nic/mlx5_0/port1"].rule == "port down"
    assert "100 of 200" in c["inventory/expected/nic/mlx5_1/port1"].rule
    assert all(x.verdict == "pass" for x in exp.compare(want, want, FLOOR))


def test_offline_cpus_are_configuration_missing_ones_hardware():
    want = nodes.karolina()
    off = replace(want, pus=tuple(replace(p, online=p.os_index % 2 == 0) for p in want.pus))
    assert exp.cpus(want, off)[0].cause == "configuration"
    gone = replace(want, pus=want.pus[:10])
    assert exp.cpus(want, gone)[0].cause == "hardware" and exp.cpus(want, gone)[0].verdict == "fail"


def test_a_hardware_failure_is_a_drain_reason():
    from nodemap.check import expectations
    from nodemap.check.document import CheckDoc

    want = nodes.karolina()
    doc = CheckDoc("health", want, expectations.shipped(), checks=exp.compare(want, replace(
        want, nics=want.nics[:3]), FLOOR))
    doc.rejudge()
    assert verdict.health(doc) == (False, "nodemap: inventory: NICs 3 (limit 4)")


def test_a_hung_nvml_ends_at_the_health_timeout(tmp_path):
    """nvmlInit blocking (a hung driver): exit 2 at --health-timeout, one
    line, before Slurm's 60 s kill; nothing drained (no scontrol call)."""
    import os
    import subprocess
    import sys

    (tmp_path / "pynvml.py").write_text("import time\n\ndef nvmlInit():\n    time.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PATH="/nonexistent", NODEMAP_RUNTIME_DIR=str(tmp_path / "run"))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "nodemap", "check", "--level", "health", "--health-timeout", "2",
                        "--slurm-drain"], capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 2 and time.monotonic() - t0 < 10
    assert p.stderr.strip().splitlines() == ["nodemap check --level health: not done within 2 s (a hung GPU driver, "
                                             "file system or slurmctld?): could not judge, nothing drained (exit 2)"]
