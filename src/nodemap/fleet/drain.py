"""The fleet's drains: the ranked drain list (a missing node first, then
nodes with failures, worst ratio first) and what rank 0 does with it in
Slurm under `--slurm-drain`: what only the fleet can see.

Each leader drains or resumes its node on its own check (fleet/command.py,
as `nodemap check --slurm-drain`). A node's pairs that stay bad against good
partners (a rail at a tenth of its rate, lossy, delayed, cut) and a part its
peers have and it lacks or has down (a NIC port down where the others' are
up) are judged against the fleet, never by the node's own check: rank 0
drains those nodes after the merge, with a reason that names the figure and
the rail's NICs ("nodemap: fleet: pairs: mpi bw host rail1 n1 (rail1) <->
n2 (rail1) 0.0022 GB/s = 12% of the best pair"); the node's own topology
first where it has both (a rail down: its NIC port, not the slow pairs it
causes, cause_first). A node the fleet drained so is resumed by a later fleet run whose pair tests and topology pass it;
drains with any other reason (a node check's, a person's) are left as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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


KINDS = {"link": "pairs", "topology": "topology"}  # fleet finding kind -> the reason's item


class FleetScope:
    """What a fleet run judged (slurm/drain.Scope): its pair tests and the topology against peers."""

    level = "fleet"

    def __init__(self, pairs: bool) -> None:
        from ..slurm import drain

        self.heads = [drain.head("fleet", item) for kind, item in KINDS.items() if pairs or kind != "link"]

    def covers(self, why: str) -> bool:
        from ..slurm import drain

        return any(drain.names(why, h) for h in self.heads)


def act(fleet: Any, pairs: bool, dry_run: bool, timeout: float) -> list[str]:
    """Drain every complete node with a fleet-only failure, resume the fleet's own drains of the
    others; one line each (a Slurm error is one line too, and the rest go on)."""
    from ..slurm import drain

    scope = FleetScope(pairs)
    out = []
    for node in fleet.nodes:
        if node.status != "complete":
            continue  # a missing node is the launcher's and its own check's to judge
        fails = cause_first([f for f in fleet.findings if f.node == node.name and f.verdict == "fail"
                             and f.kind in KINDS])
        why = reason(fails[0]) if fails else ""
        try:
            out.append(drain.act(node.name, not fails, why, scope, dry_run=dry_run, timeout=timeout))
        except drain.SlurmError as e:
            out.append(f"{node.name}: {e}")
    return out


def reason(f: Any) -> str:
    """The Slurm reason of a fleet finding: its evidence (the worst figure, with the rail's NICs)
    where it has one, else its sentence."""
    from ..slurm import drain

    return drain.reason("fleet", KINDS[f.kind], f.evidence or f.text, "")
