"""What a user asks for (Request) and what the planner decides (Plan).

Both are plain data: a Request can come from the CLI, a launcher's
environment or a test; a Plan is printed, emitted as environment variables,
applied by launch, and serialized to JSON.
"""

from __future__ import annotations

import json

from ..topology.cpuset import CpuSet
from ..topology.record import Record, to_builtins

PLAN_SCHEMA = "nodemap.plan/1"
RAILS_AUTO = -2  # nic_rails: every nearest NIC when the node has more NICs than tasks, else one


class Request(Record):
    tasks: int  # tasks (ranks) on this node
    threads: int = 0  # threads per task; 0 = auto (the PUs the task gets, at the SMT level asked)
    gpus_per_task: int = -1  # -1 auto: spread evenly, share when tasks outnumber GPUs; 0 ignore GPUs
    smt: int = 0  # hardware threads per core to use; 0 = 1, or the fewest that give every thread a PU
    restrict_cpus: CpuSet | None = None  # only these PUs (always intersected with the allowed set)
    restrict_mems: CpuSet | None = None  # only these NUMA nodes
    nic_rails: int = RAILS_AUTO  # NICs per task; 0 none, -1 all equally near, -2 auto (all when NICs > tasks)
    spread_by: str = "auto"  # "auto" (GPUs when there are GPUs, else PUs), "gpus", "pus"
    gpu_order: str = "locality"  # "locality" or "index" (GPU k to task k, for codes that assume it)
    oversubscribe: bool = False  # allow tasks to share PUs when tasks > PUs
    greedy: bool = True  # fewer tasks than GPU/NUMA domains: each takes a run of domains (else one each)
    gpu_ids: str = "index"  # how CUDA_VISIBLE_DEVICES names GPUs: "index", "uuid" or "pci" (index + NODEMAP_GPU_PCI)
    reserve_cores: int = 0  # the first K cores of every package are kept free of tasks
    all_pus: bool = False  # without --smt: bind every PU of the task's cores, threads still one per core
    # (nodemap run without a launcher: like numactl, the whole allowed node)


class TaskBinding(Record):
    task: int  # node-local rank
    cpus: CpuSet  # PUs the task may run on
    mems: CpuSet  # NUMA nodes its memory is bound to
    gpus: tuple[int, ...] = ()  # physical GPU indexes (PCI bus order)
    nics: tuple[str, ...] = ()  # NIC names, e.g. ("mlx5_1",)
    threads: int = 1
    places: tuple[CpuSet, ...] = ()  # one entry per thread place (OMP_PLACES)
    env: tuple[tuple[str, str], ...] = ()  # environment the task should get, in order


class Plan(Record):
    request: Request
    tasks: tuple[TaskBinding, ...]
    level: str = ""  # hierarchy level the tasks were spread over ("NUMA", "L3", "Core"...)
    notes: tuple[str, ...] = ()  # policy decisions worth telling the user


    def to_dict(self) -> dict[str, object]:
        return {"schema": PLAN_SCHEMA, **to_builtins(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, data: bytes | str, where: str = "plan") -> "Plan":
        """A saved plan (`to_json`), every field checked: an InputError
        naming `where` and the field path ("tasks[2].cpus")."""
        from ..topology import saved

        return saved.decode(where, data, cls, PLAN_SCHEMA, "nodemap plan")
