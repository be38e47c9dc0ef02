"""The node class (`check --expect-topology`): a class that cannot be any
node is refused in one line before anything is judged or drained; host
memory judged by the kernel's total where a VM's per-NUMA sysfs figures
undercount; each GPU's memory and MIG mode against the class's."""

from __future__ import annotations

import json

import pytest

import nodes
from nodemap.check import expectations
from nodemap.check import expected as exp
from nodemap.cli import main
from nodemap.topology.model import NumaNode, replace
from test_slurm_drain import slurm  # noqa: F401  (the recording scontrol on PATH)

FLOOR = expectations.shipped().table(expectations.NodeClassRules).memory_floor

GIB = 1 << 30


def _files(tmp_path, cls_edit=None, node=None):
    node = node or nodes.two_socket_four_nics()
    have, want = tmp_path / "node.json", tmp_path / "class.json"
    have.write_text(node.to_json())
    d = json.loads(node.to_json())
    if cls_edit:
        cls_edit(d)
    want.write_text(json.dumps(d))
    return str(have), str(want)


def _health(*argv):
    return main(["check", "--level", "health", "-q", *argv])


@pytest.mark.parametrize("edit,field", [
    (lambda d: d["numa_nodes"][0].update(memory=10 ** 30), "(numa_nodes[0].memory) is 1e+30, beyond any machine"),
    (lambda d: d["nics"][0]["ports"][0].update(rate_gbps=1e12), "(nics[0].ports[0].rate_gbps) is 1e+12"),
    (lambda d: d["pci_devices"][0].update(link_max_width=10 ** 6), "(pci_devices[0].link_max_width) is 1e+06"),
    (lambda d: d.update(pus=[]), "pus: no CPU online"),
    (lambda d: d.update(numa_nodes=[], distances=[]), "numa_nodes: no NUMA node with CPUs"),
    (lambda d: d["machine"].update(mem_total=GIB), "numa_nodes[].memory: the NUMA nodes hold 128 GiB, more than"),
])
def test_a_class_that_cannot_be_a_node_is_refused_and_nothing_drained(slurm, tmp_path, capsys, edit, field):  # noqa: F811
    """NUMA memory 1e30 B failed every node of the class for "hardware", and --slurm-drain drained them all."""
    have, want = _files(tmp_path, edit)
    assert _health("--input", have, "--expect-topology", want, "--slurm-drain") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and field in err[0] and "--expect-topology" in err[0], err
    assert slurm.calls() == []


def test_an_empty_class_path_is_refused_not_run_without_a_class(slurm, tmp_path, capsys):  # noqa: F811
    have, _ = _files(tmp_path)
    assert _health("--input", have, "--expect-topology", "", "--slurm-drain") == 2
    assert "--expect-topology '': an empty path" in capsys.readouterr().err
    assert slurm.calls() == []
    assert main(["check", "--fleet", "--expect-topology", ""]) == 2  # per node, whatever its value


def _vm(topo, per_node: int, total: int):
    """A node whose sysfs NUMA nodes hold `per_node` bytes each and whose MemTotal is `total`."""
    numa = tuple(replace(n, memory=per_node) for n in topo.numa_nodes)
    return replace(topo, numa_nodes=numa, machine=replace(topo.machine, mem_total=total))


def test_a_vms_undercounting_numa_memory_is_not_judged_its_total_is():
    """The H200 VM: sysfs said 4.6 GiB of MemTotal 125.8; another VM went 9.5 -> 16 GiB in 20 minutes."""
    node = nodes.two_socket_four_nics()
    cls = _vm(node, 8 * GIB, 126 * GIB)  # saved when the hypervisor had initialised 16 of 126 GiB
    now = _vm(node, int(2.3 * GIB), 126 * GIB)  # later, less of it counted per node: the same machine
    c = {x.key: x for x in exp.compare(cls, now, FLOOR)}
    assert c["inventory/expected/memory/total"].verdict == "pass"
    numa = c["inventory/expected/memory/numa0"]
    assert numa.verdict == "info" and "not judged" in numa.rule and "the total is judged instead" in numa.rule
    # a DIMM gone: MemTotal fell
    lost = {x.key: x for x in exp.compare(cls, _vm(node, int(2.3 * GIB), 100 * GIB), FLOOR)}
    assert lost["inventory/expected/memory/total"].verdict == "fail"
    assert lost["inventory/expected/memory/total"].cause == "hardware"


def test_trusted_numa_memory_is_still_judged_per_node():
    node = nodes.two_socket_four_nics()
    cls = _vm(node, 64 * GIB, 128 * GIB)
    half = replace(cls, numa_nodes=(replace(cls.numa_nodes[0], memory=32 * GIB),) + cls.numa_nodes[1:],
                   machine=replace(cls.machine, mem_total=96 * GIB))
    c = {x.key: x for x in exp.compare(cls, half, FLOOR)}
    assert c["inventory/expected/memory/numa0"].verdict == "fail" and "50%" in c["inventory/expected/memory/numa0"].rule
    assert c["inventory/expected/memory/numa1"].verdict == "pass"
    assert c["inventory/expected/memory/total"].verdict == "fail"  # 75%
    # a source without MemTotal (hwloc XML): its per-node figures are all there is, and are judged
    assert exp.per_node_trusted(replace(cls, machine=replace(cls.machine, mem_total=0)))


def test_the_live_machines_mem_total_is_read(tmp_path):
    from nodemap.topology import sysfs

    t = sysfs.read()
    assert t.machine.mem_total > 0 and exp.host_total(t) == t.machine.mem_total


def test_each_gpus_memory_and_mig_mode_are_compared_with_the_class():
    """A 1x H200 node passed a class giving its GPU twice its memory; a GPU left in MIG mode passed too."""
    cls = nodes.karolina()
    small = replace(cls, gpus=tuple(replace(g, memory=g.memory // 2) if g.index == 3 else g for g in cls.gpus))
    c = {x.key: x for x in exp.compare(cls, small, FLOOR)}
    assert c["inventory/expected/gpu_memory/gpu3"].verdict == "fail"
    assert c["inventory/expected/gpu_memory/gpu3"].cause == "hardware"
    assert "50% of the node class's A100-SXM4-40GB" in c["inventory/expected/gpu_memory/gpu3"].rule
    assert c["inventory/expected/gpu_memory/gpu2"].verdict == "pass"
    mig = replace(cls, gpus=tuple(replace(g, mig=("MIG-a", "MIG-b")) if g.index == 1 else g for g in cls.gpus))
    c = {x.key: x for x in exp.compare(cls, mig, FLOOR)}
    assert c["inventory/expected/mig/gpu1"].verdict == "fail" and c["inventory/expected/mig/gpu1"].value == "on"
    assert "inventory/expected/mig/gpu0" not in c  # as the class: nothing to say
    back = {x.key: x for x in exp.compare(mig, cls, FLOOR)}["inventory/expected/mig/gpu1"]  # the class wants it on
    assert (back.verdict, back.value, back.expected) == ("fail", "off", "on")
    assert all(x.verdict in ("pass", "info") for x in exp.compare(cls, cls, FLOOR))


def test_a_gpu_with_half_the_class_memory_drains_the_node(slurm, tmp_path, capsys):  # noqa: F811
    node = nodes.karolina()
    have, want = _files(tmp_path, lambda d: [g.update(memory=2 * g["memory"]) for g in d["gpus"]], node)
    assert _health("--input", have, "--expect-topology", want, "--slurm-drain") == 1
    assert slurm.calls()[-1].startswith("update NodeName=n2 State=DRAIN Reason=nodemap: inventory: GPU0 memory 40")


def test_a_site_files_memory_floor_judges_the_class(slurm, tmp_path, capsys):  # noqa: F811
    """[node_class] memory_floor of a site file (--expect): half the class's GPU memory passes at 0.4."""
    node = nodes.karolina()
    have, want = _files(tmp_path, lambda d: [g.update(memory=2 * g["memory"]) for g in d["gpus"]], node)
    (tmp_path / "site.toml").write_text("[node_class]\nmemory_floor = 0.4\n")
    assert _health("--input", have, "--expect-topology", want, "--expect", str(tmp_path / "site.toml"),
                   "--slurm-drain") == 0
    assert not any(c.startswith("update NodeName=n2 State=DRAIN") for c in slurm.calls())
