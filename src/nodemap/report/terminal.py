"""The one-screen terminal summary of a check: a verdict line per area,
the top findings with evidence and fix, what was skipped."""

from __future__ import annotations

import shutil
import textwrap
from typing import Sequence

from ..check.document import CheckDoc
from ..bench.report import number
from ..check.verdicts import RANK

MARK = {"pass": "PASS", "info": "info", "inconclusive": "INCONCLUSIVE", "warn": "WARN", "fail": "FAIL"}


def summary(doc: CheckDoc, top: int = 5, files: Sequence[str] = ()) -> str:
    width = min(shutil.get_terminal_size((100, 24)).columns, 110)
    state = "complete" if doc.complete else "INCOMPLETE (interrupted: what was measured only)"
    lines = [f"nodemap check --level {doc.level} on {doc.host}, {doc.started}: {MARK[doc.verdict()]} ({state})"]
    lines += busy_lines(doc, width)
    for area, verdict in doc.areas().items():
        lines.append(f"  {area:<12} {MARK[verdict]:<5} {area_detail(doc, area)}"[:width])
    for s in doc.skipped:
        lines.append(_wrap(f"  skipped: {s.what}: {s.reason}", width, "    "))
    shown = doc.findings[:top]
    if shown:
        lines.append(f"findings ({len(shown)} of {len(doc.findings)}, worst first):")
        for i, f in enumerate(shown, 1):
            lines.append(_wrap(f"  {i}. {MARK[f.verdict]} [{f.cause}] {f.text}", width, "     "))
            lines.append(_wrap(f"     fix: {f.fix}", width, "       "))
    else:
        lines.append("findings: none")
    c = doc.counts()
    lines.append(f"{len(doc.judged)} figures and {len(doc.checks)} checks: {c['pass']} pass, {c['warn']} warn, "
                 f"{c['fail']} fail, {c['inconclusive']} inconclusive, {c['info']} recorded without a rule")
    lines += [f"report: {p}" for p in files]
    return "\n".join(lines)


def busy_lines(doc: CheckDoc, width: int, shown: int = 4) -> list[str]:
    """A busy node says so first: why, and what that means for its verdicts."""
    if not doc.is_busy():
        return []
    reasons = doc.busy.get("reasons", [])
    out = [_wrap("BUSY: other work shared this node during the check; figures measured then are not failed "
                 "for speed (inconclusive): run the check again when the node is idle", width, "  ")]
    out += [_wrap(f"  busy: {r}", width, "    ") for r in reasons[:shown]]
    if len(reasons) > shown:
        out.append(f"  busy: ... {len(reasons) - shown} more in the report's busy field")
    return out


def area_detail(doc: CheckDoc, area: str) -> str:
    js = [j for j in doc.judged if j.figure.area == area]
    cs = [c for c in doc.checks if c.area == area]
    if js:
        w = max(js, key=lambda j: (RANK[j.verdict], -(j.relative or 1)))
        f = w.figure
        return f"{len(js)} figures; {'worst' if w.verdict in ('warn', 'fail') else 'e.g.'} {f.label}: {number(f.value)} {f.unit}"
    bad = [c for c in cs if c.verdict in ("warn", "fail")]
    return f"{len(cs)} checks" + (f"; {bad[0].label}: {bad[0].value}" if bad else "")


def _wrap(text: str, width: int, indent: str) -> str:
    return "\n".join(textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False)) or text


def figures_table(doc: CheckDoc) -> str:
    from ..bench.report import table

    rows = [[j.figure.key, number(j.figure.value), j.figure.unit, MARK[j.verdict], j.rule]
            for j in doc.judged]
    return table(["figure", "value", "unit", "verdict", "rule"], rows, right=[False, True, False, False, False])
