"""`nodemap compare`'s bindings on fixture topologies: the deliberately bad
ones really are remote per the topology, the plan and the references are
what they say, and a one-NUMA-node machine gets no bad binding."""

from __future__ import annotations

import pytest

from nodemap.compare import bindings as cb
from nodemap.mapping.plan import plan
from nodemap.mapping.request import Request
from nodemap.topology.cpuset import CpuSet
from nodemap.topology.discover import discover

MACHINES = ["hwloc-xml/24em64t-2n6c2t-pci.xml", "hwloc-xml/32em64t-2n8c2t-pci-normalio.xml",
            "hwloc-xml/power8gpudistances.xml", "mpibind/topo-xml/coral-lassen.xml",
            "mpibind/topo-xml/epyc-corona.xml", "hwloc-xml/192em64t-24n8c2t.xml"]


def load(fixtures, name):
    path = fixtures / name
    if not path.exists():
        pytest.skip(f"{name} not in the fixtures")
    return discover(str(path))


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("tasks", [1, 2, 4])
def test_bad_bindings_are_remote_per_the_topology(fixtures, name, tasks):
    topo = load(fixtures, name)
    p = plan(topo, Request(tasks=tasks))
    got, why = cb.build(topo, p)
    names = [b.name for b in got]
    assert names[:3] == ["none", "launcher", "plan"]
    assert all(len(b.tasks) == tasks for b in got)
    by = {b.name: b for b in got}
    assert by["plan"].tasks == p.tasks
    if "remote-gpu" in by:
        for t in by["remote-gpu"].tasks:
            (g,) = t.gpus
            assert topo.gpu(g).numa_node not in cb.task_numa(topo, t), cb.describe(topo, t)
        assert [t.cpus for t in by["remote-gpu"].tasks] == [t.cpus for t in p.tasks]  # only the GPU moved
    if "far-nic" in by:
        for t in by["far-nic"].tasks:
            (nic,) = t.nics
            assert topo.nic(nic).numa_node not in cb.task_numa(topo, t)
    if "packed" in by:
        nodes = {n for t in by["packed"].tasks for n in topo.numa_of(t.cpus)}
        assert len(nodes) == 1 and all(t.mems == CpuSet(nodes) for t in by["packed"].tasks)
        assert [t.gpus for t in by["packed"].tasks] == [t.gpus for t in p.tasks]
    for b in got:
        for t in b.tasks:
            assert t.cpus and t.cpus.issubset(topo.allowed_cpus), (b.name, t)
    assert len(names) + len(why) == len(cb.NAMES)
    assert all(w.split(":")[0] in cb.NAMES for w in why)


def test_gpu_machines_get_a_remote_gpu(fixtures):
    for name in ("hwloc-xml/32em64t-2n8c2t-pci-normalio.xml", "mpibind/topo-xml/coral-lassen.xml",
                 "mpibind/topo-xml/epyc-corona.xml"):
        topo = load(fixtures, name)
        got, why = cb.build(topo, plan(topo, Request(tasks=2)))
        assert "remote-gpu" in [b.name for b in got], (name, why)
        remote = next(b for b in got if b.name == "remote-gpu")
        assert "NUMA" in remote.bad and "drives GPU" in remote.bad


def test_lassen_far_nic_crosses_the_socket(fixtures):
    topo = load(fixtures, "mpibind/topo-xml/coral-lassen.xml")
    p = plan(topo, Request(tasks=4))
    far = next(b for b in cb.build(topo, p)[0] if b.name == "far-nic")
    for planned, t in zip(p.tasks, far.tasks):
        (nic,) = t.nics
        assert topo.nic(nic).numa_node not in cb.task_numa(topo, planned)
        assert t.gpus == planned.gpus and t.cpus == planned.cpus


def one_numa_topology():
    from nodemap.topology.model import Core, NumaNode, PU, Package, Topology

    cpus = CpuSet(range(8))
    return Topology(packages=(Package(0, cpus),), numa_nodes=(NumaNode(0, cpus, 1 << 30),),
                    cores=tuple(Core(i, 0, CpuSet([i])) for i in range(8)), pus=tuple(PU(i) for i in range(8)),
                    allowed_mems=CpuSet([0]))


def test_one_numa_node_has_no_bad_binding(fixtures):
    topo = one_numa_topology()
    got, why = cb.build(topo, plan(topo, Request(tasks=2)))
    assert [b.name for b in got] == ["none", "launcher", "plan"]
    assert cb.one_numa(topo) and any("one NUMA node" in w for w in why)


def test_launcher_default_follows_open_mpi(fixtures):
    topo = load(fixtures, "mpibind/topo-xml/coral-lassen.xml")
    two = cb.launcher(topo, plan(topo, Request(tasks=2)))
    assert all(len(topo.numa_of(t.cpus)) == 1 and len(t.cpus) <= 4 for t in two.tasks)  # one core (SMT4)
    four = cb.launcher(topo, plan(topo, Request(tasks=4)))
    pk = sorted(topo.packages, key=lambda p: p.os_index)
    assert [t.cpus for t in four.tasks] == [(pk[i % len(pk)].cpuset & topo.allowed_cpus) for i in range(4)]


def test_probe_figures_come_from_recorded_result_sets():
    """The number each probe keeps, read from result sets recorded on GPU machines."""
    import json
    from pathlib import Path

    from nodemap.compare import probes as pr

    res = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
    copies = json.loads((res / "gpu_copies_h200x2.json").read_text())
    first = next(r for r in copies["results"] if r["metric"] == "h2d_ce")
    assert pr.figure("h2d", copies, 0) == first["stats"]["median"]
    gpu = json.loads((res / "gpu_bench_h200x2.json").read_text())
    triad = next(r for r in gpu["results"] if r["metric"] == "triad" and r["params"]["dtype"] == "float64")
    assert pr.figure("gpu", gpu, 0) == triad["stats"]["median"]
    jac = json.loads((res / "jacobi_h100_20261123" / "jacobi_single_1gpu.json").read_text())
    assert pr.figure("jacobi", jac, 0) == next(r for r in jac["results"] if r["metric"] == "single")["stats"]["median"]
    assert pr.figure("stream", jac, 0) is None  # not a STREAM result set: nothing taken from it


# --- verdicts against the noise of the repetitions (synthetic probe results) -------------


def row(binding, probe, values, spreads):
    from nodemap.compare import probes as pr

    return pr.Row(binding, probe, values, [], spreads)


def test_a_difference_within_the_spread_is_no_difference():
    from nodemap.compare import probes as pr

    b = cb.Binding("none", "", ())
    plan_row = row("plan", "stream", [4.0, 5.0], [0.30, 0.20])
    # 54% higher, but the repetitions spread 60%: noise, not a finding
    v = pr.verdict(row("none", "stream", [7.0, 6.9], [0.6, 0.1]), plan_row, b)
    assert v == "stream: 13.9 GB/s: no difference beyond noise (±60%)"
    v = pr.verdict(row("none", "stream", [1.5, 1.4], [0.05, 0.05]), plan_row, b)  # 68% lower, band 30%
    assert "68% lower than the plan's (beyond the ±30% noise)" in v


def test_tight_repetitions_still_need_three_percent():
    from nodemap.compare import probes as pr

    b = cb.Binding("remote-gpu", "", (), bad="rank 0 on NUMA 0 drives GPU2 on NUMA 8")
    plan_row = row("plan", "h2d", [50.0], [0.0])
    assert "no difference beyond noise (±3%)" in pr.verdict(row("remote-gpu", "h2d", [49.0], [0.0]), plan_row, b)
    v = pr.verdict(row("remote-gpu", "h2d", [35.0], [0.01]), plan_row, b)
    assert "30% lower" in v and "drives GPU2 on NUMA 8" in v
    slower = pr.verdict(row("remote-gpu", "jacobi", [1200.0], [0.02]), row("plan", "jacobi", [1000.0], [0.02]), b)
    assert "20% slower" in slower


def test_bindings_that_cannot_differ_say_so():
    from nodemap.compare import probes as pr

    topo = one_numa_topology()
    p = plan(topo, Request(tasks=2))
    got = {b.name: b for b in cb.build(topo, p)[0]}
    planned = got["plan"]
    assert not cb.cannot_differ(topo, got["none"], planned)  # unbound: ranks may share cores
    moved = cb.Binding("moved", "", tuple(cb._with(t, cpus=CpuSet([7 - t.task])) for t in planned.tasks))
    if all(len(t.cpus) == 1 for t in planned.tasks):
        assert cb.cannot_differ(topo, moved, planned)  # one NUMA node: other cores, equally near
    stacked = cb.Binding("stacked", "", tuple(cb._with(t, cpus=CpuSet([0])) for t in planned.tasks))
    assert not cb.cannot_differ(topo, stacked, planned)  # two ranks on one core can differ
    v = pr.verdict(row("moved", "stream", [3.0, 3.0], [0.1, 0.1]), row("plan", "stream", [4.0, 4.0], [0.1, 0.1]),
                   moved, same=True)
    assert "cannot differ from the plan here" in v and "25% lower" in v


def test_a_memory_binding_not_applied_is_recorded_in_the_row(fixtures):
    from nodemap.compare import probes as pr

    topo = discover()
    t = plan(topo, Request(tasks=1)).tasks[0]
    b = cb.Binding("bogus", "", (cb._with(t, mems=CpuSet([1023])),))  # no such NUMA node: set_mempolicy fails
    r = pr.run_binding(topo, b, "stream", "1M", 120)
    assert r.values[0] is not None and r.values[0] > 0, r.errors
    assert len(r.warnings) == 1 and "rank 0" in r.warnings[0] and "set_mempolicy" in r.warnings[0]


def test_ranks_sharing_a_gpu_do_not_add_their_kernel_bandwidth():
    """Two ranks on one GPU each see ~3.1 TB/s (their kernels run by turns): the node has one GPU's worth;
    copies share the engines at once, so their figures add up."""
    from nodemap.compare import probes as pr

    gpu = pr.Row("plan", "gpu", [3106.0, 3108.0], [], [0.0, 0.0], gpus=[(0,), (0,)])
    assert gpu.total == 3107.0
    two = pr.Row("plan", "gpu", [3106.0, 3108.0], [], [0.0, 0.0], gpus=[(0,), (1,)])
    assert two.total == 6214.0
    h2d = pr.Row("plan", "h2d", [26.5, 26.4], [], [0.0, 0.0], gpus=[(0,), (0,)])
    assert h2d.total == 52.9
