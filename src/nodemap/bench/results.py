"""The one result record of every benchmark, and its versioned JSON file.

`ResultFile` is the file's one shape: a ResultSet is saved as it (outfile.json_text) and every reader
decodes it (bench/resultfile.py checks each result's parameters against its kind's).

A Result says what was measured, in which unit, how bytes were counted, the
sample statistics, the topology path crossed, the peak it is compared with
and the efficiency, and how the output was verified. Reports read only
Results (and a Topology), never run measurements.
"""

from __future__ import annotations

import math
import socket
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal

import msgspec

from .. import __version__
from ..records import finite
from .endpoints import Endpoint, of_params

SCHEMA = "nodemap.results/1"


@dataclass(frozen=True)
class Stats:
    """Statistics of the per-repetition values, in the Result's unit."""

    n: int
    best: float  # max for higher-is-better units, min otherwise
    median: float
    min: float
    max: float
    mean: float
    stdev: float
    spread: float  # (max - min) / median, 0 for one sample

    def __post_init__(self) -> None:
        # a saved file read back (bench/resultfile.py) is refused here, field named: the reports divide by
        # these, format them and draw min-median-max bars (NaN was an IndexError in text.number, a median
        # above max a matplotlib ValueError on the HTML page)
        finite(self, "median", "best", "min", "max", "mean", "stdev", "spread")
        if not 0 < self.min <= self.median <= self.max or not self.min <= self.best <= self.max:
            raise ValueError(f"min {self.min}, median {self.median}, best {self.best}, max {self.max}: not "
                             "0 < min <= median, best <= max as measured samples give")

    @classmethod
    def of(cls, values: Iterable[float], higher_is_better: bool = True) -> "Stats":
        v = [float(x) for x in values]
        if not v:
            raise ValueError("no samples")
        med = statistics.median(v)
        lo, hi = min(v), max(v)
        return cls(
            n=len(v),
            best=hi if higher_is_better else lo,
            median=med,
            min=lo,
            max=hi,
            mean=statistics.fmean(v),
            stdev=statistics.stdev(v) if len(v) > 1 else 0.0,
            spread=(hi - lo) / med if med and len(v) > 1 else 0.0,
        )



HIGHER_IS_BETTER = {"GB/s": True, "GB/s busbw": True, "lookups/s": True, "ns": False, "us": False, "s": False, "ms": False}


@dataclass(frozen=True)
class Result:
    benchmark: str  # "memory", "numa", "latency", "gpu", "copies", "mpi", "nccl", "ring", "placement"
    metric: str  # "triad", "h2d_ce", "all_reduce busbw", "pingpong latency"...
    unit: str  # "GB/s" (1e9 bytes/s), "ns", "us", "lookups/s"
    stats: Stats
    samples: tuple[float, ...] = ()  # per repetition, in `unit`
    params: dict[str, Any] = field(default_factory=dict)  # size, threads, cpus, dtype...
    bytes: int = 0  # bytes counted per repetition (0 when not a bandwidth)
    counting: str = ""  # how `bytes` was counted, e.g. "STREAM: 3 x 8 B per element"
    path: str = ""  # "NUMA0 cores -> NUMA1 memory", "GPU0->GPU1 NV18"
    path_class: str = ""  # "NV18", "PIX", "SYS", "local", "remote-socket"
    peak: float | None = None  # in `unit`, the hardware limit of that path
    peak_source: str = ""  # "H200 datasheet HBM3e 4.8 TB/s", "PCIe Gen5 x16"
    verified: bool = False
    verification: str = ""  # what was checked: "all 3 arrays against STREAM gold values"
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        finite(self, "samples", "peak")

    @property
    def endpoints(self) -> tuple[Endpoint | None, Endpoint | None]:
        """(source, destination) measured between, typed (bench/endpoints.py):
        from the parameters the kinds record, so every saved file has them."""
        return of_params(self.params)

    @property
    def efficiency(self) -> float | None:
        if not self.peak:
            return None
        v = self.stats.best
        return v / self.peak if HIGHER_IS_BETTER.get(self.unit, True) else self.peak / v


# Host results saved before 2026-11-25 called the CPU thread order
# "placement", the word now kept for data placement across GPUs.
_THREAD_ORDER_KINDS = ("memory", "numa")


def _renamed_params(benchmark: str, params: dict[str, Any]) -> dict[str, Any]:
    if benchmark in _THREAD_ORDER_KINDS and "placement" in params and "thread_order" not in params:
        params = dict(params)
        params["thread_order"] = params.pop("placement")
    return params


def make_result(
    benchmark: str,
    metric: str,
    unit: str,
    samples: Iterable[float],
    *,
    verified: bool,
    **kw: Any,
) -> Result:
    """Build a Result; refuses unverified or non-finite numbers.

    DESIGN: a number without its verification is not reported.
    """
    vals = tuple(float(s) for s in samples)
    if not verified:
        raise ValueError(f"{benchmark}/{metric}: refusing to record an unverified result")
    if not vals or not all(math.isfinite(v) and v > 0 for v in vals):
        raise ValueError(f"{benchmark}/{metric}: non-positive or non-finite samples {vals[:4]}")
    return Result(
        benchmark=benchmark,
        metric=metric,
        unit=unit,
        stats=Stats.of(vals, HIGHER_IS_BETTER.get(unit, True)),
        samples=vals,
        verified=True,
        **kw,
    )


@dataclass(frozen=True)
class Failure:
    """A part of a kind whose output was wrong, so no figure was reported
    for it (NCCL's received elements, a Jacobi or ring halo, placement's
    checksums): typed for the check that judges it (check/failed.py), where
    the kind's `message` (kept among the set's messages as it was) is for
    people. Saved with its set, so `report` and `check --from` keep it."""

    kind: str  # "nccl", "jacobi", "ring", "placement"
    part: str  # what failed within the kind (the check's key ends in it): an op, a variant, a transport
    what: str  # what was verified, in words: "NCCL all_reduce", "Jacobi peer halos"
    expected: str  # "0 wrong elements", "the single-GPU run's field"
    got: str  # what the output was: "5 wrong elements (out-of-place, 256 MiB)", "fp64: norm 1.5 != 1.25"
    transport: str = ""  # what carried the data: "nccl", "peer", "mpi-aware"... ("" where none did)
    count: int = 0  # elements found wrong (0: not counted)
    size: int = 0  # bytes per case (0: not sized)
    message: str = ""  # the kind's own line, as among the set's messages

    def __post_init__(self) -> None:
        if self.count < 0 or self.size < 0:
            raise ValueError(f"count {self.count}, size {self.size}: not the counts of a case (>= 0)")


@dataclass
class ResultSet:
    """What one `nodemap bench ...` invocation produced, saved as one file
    (read back, checked, by bench/resultfile.py)."""

    command: str
    results: list[Result] = field(default_factory=list)
    host: str = field(default_factory=socket.gethostname)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    complete: bool = True  # False when interrupted (Ctrl-C) or a part failed
    environment: dict[str, Any] = field(default_factory=dict)  # versions, CPU model, GPU driver
    messages: list[str] = field(default_factory=list)  # what was skipped and why
    failures: list[Failure] = field(default_factory=list)  # the parts whose output was wrong (fail)
    # called with the set after every add (the harness saves it there); not saved
    on_add: Any = field(default=None, repr=False, compare=False)

    def add(self, r: Result) -> None:
        self.extend([r])

    def extend(self, results: Iterable[Result]) -> None:
        self.results.extend(results)
        if self.on_add is not None:
            self.on_add(self)

    def fail(self, failure: Failure) -> None:
        """A part whose output was wrong: its record, its message for
        people, and the set incomplete (no figure for that part)."""
        self.failures.append(failure)
        if failure.message:
            self.messages.append(failure.message)
        self.complete = False

    def saved(self) -> ResultFile:
        """The set as its file holds it."""
        return ResultFile(schema=SCHEMA, nodemap_version=__version__, command=self.command, host=self.host,
                          started=self.started, complete=self.complete, environment=self.environment,
                          messages=self.messages, failures=self.failures, results=self.results)

    def to_json(self) -> str:
        from ..outfile import json_text

        return json_text(self.saved())

    def save(self, path: str, option: str = "--output") -> None:
        """Atomic (nodemap.outfile): a crash never leaves a half-written file."""
        from ..outfile import write

        write(path, self.to_json() + "\n", option)


class ResultFile(msgspec.Struct, kw_only=True):
    """A ResultSet's file (nodemap.results/1), written and read."""

    schema: Literal[SCHEMA]
    nodemap_version: str = ""
    command: str
    host: str
    started: str
    complete: bool
    environment: dict[str, Any] = {}
    messages: list[str] = []
    failures: list[Failure] = []  # files saved before failures were typed have none
    results: list[Result]
