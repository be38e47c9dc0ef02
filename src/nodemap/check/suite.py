"""The suite: which bench kinds `check` runs at each level, from the
Topology (each kind's STORY declares its steps: bench/story.py), and
running them in-process to ResultSets.

quick keeps the standard array/copy sizes, the DRAM working set and the
largest NCCL size (a quick figure is full's measurement with fewer
repetitions) and drops kernels, engines, sizes and repetitions that are
not judged; full runs the kinds at their defaults.
"""

from __future__ import annotations

import os

from ..bench.driver import argv_of
from ..bench.kinds import BENCHES, story
from ..bench.results import ResultSet
from ..bench.story import Node, Skipped, Step, joined
from ..topology.model import Topology
from . import mpi

# Testing knob (not a user option): tiny host arrays so the end-to-end test
# stays short on CI. The real quick level is what users get without it.
TINY_ENV = "NODEMAP_CHECK_TINY"


def plan(topo: Topology, level: str, env: dict[str, str] | None = None,
         in_job: mpi.InJob | None = None) -> tuple[list[Step], list[Skipped]]:
    """The steps for this node, most telling first (their kinds' priority), and what is skipped, with
    the reason (`in_job`: the check is a rank of an MPI job, whose ranks measure its launched kinds)."""
    env = dict(os.environ if env is None else env)
    gpus = [g for g in topo.gpus if g.visible and g.vendor == "NVIDIA"]
    no_gpu = _no_gpu(topo, gpus)
    node = Node(level, topo, 0 if no_gpu else len(gpus), tiny=bool(env.get(TINY_ENV)))
    steps: list[Step] = []
    skipped: list[Skipped] = []
    for kind, told in sorted(((k, story(k)) for k in BENCHES), key=lambda kt: kt[1].priority):
        if told.steps is None:
            continue
        if told.gpu and no_gpu:
            skipped += [Skipped(area, no_gpu) for area in told.areas]
            continue
        for s in told.steps(node):
            if isinstance(s, Skipped):
                skipped.append(s)
            elif not told.launched:
                steps.append(Step(kind, argv_of(s.options), s.what, s.options))
            else:  # its ranks need a launcher: mpiexec's, or the job's own ranks (without options)
                why = (in_job.why if in_job.measure is None else "") if in_job else mpi.availability(env)[1]
                skipped += [Skipped(s.what, why)] if why else []
                steps += [] if why else [Step(kind, (), s.what) if in_job else
                                         Step(kind, argv_of(s.options), s.what, s.options)]
    return steps, joined(skipped)


def _no_gpu(topo: Topology, gpus: list) -> str:
    """Why the GPU kinds cannot run here ('' when they can)."""
    if not gpus:
        other = [g for g in topo.gpus if g.vendor != "NVIDIA"]
        return (f"{len(other)} non-NVIDIA GPU(s): the GPU kinds measure NVIDIA GPUs through CuPy" if other
                else "no GPU visible in the topology")
    return "" if _has_cupy() else "CuPy is not installed: pip install 'nodemap[cuda]'"


def _has_cupy() -> bool:
    import importlib.util

    return importlib.util.find_spec("cupy") is not None


class KindFailed(Exception):
    """A kind stopped with an error message (no GPU, no CuPy...); `error`:
    the kind's own (a driver.VerificationFailed is judged: check/failed.py)."""

    def __init__(self, message: str, error: BaseException | None = None) -> None:
        super().__init__(message)
        self.error = error


def measure(kind: str, options, level: str = "full", in_job: mpi.InJob | None = None,
            topo: Topology | None = None) -> ResultSet:
    """Run bench KIND in-process (nothing printed or saved) from its typed
    options and return its ResultSet; a kind interrupted by Ctrl-C returns
    what it measured, marked incomplete. A launched kind's ranks (its
    STORY) run under mpiexec (check/mpi.py), or are the job's (`in_job`).
    Raises KindFailed with the kind's one-line error (no GPU, no CuPy, the
    launcher's...)."""
    from ..errors import NodemapError

    if story(kind).launched:
        try:
            if in_job is not None and in_job.measure is not None:
                return in_job.measure(level, topo)
            # the ranks are mpiexec's child processes: a command line at that boundary only
            return mpi.measure(kind, level, list(argv_of(options)))
        except mpi.MPIFailed as e:
            raise KindFailed(str(e)) from None
    try:
        import importlib

        from ..bench.driver import measure as driver_measure

        return driver_measure(importlib.import_module(BENCHES[kind][0]), options)
    except NodemapError as e:
        raise KindFailed(str(e), e) from None
