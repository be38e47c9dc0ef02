"""The suite: which bench kinds `check` runs at each level, from the
Topology, and running them in-process to ResultSets.

quick keeps the standard array/copy sizes, the DRAM working set and the
largest NCCL size (a quick figure is full's measurement with fewer
repetitions) and drops kernels, engines, sizes and repetitions that are
not judged; full runs the kinds at their defaults.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..bench.driver import Common, argv_of
from ..bench.results import ResultSet
from ..topology.model import Topology
from . import mpi
from .inventory import Skipped

# Testing knob (not a user option): tiny host arrays so the end-to-end test
# stays short on CI. The real quick level is what users get without it.
TINY_ENV = "NODEMAP_CHECK_TINY"


@dataclass(frozen=True)
class Step:
    kind: str  # `nodemap bench KIND`
    argv: tuple[str, ...]  # its command line: what is shown (what runs for the job's own mpi step)
    what: str  # for progress and the report
    options: Common | None = None  # what runs (bench/driver.py); None: the MPI job's own ranks measure


def typed(kind: str, options: Common, what: str) -> Step:
    return Step(kind, argv_of(options), what, options)


def host_steps(level: str, topo: Topology, tiny: bool = False) -> list[Step]:
    """STREAM sweep, NUMA matrices (two NUMA nodes or more), latency.

    quick reads every judged figure where full does (the same STREAM arrays,
    the DRAM latency at 4x the largest cache) with fewer repetitions, and
    skips the latency curve's cache-to-DRAM transition (chasing 1-2x the
    largest cache is most of the curve's time on a large L3). A best of
    fewer repetitions is a slightly worse best; full's repetitions would
    cost an estimated +12 s of the 60 s the quick level has on a 1-GPU node,
    for a bias inside the run-to-run noise of the VMs measured
    (benchmarks/check_quick_vs_full.py measures it on a node). Only the
    triad is judged, so only it is swept."""
    from ..bench.host import memory as host_memory, latency, numa

    has_numa = len([n for n in topo.numa_nodes if n.cpuset]) > 1
    quick = {"repeats": 3} if level == "quick" else {}
    size = "2M" if tiny else None
    steps = [typed("memory", host_memory.Options(sweep=True, kernels="triad", size=size, **quick),
                   "STREAM placement sweep"),
             typed("numa", numa.Options(size=size, latency_size="1M" if tiny else None, **quick),
                   "NUMA bandwidth and latency matrices"),
             typed("latency", latency.Options(**({"dram_top_only": True, "repeats": 2} if quick else {}),
                                              max_size="256K" if tiny else None),
                   "latency against working-set size")]
    return [s for s in steps if has_numa or s.kind != "numa"]


def gpu_steps(level: str, gpus: int) -> list[Step]:
    from ..bench.comm import collectives
    from ..bench.gpu import copies, memory

    quick = level == "quick"
    steps = [typed("gpu", memory.Options(dtype="float64", kernels="triad", no_aggregate=True, repeats=10)
                   if quick else memory.Options(), "GPU memory bandwidth (BabelStream)"),
             typed("copies", copies.Options(engine="ce", cases="host,d2d" if gpus > 1 else "host", iters=4,
                                            repeats=3) if quick else copies.Options(latency=True),
                   "host<->GPU (NUMA x GPU) and GPU<->GPU copies")]
    if gpus > 1:
        steps.append(typed("nccl", collectives.Options(ops="all_reduce", mode="single", sizes="256MiB:1GiB",
                                                       inplace="out", repeats=3) if quick
                           else collectives.Options(ops="all_reduce", mode="single"),
                           "NCCL all_reduce bus bandwidth"))
    return steps


def plan(topo: Topology, level: str, env: dict[str, str] | None = None,
         in_job: mpi.InJob | None = None) -> tuple[list[Step], list[Skipped]]:
    """The steps for this node and what is skipped, with the reason
    (`in_job`: the check is a rank of an MPI job, its MPI step is that)."""
    env = dict(os.environ if env is None else env)
    steps: list[Step] = []
    skipped = []
    gpus = [g for g in topo.gpus if g.visible and g.vendor == "NVIDIA"]
    gpu_areas = "GPU memory, host<->GPU, GPU<->GPU and NCCL"
    if not gpus:
        other = [g for g in topo.gpus if g.vendor != "NVIDIA"]
        why = (f"{len(other)} non-NVIDIA GPU(s): the GPU kinds measure NVIDIA GPUs through CuPy" if other
               else "no GPU visible in the topology")
        skipped.append(Skipped(gpu_areas, why))
    elif not _has_cupy():
        skipped.append(Skipped(gpu_areas, "CuPy is not installed: pip install 'nodemap[cuda]'"))
    else:
        steps += gpu_steps(level, len(gpus))
        if len(gpus) < 2:
            skipped.append(Skipped("GPU<->GPU and NCCL", "one GPU: no pair to measure"))
    # GPUs first: on a GPU node their figures matter most if the check is cut short
    steps += host_steps(level, topo, tiny=bool(env.get(TINY_ENV)))
    if len([n for n in topo.numa_nodes if n.cpuset]) < 2:
        skipped.append(Skipped("NUMA matrices", "one NUMA node with CPUs: its one cell is the STREAM and "
                               "latency figures"))
    why = (in_job.why if in_job.measure is None else "") if in_job else mpi.availability(env)[1]
    if why:
        skipped.append(Skipped(mpi.WHAT, why))
    else:
        steps.append(Step("mpi", (), mpi.WHAT) if in_job  # the job's own ranks measure, with its options
                     else typed("mpi", mpi.bench_options(level, bool(gpus) and _has_cupy()), mpi.WHAT))
    return steps, skipped


def _has_cupy() -> bool:
    import importlib.util

    return importlib.util.find_spec("cupy") is not None


class KindFailed(Exception):
    """A kind stopped with an error message (no GPU, no CuPy...); `error`:
    the kind's own (a driver.VerificationFailed is judged: check/failed.py)."""

    def __init__(self, message: str, error: BaseException | None = None) -> None:
        super().__init__(message)
        self.error = error


def measure(kind: str, options: Common | None, level: str = "full", in_job: mpi.InJob | None = None,
            topo: Topology | None = None) -> ResultSet:
    """Run bench KIND in-process (nothing printed or saved) from its typed
    options and return its ResultSet; a kind interrupted by Ctrl-C returns
    what it measured, marked incomplete. MPI ranks need a launcher: `mpi`
    runs under mpiexec (check/mpi.py), or with the job's ranks (`in_job`).
    Raises KindFailed with the kind's one-line error (no GPU, no CuPy, the
    launcher's...)."""
    from ..errors import NodemapError

    if kind == "mpi":
        try:
            if in_job is not None and in_job.measure is not None:
                return in_job.measure(level, topo)
            # the ranks are mpiexec's child processes: a command line at that boundary only
            return mpi.measure(level, list(argv_of(options)))
        except mpi.MPIFailed as e:
            raise KindFailed(str(e)) from None
    try:
        import importlib

        from ..bench.driver import measure as driver_measure
        from ..bench.kinds import BENCHES

        return driver_measure(importlib.import_module(BENCHES[kind][0]), options)
    except NodemapError as e:
        raise KindFailed(str(e), e) from None
