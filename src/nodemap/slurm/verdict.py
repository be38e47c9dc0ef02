"""A check document as Slurm sees it: healthy, failed for a hardware cause
(drain it, with the reason), or neither (a busy node, an incomplete check:
could not judge, never drained). Configuration failures are the job's or
the site's, not the node's: the node's verdict (CheckDoc.node_verdict, the
one rule behind the exit status) leaves them out."""

from __future__ import annotations

from ..check.document import CheckDoc, not_judged
from ..text import number
from .drain import reason

# Expectation keys holding a failing figure's limit, in the order tried.
_LIMIT_KEYS = ("fail_below", "fail_above", "relative_fail_below", "relative_fail_above")


def hardware_failures(doc: CheckDoc) -> list[str]:
    """Drain reasons of every failed check and figure the node's verdict
    counts (not a configuration cause): checks first, then figures in the
    findings' ranking (most telling first)."""
    causes = doc.causes()
    node = lambda key: causes.get(key, "hardware") != "configuration"  # noqa: E731  (node_verdict's rule)
    out = [reason(c.area, c.label, c.value, c.expected) for c in doc.checks if c.verdict == "fail" and node(c.key)]
    rank = {k: i for i, f in enumerate(doc.findings) for k in reversed(f.keys)}
    failed = [j for j in doc.judged if j.verdict == "fail" and node(j.figure.key)]
    for j in sorted(failed, key=lambda j: rank.get(j.figure.key, len(rank))):
        lim = next((j.expectation[k] for k in _LIMIT_KEYS if j.expectation.get(k) is not None), None)
        out.append(reason(j.figure.area, j.figure.key, f"{number(j.figure.value)} {j.figure.unit}",
                          f"{number(lim)} {j.figure.unit}" if lim is not None else ""))
    return out


def health(doc: CheckDoc) -> tuple[bool | None, str]:
    """(True, "") healthy; (False, reason) unhealthy, a hardware cause;
    (None, why) could not judge: the check did not finish, the node was
    busy or nothing was measured (exit 2: a node nodemap drained stays
    drained until a check measures it again)."""
    if not doc.complete:
        return None, "the check did not finish"
    if doc.node_verdict() == "fail":
        failed = hardware_failures(doc)
        return False, failed[0] if failed else reason("node", "check", "failed", "")
    why = not_judged(doc)  # exit_status's rule: what exits 2 never drains, nor resumes
    if why == "busy":
        return None, "the node was busy: its figures are inconclusive"
    if why:
        return None, f"could not judge ({why})"
    return True, ""
