"""bench/comm/world.py: each rank's GPU from the node's plan, from the
visibility nodemap or the launcher gave it, or (no plan) local rank mod
GPUs with a note; ranks sharing a GPU said. Pure functions on fixture nodes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import nodes
from nodemap.bench.comm import world
from nodemap.mapping.nodeplan import plan_dict, read
from nodemap.mapping.plan import plan
from nodemap.mapping.request import Request
from nodemap.topology.cpuset import CpuSet


def node_plan(topo, tasks):
    return read(plan_dict(topo, plan(topo, Request(tasks=tasks))))


def buses(topo):
    """CUDA ordinals in PCI order (CUDA_DEVICE_ORDER=PCI_BUS_ID): ordinal k is GPU k."""
    return [g.pci_bus_id for g in topo.gpus]


def test_on_perlmutter_the_plan_gives_each_rank_the_gpu_nearest_its_cores_not_k_mod_4():
    topo = nodes.perlmutter()  # GPU k nearest NUMA 3-k
    p = node_plan(topo, 4)
    got = [world.choose(k, 4, buses(topo), plan=p) for k in range(4)]
    assert [d.device for d in got] == [3, 2, 1, 0]
    assert all(d.how == "plan" and not d.notes for d in got)
    old = [k % 4 for k in range(4)]  # the rule every multi-process kind used before the world
    for k, d in enumerate(got):
        cores = CpuSet(p.tasks[k].cpu_list)
        near = {g.index for g in topo.gpus if not topo.numa(g.numa_node).cpuset.isdisjoint(cores)}
        assert d.device in near and old[k] not in near  # the old rule put every rank on a far GPU


def test_on_karolina_eight_ranks_get_their_numa_nodes_gpus():
    topo = nodes.karolina()
    p = node_plan(topo, 8)
    got = [world.choose(k, 8, buses(topo), plan=p).device for k in range(8)]
    assert sorted(got) == list(range(8)) and got != list(range(8))
    for k, d in enumerate(got):
        assert topo.gpu(d).numa_node in topo.numa_of(CpuSet(p.tasks[k].cpu_list))


def test_ordinals_follow_bus_ids_not_indexes():
    """CUDA's default order (fastest first) or a narrowed visibility renumbers GPUs: the bus id decides."""
    topo = nodes.perlmutter()
    p = node_plan(topo, 4)
    seen = list(reversed(buses(topo)))  # ordinal 0 is GPU 3
    assert [world.choose(k, 4, seen, plan=p).device for k in range(4)] == [0, 1, 2, 3]


def test_a_rank_nodemap_placed_drives_device_0_of_what_it_sees():
    mine = (("CUDA_VISIBLE_DEVICES", "3"), ("NODEMAP_GPUS", "3"))
    why = world.placed(mine, [mine])
    assert "NODEMAP_GPUS=3" in why
    d = world.choose(0, 1, ["0000:13:00.0"], why, plan=node_plan(nodes.perlmutter(), 4))
    assert (d.device, d.how, d.notes) == (0, "visibility", ())


def test_a_launcher_that_gives_each_rank_its_own_gpus_is_followed():
    ranks = [(("CUDA_VISIBLE_DEVICES", str(3 - k)),) for k in range(4)]  # srun --gpu-bind=map_gpu:3,2,1,0
    assert "each rank its own" in world.placed(ranks[1], ranks)
    assert world.choose(1, 1, [], world.placed(ranks[1], ranks)).device == 0


def test_the_same_visibility_on_every_rank_is_a_node_limit_planned_within():
    ranks = [(("CUDA_VISIBLE_DEVICES", "0,1,2,3"),)] * 4
    assert world.placed(ranks[0], ranks) == ""
    assert world.placed((), [()] * 4) == ""


def test_without_a_plan_local_rank_mod_gpus_and_a_note_says_why():
    d = world.choose(5, 4, [], no_plan="no topology: /sys unreadable")
    assert d.device == 1 and d.how == "local rank mod GPUs"
    assert "local rank mod 4 GPUs" in d.notes[0] and "/sys unreadable" in d.notes[0]


@pytest.mark.parametrize("bus,why", [(["0000:99:00.0"] * 4, "which CUDA does not show"), (None, "gives it no GPU")])
def test_a_plan_cuda_cannot_follow_falls_back_with_a_note(bus, why):
    topo = nodes.perlmutter()
    p = node_plan(topo, 4)
    if bus is None:
        p.tasks[2] = p.tasks[2]._replace(gpu_pci=[])
        bus = buses(topo)
    d = world.choose(2, 4, bus, plan=p)
    assert d.device == 2 and why in d.notes[0]


def test_more_ranks_than_the_plan_has_tasks_falls_back():
    d = world.choose(4, 4, buses(nodes.perlmutter()), plan=node_plan(nodes.perlmutter(), 4))
    assert d.device == 0 and "none for local rank 4" in d.notes[0]


def test_no_gpu_no_device():
    assert world.choose(0, 0, []).device is None


def test_ranks_sharing_a_gpu_are_said():
    topo = nodes.perlmutter()
    p = node_plan(topo, 8)  # 8 ranks, 4 GPUs: two a GPU
    got = [world.choose(k, 4, buses(topo), plan=p).device for k in range(8)]
    notes = world.sharing([f"n1:GPU{d}" for d in got])
    assert len(notes) == 4 and all(n.startswith("ranks ") and " share n1:GPU" in n for n in notes)
    assert world.sharing(["n1:GPU0", "n2:GPU0", ""]) == []  # other nodes' GPUs are others


def test_the_summary_says_how_once_and_each_note_once():
    every = [("n:GPU3", "plan", ()), ("n:GPU0", "local rank mod GPUs", ("x",)),
             ("n:GPU1", "local rank mod GPUs", ("x",)), ("m:GPU1", "local rank mod GPUs", ("y",))]
    out = world.summary(every)
    assert out[0].startswith("each rank's GPU chosen by local rank mod GPUs and the node's plan")
    assert out[1:] == ["ranks 1,2: x", "rank 3: y"]


def test_a_world_of_one_process_reduces_to_itself():
    w = world.alone()
    w.barrier()
    assert (w.max_all(2.0), w.sum_all(3.0), w.allgather("a"), w.is_root()) == (2.0, 3.0, ["a"], True)


def test_visibility_reads_the_one_list_and_the_plan_mark():
    env = {"CUDA_VISIBLE_DEVICES": "1", "ROCR_VISIBLE_DEVICES": "0", "NODEMAP_GPUS": "1", "OTHER": "x"}
    assert dict(world.visibility(env)) == {"CUDA_VISIBLE_DEVICES": "1", "ROCR_VISIBLE_DEVICES": "0",
                                          "NODEMAP_GPUS": "1"}


def test_a_rank_drives_the_gpu_of_its_nodes_plan_and_notes_say_so(monkeypatch):
    """World.gpu end to end on the CuPy stand-in: 4 devices, local rank 1 of 4, the node's plan gives it
    the GPU at bus 03 (ordinal 2, as fake_cupy numbers buses d+1): that device becomes current."""
    import fake_cupy

    monkeypatch.setattr(fake_cupy.cuda.runtime, "devices", 4)
    for v in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
              "NODEMAP_GPUS"):
        monkeypatch.delenv(v, raising=False)
    p = SimpleNamespace(tasks=[SimpleNamespace(gpu_pci=[f"0000:{4 - k:02x}:00.0"]) for k in range(4)])  # rank k: bus 4-k
    asked = []
    monkeypatch.setattr(world, "node_plan", lambda size, rank, say: (asked.append((size, rank)), (p, ""))[1])
    monkeypatch.setattr(fake_cupy.Device, "current", 0)

    class Comm:  # this rank's view of a 4-rank node: every rank gathers the same
        def allgather(self, v):
            return [v] * 4

    w = world.World(Comm(), 1, 4, 1, 4, "n1", Comm())
    d = w.gpu(fake_cupy, lambda o: f"GPU{o}")
    assert asked == [(4, 1)] and (d.device, d.how) == (2, "plan") and fake_cupy.Device.current == 2
    assert w.gpu_keys == ["n1:GPU2"] * 4  # the stand-in comm repeats this rank: four ranks on one GPU
    assert w.notes[0] == "each rank's GPU chosen by the node's plan (as nodemap run places ranks)"
    assert w.notes[1].startswith("ranks 0,1,2,3 share n1:GPU2")


def test_ranks_sharing_a_gpu_never_start_nccl_and_say_why(monkeypatch):
    """NCCL refuses two ranks on one GPU (NCCL_ERROR_INVALID_USAGE, a traceback before issue 36): the
    world decides from every rank's GPU, before ncclCommInitRank, and says it in one line."""
    from nodemap.errors import NodemapError

    monkeypatch.setattr(world, "import_nccl", lambda: pytest.fail("NCCL imported"))  # never called at all
    w = world.World(node="n1", gpu_keys=["n1:GPU0", "n1:GPU0", "n1:GPU1", "n2:GPU1"])
    why = w.nccl_refusal()
    assert why.startswith("ranks 0,1 share n1:GPU0: NCCL refuses two ranks on one GPU") and "n2" not in why
    with pytest.raises(NodemapError, match="ranks 0,1 share n1:GPU0"):
        w.require_nccl()
    assert world.World(gpu_keys=["n1:GPU0", "n2:GPU0", ""]).nccl_refusal() == ""
