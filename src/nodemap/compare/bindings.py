"""The bindings `nodemap compare` measures, built from a Topology and a Plan.

Pure: no I/O. Each binding (none, launcher, plan, remote-gpu, packed, far-nic:
docs/compare.md says what each does) gives every task (rank) its PUs, NUMA
memory nodes, GPUs and NICs.
A deliberately bad binding that the topology cannot make bad (one NUMA
node, every GPU on the tasks' node, no NICs) is left out with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from ..bench.endpoints import Endpoint
from ..mapping.request import Plan, TaskBinding
from ..topology.cpuset import CpuSet
from ..topology.model import Topology

NAMES = ("none", "launcher", "plan", "remote-gpu", "packed", "far-nic")
SCHEMA = "nodemap.compare/1"  # bindings compared; `report --compare`'s figure ratios are nodemap.report.compare/1


@dataclass(frozen=True)
class Binding:
    name: str
    what: str  # one line: how the tasks were placed
    tasks: tuple[TaskBinding, ...]
    bad: str = ""  # for a deliberately bad binding: what is remote, in topology terms
    bound: bool = True  # False: no CPU or memory binding applied at all


def build(topo: Topology, plan: Plan) -> tuple[list[Binding], list[str]]:
    """Every binding this topology allows, and why the others are missing."""
    out, why = [none(topo, plan), launcher(topo, plan), plan_binding(plan)], []
    for make in (remote_gpu, packed, far_nic):
        b, reason = make(topo, plan)
        if b is None:
            why.append(reason)
        else:
            out.append(b)
    return out, why


def one_numa(topo: Topology) -> bool:
    return len(topo.host_numa_nodes) <= 1


# --- the reference points --------------------------------------------------------------


def _gpu_by_rank(topo: Topology, task: int) -> tuple[int, ...]:
    """What an unbound code does: CUDA device = local rank modulo GPUs."""
    gpus = [g.index for g in topo.gpus if g.visible]
    return (gpus[task % len(gpus)],) if gpus else ()


def none(topo: Topology, plan: Plan) -> Binding:
    tasks = tuple(TaskBinding(t.task, topo.allowed_cpus, CpuSet(), _gpu_by_rank(topo, t.task), (), t.threads)
                  for t in plan.tasks)
    return Binding("none", "no binding: every task may run anywhere, memory first-touch, GPU = local rank",
                   tasks, bound=False)


def launcher(topo: Topology, plan: Plan) -> Binding:
    """Open MPI's default: a core each for <= 2 ranks, else a package each, in order."""
    n = len(plan.tasks)
    allowed = topo.allowed_cpus
    if n <= 2:
        units = [c.cpuset & allowed for c in sorted(topo.cores, key=lambda c: min(c.cpuset, default=0))]
        what = "Open MPI's default for <= 2 ranks: --bind-to core, ranks in core order"
    else:
        units = [p.cpuset & allowed for p in sorted(topo.packages, key=lambda p: p.os_index)]
        what = "Open MPI's default for > 2 ranks: --bind-to package, ranks round-robin over packages"
    units = [u for u in units if u] or [allowed]
    tasks = tuple(TaskBinding(t.task, units[i % len(units)], CpuSet(), _gpu_by_rank(topo, t.task), (), t.threads)
                  for i, t in enumerate(plan.tasks))
    return Binding("launcher", what + "; GPU = local rank; memory first-touch", tasks)


def plan_binding(plan: Plan) -> Binding:
    return Binding("plan", "nodemap's plan: cores, memory, GPU and NIC near each other", tuple(plan.tasks))


# --- deliberately bad ones ----------------------------------------------------------------


def _far_numa(topo: Topology, near: CpuSet, candidates: list[int]) -> int | None:
    """The candidate NUMA node farthest from the nodes `near` (SLIT; any
    other node when distances are unknown); None when every candidate is near."""
    far = [c for c in candidates if c not in near]
    if not far:
        return None

    def dist(c: int) -> int:
        return max((topo.distance(c, m) or 0) for m in near) if near else 0

    return max(far, key=lambda c: (dist(c), -c))


def same_resources(topo: Topology, a: TaskBinding, b: TaskBinding) -> bool:
    """The same CPUs, GPUs and NUMA memory (a policy naming the node first
    touch would use anyway is no difference)."""

    def memory(t: TaskBinding) -> CpuSet:
        return t.mems or topo.numa_of(t.cpus)

    return (a.cpus, a.gpus, memory(a)) == (b.cpus, b.gpus, memory(b))


def cannot_differ(topo: Topology, b: Binding, planned: Binding | None) -> bool:
    """True when binding b gives its ranks nothing the plan's do not: the
    plan's CPUs, memory and GPUs exactly, or, on a node of one NUMA node
    (where every CPU, memory and device is equally near), as many CPUs per
    rank with no more sharing of CPUs between ranks than the plan's."""
    if planned is None or b.name == "plan" or not b.bound or len(b.tasks) != len(planned.tasks):
        return False
    if all(same_resources(topo, x, y) for x, y in zip(b.tasks, planned.tasks)):
        return True
    if not one_numa(topo):
        return False
    sizes = all(len(x.cpus) == len(y.cpus) and len(x.gpus) == len(y.gpus) for x, y in zip(b.tasks, planned.tasks))
    return sizes and _shared_cpus(b) <= _shared_cpus(planned)


def _shared_cpus(b: Binding) -> int:
    """CPUs named by more than one rank."""
    seen: dict[int, int] = {}
    for t in b.tasks:
        for c in t.cpus:
            seen[c] = seen.get(c, 0) + 1
    return sum(1 for n in seen.values() if n > 1)


def task_numa(topo: Topology, t: TaskBinding) -> CpuSet:
    """NUMA nodes a task runs and allocates on."""
    return CpuSet(set(topo.numa_of(t.cpus)) | set(t.mems))


def _farthest(topo: Topology, plan: Plan, devices: list, key: Any) -> tuple[list, str]:
    """For each task, a device (GPU or NIC, each with .numa_node) on the NUMA
    node farthest from the task's, spreading tasks over that node's devices:
    [(task, device, task's NUMA nodes)], or [] and the first task that has none."""
    out = []
    for t in plan.tasks:
        near = task_numa(topo, t)
        node = _far_numa(topo, near, sorted({d.numa_node for d in devices}))
        if node is None:
            return [], f"rank {t.task} spans every NUMA node that has one"
        there = sorted((d for d in devices if d.numa_node == node), key=key)
        out.append((t, there[t.task % len(there)], near))
    return out, ""


def remote_gpu(topo: Topology, plan: Plan) -> tuple[Binding | None, str]:
    """Each rank a GPU of another NUMA node (the farthest by SLIT), no GPU
    given more ranks than the plan gives any: only remoteness differs from
    the plan, not how ranks share GPUs."""
    gpus = [g for g in topo.gpus if g.visible and g.numa_node >= 0]
    if not gpus:
        return None, "remote-gpu: no GPU with a known NUMA node"
    picks, why = _remote_gpus(topo, plan, gpus)
    if not picks:
        return None, f"remote-gpu: {why}"
    tasks = tuple(_with(t, gpus=(g.index,)) for t, g, _ in picks)
    said = [f"rank {t.task} on NUMA {near.format()} drives {g.key} on NUMA {g.numa_node}" for t, g, near in picks]
    return Binding("remote-gpu", "the plan's cores and memory, each rank handed a GPU of another NUMA node",
                   tasks, bad="; ".join(said)), ""


def _remote_gpus(topo: Topology, plan: Plan, gpus: list) -> tuple[list, str]:
    """[(task, GPU, task's NUMA nodes)]: every task a GPU off its NUMA nodes,
    the farthest still free, each GPU taken by at most as many tasks as the
    plan puts on one GPU (one, where there are GPUs enough). Greedy, with a
    swap when a task finds only near GPUs left (a remote one held by an
    earlier task that can take another); [] and why when none exists."""
    per_gpu: dict[tuple[int, ...], int] = {}
    for t in plan.tasks:
        per_gpu[t.gpus] = per_gpu.get(t.gpus, 0) + 1
    room = {g.index: max(per_gpu.values(), default=1) for g in gpus}
    near = {t.task: task_numa(topo, t) for t in plan.tasks}
    by_id = {t.task: t for t in plan.tasks}

    def dist(t: TaskBinding, g: Any) -> int:
        return max((topo.distance(g.numa_node, m) or 0) for m in near[t.task]) if near[t.task] else 0

    def remote(t: TaskBinding) -> list:
        """t's remote GPUs, farthest first."""
        return sorted((g for g in gpus if g.numa_node not in near[t.task]), key=lambda g: (-dist(t, g), g.index))

    if all(not remote(t) for t in plan.tasks):
        return [], "every GPU is on the NUMA node of the ranks that would drive it (one NUMA node with GPUs)"
    got: dict[int, Any] = {}
    for t in plan.tasks:
        far = remote(t)
        if not far:
            return [], f"rank {t.task} spans every NUMA node that has a GPU"
        free = [g for g in far if room[g.index]]
        if not free:  # take a remote GPU of an earlier task that can move to a GPU still free for it
            swap = next(((q, g, h) for q in got for g in far if got[q] is g
                         for h in remote(by_id[q]) if room[h.index]), None)
            if swap is None:
                return [], (f"rank {t.task}: every GPU off its NUMA node already has as many ranks as the plan "
                            "gives one GPU")
            q, g, h = swap
            got[q] = h
            room[h.index] -= 1
            free = [g]
            room[g.index] += 1
        got[t.task] = free[0]
        room[free[0].index] -= 1
    return [(t, got[t.task], near[t.task]) for t in plan.tasks], ""


def packed(topo: Topology, plan: Plan) -> tuple[Binding | None, str]:
    if one_numa(topo):
        return None, "packed: one NUMA node: every binding is packed on it"
    home = next((n for n in topo.host_numa_nodes if n.cpuset & topo.allowed_cpus), None)
    if home is None:
        return None, "packed: no NUMA node with allowed PUs"
    cores = [c.cpuset & topo.allowed_cpus for c in sorted(topo.cores, key=lambda c: min(c.cpuset, default=0))
             if c.cpuset & home.cpuset & topo.allowed_cpus]
    n = len(plan.tasks)
    tasks = []
    for i, t in enumerate(plan.tasks):
        mine = cores[i * len(cores) // n:(i + 1) * len(cores) // n] or [cores[i % len(cores)]]
        cpus = CpuSet(set().union(*mine))
        tasks.append(_with(t, cpus=cpus, mems=CpuSet([home.os_index])))
    return Binding("packed", f"every rank on the cores of NUMA {home.os_index}, memory there, the plan's GPUs",
                   tuple(tasks), bad=f"all {n} ranks share NUMA {home.os_index}'s {len(cores)} cores and memory"), ""


def far_nic(topo: Topology, plan: Plan) -> tuple[Binding | None, str]:
    planned = {n for t in plan.tasks for n in t.nics}
    kinds = {n.kind for n in topo.nics if n.name in planned}
    nics = [n for n in topo.nics if n.numa_node >= 0 and (not kinds or n.kind in kinds)]  # the kind the plan uses
    if not nics:
        return None, "far-nic: no NIC with a known NUMA node"
    picks, why = _farthest(topo, plan, nics, key=lambda n: n.name)
    if not picks:
        return None, f"far-nic: {why.replace('one', 'a NIC')}"
    tasks = tuple(_with(t, nics=(n.name,)) for t, n, _ in picks)
    said = [f"rank {t.task} on NUMA {near.format()} uses {n.name} on NUMA {n.numa_node}" for t, n, near in picks]
    return Binding("far-nic", "the plan's cores, memory and GPUs, each rank handed the NIC farthest from it",
                   tasks, bad="; ".join(said)), ""


def _with(t: TaskBinding, **change: object) -> TaskBinding:
    d = {name: getattr(t, name) for name in ("task", "cpus", "mems", "gpus", "nics", "threads")}
    d.update(change)
    return TaskBinding(**d)  # places and env belong to the plan's binding, not to this one


class Resources(msgspec.Struct):
    """One rank's resources as table cells: PUs, the NUMA nodes of its CPUs, its memory policy, GPUs and NICs
    (each with its NUMA node)."""

    rank: int
    pus: str
    numa: str
    memory: str
    gpus: list[str]
    nics: list[str]


def resources(topo: Topology, t: TaskBinding) -> Resources:
    def near(name: str, numa: int) -> str:
        return f"{name} (NUMA {numa})" if numa >= 0 else name

    gpus = {g.index: g for g in topo.gpus}
    nics = {n.name: n for n in topo.nics}
    return Resources(t.task, t.cpus.format(), topo.numa_of(t.cpus).format(),
                     f"NUMA {t.mems.format()}" if t.mems else "first-touch",
                     [near(Endpoint("gpu", i).label, gpus[i].numa_node if i in gpus else -1) for i in t.gpus],
                     [near(n, nics[n].numa_node if n in nics else -1) for n in t.nics])


def describe(topo: Topology, t: TaskBinding) -> str:
    """'rank 0: cpus 0-7 (NUMA 0), memory NUMA 0, GPU1 (NUMA 1), mlx5_0 (NUMA 0)'."""
    r = resources(topo, t)
    return ", ".join([f"rank {t.task}: cpus {r.pus} (NUMA {r.numa})", f"memory {r.memory}", *r.gpus, *r.nics])


# --- the document (nodemap compare --json, -o): written and read as Comparison (nodemap.records) ---


class Outcome(msgspec.Struct):
    """One probe under one binding."""

    per_rank: list[float | None]  # each rank's median
    total: float | None  # the whole binding's figure (None: it failed)
    unit: str
    repetitions: list[float]  # the whole binding's figure per repetition
    rounds: int
    started_together: int  # repetitions its ranks started together
    interval: list[float] | None  # the 95% interval of `total`
    spread: float
    errors: list[str]
    warnings: list[str]
    verdict: str  # against the plan


class Entry(msgspec.Struct):
    name: str
    what: str
    bad: str
    ranks: list[str]  # describe()'s
    resources: list[Resources]
    probes: dict[str, Outcome]  # none for --dry-run


class Comparison(msgspec.Struct, kw_only=True):
    schema: Literal[SCHEMA] = SCHEMA
    tasks: int
    topology: str  # its source
    rounds: int
    bindings: list[Entry]
    notes: list[str]
