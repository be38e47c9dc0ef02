"""This node's plan for its ranks, made once and shared through the plan
cache: what `nodemap run` applies and what a benchmark's ranks take their
GPUs from (bench/comm/world.py), so both place a rank alike.

`node_plan` plans (or reads the plan another rank published); `plan_dict`
is the pure part: a Plan of a Topology as the plain dict the cache holds.
"""

from __future__ import annotations

import argparse
import os
from typing import Callable


def default_args(**given) -> argparse.Namespace:
    """The request options' defaults (`nodemap run` with no request option),
    with `given` over them: the plan a benchmark's ranks share with it."""
    from . import cliargs

    p = argparse.ArgumentParser(add_help=False)
    cliargs.add_request_arguments(p)
    args = p.parse_args([])
    args.no_cache = False
    for k, v in given.items():
        setattr(args, k, v)
    return args


def node_plan(args: argparse.Namespace, tasks: int, local_rank: int = 0, all_pus: bool = False,
              say: Callable[[str], None] = lambda text: None) -> tuple[dict, bool]:
    """The node's plan as a dict (Plan.to_dict, each task with its env), and
    whether another rank or an earlier step made it: the first rank of the
    node plans and publishes, the others wait for it and read. `all_pus`:
    the lone task of a run without a launcher binds every PU of its cores.
    `say` tells of a long wait and of a cache that cannot be used."""
    from . import cliargs, plancache

    if args.no_cache:
        return _plan_node(args, tasks, all_pus), False
    key = plancache.fingerprint((cliargs.request_key(args), tasks, all_pus), args.input, os.environ)
    try:
        return plancache.shared_plan(key, lambda: _plan_node(args, tasks, all_pus), say=say)
    except plancache.Refused as e:
        if local_rank == 0:
            say(str(e))
        return _plan_node(args, tasks, all_pus), False


def _plan_node(args: argparse.Namespace, tasks: int, all_pus: bool = False) -> dict:
    from ..errors import NodemapError
    from . import cliargs
    from .plan import plan
    from ..topology.discover import discover
    from ..topology.model import replace

    req = cliargs.request_from_args(args, tasks, all_pus)
    topo = discover(args.input, source=_source(args.input, args.gpu_ids))
    if args.tasks is None and tasks > len(topo.allowed_cpus) and topo.allowed_cpus == topo.cpuset:
        # the launcher already started more ranks than the whole node has PUs: they can only share
        # them (rank 0 says so). A rank the launcher bound sees fewer PUs: that stays an error below.
        req = replace(req, oversubscribe=True)
    try:
        p = plan(topo, req)
    except NodemapError as e:
        if args.input or topo.allowed_cpus == topo.cpuset:
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
