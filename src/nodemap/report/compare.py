"""Compare two sets of figures (a node before and after maintenance, or two
nodes side by side): per-figure ratios, regressions flagged by the
expectations' compare thresholds. Pure: (before, after, thresholds)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from ..check.figures import Figure
from ..bench.report import number
from ..check.verdicts import RANK, ratio_verdict


@dataclass(frozen=True)
class Change:
    key: str
    label: str
    unit: str
    before: float | None
    after: float | None
    ratio: float | None  # after/before for bandwidth, before/after for latency: < 1 is worse
    verdict: str  # pass | warn | fail | info (only on one side)
    rule: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare(before: Sequence[Figure], after: Sequence[Figure], t: dict[str, float]) -> list[Change]:
    b = {f.key: f for f in before}
    a = {f.key: f for f in after}
    out = []
    for key in list(b) + [k for k in a if k not in b]:
        fb, fa = b.get(key), a.get(key)
        f = fa or fb
        if fb is None or fa is None:
            out.append(_one_side(f, fb, fa))
            continue
        ratio = fa.value / fb.value if f.higher_is_better else fb.value / fa.value
        v = ratio_verdict(ratio, t["compare_warn"], t["compare_fail"])
        what = "after/before" if f.higher_is_better else "before/after (latency)"
        out.append(Change(key, f.label, f.unit, fb.value, fa.value, ratio, v,
                          f"{what} = {ratio:.3f}" + (
                              f", below {t['compare_fail' if v == 'fail' else 'compare_warn']:g}" if v != "pass"
                              else f", at least {t['compare_warn']:g}")))
    return sorted(out, key=lambda c: (-RANK[c.verdict], c.ratio if c.ratio is not None else 9, c.key))


def _one_side(f: Figure, fb: Figure | None, fa: Figure | None) -> Change:
    """A figure new after is information; one gone after is a regression
    (a GPU lost in maintenance, a NIC down, a path no longer measured)."""
    if fb is None:
        return Change(f.key, f.label, f.unit, None, fa and fa.value, None, "info", "measured only after: new")
    return Change(f.key, f.label, f.unit, fb.value, None, None, "fail",
                  f"measured before, missing after: {_gone(f)} is gone, or its step was skipped or cut short "
                  "(see the after report's skipped list)")


def _gone(f: Figure) -> str:
    if f.area in ("GPU memory", "host<->GPU", "GPU<->GPU", "NCCL"):
        return "a GPU or its path" + (" (" + f.label.split(" ")[0] + ")" if f.label.startswith("GPU") else "")
    return f"the path ({f.path})" if f.path else "the path"


def text(changes: Sequence[Change], before: str, after: str) -> str:
    from ..bench.report import table

    rows = [[c.key, _n(c.before), _n(c.after), c.unit, f"{c.ratio:.3f}" if c.ratio is not None else "-", c.verdict]
            for c in changes]
    bad = [c for c in changes if c.verdict in ("warn", "fail")]
    head = f"before: {before}\nafter:  {after}\n"
    tail = (f"\n{len(bad)} of {len(changes)} figures regressed" if bad
            else f"\nno regression among {len(changes)} figures")
    return head + table(["figure", "before", "after", "unit", "after/before", "verdict"], rows,
                        right=[False, True, True, False, True, False]) + tail


def _n(x: float | None) -> str:
    return number(x)
