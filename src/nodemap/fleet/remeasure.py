"""Suspects measured again before any drain: who is a suspect, and where its
measurements, pooled (fleet/noise.py), leave it.

A failed figure (or one below 95% and [fleet] z_suspect of its figure's noise below
the median) is a suspect: the driver measures it again, round by round
(`suspects`, `settle`), and the node is drained only once its measurements,
pooled, lie wholly below the `warn` line against the same baseline (`confirm`).
"""

from __future__ import annotations

from msgspec.structs import replace  # of a Finding

import msgspec

from ..check.expectations import FleetRules, fleet_defaults
from ..finding import Finding
from .findings import co_hosted
from .noise import REMEASURES, Baseline, Pooled, as_read, below, num, pooled, resolvable
from .nodefile import Fig, Judged, Remeasured
from .nodes import Node
from .verdicts import judge_figures


def suspects(nodes: list[Node], th: FleetRules | None = None, remeasured: Remeasured | None = None
             ) -> dict[str, list[str]]:
    """node -> the figure keys to measure (again) on it: those that fail
    against the fleet, or lie below `warn` by z_suspect of the figure's
    noise where re-measures can resolve it (`_suspect`), and that the re-measures so far (`remeasured`) have not settled; {}
    when none is left. The driver calls it round after round (`settle`)."""
    th = th or fleet_defaults()
    present = [n for n in nodes if n.status != "missing"]
    shared, _ = co_hosted(present)
    baselines, _, _, findings = judge_figures(present, th)
    by = _baselines_of(baselines, present, findings)
    figures = {n.name: n.figures for n in present}
    out: dict[str, list[str]] = {}
    for f in findings:
        if _suspect(f, th, by) and f.node not in shared:
            rounds = _rounds((remeasured or {}).get(f.node, {}).get(f.key))
            first = figures[f.node][f.key]
            if not isinstance(rounds, str) and settle(f, first, rounds or [], by[(f.node, f.key)], th)[0] == "open":
                out.setdefault(f.node, []).append(f.key)
    return out


def _baselines_of(baselines: list[Baseline], nodes: list[Node], findings: list[Finding]
                  ) -> dict[tuple[str, str], Baseline]:
    """(node, key) -> the baseline its figure is judged by, for the figures `findings` name."""
    by = {(b.node_class, b.key): b for b in baselines}
    cls = {n.name: n.node_class for n in nodes}
    return {(f.node, f.key): by[(cls[f.node], f.key)] for f in findings
            if f.kind == "figure" and (cls.get(f.node), f.key) in by}


def _suspect(f: Finding, th: FleetRules, by: dict[tuple[str, str], Baseline]) -> bool:
    """A figure failure, or one below `warn` at least z_suspect of the
    figure's typical sigmas (`Baseline.noise`, not the node's own: a noisy
    first pass is the one to measure again) below the median: a re-measure
    can tell it from noise (a figure whose noise is
    so wide that even this is within it, as in a fleet of co-scheduled
    checks, is left a warning)."""
    if f.kind != "figure" or (f.node, f.key) not in by:
        return False
    b = by[(f.node, f.key)]
    warn, fail = th.for_figure(f.key, b.node_class)
    return f.verdict == "fail" or (f.ratio is not None and b.noise > 0 and f.ratio < warn
                                    and (f.ratio - 1) / b.noise <= -th.z_suspect
                                    and resolvable(b, warn, fail, th.z_drain))


def _rounds(got: list[Judged] | str | None) -> list[Fig] | str | None:
    """Re-measures as recorded (`Remeasured`): the figure records, each as the fleet reads a figure (Fig),
    a reason none came (a str), or None (not asked)."""
    if got is None or isinstance(got, str):
        return got
    return [msgspec.convert(g, Fig, from_attributes=True) for g in got]


def settle(f: Finding, first: Fig, rounds: list[Fig], b: Baseline, th: FleetRules
           ) -> tuple[str, list[str], Pooled | None]:
    """Where a suspect stands after its re-measures, pooled with its first
    pass (`pooled`): "drain" once the pooled interval's upper end (z_drain
    sigmas) lies below the figure's `warn` line and the re-measures alone
    are below it by z_fresh of their sigmas (the first pass was picked for
    being low: a heavy-tailed outlier of a healthy node must not drain it); "clear" once the pooled ratio is at least that line;
    "unsettled" after REMEASURES without either, else "open" (measure it
    again). With no noise known, the line is `fail` and the pooled ratio
    alone decides. Also each re-measure's value, for the text."""
    said = ["?" if g.problem() or g.stat() <= 0 else num(g.stat()) for g in rounds]
    p = pooled(first, rounds, b)
    if p is not None:
        warn, fail = th.for_figure(b.key, b.node_class)
        line = warn if p.sigma > 0 else fail
        if (p.k > th.min_fresh and p.ratio + th.z_drain * p.sigma < line
                and p.fresh + th.z_fresh * p.fresh_sigma < line):
            return "drain", said, p
        if p.ratio >= line or p.fresh - th.z_fresh * p.fresh_sigma >= line:
            return "clear", said, p
    return ("unsettled" if len(rounds) >= REMEASURES else "open"), said, p


def _pooled_text(p: Pooled | None, b: Baseline, th: FleetRules) -> str:
    if p is None:
        return "no re-measure was a measurement"
    line = th.for_figure(b.key, b.node_class)[0 if p.sigma > 0 else 1]
    if p.sigma <= 0:
        return f"{p.k} measurements pooled: {as_read(p.ratio, b)} (noise unknown: against {below(b, line)})"
    hi = p.ratio + th.z_drain * p.sigma
    return (f"{p.k} measurements pooled: {as_read(p.ratio, b)}, {th.z_drain:g} sigma ({p.sigma:.1%}) up to "
            f"{as_read(hi, b)}, against the line {below(b, line)}")


def confirm(findings: list[Finding], baselines: list[Baseline], remeasured: Remeasured | None,
            th: FleetRules, nodes: list[Node]) -> list[Finding]:
    """A suspect figure drains its node only when its measurements, the
    first pass and the re-measures pooled against the same baseline (the
    first pass's: a re-measure does not move the line it is judged by),
    settle it below the line (`settle`); one cleared is transient, one
    unsettled after REMEASURES a warning."""
    by = _baselines_of(baselines, nodes, findings)
    figures = {n.name: n.figures for n in nodes}
    out = []
    for f in findings:
        if not _suspect(f, th, by):
            out.append(f)
            continue
        rounds = _rounds((remeasured or {}).get(f.node, {}).get(f.key))
        if rounds is None or isinstance(rounds, str):
            why = "saved documents" if remeasured is None else rounds or "no value came back"
            out.append(replace(f, text=f.text + f"; not re-measured ({why})") if f.verdict == "fail" else f)
            continue
        b = by[(f.node, f.key)]
        state, values, p = settle(f, figures[f.node][f.key], rounds, b, th)
        v = f"re-measured {', '.join(values)} {b.unit}".rstrip() + f" ({_pooled_text(p, b, th)})"
        if state == "drain":
            out.append(replace(f, verdict="fail", text=f.text + f"; {v}: {OUTCOMES['drained']}"))
        elif state == "clear":
            out.append(replace(f, verdict="warn", text=f.text + f"; {v}: {OUTCOMES['transient']}"))
        else:
            out.append(replace(f, verdict="warn", text=f.text + f"; {v}: neither wholly below the line nor above "
                               f"it in {REMEASURES}: {OUTCOMES['unsettled']}"))
    return out


# What `confirm` appends to a re-measured suspect's text, by outcome (said_remeasured counts them).
OUTCOMES = {"drained": "still beyond, confirmed below the line", "transient": "transient, not drained",
            "unsettled": "unsettled, not drained"}


def said_remeasured(findings: list[Finding]) -> str:
    """One line on the re-measures: how many suspects, and how each ended."""
    counts = {k: sum(1 for f in findings if f.kind == "figure" and v in f.text) for k, v in OUTCOMES.items()}
    asked = sum(counts.values())
    nodes = len({f.node for f in findings if f.kind == "figure" and any(v in f.text for v in OUTCOMES.values())})
    return (f"re-measured {asked} suspect figure{'s' * (asked != 1)} on {nodes} node{'s' * (nodes != 1)} before "
            f"draining: {counts['drained']} confirmed (drained), {counts['transient']} passed (transient), "
            f"{counts['unsettled']} unsettled (warnings)")
