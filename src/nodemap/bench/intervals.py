"""How sure a figure is: an interval from its own repetitions, and where
that interval lies against a limit. Pure, stdlib only (the fleet and the
per-rank paths may import it without numpy).

The statistic judged is the median of the repetitions, with a
distribution-free 95% interval from order statistics: [x_(k), x_(n+1-k)]
of the sorted samples, k the largest index whose coverage
1 - 2 P(Binomial(n, 1/2) <= k - 1) is at least 95%. That needs n >= 6;
with 2 to 5 samples no order-statistic interval reaches 95%, so the
interval is the whole range [min, max] and its true coverage is said
(1 - 2^(1-n): 50% for 2 samples, 75% for 3, 94% for 5). One sample has no
interval (None): it is a point that must never fail on its own.

The range's favourable end is the best repetition, the number STREAM,
nvbandwidth and nccl-tests report and `check` shows as a figure's value:
with up to 5 repetitions a figure fails only where its best does (and its
worst too); with more, only where the better half of its repetitions is
beyond the limit with 95% confidence.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    n: int  # repetitions behind it
    coverage: float  # the probability the interval holds the true median (order statistics, any distribution)
    median: float

    @property
    def method(self) -> str:
        return method(self.n, self.coverage)

    def width(self) -> float:
        """(high - low) / median: the relative width, 0 for a point (the fleet's floor from repetition noise)."""
        return (self.high - self.low) / self.median if self.median else 0.0


def method(n: int, coverage: float) -> str:
    """How an interval of n repetitions was made, for rule texts."""
    if coverage >= CONFIDENCE:
        return f"{coverage:.0%} interval of the median of {n} repetitions (order statistics)"
    return f"range of {n} repetitions (holds the median with {coverage:.0%} confidence)"


def coverage(n: int, k: int) -> float:
    """P(x_(k) <= median <= x_(n+1-k)) for n samples of any continuous distribution."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n


def median_interval(samples: Iterable[float], confidence: float = CONFIDENCE) -> Interval | None:
    """The median's interval (module docstring); None for fewer than 2 samples."""
    x = sorted(float(v) for v in samples)
    n = len(x)
    if n < 2:
        return None
    k = 1
    while k + 1 <= n // 2 and coverage(n, k + 1) >= confidence:
        k += 1
    return Interval(x[k - 1], x[n - k], n, coverage(n, k), statistics.median(x))


def where(low: float, high: float, limit: float, above: bool) -> str:
    """Where [low, high] lies against a limit: wholly beyond it, straddling it, or within."""
    if above:
        return "beyond" if low > limit else "straddles" if high > limit else "within"
    return "beyond" if high < limit else "straddles" if low < limit else "within"


def ratio_interval(a: tuple[float, float], ref: tuple[float, float]) -> tuple[float, float]:
    """[lo, hi] of a / ref for positive intervals: every ratio the two intervals allow."""
    return a[0] / ref[1], a[1] / ref[0]
