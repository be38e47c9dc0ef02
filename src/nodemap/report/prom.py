"""A check document as a Prometheus text file (`nodemap check --prom FILE`),
for node_exporter's textfile collector.

The exposition format, version 0.0.4: one HELP and one TYPE line per
metric, then its samples; no timestamps (the collector exports the file's
mtime). Labels are bounded, so a node's series stay the same from one
check to the next: node, level, area, figure key, path class, unit, a
verdict's name and a step's name; never a job id, a time or a measured value. Verdicts are
numbers, their severity (RANK: 0 info, 1 pass, 2 inconclusive, 3 warn,
4 fail), so an alert is a comparison (`>= 4`). The node's verdict tells a
healthy node (1 pass, or 3 warn) from one that could not be judged (2
inconclusive: busy, nothing measured; its status is 2) and from one whose
document holds nothing with a rule (0 info) (docs/check.md).
"""

from __future__ import annotations

import math
from typing import Any

from ..check.verdicts import RANK, VERDICTS

PREFIX = "nodemap_check_"
SEVERITY = ", ".join(f"{v} {RANK[v]}" for v in sorted(RANK, key=RANK.get))
# name -> help; the order of the file
HELP = {
    "status": "exit status of the check: 0 healthy, 1 unhealthy (hardware), 2 could not judge (busy), "
              "130 interrupted, 143 ended by SIGTERM",
    "complete": "1 when the check ran to its end (not interrupted); steps a --budget left out are in left_out",
    "budget_seconds": "the --budget the check measured within (absent without one)",
    "left_out": "1 for each step the --budget left out (cut=1: the step it cut, what it measured kept)",
    "verdict": f"verdict of the node (of=node: hardware; pass healthy, inconclusive could not judge, fail "
               f"unhealthy) and of the job environment (of=environment: configuration) as a severity: {SEVERITY}",
    "area_verdict": f"worst verdict of an area as a severity: {SEVERITY}",
    "items": "figures and inventory checks with this verdict",
    "figure": "a measured figure, in its unit (label unit): the best of its repetitions",
    "figure_verdict": f"a figure's verdict as a severity: {SEVERITY}",
}
BUDGET_ONLY = ("budget_seconds", "left_out")  # written for a check with --budget only


def render(doc: Any, status: int) -> str:
    """The text file for a check document (check/document.CheckDoc) and the exit status it gave."""
    node = {"node": doc.host, "level": doc.level}
    samples: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in HELP}
    samples["status"].append((node, status))
    samples["complete"].append((node, 1 if doc.complete else 0))
    budget = doc.budget
    if budget is not None:
        samples["budget_seconds"].append((node, budget.seconds))
        samples["left_out"] += [({**node, "step": w, "cut": "0"}, 1) for w in budget.left_out]
        if budget.cut:
            samples["left_out"].append(({**node, "step": budget.cut, "cut": "1"}, 1))
    samples["verdict"] += [({**node, "of": "node"}, RANK[doc.node_verdict()]),
                           ({**node, "of": "environment"}, RANK[doc.environment_verdict()])]
    samples["area_verdict"] += [({**node, "area": a}, RANK[v]) for a, v in doc.areas().items()]
    samples["items"] += [({**node, "verdict": v}, doc.counts().get(v, 0)) for v in VERDICTS]
    for f in doc.judged:
        labels = {**node, "area": f.area, "key": f.key, "path_class": f.path_class}
        samples["figure"].append(({**labels, "unit": f.unit}, f.value))
        samples["figure_verdict"].append((labels, RANK.get(f.verdict, 0)))
    lines = []
    for name, rows in samples.items():
        if not rows:
            continue
        lines += [f"# HELP {PREFIX}{name} {HELP[name]}", f"# TYPE {PREFIX}{name} gauge"]
        seen = set()
        for labels, value in rows:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            if text not in seen:  # one sample per series: a repeated key would make the file invalid
                seen.add(text)
                lines.append(f"{PREFIX}{name}{{{text}}} {_number(value)}")
    return "\n".join(lines) + "\n"


MAX_LABEL = 128  # characters of a label value: names (a host, a figure key), never a measured text
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n"}  # the exposition format's three escapes


def _escape(value: str) -> str:
    """A label value as the exposition format writes it: backslash, double
    quote and newline escaped; any other character that is not printable (a
    control or escape sequence from a name, a lone surrogate UTF-8 cannot
    hold) as the text of its Python escape (\\x1b reads back as those four
    characters); cut to MAX_LABEL characters."""
    if len(value) > MAX_LABEL:
        value = value[:MAX_LABEL - 3] + "..."
    return "".join(_ESCAPES.get(c) or (c if c.isprintable() else "\\" + ascii(c)[1:-1]) for c in value)


def _number(value: float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return repr(value) if isinstance(value, float) else str(int(value))
