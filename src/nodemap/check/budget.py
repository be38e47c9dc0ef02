"""`nodemap check --budget SECONDS`: measure what fits, most telling first.

A check run from a Slurm prolog has a time limit (PrologEpilogTimeout, the job's
patience). Each step gets an estimated cost from the level and the node's
topology (`estimate`); steps run in priority order (`order`), each only
when its estimate fits in what is left of the budget, the others are
skipped with the budget named; re-measurement gets what is left; a step
that overruns is cut at the budget (proc.cut_after), keeping what its kind
measured.

Priority, most telling first (inventory always runs: it measures nothing;
each kind's STORY says its priority and cost, bench/story.py):
GPU memory (HBM, the part a GPU node is bought for, and the cheapest GPU
step), host<->GPU (a PCIe link trained down or a GPU far from its NUMA
node), GPU<->GPU and NCCL (NVLink faults: the pairs come with the copies
step), STREAM (host DIMMs, placement), latency (rarely shows a fault the
sweep did not, and costs more), NUMA matrices (n x n cells, the costliest
per fault found), MPI (a launcher's start-up; mostly tells about the job's
environment, a configuration, not the node).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from ..bench.kinds import story
from .document import Spent
from .inventory import Skipped


def estimate(kind: str, level: str, gpus: int, numa: int, tiny: bool = False) -> float:
    """Seconds step `kind` is expected to take at `level` on a node with
    `gpus` measured GPUs and `numa` NUMA nodes with CPUs: its STORY's cost
    (a kind with check steps declares it: bench/story.py)."""
    cost = story(kind).cost
    return ((cost.get("tiny") if tiny else None) or cost.get(level) or cost["full"]).of(gpus, max(1, numa))


def order(steps: Iterable) -> list:
    """Steps most telling first (their kinds' priority; a kind not registered last, in the order given)."""
    return sorted(steps, key=lambda s: story(s.kind).priority)


def fits(needs: float, left: float) -> bool:
    return needs <= left


def left_out(what: str, needs: float, left: float, budget: float) -> Skipped:
    """The skipped entry of a step the budget leaves out."""
    return Skipped(what, f"not measured: {_s(max(0.0, left))} s of the {budget:g} s budget left, needs ~{_s(needs)} s")


def _s(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


class Budget:
    """The budget of one check, while it measures: its clock, what it left out and what it cut.
    The document holds its record (`spent`), check/document.Spent."""

    def __init__(self, seconds: float, start: float | None = None,
                 estimator: Callable[[str, str, int, int, bool], float] = estimate) -> None:
        self.seconds = seconds
        self.start = time.monotonic() if start is None else start
        self.estimator = estimator
        self.left_out: list[str] = []  # the steps it did not run
        self.ran: list[str] = []  # the steps it let run (a failed one is not left out by choice)
        self.cut = ""  # the step the budget ended, its measurements so far kept
        self.expired = False  # set by the cut (proc.cut_after's stop)
        self.ended: float | None = None  # when measuring stopped (the report is not counted)

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def admit(self, step, level: str, gpus: int, numa: int, tiny: bool) -> Skipped | None:
        """None when `step` fits what is left, else its skipped entry (recorded)."""
        needs, left = self.estimator(step.kind, level, gpus, numa, tiny), self.left()
        if fits(needs, left) and not self.expired:
            self.ran.append(step.what)
            return None
        self.left_out.append(step.what)
        return left_out(f"{step.what} (bench {step.kind})", needs, left, self.seconds)

    def stop_clock(self) -> None:
        self.ended = time.monotonic() if self.ended is None else self.ended

    def spent(self) -> Spent:
        """What it spent, as the document keeps it."""
        spent = (time.monotonic() if self.ended is None else self.ended) - self.start
        return Spent(self.seconds, round(spent, 2), tuple(self.left_out), tuple(self.ran), self.cut)
