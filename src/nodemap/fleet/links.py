"""Pair results judged: each pair by ClusterKit's rule (`pairs.bad_pairs`)
for the link heatmap; the findings from the re-tests' conclusion (`pairs.isolate`)."""

from __future__ import annotations

from typing import Callable

from ..check.expectations import FleetRules
from ..finding import Finding
from .nodefile import Conclusion, Link, PairResult
from .noise import num
from .pairs import bad_pairs, is_sibling, is_tail, rail_rules, replay, sibling_bad


def judge_links(results: list[PairResult], th: FleetRules, isolation: Conclusion | None = None
                ) -> tuple[list[Link], list[Finding]]:
    """Pair results (a, b, key, unit, value, higher_is_better), each pair
    marked by ClusterKit's rule per key for the link heatmap; the findings
    come from the re-test isolation only (`pairs.isolate`, its conclusion
    given, or replayed from the results): a bad node is a finding of its own
    and its partners are spared, a bad link a finding on both its nodes, a
    node with bad pairs no re-test could settle a warning."""
    rails = rail_rules(th)
    by_key: dict[str, list[PairResult]] = {}
    for r in results:
        by_key.setdefault(r.key, []).append(r)
    judged = []
    for key, rs in sorted(by_key.items()):
        values = {tuple(sorted((r.a, r.b))): float(r.value) for r in rs}  # the last test of a pair counts
        nics = {tuple(sorted((r.a, r.b))): r.nics_by_node() for r in rs if r.nics}
        unit, hib = rs[0].unit, rs[0].higher_is_better
        sibling = is_sibling(key)
        if sibling:  # against the same pair's other rail: of_best is how far below it (1 at par or better)
            bad = {p for p, v in values.items() if sibling_bad(v, hib, rails, is_tail(key))}
            of_best = {p: min(1.0, v if hib else 1 / v) if v > 0 else 0.0 for p, v in values.items()}
        else:
            bad = bad_pairs(values, hib, th.link_bad, th.link_latency)
            best = max(values.values()) if hib else min(values.values())
            of_best = {p: v / best if hib else best / v for p, v in values.items()}
        for (a, b), v in sorted(values.items()):
            judged.append(Link(a, b, key, unit, v, hib, of_best[(a, b)], "fail" if (a, b) in bad else "pass",
                               sibling, nics.get((a, b))))
    if not results:
        return judged, []
    if isolation is None:
        isolation = replay(results, th.link_bad, th.link_latency, rails=rails)
    return judged, isolation_findings(isolation, judged, th)


def isolation_findings(iso: Conclusion, judged: list[Link], th: FleetRules) -> list[Finding]:
    out = []
    for x in iso.bad_nodes:
        ev = _worst_bad(judged, lambda j: x in (j.a, j.b))
        out.append(Finding("fail", f"node {x}: its pairs stay bad against other, good partners "
                           f"({_evidence(ev, th)})", node=x, kind="link", ratio=_of_best(ev), evidence=_worst(ev)))
    for a, b in iso.bad_links:
        ev = _worst_bad(judged, lambda j: {j.a, j.b} == {a, b})
        text = f"link {a} <-> {b}: bad when re-tested, both nodes good with other partners ({_evidence(ev, th)})"
        out += [Finding("fail", text, node=x, kind="link", ratio=_of_best(ev), evidence=_worst(ev)) for x in (a, b)]
    for x in iso.unsettled:
        ev = _worst_bad(judged, lambda j: x in (j.a, j.b))
        out.append(Finding("warn", f"node {x}: bad pairs that no re-test could settle (no good partner "
                           f"left; {_evidence(ev, th)})", node=x, kind="link", ratio=_of_best(ev)))
    return out


def _worst_bad(judged: list[Link], which: Callable[[Link], bool]) -> list[Link]:
    """The worst bad pair of each key among those `which` picks, worst first: a rail's own figure
    (named with its NICs) before the total it is part of."""
    worst: dict[str, Link] = {}
    for j in judged:
        if j.verdict == "fail" and which(j):
            if j.key not in worst or j.of_best < worst[j.key].of_best:
                worst[j.key] = j
    return sorted(worst.values(), key=lambda j: (j.of_best, "rail" not in j.key))


def _worst(ev: list[Link]) -> str:
    """The worst bad figure alone ("mpi bw host rail1 n1 (rail1) <-> n2 (rail1) 0.0022 GB/s = 12% of the best
    pair 0.0186 GB/s"): what a one-line drain reason can hold."""
    return _evidence(ev[:1], None) if ev else ""


def _of_best(ev: list[Link]) -> float | None:
    return min((j.of_best for j in ev), default=None)


def _evidence(ev: list[Link], th: FleetRules | None) -> str:
    if not ev:
        return "its last values are within the rule"
    parts = []
    for j in ev:
        hib = j.higher_is_better
        ends = " <-> ".join(f"{x} ({j.nics[x]})" if j.nics and j.nics.get(x) else x for x in (j.a, j.b))
        if j.sibling and is_tail(j.key):
            said = (f"its slowest round trips {j.value:.1f}x the other rail's in most repetitions, measured with "
                    f"it ({TAIL_CAUSE})")
            rule = "" if th is None else f"bad above {th.rail_tail:g}x"
        elif j.sibling:
            said = (f"at most {j.value:.0%} of the other rail's" if hib else
                    f"at least {j.value:.1f}x the other rail's") + " in every repetition, measured with it"
            rule = ("" if th is None else f"bad below {th.rail_bad:.0%}" if hib else f"bad above {th.rail_latency:g}x")
        else:
            best = j.value / j.of_best if hib else j.value * j.of_best
            said = _vs_best(j.value, best, j.unit, hib)
            rule = ("" if th is None else f"bad below {th.link_bad:.0%} of the best pair" if hib else
                    f"bad above {th.link_latency:g}x the lowest")
        parts.append(f"{j.key} {ends} {said}" + (f"; {rule}" if rule else ""))
    return "; ".join(parts)


# A rail whose round trips stall where its sibling's do not: what it means and what to do (the drain reason
# holds the start of it; fleet.json's finding all of it)
TAIL_CAUSE = ("tail latency: lost packets wait for retransmits; check the rail's cable or optics and its "
              "link's error counters (ethtool -S, ibstat, perfquery)")


def _vs_best(v: float, best: float, unit: str, hib: bool) -> str:
    if hib:
        return f"{num(v)} {unit} = {v / best:.0%} of the best pair {num(best)} {unit}"
    return f"{num(v)} {unit} = {v / best:.1f}x the lowest pair {num(best)} {unit}"
