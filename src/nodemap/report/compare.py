"""Compare two sets of figures (a node before and after maintenance, or two
nodes side by side): per-figure ratios, regressions flagged by the
expectations' compare thresholds. Pure: (before, after, thresholds).
A figure inconclusive on either side (measured while the node was busy,
or its interval undecided) is not compared: a busy "before" against a busy
"after" said "6 of 7 figures regressed" and exited 1."""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence

import msgspec

from ..bench.figures import Figure
from ..text import number
from ..check.verdicts import RANK, ratio_verdict

# `report --compare --json`; "nodemap.compare/1" is `nodemap compare`'s (bindings), a different document
SCHEMA = "nodemap.report.compare/1"


class Change(msgspec.Struct, frozen=True):
    key: str
    label: str
    unit: str
    before: float | None
    after: float | None
    ratio: float | None  # after/before for bandwidth, before/after for latency: < 1 is worse
    verdict: str  # pass | warn | fail | info (only on one side) | inconclusive (not compared)
    rule: str


class Comparison(msgspec.Struct, kw_only=True):
    """`report --compare --json`: written and read as this (nodemap.records)."""

    schema: Literal[SCHEMA] = SCHEMA
    before: str  # the two documents' paths
    after: str
    incomplete: list[str]  # the side(s), "before" or "after", that were interrupted checks
    summary: str  # closing()
    changes: list[Change]


def unsure(doc: Any) -> dict[str, str]:
    """Figure key -> why a check document's figure cannot be compared: its
    step measured while the node was busy, or its verdict inconclusive."""
    from ..check.busy import busy_figures

    out = {j.figure.key: "inconclusive" for j in doc.judged if j.verdict == "inconclusive"}
    busy = busy_figures(doc.results, doc.topology, doc.expectations.dram_peak())
    out.update({k: "measured while the node was busy" for k in busy})
    return out


def compare(before: Sequence[Figure], after: Sequence[Figure], t: dict[str, float],
            after_complete: bool = True, unsure_before: Mapping[str, str] = {},
            unsure_after: Mapping[str, str] = {}) -> list[Change]:
    """`after_complete` False (an interrupted check): a figure missing after
    was perhaps never measured, so it is information, not a regression.
    `unsure_*` (unsure()): figures of that side that cannot be compared."""
    b = {f.key: f for f in before}
    a = {f.key: f for f in after}
    out = []
    for key in list(b) + [k for k in a if k not in b]:
        fb, fa = b.get(key), a.get(key)
        f = fa or fb
        if fb is None or fa is None:
            out.append(_one_side(f, fb, fa, after_complete))
            continue
        ratio = fa.value / fb.value if f.higher_is_better else fb.value / fa.value
        why = [f"{side} {unsure[key]}" for side, unsure in (("before", unsure_before), ("after", unsure_after))
               if key in unsure]
        if why:
            out.append(Change(key, f.label, f.unit, fb.value, fa.value, ratio, "inconclusive",
                              f"could not compare: {'; '.join(why)}"))
            continue
        v = ratio_verdict(ratio, t["compare_warn"], t["compare_fail"])
        what = (f"after/before = {ratio:.3f}" if f.higher_is_better else
                f"after/before = {fa.value / fb.value:.3f} (latency: {'slower' if ratio < 1 else 'not slower'}; "
                f"before/after = {ratio:.3f})")
        out.append(Change(key, f.label, f.unit, fb.value, fa.value, ratio, v,
                          what + (
                              f", below {t['compare_fail' if v == 'fail' else 'compare_warn']:g}" if v != "pass"
                              else f", at least {t['compare_warn']:g}")))
    return sorted(out, key=lambda c: (-RANK[c.verdict], c.ratio if c.ratio is not None else 9, c.key))


def _one_side(f: Figure, fb: Figure | None, fa: Figure | None, after_complete: bool = True) -> Change:
    """A figure new after is information; one gone after is a regression
    (a GPU lost in maintenance, a NIC down, a path no longer measured)
    unless the after check was interrupted before measuring it."""
    if fb is None:
        return Change(f.key, f.label, f.unit, None, fa and fa.value, None, "info", "measured only after: new")
    if not after_complete:
        return Change(f.key, f.label, f.unit, fb.value, None, None, "info",
                      "measured before, not after: the after check was interrupted (incomplete)")
    return Change(f.key, f.label, f.unit, fb.value, None, None, "fail",
                  f"measured before, missing after: {_gone(f)} is gone, or its step was skipped or cut short "
                  "(see the after report's skipped list)")


def _gone(f: Figure) -> str:
    if f.area in ("GPU memory", "host<->GPU", "GPU<->GPU", "NCCL"):
        return "a GPU or its path" + (" (" + f.label.split(" ")[0] + ")" if f.label.startswith("GPU") else "")
    return f"the path ({f.path})" if f.path else "the path"


def text(changes: Sequence[Change], before: str, after: str, incomplete: Sequence[str] = ()) -> str:
    """The table and one closing line. Every row prints after/before (a
    latency that grew shows above 1, with its verdict: worse); `incomplete`
    names the side(s) ("before", "after") that were interrupted checks."""
    from ..text import table

    rows = [[c.key, number(c.before), number(c.after), c.unit, f"{c.after / c.before:.3f}" if c.before and c.after else "-",
             c.verdict] for c in changes]
    head = f"before: {before}\nafter:  {after}\n"
    head += "".join(f"{side} is INCOMPLETE (an interrupted check): a figure missing there may be unmeasured, "
                    f"not gone\n" for side in incomplete)
    return head + table(["figure", "before", "after", "unit", "after/before", "verdict"], rows,
                        right=[False, True, True, False, True, False]) + "\n" + closing(changes, incomplete)


def closing(changes: Sequence[Change], incomplete: Sequence[str] = ()) -> str:
    """How many figures were compared (measured on both sides), how many
    regressed, and what could not be compared: never "no regression among
    N" for figures that have no before."""
    both = [c for c in changes if c.before is not None and c.after is not None and c.verdict != "inconclusive"]
    bad = [c for c in changes if c.verdict in ("warn", "fail")]
    unsure = sum(1 for c in changes if c.verdict == "inconclusive")
    only_after = sum(1 for c in changes if c.before is None)
    only_before = sum(1 for c in changes if c.after is None)
    compared = len(both) + sum(1 for c in changes if c.after is None and c.verdict == "fail")  # gone: compared
    line = (f"{len(bad)} of the {compared} figures compared regressed" if bad else
            f"no regression among the {len(both)} figure{'s' if len(both) != 1 else ''} measured on both sides"
            if both else f"could not compare: the {unsure} figure{'s' if unsure != 1 else ''} measured on both sides "
            "are inconclusive on a side (a busy node, or undecided): check again when the node is idle"
            if unsure else "nothing to compare: no figure was measured on both sides")
    notes = ([f"{unsure} inconclusive on a side (not compared)"] if unsure and (both or bad) else []) + (
        [f"{only_after} measured only after (new, not compared)"] if only_after else []) + (
        [f"{only_before} measured only before (gone after)"] if only_before else []) + (
        [f"{' and '.join(incomplete)} incomplete"] if incomplete else [])
    return line + (f"; {', '.join(notes)}" if notes else "")


def exit_status(changes: Sequence[Change]) -> int:
    """1 a figure regressed to its fail threshold (or is gone), 2 figures
    that could not be compared (inconclusive) and none failed, else 0."""
    if any(c.verdict == "fail" for c in changes):
        return 1
    return 2 if any(c.verdict == "inconclusive" for c in changes) else 0
