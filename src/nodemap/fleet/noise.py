"""How far a node's figure is from its peers, beyond the noise: the fleet's statistics.

For each class of node (GPU model, else CPU model) and each figure key
(node-independent: "gpu/hbm triad/GPU5"), the baseline is the median of
the nodes' values, with the median absolute deviation (MAD) beside it to
show how much the fleet itself varies. The median, not the mean, so that
the outliers being looked for do not move the baseline they are judged by.
A node's figure is compared by its ratio to that median (for latency the
inverse, so that below 1 is always worse) and by how far that is beyond
the noise: a robust z, (ratio - 1) / sigma, where sigma is the larger of
the fleet's own spread (1.4826 MAD / median) and the repetition noise of
the figure (half its median's interval, or half the range of its
repetitions: the fleet's typical one, or the node's own when wider). A
suspect measured again is judged by its measurements pooled (`pooled`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ..bench.intervals import Interval
from .nodefile import Fig


@dataclass
class Baseline:
    node_class: str
    key: str
    label: str
    path: str
    unit: str
    higher_is_better: bool
    n: int
    median: float
    mad: float
    min: float
    max: float
    noise: float = 0.0  # sigma, relative to the median: max(1.4826 MAD / median, typical repetition noise)
    repetition: float = 0.0  # the typical (median) repetition noise of the figure on these nodes


def baseline(cls: str, key: str, f0: Fig, stats: list[float], reps: list[float]) -> Baseline:
    """Of one key's figures (the first, `f0`, names it): their statistics (Fig.stat) and repetition noise (own_noise)."""
    values = sorted(stats)
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    rep = statistics.median(reps) if any(reps) else 0.0
    return Baseline(cls, key, f0.label or key, f0.path, f0.unit, f0.higher_is_better, len(values), med, mad,
                    values[0], values[-1], noise=max(1.4826 * mad / med if med else 0.0, rep), repetition=rep)


def ratio(value: float, b: Baseline) -> float:
    """Below 1 is worse, whichever way the unit goes."""
    return value / b.median if b.higher_is_better else b.median / value


def own_noise(f: Fig) -> float:
    """A figure's repetition noise relative to its statistic: half the
    width of its median's interval (bench/intervals.py: order statistics,
    the range for up to 5 repetitions) where the document has one, else
    half the range of its repetitions (`spread` is (max - min) / median); 0 when unknown."""
    if f.n >= 2 and f.median > 0:
        return Interval(f.low, f.high, f.n, float(f.coverage or 0.0), f.median).width() / 2
    s = f.spread
    if s is None:
        return 0.0
    return s / 2 if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s > 0 else 0.0


REMEASURES = 5  # at most this many re-measures of one suspect figure (the driver's rounds)


def resolvable(b: Baseline, warn: float, fail: float, z_drain: float) -> bool:
    """Whether all the re-measures a suspect may get could confirm a fault
    in the middle of the band the fleet looks for (as far below `fail` as
    `fail` is below `warn`: 85% by default) wholly below the `warn` line:
    the pooled interval of 1 + REMEASURES measurements of the figure's
    typical noise (z_drain of its sigmas, [fleet]) fits in warn - (2 fail - warn). Where it cannot (checks
    co-scheduled on one machine: sigma 17-46%) a re-measure settles
    nothing, and the pooled mean of a few such skewed, heavy-tailed
    measurements is no normal one: only a failure is measured again."""
    return z_drain * (b.repetition or b.noise) / math.sqrt(1 + REMEASURES) <= 2 * (warn - fail)


@dataclass(frozen=True)
class Pooled:
    """A suspect figure's measurements pooled: the inverse-variance weighted
    mean of their ratios to the median and its sigma (each measurement's
    sigma its own repetition noise, at least the figure's typical one on
    these nodes), and the same over the re-measures alone."""

    ratio: float
    sigma: float
    k: int  # measurements pooled (the first pass and the re-measures)
    fresh: float  # the re-measures' weighted mean ratio (the first pass picked the suspect: it cannot drain alone)
    fresh_sigma: float  # and its sigma


def pooled(first: Fig, rounds: list[Fig], b: Baseline) -> Pooled | None:
    """The first pass and each re-measure that is a measurement; None
    before a re-measure is. The fleet median is known far more precisely
    (1.25 sigma / sqrt(nodes)) than one node: its uncertainty is left out."""
    floor = b.repetition or b.noise  # the fleet's spread stands in where no repetitions were recorded
    fresh = [g for g in rounds if not g.problem() and g.stat() > 0]
    if not fresh:
        return None
    ms = [(ratio(g.stat(), b), max(own_noise(g), floor)) for g in [first, *fresh]]
    if any(s <= 0 for _, s in ms):  # noise unknown: the plain mean, no interval
        mean = statistics.fmean(r for r, _ in ms)
        return Pooled(mean, 0.0, len(ms), statistics.fmean(r for r, _ in ms[1:]), 0.0)

    def weighted(part: list[tuple[float, float]]) -> tuple[float, float]:
        w = [1 / s ** 2 for _, s in part]
        return sum(r * x for (r, _), x in zip(part, w)) / sum(w), 1 / math.sqrt(sum(w))

    def scattered(part: list[tuple[float, float]]) -> tuple[float, float]:
        mean, sigma = weighted(part)
        if len(part) >= 3:  # the measurements' own scatter, where it says more than their recorded noise
            sigma = max(sigma, statistics.stdev(r for r, _ in part) / math.sqrt(len(part)))
        return mean, sigma

    return Pooled(*scattered(ms), len(ms), *scattered(ms[1:]))


def figure_label(b: Baseline, path: str) -> str:
    return f"{path} {b.label}" if path and path not in b.label else b.label


def below(b: Baseline, limit: float) -> str:
    return f"below {limit:.0%}" if b.higher_is_better else f"above {1 / limit:.2f}x"


def as_read(r: float, b: Baseline) -> str:
    return f"{r:.1%}" if b.higher_is_better else f"{1 / r:.3f}x" if r > 0 else "inf"


def num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3g}"
