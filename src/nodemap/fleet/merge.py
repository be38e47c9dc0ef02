"""Fleet verdicts: node documents in, a `Fleet` out (pure).

Each node's figures are judged against its peers' (fleet/noise.py: the
statistics, verdicts.py: the rule and its words), suspects measured again
before a drain (remeasure.py), pairwise links by ClusterKit's rule
(links.py), topology differences, each node's own check and contention
(findings.py), and the nodes to drain ranked (drain.py). The thresholds are
the [fleet] table of the expectations (check/expectations.py).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from ..check.expectations import FleetRules, fleet_defaults
from ..finding import Finding
from .drain import Drain, drain_list
from .findings import co_hosted, contended, own_findings, status_findings, too_few_notes, topology_findings
from .links import judge_links
from .noise import Baseline
from .nodefile import Conclusion, Link, NodeRow, NoPairTests, PairResult, Remeasured
from .nodes import Node
from .pairs import rail_rules, replay
from .remeasure import confirm, said_remeasured
from .verdicts import judge_figures


SCHEMA = "nodemap.fleet/2"  # /2: findings are nodemap/finding.py's (verdict, keys; /1: severity, key)


@dataclass
class Fleet:
    nodes: list[Node]
    baselines: list[Baseline]
    keys: list[str]  # figure keys, columns of `ratios`
    ratios: dict[str, list[float | None]]  # node -> ratio to its class median per key
    findings: list[Finding]
    links: list[Link]  # judged pair results
    drain: list[Drain]
    thresholds: FleetRules
    notes: list[str] = field(default_factory=list)  # what the merge could not judge, and why
    isolation: Conclusion | None = None  # the pair tests' conclusion (pairs.conclusion)
    complete: bool = True
    remeasured: Remeasured = field(default_factory=dict)  # the suspects' re-measures

    _verdicts: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def verdict(self, node: str) -> str:
        if self._verdicts is None:  # once: asked for each of 10,000 nodes
            self._verdicts = {}
            for f in self.findings:
                if self._verdicts.get(f.node) != "fail":
                    self._verdicts[f.node] = "fail" if f.verdict == "fail" else "warn"
        return self._verdicts.get(node, "pass")

    def file(self, messages: list[str]) -> FleetFile:
        """fleet.json (and `--json`), with the run's messages."""
        return FleetFile(SCHEMA, self.complete, self.thresholds,
                         [NodeRow(n.name, n.status, n.node_class, n.last_state, self.verdict(n.name), len(n.figures))
                          for n in self.nodes], self.baselines, self.keys, self.ratios, self.findings, self.links,
                         self.isolation if self.isolation is not None else NoPairTests(), self.notes, self.drain,
                         self.remeasured, messages)


@dataclass
class FleetFile:
    """fleet.json: what `check --fleet` concluded (written by msgspec, or outfile.json_text for `--json`)."""

    schema: str
    complete: bool
    thresholds: FleetRules
    nodes: list[NodeRow]
    baselines: list[Baseline]
    keys: list[str]
    ratios: dict[str, list[float | None]]
    findings: list[Finding]
    links: list[Link]
    isolation: Conclusion | NoPairTests
    notes: list[str]
    drain: list[Drain]
    remeasured: Remeasured
    messages: list[str]


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: building a million small objects
    (10,000 nodes x 86 figures) otherwise triggers full collections that
    rescan every live one, which made the merge grow as n^2 (5,000 nodes:
    8.9 s with, benchmarks/fleet_scale.py). Nothing here makes cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def merge(nodes: list[Node], pair_results: Iterable[PairResult] = (),
          thresholds: FleetRules | None = None, isolation: Conclusion | None = None,
          remeasured: Remeasured | None = None) -> Fleet:
    """`isolation`: the pair tests' conclusion (`pairs.conclusion`); without
    it, it is replayed from the pair results. `remeasured`: the suspects'
    figures measured again (`suspects` names them, round by round; the
    driver measures); None where nothing could be (saved documents): a
    failure then says so."""
    with no_gc():
        return _merge(nodes, pair_results, thresholds or fleet_defaults(), isolation, remeasured)


def _merge(nodes: list[Node], pair_results: Iterable[PairResult], thresholds: FleetRules,
           isolation: Conclusion | None, remeasured: Remeasured | None) -> Fleet:
    nodes = sorted(nodes, key=lambda n: n.name)
    present = [n for n in nodes if n.status != "missing"]
    baselines, keys, ratios, findings = judge_figures(present, thresholds)
    findings = confirm(findings, baselines, remeasured, thresholds, present)
    remeasure_notes = [said_remeasured(findings)] if remeasured else []
    shared, contention_notes = co_hosted(present)
    own, own_notes = own_findings(present)
    findings += own
    findings += topology_findings(present)
    findings += status_findings(nodes)
    pair_results = list(pair_results)
    if isolation is None and pair_results:
        isolation = replay(pair_results, thresholds.link_bad, thresholds.link_latency,
                           rails=rail_rules(thresholds))
    links, link_findings = judge_links(pair_results, thresholds, isolation)
    findings += link_findings
    findings = [contended(f, shared) for f in findings]
    order = {"missing": 0, "fail": 1, "warn": 2}
    findings.sort(key=lambda f: (f.node, order.get(f.kind if f.kind == "missing" else f.verdict, 3),
                                 f.ratio if f.ratio is not None else 0.0))
    return Fleet(nodes=nodes, baselines=baselines, keys=keys, ratios=ratios, findings=findings, links=links,
                 drain=drain_list(findings), thresholds=thresholds, isolation=isolation,
                 notes=own_notes + remeasure_notes + contention_notes + too_few_notes(baselines, thresholds),
                 remeasured=remeasured or {},
                 complete=all(n.status == "complete" for n in nodes))
