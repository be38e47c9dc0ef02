"""What the fleet finds beside the figures' verdicts: each node's own check,
topology differences (fleet/facts.py), missing, incomplete and busy nodes,
and nodes measured at the same time on one host (ranks acting as nodes,
co-scheduled checks), which contend for it: their speed failures are
warnings, said in a note."""

from __future__ import annotations

from msgspec.structs import replace  # of a Finding

from ..check.expectations import FleetRules
from ..finding import Finding
from . import facts as factsmod
from .noise import Baseline
from .nodes import Node


def own_findings(nodes: list[Node]) -> tuple[list[Finding], list[str]]:
    """What each node's own check found (absolute limits, its inventory),
    whatever the fleet size, and notes. A configuration failure every node
    shares (MPI without CUDA support on every node) is the fleet's to fix once:
    a note, and on each node a warning, not a reason to drain them all."""
    shared = set.intersection(*({_configuration(f) for f in n.findings if f.verdict == "fail"} - {""}
                                for n in nodes)) if len(nodes) > 1 else set()
    out, notes = [], {}
    for n in nodes:
        for f in n.findings:
            verdict, what = f.verdict, _configuration(f)
            if what in shared:
                verdict = "warn"
                notes.setdefault(what, f"every node ({len(nodes)}), e.g. {n.name}: {f.text}; configuration the whole "
                                       "fleet shares: fix it once, no node is drained for it")
            # the measured figures it rests on (not inventory): one measured beside other checks is told apart
            measured = tuple(k for k in f.keys if not k.startswith("inventory/"))
            out.append(Finding(verdict, f"its own check: {f.text}", keys=measured, node=n.name, kind="check"))
    return out, list(notes.values())


def _configuration(f: Finding) -> str:
    """What a configuration finding is ("MPI:mpi/DD/bw"), so one the whole
    fleet shares is told apart; "" for any other."""
    return f"{f.area}:{','.join(f.keys)}" if f.cause == "configuration" else ""


def topology_findings(nodes: list[Node]) -> list[Finding]:
    by_class: dict[str, dict[str, factsmod.Facts]] = {}  # class -> node -> its facts
    for n in nodes:
        if n.facts:
            by_class.setdefault(n.node_class, {})[n.name] = n.facts
    out = []
    for group in by_class.values():
        for node, diffs in factsmod.differences(group).items():
            out += [Finding(verdict, text, node=node, kind="topology") for verdict, text in diffs]
    return out


def status_findings(nodes: list[Node]) -> list[Finding]:
    out = []
    for n in nodes:
        if n.status == "missing":
            out.append(Finding("fail", f"did not answer; last known state: {n.last_state or 'none'}", node=n.name,
                               kind="missing"))
        elif n.status == "incomplete":
            out.append(Finding("warn", "its check did not complete (interrupted or a part failed): judged on what "
                               "it measured", node=n.name, kind="incomplete"))
        if n.busy:  # its own check could not judge it (exit 2): not a pass, nor a drain
            out.append(Finding("warn", f"its own check found the node busy ({n.busy}): its figures measured then "
                               "are not judged for speed; check it again when it is idle", node=n.name, kind="busy"))
    return out


def co_hosted(nodes: list[Node]) -> tuple[set[str], list[str]]:
    """Nodes measured at overlapping times on one host, or on one GPU (ranks
    acting as nodes, checks co-scheduled on one machine): their figures
    contend for its memory, caches and PCIe, so a shortfall among them is
    not a fault of any one. Returns those nodes and a note per place."""
    by_place: dict[str, list[Node]] = {}
    for n in nodes:
        if n.window:
            for p in n.places:
                by_place.setdefault(p, []).append(n)
    shared: set[str] = set()
    notes = []
    for place, group in sorted(by_place.items(), key=lambda kv: (not kv[0].startswith("host"), kv[0])):
        together = overlapping(group)
        if len(together) > 1 and not together <= shared:
            shared |= together
            hosts = sorted({n.host for n in group if n.name in together and n.host})
            # "host (vm", "host (boot id ...", "GPU (GPU-6030..."
            where = place.replace("GPU ", "GPU (", 1) if place.startswith("GPU") else place
            named = "" if where == f"host ({','.join(hosts)}" else f"; hostname {', '.join(hosts)}" if hosts else ""
            notes.append(f"{len(together)} nodes ({', '.join(sorted(together))}) were measured at the same time on "
                         f"one {where}{named}): their checks contend for its memory, "
                         "caches and PCIe, so their speed failures (against the fleet or their own checks' limits) "
                         "are warnings, not drains; run one check per host to judge them")
    return shared, notes


def overlapping(group: list[Node]) -> set[str]:
    """The nodes whose measuring window overlaps another's (a sweep by start)."""
    out: set[str] = set()
    latest: Node | None = None
    for n in sorted(group, key=lambda x: x.window or (0, 0)):
        if latest is not None and n.window[0] < latest.window[1]:  # type: ignore[index]
            out |= {n.name, latest.name}
        if latest is None or n.window[1] > latest.window[1]:  # type: ignore[index]
            latest = n
    return out


def contended(f: Finding, shared: set[str]) -> Finding:
    """A speed failure of a node measured beside other checks on its host
    (against the fleet, or its own check's limits): a warning. Its inventory
    and topology failures stand: contention does not remove a GPU."""
    if f.node in shared and f.kind in ("figure", "check") and f.key and f.verdict == "fail":
        return replace(f, verdict="warn", kind="contention", text=f.text + "; measured beside other checks on "
                       "the same host: contention, not drained")
    return f


def too_few_notes(baselines: list[Baseline], th: FleetRules) -> list[str]:
    """Classes, or figures of a class, too few nodes measured for a fleet
    median: judged by the node checks' own rules only. Figures can fall short
    where the class does not (nodes whose GPUs are numbered differently)."""
    nodes: dict[str, int] = {}
    short: dict[str, list[Baseline]] = {}
    for b in baselines:
        nodes[b.node_class] = max(nodes.get(b.node_class, 0), b.n)
        if b.n < th.min_nodes:
            short.setdefault(b.node_class, []).append(b)
    rule = (f"fleet-relative verdicts need >= {th.min_nodes} nodes of a class (min_nodes), so these are judged "
            "by their own checks' rules (absolute limits, topology) only")
    out = []
    for cls, few in sorted(short.items()):
        n = nodes[cls]
        if n < th.min_nodes:
            out.append(f"{cls}: {n} node{'s' * (n != 1)}; {rule}")
            continue
        keys = ", ".join(b.key for b in few[:4]) + (f" and {len(few) - 4} more" if len(few) > 4 else "")
        out.append(f"{cls}: {n} nodes, but {len(few)} figure{'s' * (len(few) != 1)} measured on fewer than "
                   f"{th.min_nodes} of them ({keys}); {rule}")
    return out
