"""This node's plan for its ranks, made once and shared through the plan
cache: what `nodemap run` applies and what a benchmark's ranks take their
GPUs from (bench/comm/world.py), so both place a rank alike.

`node_plan` takes the Request's fields (plain values: only the rank that
plans builds the Request, so a rank's launch imports no msgspec) and gives
a NodePlan, the Plan as the cache holds it (`plan_dict`) typed for reading.
"""

from __future__ import annotations

import os
from collections import namedtuple

TYPE_CHECKING = False  # typing is not on the launch path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


# A task: TaskBinding's fields as text and lists (cpus "0-3"), and its PUs, NUMA nodes and GPUs' PCI bus
# ids as lists. Named tuples, not dataclasses: on every rank's launch (dataclasses import inspect: ms).
PlannedTask = namedtuple("PlannedTask", "task cpus mems gpus nics threads places env cpu_list mem_list gpu_pci")
# tasks by local rank, the planner's notes, the host, every NUMA node (a binding to all restricts nothing)
NodePlan = namedtuple("NodePlan", "tasks notes hostname node_mems")


def read(saved: dict) -> NodePlan:
    """A NodePlan of the plan as the cache holds it (plan_dict)."""
    return NodePlan([PlannedTask(**t) for t in saved["tasks"]], saved["notes"], saved["hostname"],
                    saved["node_mem_list"])


def node_plan(request: Mapping[str, object], input_path: str | None = None, *, from_launcher: bool = False,
              local_rank: int = 0, cache: bool = True,
              say: Callable[[str], None] = lambda text: None) -> tuple[NodePlan, bool]:
    """The node's plan for `request` (every field of a Request, as keyword arguments of Request) on the
    node read from `input_path` (default: this one), and whether another rank or an earlier step made
    it: the first rank of the node plans and publishes, the others wait for it and read.
    `from_launcher`: the request's tasks are the launcher's count (no --tasks). `say` tells of a long
    wait and of a cache that cannot be used."""
    from . import plancache

    def make() -> dict:
        return _plan_node(request, input_path, from_launcher)

    if not cache:
        return read(make()), False
    key = plancache.fingerprint((sorted(request.items()), from_launcher), input_path, os.environ)
    try:
        saved, cached = plancache.shared_plan(key, make, say=say)
    except plancache.Refused as e:
        if local_rank == 0:
            say(str(e))
        saved, cached = make(), False
    return read(saved), cached


def _plan_node(request: Mapping[str, object], input_path: str | None, from_launcher: bool) -> dict:
    from ..errors import NodemapError
    from .plan import plan
    from .request import Request
    from ..topology.discover import discover
    from ..topology.model import replace

    req = Request(**request)
    topo = discover(input_path, source=_source(input_path, req.gpu_ids))
    if from_launcher and req.tasks > len(topo.allowed_cpus) and topo.allowed_cpus == topo.cpuset:
        # the launcher already started more ranks than the whole node has PUs: they can only share
        # them (rank 0 says so). A rank the launcher bound sees fewer PUs: that stays an error below.
        req = replace(req, oversubscribe=True)
    try:
        p = plan(topo, req)
    except NodemapError as e:
        if input_path or topo.allowed_cpus == topo.cpuset:
            raise
        # the usual cause: the launcher bound this rank before nodemap could (Open MPI binds to cores by default)
        raise NodemapError(f"{e}. This rank may use only PUs {topo.allowed_cpus.format()} of the node's "
                           f"{topo.cpuset.format()} (its affinity and cgroup): if the launcher bound it, start ranks "
                           "unbound (mpirun --bind-to none, srun --cpu-bind=none, flux -o cpu-affinity=off); if the "
                           "job's allocation is that small, ask for more CPUs or fewer tasks") from None
    return plan_dict(topo, p)


def plan_dict(topo, p) -> dict:
    """A Plan as the cache holds it: Plan.to_dict with every task's env, plus
    plain lists (a rank reading the cached plan needs no CpuSet) and each
    task's GPUs by PCI bus id (--watch finds them in NVML, a benchmark rank
    among its CUDA devices)."""
    from . import emit

    p = emit.with_env(topo, p)
    d = p.to_dict()
    for t, tb in zip(d["tasks"], p.tasks):
        t["cpu_list"], t["mem_list"] = list(tb.cpus), list(tb.mems)
        t["gpu_pci"] = [topo.gpu(i).pci_bus_id for i in tb.gpus]
    d["node_mem_list"] = list(topo.nodeset)
    d["hostname"] = topo.machine.hostname
    return d


def _source(input_path, gpu_ids: str = "index") -> str:
    """sysfs has all the plan needs and is fast; NVML only for GPU UUIDs and
    MIG devices (the driver lists MIG GPU instances under /proc; a container
    that masks that folder needs --gpu-ids uuid on MIG nodes)."""
    if input_path or gpu_ids == "uuid" or _mig_instances():
        return "auto"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return "auto" if any(e.strip() and not e.strip().isdecimal() for e in visible.split(",")) else "sysfs"


def _mig_instances(root: str = "/proc/driver/nvidia/capabilities") -> bool:
    """Whether some GPU has MIG GPU instances (gpuN/mig/giK), by the driver's capability files."""
    try:
        gpus = [e for e in os.listdir(root) if e.startswith("gpu")]
    except OSError:
        return False
    for g in gpus:
        try:
            if any(e.startswith("gi") for e in os.listdir(os.path.join(root, g, "mig"))):
                return True
        except OSError:
            pass
    return False
