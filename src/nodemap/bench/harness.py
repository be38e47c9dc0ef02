"""The one measurement loop every benchmark uses.

A benchmark gives `repeat` a callable that runs its kernel once and returns
the elapsed seconds of the timed region (the callable times itself: a host
monotonic clock around a C kernel, CUDA events around device work, MPI_Wtime
around a ping-pong). The harness does warm-up, repetitions, a time budget and
progress; the benchmark converts seconds to its unit, verifies the output and
builds a Result with `results.make_result`.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


def repeat(
    once: Callable[[], float],
    *,
    repeats: int = 10,
    warmup: int = 1,
    min_repeats: int = 3,
    budget_s: float | None = None,
) -> list[float]:
    """Run `once` warmup + repeats times; return the timed repetitions' seconds.

    With `budget_s`, stops after at least `min_repeats` once the budget is
    spent, so sweeps on slow machines stay bounded.
    """
    for _ in range(max(0, warmup)):
        once()
    times: list[float] = []
    t0 = time.monotonic()
    for i in range(repeats):
        dt = once()
        if not dt > 0:
            raise RuntimeError(f"timer returned {dt!r} s: the timed region is empty or the clock is broken")
        times.append(dt)
        if budget_s is not None and i + 1 >= min_repeats and time.monotonic() - t0 > budget_s:
            break
    return times


def host_timer(fn: Callable[[], object]) -> Callable[[], float]:
    """Wrap `fn` so each call returns its wall time from the monotonic clock."""

    def once() -> float:
        t0 = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - t0) * 1e-9

    return once


def gbps(nbytes: int, seconds: list[float]) -> list[float]:
    """Bytes per repetition and seconds -> GB/s (GB = 1e9 B, as STREAM)."""
    return [nbytes / s / 1e9 for s in seconds]


class Progress:
    """One line per step on stderr, so --json on stdout stays clean."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.t0 = time.monotonic()

    def step(self, what: str) -> None:
        self.done += 1
        if self.quiet:
            return
        el = time.monotonic() - self.t0
        print(f"[{self.label} {self.done}/{self.total} {el:6.1f}s] {what}", file=self.stream, flush=True)
