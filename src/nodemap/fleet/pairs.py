"""Which node pairs to test, and how a bad node or link is isolated, in
fewer tests than all n(n-1)/2 pairs (ClusterKit's method).

1. A ring of pairs: node i with i+1, then a few more shifts (i with i+2...),
   grouped into rounds in which no node takes part twice, so that one
   round's pairs run at the same time without sharing a node's NIC.
2. Judge the pairs (ClusterKit's rule): a pair is bad below 93% of the
   best pair's bandwidth, or above 2.1x the lowest latency; with several
   rails, also when a rail stays below half its sibling rail's bandwidth,
   above twice its latency, or its slowest round trips above 3x the
   sibling's (lost packets: `tail_ratio`), measured at the same moment
   (`against_siblings`).
3. Re-test rounds: every suspect (a node of a bad pair) meets a known-good
   partner it has not met. A pass clears it; two failures against two good
   partners isolate it as a bad node. A bad pair whose two nodes are both
   cleared is tested once more on its own: still bad, it is a bad link.
   Each round settles at least half of the open suspects (usually all), so
   the rounds end after at most log2(n) + 1 of them.
A pair test may give several figures (bandwidth over host and device
buffers, latency): a pair is bad when any of them is, so a latency suspect
is re-tested as a bandwidth one is. The conclusion (`conclusion`) is the
one the fleet report drains by. Pure: the measuring is a callable, so the
driver runs it over MPI and the tests run it on simulated nodes; `replay`
runs it again over recorded results (`--from` a pairs.jsonl without one).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Union

from ..check.expectations import fleet_defaults
from .nodefile import Conclusion, PairResult

Pair = tuple[int, int]
Figures = dict[str, float]  # one pair test's figures by name


def pair(a: int, b: int) -> Pair:
    return (a, b) if a < b else (b, a)


def ring_pairs(n: int, shifts: Iterable[int] = (1, 2)) -> list[Pair]:
    """Node i with i+s for each shift s, each pair once."""
    seen: dict[Pair, None] = {}
    for s in shifts:
        if n < 2 or s % n == 0:
            continue
        for i in range(n):
            seen.setdefault(pair(i, (i + s) % n))
    return list(seen)


def rounds(pairs: Iterable[Pair]) -> list[list[Pair]]:
    """The pairs grouped so that no node is in two pairs of a round (greedy,
    in order: a ring of shift s takes 2 or 3 rounds)."""
    out: list[tuple[set[int], list[Pair]]] = []
    for p in pairs:
        for busy, ps in out:
            if p[0] not in busy and p[1] not in busy:
                busy.update(p)
                ps.append(p)
                break
        else:
            out.append(({p[0], p[1]}, [p]))
    return [ps for _, ps in out]


# The defaults below are the shipped [fleet] table's (check/expectations.toml), never a second copy of its
# numbers: link_bad, link_latency; a rail against its sibling: rail_bad, rail_latency, rail_tail
_SHIPPED = fleet_defaults()
LINK_BAD, LINK_LATENCY = _SHIPPED.link_bad, _SHIPPED.link_latency
RAILS = (_SHIPPED.rail_bad, _SHIPPED.rail_latency, _SHIPPED.rail_tail)


def bad_figures(values: dict[Pair, Figures], directions: dict[str, bool], default: bool = True,
                bad_ratio: float = LINK_BAD, latency_factor: float = LINK_LATENCY, rails: tuple[float, ...] = RAILS
                ) -> set[Pair]:
    """The pairs bad by any of their figures (each judged among its own kind; a rail against its
    sibling, `sibling_key`, by `rails`: (rail_bad, rail_latency, rail_tail))."""
    names = {k for v in values.values() for k in v}
    bad: set[Pair] = set()
    for k in names:
        one = {p: v[k] for p, v in values.items() if k in v}
        hib = directions.get(k, default)
        if is_sibling(k):
            bad |= {p for p, v in one.items() if sibling_bad(v, hib, rails, is_tail(k))}
        else:
            bad |= bad_pairs(one, hib, bad_ratio, latency_factor)
    return bad


# --- a rail against its sibling ----------------------------------------------------------
# The rails of one pair are measured at the same moment (rail k by the k-th local ranks of both
# nodes), so they share the host's noise, which spreads healthy pairs far apart on a busy host: a
# rail judged against its sibling sees a delay or a lossy cable that hides among the pairs.


def sibling_key(figure: str, rail: int, other: int) -> str:
    """"mpi latency host rail1 vs rail0": rail 1's figure against rail 0's of the same pair."""
    return f"{figure} rail{rail} vs rail{other}"


def is_sibling(key: str) -> bool:
    words = key.split()
    return len(words) >= 3 and words[-2] == "vs" and words[-1].startswith("rail") and words[-3].startswith("rail")


def sibling_ratio(mine: list[float], other: list[float], higher_is_better: bool) -> float:
    """A rail's repetitions against its sibling's, taken at their closest: bandwidth, its best over
    the sibling's worst; latency, its lowest over the sibling's highest. Beyond a limit, every
    repetition of the rail is beyond it against every one of the sibling's (no single noisy
    repetition on either side makes it)."""
    if higher_is_better:
        return max(mine) / min(other) if min(other) > 0 else 1.0
    return min(mine) / max(other) if max(other) > 0 else 1.0


# A rail's tail: each repetition's slowest round trip (pairtest.CEILING), judged against the sibling's by
# `tail_ratio` and [fleet] rail_tail; the figure "mpi tail host" exists only as a rail against its sibling.
TAIL = "tail"
# The slowest round trip a rail is compared with is the sibling's, or TAIL_FLOOR where the sibling's was
# quicker (us, a half round trip). On the project's shared 2-core VM at load 6.9-12.4 a healthy rail's
# slowest round trip per repetition was the scheduler's worst wait: 0.3-22 ms in 294 of 300 repetitions
# (median 4.2 ms), 42-302 ms in 6, and at most 53 ms as the median of a rail's 5 (one pair test of 60 rail
# tests); a rail losing 1% waited for TCP's retransmit timeout (200 ms, so >= 100 ms a half round trip) in
# 59 of 60 repetitions, its median 104-109 ms (network_faults_20261202_ceilings_data.md). With rail_tail 3
# a rail is bad above 75 ms: 1.4x the healthy worst and 1.4x below the lossy best; measured tail_ratio:
# healthy at most 0.59, lossy 4.17-4.36.
TAIL_FLOOR = 25_000.0


def tail_ratio(mine: list[float], other: list[float]) -> float:
    """A rail's slowest round trips against its sibling's: the rail's median repetition (most of its
    repetitions are at least this slow) over the sibling's second slowest (one stalled repetition of the
    sibling is forgiven: a healthy rail's stall is a moment of the host, a lossy rail's is in nearly every
    repetition), at least TAIL_FLOOR. At a healthy pair's worst, its rails stalled in different
    repetitions (53, 161 and 302 ms beside 91 and 274 ms), which a median against the sibling's median
    would call 5.7x."""
    top = sorted(other, reverse=True)
    return statistics.median(mine) / max(top[min(1, len(top) - 1)], TAIL_FLOOR)


def is_tail(key: str) -> bool:
    return key.split()[1:2] == [TAIL]


def sibling_bad(ratio: float, higher_is_better: bool, rails: tuple[float, ...] = RAILS, tail: bool = False) -> bool:
    if higher_is_better:
        return ratio < rails[0]
    return ratio > rails[2 if tail else 1]


def rail_rules(th: Any) -> tuple[float, float, float]:
    """[fleet]'s rules of a rail against its sibling (check/expectations.FleetRules), as `RAILS`."""
    return th.rail_bad, th.rail_latency, th.rail_tail


def against_siblings(samples: dict[int, list[float]], higher_is_better: bool,
                     ratio: Callable[[list[float], list[float]], float] | None = None
                     ) -> dict[tuple[int, int], float]:
    """Each rail's figure (its repetitions, by rail) against the pair's best other rail (by median):
    (rail, other) -> `ratio` (`sibling_ratio` unless given). Rails without repetitions are left out."""
    have = {k: v for k, v in samples.items() if v}
    out = {}
    for k, mine in sorted(have.items()):
        others = [j for j in have if j != k]
        if not others:
            continue
        pick = max if higher_is_better else min
        j = pick(others, key=lambda r: statistics.median(have[r]))
        out[(k, j)] = ratio(mine, have[j]) if ratio else sibling_ratio(mine, have[j], higher_is_better)
    return out


def bad_pairs(values: dict[Pair, float], higher_is_better: bool, bad_ratio: float = LINK_BAD,
              latency_factor: float = LINK_LATENCY) -> set[Pair]:
    """ClusterKit's rule over the pairs measured so far."""
    if not values:
        return set()
    if higher_is_better:
        best = max(values.values())
        return {p for p, v in values.items() if v < bad_ratio * best}
    low = min(values.values())
    return {p for p, v in values.items() if v > latency_factor * low}


@dataclass
class Isolation:
    """What the pair tests found, and what they cost."""

    bad_nodes: set[int] = field(default_factory=set)
    bad_links: set[Pair] = field(default_factory=set)
    transient: set[Pair] = field(default_factory=set)  # bad once, good when re-tested
    unsettled: set[int] = field(default_factory=set)  # had bad pairs, no good partner left to settle it
    tests: list[Pair] = field(default_factory=list)  # every pair test, in order (re-tests repeat)
    rounds: int = 0
    values: dict[Pair, Figures] = field(default_factory=dict)  # the last figures of each pair


Measure = Callable[[list[Pair]], dict[Pair, Union[float, Figures]]]


def isolate(n: int, measure: Measure, higher_is_better: bool = True, shifts: Iterable[int] = (1, 2),
            bad_ratio: float = LINK_BAD, latency_factor: float = LINK_LATENCY,
            directions: dict[str, bool] | None = None, by_ring: bool = True,
            rails: tuple[float, ...] = RAILS) -> Isolation:
    """Ring, then re-test rounds until every suspect is settled.

    `measure(pairs)` runs one round (pairs disjoint) and returns a value per
    pair, or its figures by name (`directions` says which are higher-is-
    better; others take `higher_is_better`); a pair it cannot measure (a
    node that does not answer) is left out and a node none of whose pairs
    came back is not used as a partner again. `by_ring`: a suspect that met every node is decided
    by the ring (`_by_the_ring`); off where the pairs crossed no link (nodes sharing one network
    stack: their figures are the host's contention, and a re-test's evidence is required)."""
    iso = Isolation()
    dead: set[int] = set()
    answered: set[int] = set()

    def run(ps: list[Pair]) -> None:
        for rnd in rounds(ps):
            got = measure(rnd)
            iso.rounds += 1
            iso.tests.extend(rnd)
            for p in rnd:
                if p in got:
                    v = got[p]
                    iso.values[p] = dict(v) if isinstance(v, dict) else {"value": float(v)}
                    answered.update(p)
            # A node none of whose tests came back is dead: never a partner again.
            dead.update(x for p in rnd if p not in got for x in p if x not in answered)
            dead.difference_update(answered)

    def judge() -> set[Pair]:
        return bad_figures(iso.values, directions or {}, higher_is_better, bad_ratio, latency_factor, rails)

    run(ring_pairs(n, shifts))
    met: dict[int, set[int]] = {i: set() for i in range(n)}
    for a, b in iso.values:
        met[a].add(b)
        met[b].add(a)
    # Suspects come from the ring only: a known-good partner that meets a bad
    # node in a re-test is not suspected for it.
    ring_bad = {x for p in judge() for x in p}
    good = sorted({x for p in iso.values for x in p} - ring_bad - dead)
    fails: dict[int, int] = {}
    cleared: set[int] = set()
    for _ in range(max(1, n.bit_length()) + 1):
        suspects = ring_bad - cleared - iso.bad_nodes - dead
        partners = [g for g in good + sorted(cleared) if g not in dead]
        plan: list[Pair] = []
        busy: set[int] = set()
        for s in sorted(suspects):
            partner = next((g for g in partners if g not in met[s] and g not in busy and g != s), None)
            if partner is None:
                continue
            busy.update((s, partner))
            met[s].add(partner)
            met[partner].add(s)
            plan.append(pair(s, partner))
        if not plan:
            break
        run(plan)
        bad = judge()
        for p in plan:
            s = p[0] if p[0] in suspects else p[1]
            if p not in iso.values:
                continue
            if p in bad:
                fails[s] = fails.get(s, 0) + 1
                if fails[s] >= 2:
                    iso.bad_nodes.add(s)
            else:
                cleared.add(s)
    _settle_links(iso, judge, run, cleared)
    if by_ring:
        measured_with = {x: {y for p in iso.values if x in p for y in p} for x in ring_bad}
        _by_the_ring(iso, judge(), {x for x in ring_bad if measured_with[x] | dead >= set(range(n))}, cleared, dead)
    iso.unsettled = ring_bad - cleared - iso.bad_nodes - dead
    return iso


def _by_the_ring(iso: Isolation, bad: set[Pair], suspects: set[int], cleared: set[int], dead: set[int]) -> None:
    """Suspects no re-test can reach (they met every node: a small fleet's ring meets them all), so
    no good partner is left to meet: the ring decides as a re-test would. A node none of whose
    pairs passed, bad against two partners that passed with others, is a bad node (3 nodes, one bad:
    its two pairs bad, the third good; all three were unsettled, and none was drained); a suspect
    whose every bad pair is with a bad node is cleared (its partners are spared)."""
    passed = {x for p in iso.values if p not in bad for x in p}
    for s in sorted(suspects - cleared - iso.bad_nodes - dead):
        against = {x for p in bad if s in p for x in p if x != s and x in passed}
        if s not in passed and len(against) >= 2:
            iso.bad_nodes.add(s)
    for s in suspects - cleared - iso.bad_nodes - dead:
        if all(set(p) - {s} <= iso.bad_nodes for p in bad if s in p):
            cleared.add(s)


def _settle_links(iso: Isolation, judge: Callable[[], set[Pair]], run: Callable[[list[Pair]], None],
                  cleared: set[int]) -> None:
    """A bad pair of two cleared nodes: measure it again; still bad, the link is bad."""
    links = sorted(p for p in judge() if p[0] in cleared and p[1] in cleared)
    if not links:
        return
    run(links)
    bad = judge()
    for p in links:
        (iso.bad_links if p in bad else iso.transient).add(p)
    # A node with bad pairs that never met a good partner stays a suspect; the
    # fleet report names its pairs as evidence without calling it bad.


def conclusion(iso: Isolation, names: list[str]) -> Conclusion:
    """The isolation by node names, as isolation.json and fleet.json keep it."""
    def link(p: Pair) -> tuple[str, str]:
        a, b = sorted((names[p[0]], names[p[1]]))
        return a, b

    return Conclusion(sorted(names[i] for i in iso.bad_nodes), sorted(link(p) for p in iso.bad_links),
                      sorted(link(p) for p in iso.transient), sorted(names[i] for i in iso.unsettled),
                      len(iso.tests), iso.rounds, len(names) * (len(names) - 1) // 2)


def said(c: Conclusion) -> str:
    """The pair tests' conclusion in words: "bad nodes: none; bad links: a <-> b"."""
    def names(xs: Any) -> str:
        return ", ".join(" <-> ".join(x) if isinstance(x, (list, tuple)) else str(x) for x in xs) or "none"

    return (f"pair tests: {c.tests} in {c.rounds} rounds; bad nodes: {names(c.bad_nodes)}; "
            f"bad links: {names(c.bad_links)}; transient: {names(c.transient)}")


def replay(results: list[PairResult], bad_ratio: float = LINK_BAD, latency_factor: float = LINK_LATENCY,
           shifts: Iterable[int] = (1, 2), rails: tuple[float, ...] = RAILS) -> Conclusion:
    """`isolate` over recorded pair results (in the order they were measured;
    a rail's figures are judged on their own as the live run judges them):
    the same conclusion the live run drew, for results saved without it."""
    names = sorted({x for r in results for x in (r.a, r.b)})
    idx = {x: i for i, x in enumerate(names)}
    queue: dict[Pair, list[dict[str, float]]] = {}
    directions: dict[str, bool] = {}
    for r in results:
        p = pair(idx[r.a], idx[r.b])
        directions[r.key] = r.higher_is_better
        tests = queue.setdefault(p, [])
        if not tests or r.key in tests[-1]:
            tests.append({})
        tests[-1][r.key] = r.value

    def measure(rnd: list[Pair]) -> dict[Pair, Figures]:
        return {p: queue[p].pop(0) if len(queue[p]) > 1 else queue[p][0] for p in rnd if queue.get(p)}

    iso = isolate(len(names), measure, True, shifts, bad_ratio, latency_factor, directions, rails=rails)
    return conclusion(iso, names)
