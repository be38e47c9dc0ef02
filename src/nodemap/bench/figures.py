"""Figures: the numbers `check` judges, each drawn by its kind (its STORY's
`figures`, bench/story.py) from its Results and a Topology.

A Figure is one number with a stable, node-independent key
("gpu/0/hbm_triad", "h2d/numa1->gpu0", "numa/bw/numa0->numa1"), the kind
of practical limit that applies to it (a row kind of expectations.toml),
the part that limit is looked up by (GPU model, "PCIe Gen5 x16", "NV18"),
its peak, and the group of peers on the same path it is compared with.
Keys are the same on every node of a fleet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Sequence

from ..finding import AREAS  # the parts of a node, in the order the report lists them
from ..records import Finite
from ..topology.model import Topology
from .endpoints import Endpoint, of_key
from .intervals import coverage, median_interval
from .results import HIGHER_IS_BETTER, Result

ROUNDS = "rounds"  # a Result's params key: measurements pooled into its samples (check/remeasure.py)



@dataclass(frozen=True)
class Figure:
    """Typed as the check document holds it (check/document.py): its numbers finite, its area one of AREAS."""

    key: str  # stable across nodes: "gpu/0/hbm_triad"
    area: Literal[AREAS]
    label: str  # for people: "GPU0 HBM triad (float64)"
    path: str  # the Result's topology path
    unit: str
    value: Finite  # the Result's best (STREAM, nvbandwidth and nccl-tests report the best)
    higher_is_better: bool
    kind: str = ""  # expectations.toml row kind, "" when no practical limit applies
    part: str = ""  # what the limit row's `match` is tried on
    peak: Finite | None = None  # in `unit`
    peak_source: str = ""
    group: str = ""  # peers judged against their median ("" = none)
    path_class: str = ""
    median: Finite = 0.0  # the Result's median: the statistic the verdict judges
    spread: Finite = 0.0
    # the median's interval from the repetitions (bench/intervals.py): n = 1 has none (low = high = median),
    # n = 0 a figure saved before intervals existed (judged as the point `value`)
    low: Finite = 0.0
    high: Finite = 0.0
    n: int = 0
    coverage: Finite = 0.0
    rounds: int = 1  # measurements pooled into it (check re-measures a figure its interval left undecided)
    setting: str = ""  # what reaches the peak, for the fix (STREAM: OMP_NUM_THREADS/OMP_PLACES)
    peak_spread: Finite = 0.0  # the peak's own spread when it is another measurement (STREAM's best placement)
    # the median interval of the measurement the peak comes from (STREAM's best placement); 0: an exact peak
    peak_median: Finite = 0.0
    peak_low: Finite = 0.0
    peak_high: Finite = 0.0
    # what was measured between (bench/endpoints.py keys, "gpu0", "numa1"): "" where no pair applies
    src: str = ""
    dst: str = ""

    def endpoints(self) -> tuple[Endpoint | None, Endpoint | None]:
        """(source, destination): as the figure carries them, else (saved
        before figures carried them) from the end of its key."""
        if self.src or self.dst:
            return Endpoint.parse(self.src), Endpoint.parse(self.dst)
        return of_key(self.key)


@dataclass(frozen=True)
class Given:
    """What a kind's figures are drawn from beside its Results."""

    topology: Topology | None = None
    dram_peak: float | None = None  # the site's (its expectations' stream row), where the node says none
    messages: Sequence[str] = ()  # its set's (a cache level the latency curve contradicts)


def figure(r: Result, key: str, area: str, label: str, **kw: Any) -> Figure:
    kw.setdefault("peak", r.peak)
    kw.setdefault("peak_source", r.peak_source)
    src, dst = r.endpoints
    kw.setdefault("src", src.key if src else "")
    kw.setdefault("dst", dst.key if dst else "")
    return Figure(key=key, area=area, label=label, path=r.path, unit=r.unit, value=r.stats.best,
                  higher_is_better=HIGHER_IS_BETTER.get(r.unit, True), path_class=r.path_class,
                  median=r.stats.median, spread=r.stats.spread, **interval(r), **kw)


def against_local(figs: list[Figure], place: Any, **remote: Any) -> list[Figure]:
    """Each remote figure judged against the local one of its place (a remote NUMA cell against its CPUs'
    local cell, a copy from another node's memory against the GPU's from its own): the local figure becomes
    its peak. `place(f)`: (what a remote figure shares with its local one, whether f is the local one), or
    None for a figure of neither; `remote`: fields a remote figure takes besides (its limit row's kind)."""
    placed = [(f, place(f)) for f in figs]
    local = {p[0]: f for f, p in placed if p and p[1]}
    out = []
    for f, p in placed:
        if p and not p[1]:
            ref = local.get(p[0])
            f = replace(f, **remote, peak=ref.value if ref else None, peak_source=f"{ref.label} (local)" if ref else "")
        out.append(f)
    return out


def interval(r: Result) -> dict[str, Any]:
    """The median's interval from the Result's samples (its min..max when
    a file holds statistics only), and how many measurements were pooled."""
    iv = median_interval(r.samples) if r.samples else None
    rounds = int(r.params.get(ROUNDS, 1))
    if iv is not None:
        return {"low": iv.low, "high": iv.high, "n": iv.n, "coverage": iv.coverage, "rounds": rounds}
    if r.stats.n > 1 and not r.samples:
        return {"low": r.stats.min, "high": r.stats.max, "n": r.stats.n, "coverage": coverage(r.stats.n, 1),
                "rounds": rounds}
    return {"low": r.stats.median, "high": r.stats.median, "n": 1, "rounds": rounds}


# --- endpoints as keys and labels write them ------------------------------------------


def gpu_index(name: str) -> str:
    """A GPU's index as figure keys write it ("GPU3" -> "3"); a CUDA
    ordinal ("cuda3": not GPU3) and an unknown spelling as they are, lower case."""
    e = Endpoint.parse(name)
    return str(e.index) if e and e.kind == "gpu" else name.lower()


def key_part(name: str, kind: str) -> str:
    """An endpoint as a key writes it ("GPU3" -> "gpu3", "cuda3" -> "cuda3",
    "NUMA1" -> "numa1"); an unknown spelling as keys always wrote it."""
    e = Endpoint.parse(name)
    if e and (e.kind == kind or (kind == "gpu" and e.is_gpu)):
        return e.key
    return f"gpu{name.lower()}" if kind == "gpu" else name.lower()


def said(name: str) -> str:
    """An endpoint as a figure's label says it: a CUDA ordinal says that it is one."""
    e = Endpoint.parse(name)
    return e.label if e and e.kind == "cuda" else name
