"""A check document as Slurm sees it: healthy, failed for a hardware cause
(drain it, with the reason), or neither (a configuration failure, an
incomplete check: the job's or the site's, not the node's: never drained)."""

from __future__ import annotations

from ..bench.report import number
from ..check.document import CheckDoc
from .drain import reason

# Expectation keys holding a failing figure's limit, in the order tried.
_LIMIT_KEYS = ("fail_below", "fail_above", "relative_fail_below", "relative_fail_above")


def hardware_failures(doc: CheckDoc) -> list[str]:
    """Drain reasons of every failed check and figure with a hardware cause,
    most telling first (the findings' ranking)."""
    out = [reason(c.area, c.label, c.value, c.expected) for c in doc.checks
           if c.verdict == "fail" and c.cause == "hardware"]
    figures = {j.figure.key: j for j in doc.judged}
    for f in doc.findings:
        if f.verdict != "fail" or f.cause != "hardware":
            continue
        for key in f.keys:
            j = figures.get(key)
            if j is not None and j.verdict == "fail":
                lim = next((j.expectation[k] for k in _LIMIT_KEYS if j.expectation.get(k) is not None), None)
                out.append(reason(j.figure.area, j.figure.key, f"{number(j.figure.value)} {j.figure.unit}",
                                  f"{number(lim)} {j.figure.unit}" if lim is not None else ""))
    return out


def health(doc: CheckDoc) -> tuple[bool | None, str]:
    """(True, "") healthy; (False, reason) a hardware failure; (None, why)
    anything else: a configuration failure or a check that did not finish."""
    if not doc.complete:
        return None, "the check did not finish"
    if doc.is_busy():
        return None, "the node was busy: its figures are inconclusive"
    failed = hardware_failures(doc)
    if failed:
        return False, failed[0]
    if doc.verdict() == "fail":
        return None, "failed for a configuration cause (the job's or the site's settings, not the node)"
    return True, ""
