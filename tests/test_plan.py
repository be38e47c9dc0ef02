"""The planner on nodes shaped like real machines, and its errors."""

import pytest

import nodes
from nodemap.errors import NodemapError
from nodemap.mapping.plan import plan
from nodemap.mapping.request import Plan, Request
from nodemap.topology import paths
from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import Port, replace


def P(topo, **kw):
    return plan(topo, Request(**kw))


def test_perlmutter_reversed_gpu_order():
    topo = nodes.perlmutter()
    p = P(topo, tasks=4)
    for k, t in enumerate(p.tasks):
        assert t.cpus == CpuSet(range(16 * k, 16 * k + 16))  # one PU per core of NUMA k
        assert t.mems == CpuSet([k])
        assert t.gpus == (3 - k,)
        assert t.nics == (f"cxi{3 - k}",)
        assert t.threads == 16 and len(t.places) == 16
    assert p.level == "NUMA"


def test_karolina_gpu_numa_nic_pair_up():
    topo = nodes.karolina()
    p = P(topo, tasks=8)
    assert [t.gpus for t in p.tasks] == [(2,), (3,), (0,), (1,), (6,), (7,), (4,), (5,)]
    for t in p.tasks:
        (g,) = t.gpus
        assert t.mems == CpuSet([nodes.KAROLINA_GPU_NUMA[g]])
        assert topo.numa_of(t.cpus) == t.mems
        (nic,) = t.nics
        assert g in nodes.KAROLINA_NIC_GPUS[nic]
        assert paths.path(topo, f"GPU{g}", nic).kind == "PIX"
        assert len(t.cpus) == 8  # one CCD (L3) each, one PU per core
    assert p.level == "L3"


@pytest.mark.parametrize("rails", [-1, 2])
def test_two_sockets_two_tasks_get_their_sockets_nics(rails):
    topo = nodes.two_socket_four_nics()
    p = P(topo, tasks=2, nic_rails=rails)
    assert [t.mems for t in p.tasks] == [CpuSet([0]), CpuSet([1])]
    assert [t.nics for t in p.tasks] == [("mlx5_0", "mlx5_1"), ("mlx5_2", "mlx5_3")]
    assert [t.cpus for t in p.tasks] == [CpuSet(range(16)), CpuSet(range(16, 32))]


def test_coral_ea_mpibind_mapping():
    topo = nodes.coral_ea()
    p = P(topo, tasks=4)
    for k, t in enumerate(p.tasks):
        assert t.cpus == CpuSet(range(40 * k, 40 * k + 33, 8))
        assert t.gpus == (k,)
        assert t.threads == 5
        assert t.nics == (f"mlx5_{k // 2}",)


def test_one_task_takes_the_whole_node_greedily():
    p = P(nodes.karolina(), tasks=1)
    (t,) = p.tasks
    assert t.cpus == CpuSet(range(128)) and t.gpus == tuple(range(8)) and t.mems == CpuSet(range(8))
    assert p.level == "Machine"


def test_two_tasks_on_karolina_split_by_socket():
    p = P(nodes.karolina(), tasks=2)
    assert [t.cpus for t in p.tasks] == [CpuSet(range(64)), CpuSet(range(64, 128))]
    assert [t.gpus for t in p.tasks] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert p.level == "Package"


def test_not_greedy_one_domain_per_task():
    p = P(nodes.karolina(), tasks=2, greedy=False)
    assert [t.mems for t in p.tasks] == [CpuSet([1]), CpuSet([5])]


def test_tasks_share_gpus_evenly_and_contiguously():
    p = P(nodes.perlmutter(), tasks=12)
    assert [t.gpus for t in p.tasks] == [(3,)] * 3 + [(2,)] * 3 + [(1,)] * 3 + [(0,)] * 3
    assert all(len(t.cpus) in (5, 6) for t in p.tasks)


def test_smt_and_threads():
    topo = nodes.perlmutter()
    p = P(topo, tasks=4, smt=2)
    assert p.tasks[0].cpus == CpuSet(list(range(16)) + list(range(64, 80)))
    assert p.tasks[0].threads == 32
    p = P(topo, tasks=4, threads=32)  # more threads than cores: SMT as needed
    assert len(p.tasks[0].cpus) == 32 and len(p.tasks[0].places) == 32
    p = P(topo, tasks=4, threads=4)  # fewer threads than cores: places of 4 cores
    assert p.tasks[0].places == tuple(CpuSet(range(4 * i, 4 * i + 4)) for i in range(4))
    assert p.tasks[0].threads == 4 and len(p.tasks[0].cpus) == 16


def test_more_tasks_than_cores_uses_smt_pus():
    p = P(nodes.perlmutter(), tasks=128)
    assert sorted(t.cpus.first() for t in p.tasks) == list(range(128))
    assert p.level == "PU"


def test_gpu_order_index_keeps_locality():
    p = P(nodes.perlmutter(), tasks=4, gpu_order="index")
    assert [t.gpus for t in p.tasks] == [(0,), (1,), (2,), (3,)]
    assert [t.mems for t in p.tasks] == [CpuSet([3]), CpuSet([2]), CpuSet([1]), CpuSet([0])]
    assert [t.task for t in p.tasks] == [0, 1, 2, 3]


def test_no_gpus_spreads_by_pus():
    p = P(nodes.karolina(), tasks=8, gpus_per_task=0)
    assert [t.mems for t in p.tasks] == [CpuSet([i]) for i in range(8)]
    assert all(t.gpus == () for t in p.tasks)


def test_explicit_gpus_per_task_borrows_nearest():
    # one task per NUMA node: GPU-less nodes borrow a GPU of the same socket, least used first
    p = P(nodes.karolina(), tasks=8, spread_by="pus", gpus_per_task=1)
    # GPU domains keep their first GPU; the GPU-less ones borrow the other, one per GPU, same socket
    assert [t.gpus for t in p.tasks] == [(3,), (2,), (1,), (0,), (7,), (6,), (5,), (4,)]
    # auto mode leaves tasks of GPU-less domains without a GPU, and says so
    p = P(nodes.karolina(), tasks=8, spread_by="pus")
    assert p.tasks[0].gpus == () and p.tasks[1].gpus == (2, 3)
    assert any("no GPU in their NUMA domain" in n for n in p.notes)


def test_explicit_gpus_per_task_more_than_local():
    p = P(nodes.perlmutter(), tasks=4, gpus_per_task=2)
    assert all(len(t.gpus) == 2 for t in p.tasks)
    assert all(3 - k in t.gpus for k, t in enumerate(p.tasks))  # the local GPU always
    assert sorted(g for t in p.tasks for g in t.gpus) == [0, 0, 1, 1, 2, 2, 3, 3]  # borrowed evenly


def test_restrictions():
    topo = nodes.karolina()
    p = P(topo, tasks=2, restrict_mems=CpuSet([3]))
    assert [t.cpus for t in p.tasks] == [CpuSet(range(48, 56)), CpuSet(range(56, 64))]
    assert [t.gpus for t in p.tasks] == [(0,), (1,)]
    p = P(topo, tasks=2, restrict_cpus=CpuSet.parse("48-55"))
    assert [t.gpus for t in p.tasks] == [(0,), (1,)]
    assert [len(t.cpus) for t in p.tasks] == [4, 4]


def test_allowed_set_is_respected():
    spec = nodes.Spec(2, 1, 1, 4, smt=2, disallowed=frozenset(range(0, 4)))
    p = plan(nodes.build(spec), Request(tasks=2))
    assert all(t.cpus.isdisjoint(CpuSet(range(4))) for t in p.tasks)


def test_oversubscribe():
    topo = nodes.build(nodes.Spec(1, 1, 1, 2))
    with pytest.raises(NodemapError, match="--oversubscribe"):
        P(topo, tasks=3)
    p = P(topo, tasks=4, oversubscribe=True)
    assert [t.cpus.first() for t in p.tasks] == [0, 0, 1, 1]


@pytest.mark.parametrize("kw, match", [
    (dict(tasks=0), "--tasks"),
    (dict(tasks=2, gpus_per_task=9), "--gpus-per-task 9"),
    (dict(tasks=2, nic_rails=5), "--nic-rails 5"),
    (dict(tasks=2, restrict_cpus=CpuSet([999])), "not online"),
    (dict(tasks=2, restrict_mems=CpuSet([42])), "do not exist"),
    (dict(tasks=2, gpu_order="bus"), "--gpu-order"),
    (dict(tasks=300), "300 tasks need 300 PUs"),
])
def test_impossible_requests_say_cause_and_fix(kw, match):
    with pytest.raises(NodemapError, match=match) as e:
        P(nodes.karolina(), **kw)
    assert "\n" not in str(e.value)


def test_restriction_outside_allowed_set():
    spec = nodes.Spec(1, 1, 1, 4, disallowed=frozenset([0, 1]))
    with pytest.raises(NodemapError, match="allowed"):
        plan(nodes.build(spec), Request(tasks=1, restrict_cpus=CpuSet([0, 1])))


def test_plan_json_round_trip():
    p = P(nodes.karolina(), tasks=8)
    assert Plan.from_json(p.to_json()) == p


def test_hidden_gpus_are_not_used():
    topo = nodes.perlmutter()
    topo = replace(topo, gpus=tuple(replace(g, visible=g.index != 0) for g in topo.gpus))
    p = P(topo, tasks=4)
    assert all(0 not in t.gpus for t in p.tasks)


def test_nics_down_are_skipped_and_names_sort_naturally():
    topo = nodes.two_socket_four_nics()
    nics = list(topo.nics)
    nics[0] = replace(nics[0], ports=(Port(1, "1: DOWN"),))
    nics[1] = replace(nics[1], ports=(Port(1, "4: ACTIVE"),))
    topo = replace(topo, nics=tuple(reversed(nics)))
    p = P(topo, tasks=2, nic_rails=-1)
    assert [t.nics for t in p.tasks] == [("mlx5_1",), ("mlx5_2", "mlx5_3")]
    assert "NIC mlx5_0 down: ranks use mlx5_1,mlx5_2,mlx5_3" in p.notes  # nodemap run says it
    assert not any("down" in n for n in P(nodes.two_socket_four_nics(), tasks=2, nic_rails=-1).notes)


def test_gpus_matched_by_local_cpus_not_index():
    """Two GPUs in one NUMA node, GPU0 local to the second L3, GPU1 to the first."""
    topo = nodes.build(nodes.Spec(1, 1, 2, 4, gpus=[nodes.Dev(0, "a"), nodes.Dev(0, "b")]))
    halves = [CpuSet(range(4, 8)), CpuSet(range(0, 4))]
    gpus = tuple(replace(g, cpuset=halves[g.index]) for g in topo.gpus)
    p = P(replace(topo, gpus=gpus), tasks=2)
    assert [(t.cpus, t.gpus) for t in p.tasks] == [(CpuSet(range(4)), (1,)), (CpuSet(range(4, 8)), (0,))]
    p = P(replace(topo, gpus=gpus), tasks=2, gpu_order="index")
    assert [(t.cpus, t.gpus) for t in p.tasks] == [(CpuSet(range(4, 8)), (0,)), (CpuSet(range(4)), (1,))]
