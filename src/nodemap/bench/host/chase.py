"""The pointer chase both host kinds run (`bench latency`'s working sets,
`bench numa`'s latency cells): one pinned CPU through a random single cycle
of 64 B nodes (native/latency.c, kernels.py), and the caches of that CPU a
working set is sized against."""

from __future__ import annotations

from ...errors import NodemapError
from ...topology.cpuset import CpuSet
from ...topology.model import Topology
from ...units import format_size
from . import kernels as hostkernels
from ..driver import Case
from ..results import Result, make_result

MIN_SIZE = 4 << 10
LINE = 64


def cpu_caches(topo: Topology, cpu: int) -> list[tuple[str, int]]:
    """(label, bytes) of the data/unified caches of `cpu`, smallest first."""
    out = []
    for c in sorted(topo.caches, key=lambda c: c.level):
        if c.kind != "instruction" and cpu in c.cpuset:
            out.append((f"L{c.level}{'d' if c.kind == 'data' else ''}", c.size))
    return out


class Chase(Case):
    """One working set: a pointer chase on one pinned CPU (native/latency.c
    loops over the repetitions, after one untimed cycle)."""

    def __init__(self, topo: Topology, cpu: int, size: int, loads: int, mem_nodes: CpuSet = CpuSet(), *,
                 benchmark: str, level: str = "", params: dict | None = None) -> None:
        self.topo, self.cpu, self.size, self.loads, self.mem_nodes = topo, cpu, size, loads, mem_nodes
        self.benchmark, self.level = benchmark, level
        self.params = params or {}  # added to the Result's (numa's cell)
        self.label = format_size(size)
        self.last: hostkernels.ChaseRun | None = None

    def runs(self, n: int) -> list[float]:
        self.last = hostkernels.chase(self.size, self.cpu, reps=n, line=LINE, mem_nodes=list(self.mem_nodes),
                                      min_loads=self.loads)
        return self.last.ns_per_load

    def verify(self) -> None:
        run = self.last
        if run is not None and not run.verified:
            raise NodemapError(f"latency check failed: the chase over {run.nodes} nodes came back after "
                               f"{run.steps_to_return} steps; not reported (memory errors? rerun)")

    def results(self, samples: list[float]) -> list[Result]:
        home = self.topo.numa_of(CpuSet([self.cpu]))
        mem = self.mem_nodes or home
        level = self.level
        where = f"NUMA{mem.format()} memory" if level in ("", "DRAM") else f"{level} (predicted)"
        return [make_result(
            self.benchmark, "load latency", "ns", samples, verified=True,
            params={"cpu": self.cpu, "working_set": self.size, "line": LINE, "nodes": self.size // LINE,
                    "level": level, "mem_nodes": self.mem_nodes.format()} | self.params,
            counting="ns per dependent load (time / loads)",
            path=f"CPU{self.cpu} (NUMA{home.format()}) -> {where}",
            path_class=level or ("local" if mem.issubset(home) else "remote"),
            verification=f"chase returned to its start after exactly {self.size // LINE} steps "
                         "(one cycle through every node)",
        )]
