"""The one-screen terminal summary of a check: the node's verdict apart
from its job environment's, a verdict line per area, the top findings with
evidence and fix, what was skipped. Lines wrap at the terminal's width and
never cut a value (a number, its unit and its interval stay whole)."""

from __future__ import annotations

import re
import textwrap
from typing import Sequence

from ..check.document import CheckDoc, exit_status, not_judged
from ..check.verdicts import RANK
from ..text import columns, number

MARK = {"pass": "PASS", "info": "info", "inconclusive": "INCONCLUSIVE", "warn": "WARN", "fail": "FAIL"}


def summary(doc: CheckDoc, top: int = 5, files: Sequence[str] = (), width: int | None = None) -> str:
    width = width or min(columns(), 110)
    state = "complete" if doc.complete else f"INCOMPLETE ({doc.incomplete_why()}: what was measured only)"
    lines = [_wrap(f"{doc.origin()} on {doc.host}, {doc.started}: {state}", width, "  "),
             _wrap(verdict_line(doc), width, "  ")]
    if doc.budget:
        lines.append(_wrap(doc.budget.describe(), width, "  "))
    lines += busy_lines(doc, width)
    mark = max(len(MARK[v]) for v in doc.areas().values()) if doc.areas() else 4
    for area, verdict in doc.areas().items():
        lines.append(_wrap(f"  {area:<12} {MARK[verdict]:<{mark}} {area_detail(doc, area)}", width,
                           " " * (16 + mark)))
    for r in doc.remeasured:
        lines.append(_wrap(f"  measured again: {r.step}, {r.rounds} rounds in all ({r.seconds:g} s more) for "
                           f"{', '.join(r.figures) or 'noisy figures'}" + (f"; still noisy: {', '.join(r.still_noisy)}"
                           if r.still_noisy else "; decided") + (f" ({r.note})" if r.note else ""), width, "    "))
    for s in doc.skipped:
        lines.append(_wrap(f"  skipped: {s.what}: {s.reason}", width, "    "))
    shown = doc.findings[:top]
    if shown:
        lines.append(f"findings ({len(shown)} of {len(doc.findings)}, worst first):")
        for i, f in enumerate(shown, 1):
            lines.append(_wrap(f"  {i}. {MARK[f.verdict]} [{f.cause}] {f.text}", width, "     "))
            lines.append(_wrap(f"     fix: {f.fix}", width, "       "))
    else:
        lines.append(_wrap(f"findings: {no_findings(doc)}", width, "  "))
    c = doc.counts()
    lines.append(_wrap(f"{len(doc.judged)} figures and {len(doc.checks)} checks: {c['pass']} pass, {c['warn']} warn, "
                       f"{c['fail']} fail, {c['inconclusive']} inconclusive, {c['info']} recorded without a rule",
                       width, "  "))
    lines += [f"report: {p}" for p in files]
    return "\n".join(lines)


def verdict_line(doc: CheckDoc) -> str:
    """'node: healthy (WARN); job environment: FAIL (MPI is not CUDA-aware)':
    whether the node is unfit (hardware) apart from whether the job's
    environment is (configuration), as the exit status tells a scheduler."""
    node = doc.node_verdict()
    word = {1: "UNHEALTHY", 2: f"could not judge ({not_judged(doc)})"}.get(exit_status(doc, saved=True), "healthy")
    env = doc.environment_verdict()
    why = "; ".join(doc.environment_reasons()) if env in ("warn", "fail") else ""
    return (f"node: {word} ({MARK[node]}); job environment: {MARK[env]}" + (f" ({why})" if why else "")
            + ("" if doc.complete else " (so far)"))


def no_findings(doc: CheckDoc) -> str:
    """What a document without findings says: never "every figure passed"
    when figures were not judged (a busy node, undecided intervals)."""
    c = doc.counts()
    why = not_judged(doc)
    if why:
        return f"none: nothing was judged, the node could not be ({why})"
    if c["inconclusive"]:
        return (f"none among what was judged; {c['inconclusive']} inconclusive (measured while busy, or "
                "undecided): not judged")
    if not (c["pass"] or c["warn"] or c["fail"]):
        return "none: nothing here has a rule (recorded only)"
    return "none: every judged figure and check passed"


def busy_lines(doc: CheckDoc, width: int, shown: int = 4) -> list[str]:
    """A busy node says so first: why, and what that means for its verdicts."""
    if not doc.is_busy():
        return []
    reasons = doc.busy.reasons if doc.busy else []
    out = [_wrap("BUSY: other work shared this node during the check; figures measured then are not failed "
                 "for speed (inconclusive): run the check again when the node is idle", width, "  ")]
    out += [_wrap(f"  busy: {r}", width, "    ") for r in reasons[:shown]]
    if len(reasons) > shown:
        out.append(f"  busy: ... {len(reasons) - shown} more in the report's busy field")
    return out


def area_detail(doc: CheckDoc, area: str) -> str:
    js = [j for j in doc.judged if j.figure.area == area]
    cs = [c for c in doc.checks if c.area == area]
    bad = sorted((c for c in cs if c.verdict in ("warn", "fail")), key=lambda c: -RANK[c.verdict])
    w = max(js, key=_badness) if js else None
    if w is not None and not (bad and RANK[bad[0].verdict] >= RANK[w.verdict]):
        worst = "worst:" if w.verdict in ("inconclusive", "warn", "fail") else "e.g."
        return f"{len(js)} figures; {worst} {w.figure.label}: {judged_value(w.figure)}"
    # a failing check (wrong data from NCCL: check/failed.py) is what an area with passing figures is about
    figures = f"{len(js)} figures, " if js else ""
    return f"{figures}{len(cs)} checks" + (f"; {bad[0].label}: {bad[0].value}" if bad else "")


def _badness(j) -> tuple[int, float]:
    """The worst figure of an area: its verdict, then how far from its peers
    (a bandwidth's low ratio, a latency's high one)."""
    r = j.relative if j.relative is not None else 1.0
    return RANK[j.verdict], (-r if j.figure.higher_is_better else r)


def judged_value(f) -> str:
    """'median 13.1 us [10.7, 23.7], best 2.95': what the verdict judged
    first (an area's headline names its worst judged figure: the best
    repetition alone, outside the median's interval, read as the worst)."""
    if f.n <= 1:
        return f"{number(f.value)} {f.unit}"
    return f"median {number(f.median)} {f.unit} [{number(f.low)}, {number(f.high)}], best {number(f.value)}"


# spaces a line must not break at: inside an interval "[27.0, 29.9]", between a number and its unit
_KEEP = re.compile(r"\[[^\[\]]{0,40}\]|\d (?:GB/s|ns|us|ms|s|KiB|MiB|GiB|GB|x|%)(?![\w/])")
_NBSP = "\x00"


def _wrap(text: str, width: int, indent: str) -> str:
    """Wrap at spaces only: a word longer than the line stays whole (never cut)."""
    held = _KEEP.sub(lambda m: m.group(0).replace(" ", _NBSP), text)
    lines = textwrap.wrap(held, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines).replace(_NBSP, " ") or text
