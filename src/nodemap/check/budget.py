"""`nodemap check --budget SECONDS`: measure what fits, most telling first.

A check run from a Slurm prolog has a time limit (PrologEpilogTimeout, the job's
patience). Each step gets an estimated cost from the level and the node's
topology (`estimate`); steps run in priority order (`order`), each only
when its estimate fits in what is left of the budget, the others are
skipped with the budget named; re-measurement gets what is left; a step
that overruns is cut at the budget (proc.cut_after), keeping what its kind
measured.

Priority, most telling first (inventory always runs: it measures nothing):
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
from dataclasses import dataclass
from typing import Callable, Iterable

from .inventory import Skipped

PRIORITY = ("gpu", "copies", "nccl", "memory", "latency", "numa", "mpi")


@dataclass(frozen=True)
class Cost:
    """Seconds of one step: base + per GPU + per GPU x NUMA node (host<->GPU
    cases) + per ordered GPU pair + per NUMA cell (n x n matrices)."""

    base: float = 0.0
    gpu: float = 0.0
    gpu_numa: float = 0.0
    pair: float = 0.0
    cell: float = 0.0

    def of(self, gpus: int, numa: int) -> float:
        return (self.base + self.gpu * gpus + self.gpu_numa * gpus * numa + self.pair * gpus * (gpus - 1)
                + self.cell * numa * numa)


# Step times recorded on the lent nodes (1-2 GPUs, one NUMA node): quick on one
# H100, benchmarks/results/check_h100_20261125 and multi_gpu_h100x2_20261125
# (gpu 1.5-3.2 s, copies 1.3-1.5 s, STREAM 9.4-10.3 s, latency 13.0-13.4 s,
# MPI about 7 s; the whole quick check 33-44 s on 1-2 GPUs); full on two
# H200s, verdicts_h200x2_20261128/check_full_run1.json (gpu 3.1 s, 10.9 s on
# two H100s; copies 12.1 s; NCCL 24.7 s; STREAM 14.7 s; latency 32.0 s; MPI
# 84.3 s; the whole check 162-175 s), rounded up. NUMA matrices were not
# recorded (one NUMA node there): a cell is a STREAM and a latency point.
COSTS = {
    "quick": {"gpu": Cost(gpu=3.0), "copies": Cost(gpu_numa=1.5, pair=1.0), "nccl": Cost(base=4.0, gpu=1.0),
              "memory": Cost(base=10.0), "latency": Cost(base=14.0), "numa": Cost(cell=2.0), "mpi": Cost(base=8.0)},
    "full": {"gpu": Cost(gpu=5.5), "copies": Cost(gpu_numa=6.0, pair=1.0), "nccl": Cost(base=20.0, gpu=2.5),
             "memory": Cost(base=15.0), "latency": Cost(base=32.0), "numa": Cost(cell=5.0), "mpi": Cost(base=85.0)},
}
# NODEMAP_CHECK_TINY (tests): the host steps' tiny arrays took 0.1-0.2 s each on
# the 2-vCPU CI VM (2026-11-28, load average 9); the GPU and MPI steps are as at the level.
TINY = {"memory": Cost(base=0.5), "latency": Cost(base=0.5), "numa": Cost(cell=0.5)}
UNKNOWN = 10.0  # s for a kind without a recorded time


def estimate(kind: str, level: str, gpus: int, numa: int, tiny: bool = False) -> float:
    """Seconds step `kind` is expected to take at `level` on a node with
    `gpus` measured GPUs and `numa` NUMA nodes with CPUs."""
    cost = (TINY.get(kind) if tiny else None) or COSTS.get(level, COSTS["full"]).get(kind)
    return UNKNOWN if cost is None else cost.of(gpus, max(1, numa))


def order(steps: Iterable) -> list:
    """Steps most telling first (PRIORITY; a kind not named there last, in
    the order given)."""
    rank = {k: i for i, k in enumerate(PRIORITY)}
    return sorted(steps, key=lambda s: rank.get(s.kind, len(PRIORITY)))


def fits(needs: float, left: float) -> bool:
    return needs <= left


def left_out(what: str, needs: float, left: float, budget: float) -> Skipped:
    """The skipped entry of a step the budget leaves out."""
    return Skipped(what, f"not measured: {_s(max(0.0, left))} s of the {budget:g} s budget left, needs ~{_s(needs)} s")


def _s(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


class Budget:
    """The budget of one check: its clock, what it left out and what it cut."""

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

    def to_dict(self) -> dict:
        spent = (time.monotonic() if self.ended is None else self.ended) - self.start
        return {"seconds": self.seconds, "spent": round(spent, 2),
                "left_out": list(self.left_out), "ran": list(self.ran), "cut": self.cut}


def describe(saved: dict) -> str:
    """The document's budget in one line ("" without one), for the terminal and HTML reports."""
    if not saved:
        return ""
    left_out = saved.get("left_out") or []
    return (f"budget {saved.get('seconds', 0):g} s, {saved.get('spent', 0):.1f} s spent measuring"
            + (f"; cut at its end: {saved['cut']}" if saved.get("cut") else "")
            + (f"; left out: {', '.join(left_out)}" if left_out else "; nothing left out"))
