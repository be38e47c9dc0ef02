"""What a user asks for (Request) and what the planner decides (Plan).

Both are plain data: a Request can come from the CLI, a launcher's
environment or a test; a Plan is printed, emitted as environment variables,
applied by launch, and serialized to JSON.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from ..topology.cpuset import CpuSet

PLAN_SCHEMA = "nodemap.plan/1"


@dataclass(frozen=True)
class Request:
    tasks: int  # tasks (ranks) on this node
    threads: int = 0  # threads per task; 0 = auto (the PUs the task gets, at the SMT level asked)
    gpus_per_task: int = -1  # -1 auto: spread evenly, share when tasks outnumber GPUs; 0 ignore GPUs
    smt: int = 0  # hardware threads per core to use; 0 = 1, or the fewest that give every thread a PU
    restrict_cpus: CpuSet | None = None  # only these PUs (always intersected with the allowed set)
    restrict_mems: CpuSet | None = None  # only these NUMA nodes
    nic_rails: int = 1  # NICs per task; 0 = none, -1 = all equally near NICs
    spread_by: str = "auto"  # "auto" (GPUs when there are GPUs, else PUs), "gpus", "pus"
    gpu_order: str = "locality"  # "locality" or "index" (GPU k to task k, for codes that assume it)
    oversubscribe: bool = False  # allow tasks to share PUs when tasks > PUs
    greedy: bool = True  # fewer tasks than GPU/NUMA domains: each takes a run of domains (else one each)


@dataclass(frozen=True, init=False)
class TaskBinding:
    task: int  # node-local rank
    cpus: CpuSet  # PUs the task may run on
    mems: CpuSet  # NUMA nodes its memory is bound to
    gpus: tuple[int, ...] = ()  # physical GPU indexes (PCI bus order)
    nics: tuple[str, ...] = ()  # NIC names, e.g. ("mlx5_1",)
    threads: int = 1
    places: tuple[CpuSet, ...] = ()  # one entry per thread place (OMP_PLACES)
    env: tuple[tuple[str, str], ...] = ()  # environment the task should get, in order

    # The generated __init__ of a frozen dataclass sets each field through
    # object.__setattr__: ~2x slower, and a plan of 8,192 tasks makes 8,192.
    def __init__(self, task: int, cpus: CpuSet, mems: CpuSet, gpus: tuple[int, ...] = (),
                 nics: tuple[str, ...] = (), threads: int = 1, places: tuple[CpuSet, ...] = (),
                 env: tuple[tuple[str, str], ...] = ()) -> None:
        self.__dict__.update(task=task, cpus=cpus, mems=mems, gpus=gpus, nics=nics, threads=threads, places=places,
                             env=env)


@dataclass(frozen=True)
class Plan:
    request: Request
    tasks: tuple[TaskBinding, ...]
    level: str = ""  # hierarchy level the tasks were spread over ("NUMA", "L3", "Core"...)
    notes: tuple[str, ...] = ()  # policy decisions worth telling the user

    def to_dict(self) -> dict[str, Any]:
        def enc(o: Any) -> Any:
            if isinstance(o, CpuSet):
                return o.format()
            if dataclasses.is_dataclass(o):
                return {f.name: enc(getattr(o, f.name)) for f in dataclasses.fields(o)}
            if isinstance(o, (tuple, list)):
                return [enc(x) for x in o]
            return o

        return {"schema": PLAN_SCHEMA, **enc(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Plan":
        if d.get("schema") != PLAN_SCHEMA:
            raise ValueError(f"not a nodemap plan (schema {d.get('schema')!r})")
        r = dict(d["request"])
        for k in ("restrict_cpus", "restrict_mems"):
            if r.get(k) is not None:
                r[k] = CpuSet.parse(r[k])
        tasks = tuple(
            TaskBinding(
                task=t["task"],
                cpus=CpuSet.parse(t["cpus"]),
                mems=CpuSet.parse(t["mems"]),
                gpus=tuple(t["gpus"]),
                nics=tuple(t["nics"]),
                threads=t["threads"],
                places=tuple(CpuSet.parse(p) for p in t["places"]),
                env=tuple(tuple(e) for e in t["env"]),
            )
            for t in d["tasks"]
        )
        return cls(request=Request(**r), tasks=tasks, level=d.get("level", ""), notes=tuple(d.get("notes", ())))
