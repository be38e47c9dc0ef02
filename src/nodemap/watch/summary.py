"""The terminal summary of a run's memory: what the monitor prints as the run ends, and `nodemap report`."""

from __future__ import annotations

import time

from ..text import table
from ..units import gib
from .analysis import Analysis, Shape


def render(a: Analysis, where: str = "") -> str:
    if not a.ranks:
        return f"nodemap watch: no timelines{' in ' + where if where else ''}\n"
    hosts = sorted({r.host for r in a.ranks})
    lines = [f"nodemap watch: {len(a.ranks)} rank(s) on {', '.join(hosts)}, "
             f"{max(r.duration for r in a.ranks):.1f} s, job {a.job or '?'} started {when(a.start)}"
             + (f"; timelines in {where}" if where else "")]
    rows = [(str(r.rank), *(_shape_cells(r.gpu) if r.gpu.kind != "none" else ("-",) * 4), *_shape_cells(r.host_rss))
            for r in a.ranks]
    head = ("rank", "GPU peak", "GPU growth", "GiB/min", "shape", "host peak", "host growth", "GiB/min", "shape")
    lines += ["  " + line for line in table(head, rows).splitlines()]
    for g in a.gpus:
        lines.append(f"  {g.label} {g.name} on {g.host}: peak used {gib(g.peak_used)} of {gib(g.total)} GiB, "
                     f"margin {gib(g.margin)} GiB; ranks {','.join(map(str, g.ranks))} peaked at "
                     f"{gib(g.ranks_peak_sum)} GiB together")
    for f in a.findings:
        lines.append(f"  {f.verdict}: {f.text}")
        lines.append(f"    evidence: {f.evidence}")
        lines.append(f"    fix: {f.fix}")
    if not a.findings:
        lines.append("  no memory findings (no growth, imbalance, near-capacity or foreign memory)")
    lines += [f"  note: {n}" for n in a.notes]
    return "\n".join(lines) + "\n"


def _shape_cells(s: Shape) -> tuple[str, str, str, str]:
    """peak, growth (of the floor), slope, shape: the columns of a rank's series."""
    return f"{gib(s.peak)} GiB", f"{gib(s.growth, sign=True)} GiB", gib(s.slope * 60, sign=True), s.kind


def when(epoch: float) -> str:
    """Local time of `epoch`; '?' for none, and for one the platform cannot
    show (a damaged header's start of 1e30: OverflowError, not a traceback)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "?"
    except (OverflowError, OSError, ValueError):
        return "?"
