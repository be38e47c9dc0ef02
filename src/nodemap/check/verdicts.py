"""Verdict rules: pure functions of (figures, expectations).

Two rules judge every figure and the worse one decides, with its text:
- absolute: against the path's practical limit (a row of the expectations
  table: fractions of the peak, or floors/ceilings in the figure's unit);
- relative: against the node's own peers on the same path (the median of
  the figure's group for bandwidth, the minimum for latency).
Both judge the figure's median with its interval from the repetitions
(bench/intervals.py), not a point: a figure fails only when its whole
interval is beyond the fail limit; an interval that straddles a limit is
"inconclusive" (never a fail) and its rule says "noisy: ...".
A figure no rule applies to is "info" (recorded, nothing to judge it by).
fleet (issue 15) calls the same functions with figures from many nodes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, fields, replace
from typing import Iterable, Literal, Sequence

import msgspec
from msgspec import UNSET, UnsetType

from ..text import number
from .expectations import Expectations, Limit
from ..bench.figures import Figure
from ..records import Finite
from ..bench.intervals import method, ratio_interval, where

VERDICTS = ("pass", "info", "inconclusive", "warn", "fail")  # "info": no rule applies
# "inconclusive": the figure's interval straddles a limit (or one sample lies beyond the fail limit),
# or it was measured while the node was busy (check/busy.py); never fails the node (docs/check.md)
RANK = {"info": 0, "pass": 1, "inconclusive": 2, "warn": 3, "fail": 4}


class Bounds(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The bounds a figure was judged by, with their source (Judged.expectation): its practical-limit row's
    (absolute) and its peers' (relative). A bound its rules did not use is absent; one a row leaves out (a
    site row with a fail limit and no warn) is null."""

    source: str | UnsetType = UNSET
    origin: str | UnsetType = UNSET
    limit_kind: str | UnsetType = UNSET
    match: str | UnsetType = UNSET
    peak: float | UnsetType = UNSET
    warn_above: float | None | UnsetType = UNSET
    fail_above: float | None | UnsetType = UNSET
    warn_below: float | None | UnsetType = UNSET
    fail_below: float | None | UnsetType = UNSET
    median_of_peers: float | UnsetType = UNSET  # bandwidth's reference
    minimum_of_peers: float | UnsetType = UNSET  # latency's
    peers: int | UnsetType = UNSET
    relative_warn_below: float | UnsetType = UNSET
    relative_fail_below: float | UnsetType = UNSET
    relative_warn_above: float | UnsetType = UNSET
    relative_fail_above: float | UnsetType = UNSET

    def joined(self, other: "Bounds") -> "Bounds":
        """These bounds with those `other` sets (an absolute rule's with its peers')."""
        return msgspec.structs.replace(self, **{k: v for k in other.__struct_fields__
                                                if (v := getattr(other, k)) is not UNSET})


@dataclass(frozen=True)
class Verdict:
    verdict: str
    rule: str  # the sentence that decided it
    expectation: Bounds = Bounds()
    noisy: bool = False  # the interval straddled a limit: measuring again may decide it


@dataclass(frozen=True)
class Judged(Figure):
    """A figure with its verdict: one entry of the check document's `figures`, as saved and read."""

    expectation: Bounds = Bounds()
    verdict: Literal[VERDICTS] = "info"
    rule: str = ""
    relative: Finite | None = None  # the figure's median / its group's median of medians (latency: minimum)
    noisy: bool = False  # undecided by its interval: check re-measures it (check/remeasure.py)

    @classmethod
    def of(cls, f: Figure, verdict: str, rule: str, expectation: Bounds, relative: float | None,
           noisy: bool = False) -> "Judged":
        return cls(**{k.name: getattr(f, k.name) for k in fields(Figure)}, expectation=expectation,
                   verdict=verdict, rule=rule, relative=relative, noisy=noisy)

    @property
    def figure(self) -> Figure:
        """The figure judged (itself: its fields are the figure's)."""
        return self


def worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=lambda v: RANK[v], default="info")


def on_a_vm(judged: Sequence[Judged], vm: bool | None) -> list[Judged]:
    """A VM's host memory latency against bare metal's limits: the
    hypervisor's nested paging is the platform's cost, so a latency past its
    fail limit is warned, never failed (nor drained): run on bare metal to
    judge the memory. Other figures, and a node not known to be a VM, keep
    their verdicts."""
    if not vm:
        return list(judged)
    return [replace(j, verdict="warn", rule=f"on a VM (nested paging adds latency): warned, not failed: {j.rule}")
            if j.verdict == "fail" and j.figure.kind.startswith("latency_") else j for j in judged]


def judge(figures: Sequence[Figure], exp: Expectations) -> list[Judged]:
    """Every figure with its verdict; groups are formed from `figures`."""
    refs = group_references(figures)
    out = []
    for f in figures:
        a = absolute(f, exp.limit_for(f.kind, f.part) if f.kind else None)
        ref = refs.get(f.group) if f.group else None
        r = relative(f, ref, exp.thresholds) if ref is not None else None
        chosen = _decide(a, r)
        if a is None and r is not None and f.kind:
            chosen = Verdict(chosen.verdict, chosen.rule + f"; {no_limit(f)}", chosen.expectation, chosen.noisy)
        ratio = point(f) / ref.point if ref and ref.point else None
        bounds = (a.expectation if a else Bounds()).joined(r.expectation if r else Bounds())
        out.append(Judged.of(f, chosen.verdict, chosen.rule, bounds, ratio,
                          any(v is not None and v.noisy for v in (a, r))))
    return out


def no_limit(f: Figure) -> str:
    """Why only the peers judged a figure a practical limit would also judge."""
    part = f.part.split(" (")[0] if f.part else "this GPU model" if f.kind == "hbm" else "this part"
    return f"no datasheet limit known for {part}: relative verdict only"


def _decide(a: Verdict | None, r: Verdict | None) -> Verdict:
    got = [v for v in (a, r) if v is not None]
    if not got:
        return Verdict("info", "no practical limit known for this part and no peer on this node: recorded only")
    return max(got, key=lambda v: RANK[v.verdict])


# --- the figure's interval ------------------------------------------------------------


def point(f: Figure) -> float:
    """The judged statistic: the median of the repetitions (the value of a figure saved without them)."""
    return f.median if f.n else f.value


def span(f: Figure) -> tuple[float, float]:
    """The judged interval: the median's (bench/intervals.py); a point for one sample or an old figure."""
    return (f.low, f.high) if f.n > 1 else (point(f), point(f))


def shown(f: Figure) -> str:
    """The figure as its rule names it: 'median 27.0 GB/s [25.1, 29.2]'."""
    if f.n > 1:
        lo, hi = span(f)
        return f"median {number(point(f))} {f.unit} [{number(lo)}, {number(hi)}]"
    return f"{number(point(f))} {f.unit}" + (" (one sample)" if f.n == 1 else "")


def classify(lo: float, hi: float, n: int, warn: float | None, fail: float | None, above: bool) -> tuple[str, str]:
    """(verdict, what was undecided) of the interval [lo, hi] of n samples
    against a warn and a fail limit (ceilings when `above`, else floors).

    fail: wholly beyond the fail limit (and more than one sample); straddling
    the fail limit: inconclusive, or warn when it is wholly beyond the warn
    limit; straddling the warn limit: inconclusive. The second element says
    which limit was straddled ("fail", "warn"), "one" for one sample beyond
    the fail limit, "" when the interval decided."""
    wf = where(lo, hi, fail, above) if fail is not None else "within"
    ww = where(lo, hi, warn, above) if warn is not None else "within"
    if wf == "beyond":
        return ("inconclusive", "one") if n == 1 else ("fail", "")
    if wf == "straddles":
        return ("warn" if ww == "beyond" else "inconclusive"), "fail"
    if ww == "beyond":
        return "warn", ""
    return ("inconclusive", "warn") if ww == "straddles" else ("pass", "")


def noise(f: Figure, interval: str, limit: str, undecided: str) -> str:
    """The rule text of a figure its interval could not decide."""
    if undecided == "one":
        return (f"{shown(f)}: one sample beyond the fail limit {limit}; one sample has no interval, so it "
                "fails nothing on its own: measure it again with repetitions")
    return (f"noisy: spread {f.spread:.0%}, interval {interval} straddles the {undecided} limit {limit} "
            f"({shown(f)}, {_method(f)})")


def _method(f: Figure) -> str:
    return method(f.n, f.coverage)


# --- the rules ------------------------------------------------------------------


def group_references(figures: Sequence[Figure]) -> dict[str, Reference]:
    """group -> its reference, for groups of at least two figures."""
    groups: dict[str, list[Figure]] = {}
    for f in figures:
        if f.group:
            groups.setdefault(f.group, []).append(f)
    return {g: Reference.of(fs) for g, fs in groups.items() if len(fs) >= 2}


@dataclass(frozen=True)
class Reference:
    """What peers are judged against: bandwidth the median of the group's
    medians, latency their minimum; its interval is the same statistic of
    the members' interval ends (the median of their lows, of their highs)."""

    point: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, fs: Sequence[Figure]) -> "Reference":
        pick = statistics.median if fs[0].higher_is_better else min
        spans = [span(f) for f in fs]
        return cls(pick([point(f) for f in fs]), pick([s[0] for s in spans]), pick([s[1] for s in spans]), len(fs))


def absolute(f: Figure, lim: Limit | None) -> Verdict | None:
    """Against a practical-limit row; None when the row cannot judge it
    (fractions without a known peak)."""
    if lim is None:
        return None
    src = dict(source=lim.source, origin=lim.origin, limit_kind=lim.kind, match=lim.match)
    if lim.warn_above is not None or lim.fail_above is not None:
        return _bounds(f, lim.warn_above, lim.fail_above, above=True, src=src)
    if lim.warn_below is not None or lim.fail_below is not None:
        return _bounds(f, lim.warn_below, lim.fail_below, above=False, src=src)
    peak = lim.peak or f.peak
    if not peak:
        return None
    exp = Bounds(**src, peak=peak, warn_below=_mul(lim.warn, peak), fail_below=_mul(lim.fail, peak))
    measured = bool(f.peak_high) and not lim.peak  # the peak is another measurement: medians against medians
    ref = f.peak_median if measured else peak
    lo, hi = fractions(f) if measured else (span(f)[0] / peak, span(f)[1] / peak)
    verdict, undecided = classify(lo, hi, f.n, lim.warn, lim.fail, above=False)
    what = f"{shown(f)} = {point(f) / ref:.0%} of {'the median ' if measured else ''}{number(ref)} {f.unit}" + (
        f" ({f.peak_source})" if f.peak_source and not lim.peak else "")
    if undecided:
        frac = lim.fail if undecided in ("fail", "one") else lim.warn
        text = noise(f, f"[{lo:.0%}, {hi:.0%}] of {number(ref)} {f.unit}", f"{frac:.0%}", undecided)
        return Verdict(verdict, text, exp, noisy=True)
    if verdict == "fail":
        return Verdict("fail", f"{what}, below the {lim.fail:.0%} floor", exp)
    if verdict == "warn":
        return Verdict("warn", f"{what}, below the expected {lim.warn:.0%}", exp)
    return Verdict("pass", f"{what}, at least the expected {lim.warn or lim.fail:.0%}", exp)


def fractions(f: Figure) -> tuple[float, float]:
    """The interval of figure / its measured peak (both medians' intervals);
    exactly 1 when the peak is the figure's own measurement."""
    if (f.low, f.high, f.median) == (f.peak_low, f.peak_high, f.peak_median):
        return 1.0, 1.0
    return ratio_interval(span(f), (f.peak_low or f.peak_median, f.peak_high or f.peak_median))


def _mul(a: float | None, b: float) -> float | None:
    return None if a is None else a * b


def _bounds(f: Figure, warn: float | None, fail: float | None, above: bool, src: dict) -> Verdict:
    exp = Bounds(**src, warn_above=warn, fail_above=fail) if above else Bounds(**src, warn_below=warn, fail_below=fail)
    lo, hi = span(f)
    verdict, undecided = classify(lo, hi, f.n, warn, fail, above)
    word = "above" if above else "below"
    v = shown(f)
    if undecided:
        lim = fail if undecided in ("fail", "one") else warn
        return Verdict(verdict, noise(f, f"[{number(lo)}, {number(hi)}] {f.unit}", f"{number(lim)} {f.unit}",
                                      undecided), exp, noisy=True)
    if verdict == "fail":
        return Verdict("fail", f"{v}, {word} the {number(fail)} {f.unit} limit", exp)
    if verdict == "warn":
        return Verdict("warn", f"{v}, {word} the expected {number(warn)} {f.unit}", exp)
    lim = warn if warn is not None else fail
    return Verdict("pass", f"{v}, within the expected {number(lim)} {f.unit} ({'at most' if above else 'at least'})", exp)


def relative(f: Figure, ref: Reference, t: dict[str, float]) -> Verdict | None:
    """Against the node's peers: bandwidth vs their median, latency vs their
    minimum; the figure's interval over the reference's interval (every
    ratio both allow) is what meets the thresholds."""
    if not ref.point or not ref.low:
        return None
    base, n = ref.point, ref.n
    hib = f.higher_is_better
    rlo, rhi = ratio_interval(span(f), (ref.low, ref.high))
    warn, fail = (t["relative_warn"], t["relative_fail"]) if hib else (t["latency_warn"], t["latency_fail"])
    of, word = ("median", "below") if hib else ("minimum", "above")
    bound = (lambda x: f"{x:.0%}") if hib else (lambda x: f"{x:g}x")  # noqa: E731
    times = (lambda x: f"{x:.0%} of") if hib else (lambda x: f"{x:.2f}x")  # noqa: E731
    exp = Bounds(**{f"{of}_of_peers": base, f"relative_warn_{word}": warn * base, f"relative_fail_{word}": fail * base},
                 peers=n)
    what = f"{shown(f)} = {times(point(f) / base)} the {of} of {n} peers on this node ({number(base)} {f.unit})"
    ratios = f"[{bound(rlo)}, {bound(rhi)}]" if hib else f"[{rlo:.2f}x, {rhi:.2f}x]"
    limit = lambda x: f"{bound(x)} of the peers' {of}" if hib else f"{bound(x)} the peers' {of}"  # noqa: E731
    verdict, undecided = classify(rlo, rhi, f.n, warn, fail, above=not hib)
    if undecided:
        lim = fail if undecided in ("fail", "one") else warn
        return Verdict(verdict, "relative to its peers: " + noise(f, ratios, limit(lim), undecided), exp, noisy=True)
    if verdict == "fail":
        return Verdict("fail", f"{what}, {word} {bound(fail)}", exp)
    if verdict == "warn":
        return Verdict("warn", f"{what}, {word} {bound(warn)}", exp)
    return Verdict("pass", f"{what}, {'at least' if hib else 'at most'} {bound(warn)}", exp)


def ratio_verdict(ratio: float, warn: float, fail: float) -> str:
    """A higher-is-better ratio against its two thresholds."""
    return "fail" if ratio < fail else "warn" if ratio < warn else "pass"
