"""The ranked drain list: a missing node first, then nodes with failures, worst ratio first."""

from __future__ import annotations

from dataclasses import dataclass

from ..finding import Finding


@dataclass
class Drain:
    node: str
    rank: int
    reason: str
    evidence: list[str]


# Which finding states a node's reason first: a measured shortfall of the node
# before the topology difference that may explain it; the node's own topology
# (a NIC port down) before its pairs, which are the symptom of it (with a rail
# down both ranks share the other rail, and its pairs are slow); a figure a node
# could not measure last (its cause is usually the topology difference above it).
KIND_ORDER = {"missing": 0, "figure": 1, "check": 1, "topology": 2, "link": 3, "absent": 4, "incomplete": 5}


def cause_first(findings: list[Finding]) -> list[Finding]:
    """A node's findings in the order its reason names them (KIND_ORDER, then the worst ratio)."""
    return sorted(findings, key=lambda f: (KIND_ORDER.get(f.kind, 5), f.ratio if f.ratio is not None else 1.0))


def drain_list(findings: list[Finding]) -> list[Drain]:
    """Nodes with a failure: missing ones first, then by their worst ratio
    (to the fleet median or to the best pair), then by how many failures."""
    per: dict[str, list[Finding]] = {}
    for f in findings:
        if f.verdict == "fail":
            per.setdefault(f.node, []).append(f)

    def rank_key(item: tuple[str, list[Finding]]) -> tuple[int, float, int, str]:
        node, fs = item
        worst = min((f.ratio for f in fs if f.ratio is not None), default=1.0)
        return (0 if any(f.kind == "missing" for f in fs) else 1, worst, -len(fs), node)

    out = []
    for i, (node, fs) in enumerate(sorted(per.items(), key=rank_key), 1):
        fs = cause_first(fs)
        out.append(Drain(node, i, fs[0].text, [f.text for f in fs[:8]]))
    return out
