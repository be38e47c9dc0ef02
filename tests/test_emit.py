
import pytest

import nodes
from nodemap.errors import NodemapError
from nodemap.mapping import emit
from nodemap.mapping.plan import plan
from nodemap.mapping.request import Plan, Request, TaskBinding
from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import Port, replace


def _task(**kw):
    base = dict(task=0, cpus=CpuSet.parse("48-55"), mems=CpuSet.parse("3"), gpus=(0,), nics=("mlx5_1",), threads=2,
                places=(CpuSet.parse("48,176"), CpuSet.parse("49,177")))
    base.update(kw)
    return TaskBinding(**base)


def _plan(*tasks):
    return Plan(request=Request(tasks=len(tasks)), tasks=tuple(tasks))


def test_karolina_task_env():
    topo, t = nodes.karolina(), _task()
    env = dict(emit.task_env(topo, _plan(t), t))
    assert env == {
        "NODEMAP_GPUS": "0", "CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "OMP_NUM_THREADS": "2", "OMP_PLACES": "{48,176},{49,177}", "OMP_PROC_BIND": "close",
        "NODEMAP_NIC": "mlx5_1", "UCX_NET_DEVICES": "mlx5_1:1", "NCCL_IB_HCA": "=mlx5_1:1",
    }


def test_places_default_to_one_per_pu_and_runs_compress():
    topo = nodes.karolina()
    t = _task(places=(), cpus=CpuSet.parse("0-1"), gpus=(), nics=())
    assert dict(emit.task_env(topo, _plan(t), t))["OMP_PLACES"] == "{0},{1}"
    assert emit.omp_places([CpuSet.parse("0-3,8,9")]) == "{0:4,8,9}"


def test_two_rails_and_port_states():
    topo = nodes.karolina()
    down = replace(topo.nic("mlx5_0"), ports=(Port(1, "DOWN"), Port(2, "4: ACTIVE")))
    unknown = replace(topo.nic("mlx5_1"), ports=(Port(1, ""),))
    topo = replace(topo, nics=(down, unknown) + topo.nics[2:])
    t = _task(nics=("mlx5_0", "mlx5_1"))
    env = dict(emit.task_env(topo, _plan(t), t))
    assert env["UCX_NET_DEVICES"] == "mlx5_0:2,mlx5_1:1"
    assert env["NCCL_IB_HCA"] == "=mlx5_0:2,mlx5_1:1"
    dead = replace(down, ports=(Port(1, "DOWN"),))
    assert emit.rdma_port(dead) == ""


def test_plain_ethernet_is_steered_by_the_socket_transports_variables():
    """A NIC without an RDMA device (its name is its netdev's): libfabric's tcp provider (MPICH's
    OFI netmod) takes one interface, UCX's tcp and NCCL's sockets a list (NCCL's "=": exact names)."""
    topo = nodes.karolina()
    eth = [replace(topo.nic("mlx5_1"), name=f"rail{k}", kind="Ethernet", ports=(Port(1, "up"),),
                   netdevs=(f"rail{k}",)) for k in (0, 1)]
    topo = replace(topo, nics=tuple(eth) + topo.nics)
    t = _task(nics=("rail1",))
    env = dict(emit.task_env(topo, _plan(t), t))
    assert {k: env[k] for k in ("NODEMAP_NIC", "FI_TCP_IFACE", "UCX_NET_DEVICES", "NCCL_SOCKET_IFNAME")} == {
        "NODEMAP_NIC": "rail1", "FI_TCP_IFACE": "rail1", "UCX_NET_DEVICES": "rail1", "NCCL_SOCKET_IFNAME": "=rail1"}
    assert "NCCL_IB_HCA" not in env
    both = _task(nics=("rail0", "rail1"))
    env = dict(emit.task_env(topo, _plan(both), both))
    assert (env["FI_TCP_IFACE"], env["UCX_NET_DEVICES"], env["NCCL_SOCKET_IFNAME"]) == ("rail0", "rail0,rail1",
                                                                                       "=rail0,rail1")
    rdma = _task(nics=("mlx5_1",))  # an RDMA NIC: its port, no socket variables
    assert "FI_TCP_IFACE" not in dict(emit.task_env(topo, _plan(rdma), rdma))


def test_slingshot_policy_follows_gpu():
    topo = nodes.perlmutter()
    with_gpu = _task(cpus=CpuSet.parse("0-15"), mems=CpuSet.parse("0"), gpus=(3,), nics=("cxi3",), places=())
    cpu_only = replace(with_gpu, gpus=())
    assert ("MPICH_OFI_NIC_POLICY", "GPU") in emit.task_env(topo, _plan(with_gpu), with_gpu)
    env = dict(emit.task_env(topo, _plan(cpu_only), cpu_only))
    assert env["MPICH_OFI_NIC_POLICY"] == "NUMA"
    assert "UCX_NET_DEVICES" not in env and "CUDA_VISIBLE_DEVICES" not in env


def test_amd_gpus_by_uuid_when_known_else_index():
    topo = nodes.karolina()
    amd = tuple(replace(g, vendor="AMD") for g in topo.gpus)
    t = _task(gpus=(0, 1))
    env = dict(emit.task_env(replace(topo, gpus=amd), _plan(t), t))
    assert env["ROCR_VISIBLE_DEVICES"] == "GPU-00000000,GPU-00000001" and "CUDA_VISIBLE_DEVICES" not in env
    no_uuid = tuple(replace(g, uuid="") for g in amd)
    env = dict(emit.task_env(replace(topo, gpus=no_uuid), _plan(t), t))
    assert env["ROCR_VISIBLE_DEVICES"] == "0,1"
    # a topology saved before the sources wrote ROCr's form (hwloc's bare "%llx"): indexes, which ROCr takes
    bare = tuple(replace(g, uuid=f"7a3c15e2d{g.index}") for g in amd)
    env = dict(emit.task_env(replace(topo, gpus=bare), _plan(t), t))
    assert env["ROCR_VISIBLE_DEVICES"] == "0,1"


@pytest.mark.parametrize("vendors", [("NVIDIA",), ("AMD",), ("Intel",), ("Intel", "NVIDIA"), ("NVIDIA", "AMD")])
def test_what_plan_emits_the_topology_reads_back_for_every_vendor(vendors):
    # one table (env.GPU_VISIBILITY_OF): emit wrote ZE_AFFINITY_MASK for Intel GPUs while the topology
    # read CUDA_VISIBLE_DEVICES for them, so the planned GPUs were never the ones `show` and `topo` saw;
    # and on a node of two vendors emit wrote the node's index (an Intel iGPU as GPU0 made the first
    # NVIDIA GPU CUDA_VISIBLE_DEVICES=1, a device CUDA does not have)
    from nodemap.topology.nvml import hidden_gpus

    topo = nodes.karolina()
    gpus = tuple(replace(g, vendor=vendors[0] if g.index < 4 else vendors[-1], uuid="") for g in topo.gpus)
    topo = replace(topo, gpus=gpus)
    t = _task(gpus=(2, 5))
    env = dict(emit.task_env(topo, _plan(t), t))
    hidden, shows, problems = hidden_gpus(topo, env)
    assert hidden == {g.index for g in topo.gpus} - {2, 5} and not problems, env


PLANNED = [("CUDA_VISIBLE_DEVICES", "2"), ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"), ("OMP_NUM_THREADS", "8"),
           ("OMP_PLACES", "{0},{1}")]


def test_merge_keeps_user_values_and_says_so():
    final, dec = emit.merge_env(PLANNED, {"OMP_NUM_THREADS": "1", "OMP_PLACES": "{0},{1}"})
    used = {d["name"]: d["used"] for d in dec}
    assert used == {"CUDA_VISIBLE_DEVICES": "plan", "CUDA_DEVICE_ORDER": "plan", "OMP_NUM_THREADS": "user",
                    "OMP_PLACES": "same"}
    assert "OMP_NUM_THREADS" not in final and final["CUDA_VISIBLE_DEVICES"] == "2"
    assert [d["name"] for d in dec] == [n for n, _ in PLANNED]  # planned order kept
    final, dec = emit.merge_env(PLANNED, {"OMP_NUM_THREADS": "1"}, override=True)
    assert final["OMP_NUM_THREADS"] == "8"


def test_visibility_is_narrowed_and_device_order_follows_it():
    current = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    final, dec = emit.merge_env(PLANNED, current)
    assert final["CUDA_VISIBLE_DEVICES"] == "2" and final["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    why = {d["name"]: d["why"] for d in dec}
    assert "narrows" in why["CUDA_VISIBLE_DEVICES"] and "goes with" in why["CUDA_DEVICE_ORDER"]


def test_launch_lines_start_ranks_unbound_through_nodemap_run():
    lines = emit.launch_lines(_plan(_task(), _task(task=1)), ["--tasks", "2", "--cpus", "0-3"], app=("./a b",))
    assert set(lines) == {"srun", "mpirun", "mpiexec", "flux"}
    assert "--cpu-bind=none" in lines["srun"] and "--gpu-bind=none" in lines["srun"]
    assert "--bind-to none" in lines["mpirun"] and "-bind-to none" in lines["mpiexec"]
    assert lines["flux"].startswith("flux run --tasks-per-node=2")
    for line in lines.values():
        assert line.endswith("nodemap run --tasks 2 --cpus 0-3 -- './a b'")


def test_gpu_ids_uuid_and_pci():
    topo = nodes.karolina()
    p = plan(topo, Request(tasks=8, gpu_ids="uuid"))
    env = dict(emit.with_env(topo, p).tasks[0].env)
    assert env["CUDA_VISIBLE_DEVICES"] == topo.gpu(p.tasks[0].gpus[0]).uuid and env["NODEMAP_GPUS"] == "2"
    p = plan(topo, Request(tasks=8, gpu_ids="pci"))
    env = dict(emit.with_env(topo, p).tasks[0].env)
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["NODEMAP_GPU_PCI"] == topo.gpu(2).pci_bus_id


def test_gpu_ids_uuid_without_uuids_says_how_to_get_them():

    topo = nodes.perlmutter()
    topo = replace(topo, gpus=tuple(replace(g, uuid="") for g in topo.gpus))
    with pytest.raises(NodemapError, match="nvidia-ml-py"):
        emit.with_env(topo, plan(topo, Request(tasks=4, gpu_ids="uuid")))


def _mig_node(slices=("MIG-a", "MIG-b", "MIG-c"), whole_too=False):
    topo = nodes.build(nodes.Spec(1, 1, 1, 8, gpus=[nodes.Dev(0)] * (2 if whole_too else 1)))
    return replace(topo, gpus=(replace(topo.gpus[0], mig=slices), *topo.gpus[1:]))


def test_mig_gpus_get_one_mig_device_per_task_in_turn():
    topo = _mig_node()
    p = emit.with_env(topo, plan(topo, Request(tasks=4, gpu_ids="uuid")))
    got = [dict(t.env)["CUDA_VISIBLE_DEVICES"] for t in p.tasks]
    assert got == ["MIG-a", "MIG-b", "MIG-c", "MIG-a"]


@pytest.mark.parametrize("ids, whole_too, word", [("index", False, "pass --gpu-ids uuid"),
                                                  ("pci", False, "pass --gpu-ids uuid"),
                                                  ("uuid", True, "cannot use both")])
def test_mig_gpus_are_refused_where_cuda_could_not_use_them(ids, whole_too, word):
    topo = _mig_node(whole_too=whole_too)
    with pytest.raises(NodemapError, match=word):
        emit.with_env(topo, plan(topo, Request(tasks=1, gpu_ids=ids)))
