"""A check document as Slurm sees it: healthy, failed for a hardware cause
(drain it, with the reason), or neither (a busy node, an incomplete check:
could not judge, never drained). Configuration failures are the job's or
the site's, not the node's: the node's verdict (CheckDoc.node_verdict, the
one rule behind the exit status) leaves them out. What a check judged
(its scope) bounds what its verdict may clear: a drain for a figure it did
not measure is not its to resume."""

from __future__ import annotations

from dataclasses import dataclass

from ..check.document import CheckDoc, not_judged
from ..text import number
from .drain import PREFIX, head, names, reason


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
        e = j.expectation  # the limit it fell past: an absolute one, else its peers' (unset or null: none)
        lim = next((v for v in (e.fail_below, e.fail_above, e.relative_fail_below, e.relative_fail_above)
                    if isinstance(v, (int, float))), None)
        out.append(reason(j.figure.area, j.figure.key, f"{number(j.figure.value)} {j.figure.unit}",
                          f"{number(lim)} {j.figure.unit}" if lim is not None else ""))
    return out


def health(doc: CheckDoc) -> tuple[bool | None, str]:
    """(True, "") healthy; (False, reason) unhealthy, a hardware cause;
    (None, why) could not judge: the check did not finish, the node was
    busy or nothing was measured (exit 2: a node nodemap drained stays
    drained until a check measures it again). The reason names a measured
    figure before an inventory item when both failed: then only a check
    that measures again (not the health level) can resume the node."""
    if not doc.complete:
        return None, "the check did not finish"
    if doc.node_verdict() == "fail":
        failed = hardware_failures(doc)
        measured = [r for r in failed if not r.startswith(f"{PREFIX} inventory: ")]
        return False, (measured or failed or [_fallback(doc)])[0]
    why = not_judged(doc)  # exit_status's rule: what exits 2 never drains, nor resumes
    if why == "busy":
        return None, "the node was busy: its figures are inconclusive"
    if why:
        return None, f"could not judge ({why})"
    return True, ""


def _fallback(doc: CheckDoc) -> str:
    """The reason of a failed node no single item explains: its level named,
    so that a check of that level can clear it."""
    return reason("node", f"{doc.level} check", "failed", "")


@dataclass(frozen=True)
class Scope:
    """What one check document judged, as the starts of the drain reasons
    it could have written (drain.head): a drain whose reason starts so was
    judged again by this check. Checks and figures with a verdict count (an
    inconclusive figure was measured but not judged); a budgeted check's
    left-out steps have no figures, so their drains are not covered."""
    level: str
    heads: tuple[str, ...]

    def covers(self, why: str) -> bool:
        return any(names(why, h) for h in self.heads)


def scope(doc: CheckDoc) -> Scope:
    heads = [head(c.area, c.label) for c in doc.checks]
    heads += [head(j.figure.area, j.figure.key) for j in doc.judged if j.verdict != "inconclusive"]
    heads.append(head("node", f"{doc.level} check"))
    return Scope(doc.level, tuple(dict.fromkeys(heads)))
