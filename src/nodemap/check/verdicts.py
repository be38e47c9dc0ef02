"""Verdict rules: pure functions of (figures, expectations).

Two rules judge every figure and the worse one decides, with its text:
- absolute: against the path's practical limit (a row of the expectations
  table: fractions of the peak, or floors/ceilings in the figure's unit);
- relative: against the node's own peers on the same path (the median of
  the figure's group for bandwidth, the minimum for latency).
A figure no rule applies to is "info" (recorded, nothing to judge it by).
fleet (issue 15) calls the same functions with figures from many nodes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ..bench.report import number
from .expectations import Expectations, Limit
from .figures import Figure

VERDICTS = ("pass", "info", "inconclusive", "warn", "fail")  # "info": no rule applies
# "inconclusive": measured, but not under conditions a verdict can rest on (a busy node)
RANK = {"info": 0, "pass": 1, "inconclusive": 2, "warn": 3, "fail": 4}


@dataclass(frozen=True)
class Verdict:
    verdict: str
    rule: str  # the sentence that decided it
    expectation: dict[str, Any] = field(default_factory=dict)  # the bounds used, with their source


@dataclass(frozen=True)
class Judged:
    figure: Figure
    verdict: str
    rule: str
    expectation: dict[str, Any]
    relative: float | None  # figure / its group's median (bandwidth) or minimum (latency)

    def to_dict(self) -> dict[str, Any]:
        return {**self.figure.to_dict(), "expectation": self.expectation, "verdict": self.verdict,
                "rule": self.rule, "relative": self.relative}


def worst(verdicts: Iterable[str]) -> str:
    return max(verdicts, key=lambda v: RANK[v], default="info")


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
            chosen = Verdict(chosen.verdict, chosen.rule + f"; {no_limit(f)}", chosen.expectation)
        ratio = (f.value / ref[0] if f.higher_is_better else f.value / ref[0]) if ref and ref[0] else None
        exp_d = dict(a.expectation) if a else {}
        if r is not None:
            exp_d.update(r.expectation)
        out.append(Judged(f, chosen.verdict, chosen.rule, exp_d, ratio))
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


def group_references(figures: Sequence[Figure]) -> dict[str, tuple[float, int]]:
    """group -> (median for bandwidth / minimum for latency, members), for
    groups of at least two figures."""
    groups: dict[str, list[Figure]] = {}
    for f in figures:
        if f.group:
            groups.setdefault(f.group, []).append(f)
    out = {}
    for g, fs in groups.items():
        if len(fs) < 2:
            continue
        vals = [f.value for f in fs]
        out[g] = (statistics.median(vals) if fs[0].higher_is_better else min(vals), len(fs))
    return out


def absolute(f: Figure, lim: Limit | None) -> Verdict | None:
    """Against a practical-limit row; None when the row cannot judge it
    (fractions without a known peak)."""
    if lim is None:
        return None
    src = {"source": lim.source, "origin": lim.origin, "limit_kind": lim.kind, "match": lim.match}
    if lim.warn_above is not None or lim.fail_above is not None:
        return _bounds(f, lim.warn_above, lim.fail_above, above=True, src=src)
    if lim.warn_below is not None or lim.fail_below is not None:
        return _bounds(f, lim.warn_below, lim.fail_below, above=False, src=src)
    peak = lim.peak or f.peak
    if not peak:
        return None
    frac = f.value / peak
    exp = {**src, "peak": peak, "warn_below": _mul(lim.warn, peak), "fail_below": _mul(lim.fail, peak)}
    what = f"{number(f.value)} {f.unit} = {frac:.0%} of {number(peak)} {f.unit}" + (
        f" ({f.peak_source})" if f.peak_source and not lim.peak else "")
    if lim.fail is not None and frac < lim.fail:
        return Verdict("fail", f"{what}, below the {lim.fail:.0%} floor", exp)
    if lim.warn is not None and frac < lim.warn:
        return Verdict("warn", f"{what}, below the expected {lim.warn:.0%}", exp)
    return Verdict("pass", f"{what}, at least the expected {lim.warn or lim.fail:.0%}", exp)


def _mul(a: float | None, b: float) -> float | None:
    return None if a is None else a * b


def _bounds(f: Figure, warn: float | None, fail: float | None, above: bool, src: dict) -> Verdict:
    exp = {**src, ("warn_above" if above else "warn_below"): warn, ("fail_above" if above else "fail_below"): fail}
    bad = (lambda v, b: v > b) if above else (lambda v, b: v < b)
    word = "above" if above else "below"
    v = f"{number(f.value)} {f.unit}"
    if fail is not None and bad(f.value, fail):
        return Verdict("fail", f"{v}, {word} the {number(fail)} {f.unit} limit", exp)
    if warn is not None and bad(f.value, warn):
        return Verdict("warn", f"{v}, {word} the expected {number(warn)} {f.unit}", exp)
    lim = warn if warn is not None else fail
    return Verdict("pass", f"{v}, within the expected {number(lim)} {f.unit} ({'at most' if above else 'at least'})", exp)


def relative(f: Figure, ref: tuple[float, int], t: dict[str, float]) -> Verdict | None:
    """Against the node's peers: bandwidth vs their median, latency vs their minimum."""
    base, n = ref
    if not base:
        return None
    ratio = f.value / base
    if f.higher_is_better:
        exp = {"median_of_peers": base, "peers": n, "relative_warn_below": t["relative_warn"] * base,
               "relative_fail_below": t["relative_fail"] * base}
        what = f"{number(f.value)} {f.unit} = {ratio:.0%} of the median of {n} peers on this node ({number(base)} {f.unit})"
        if ratio < t["relative_fail"]:
            return Verdict("fail", f"{what}, below {t['relative_fail']:.0%}", exp)
        if ratio < t["relative_warn"]:
            return Verdict("warn", f"{what}, below {t['relative_warn']:.0%}", exp)
        return Verdict("pass", f"{what}, at least {t['relative_warn']:.0%}", exp)
    exp = {"minimum_of_peers": base, "peers": n, "relative_warn_above": t["latency_warn"] * base,
           "relative_fail_above": t["latency_fail"] * base}
    what = f"{number(f.value)} {f.unit} = {ratio:.2f}x the minimum of {n} peers on this node ({number(base)} {f.unit})"
    if ratio > t["latency_fail"]:
        return Verdict("fail", f"{what}, above {t['latency_fail']:g}x", exp)
    if ratio > t["latency_warn"]:
        return Verdict("warn", f"{what}, above {t['latency_warn']:g}x", exp)
    return Verdict("pass", f"{what}, at most {t['latency_warn']:g}x", exp)


def ratio_verdict(ratio: float, warn: float, fail: float) -> str:
    """A higher-is-better ratio against its two thresholds."""
    return "fail" if ratio < fail else "warn" if ratio < warn else "pass"
