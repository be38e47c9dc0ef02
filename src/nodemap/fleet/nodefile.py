"""A node's document as the fleet reads it back (`check --fleet --from`:
nodes.jsonl, nodes/NAME.json), checked field by field by nodemap.records.

The fleet reads less of a node document than `report` does (check/saved.py)
and accepts more: a figure without a verdict, a finding that is a sentence.
What it reads is typed here; the figures' numbers are left to
merge.figure_problem, which names the figure's key with the field.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .. import records
from ..check.verdicts import VERDICTS
from ..finding import Finding
from .nodecheck import SCHEMAS

WHAT = "node document (nodemap check --fleet wrote it)"


class _Figure(msgspec.Struct):
    key: str = ""  # a figure without one is passed over
    label: str = ""
    path: str = ""
    unit: str = ""
    higher_is_better: bool = True
    verdict: Literal[VERDICTS + ("",)] = ""
    n: int = 0
    coverage: float | None = None
    value: Any = None  # merge.figure_problem: finite, >= 0, named with the key
    median: Any = None
    low: Any = None
    high: Any = None


class NodeDoc(msgspec.Struct):
    schema: Literal[SCHEMAS]
    complete: bool  # required: a document that does not say it is complete is not taken as complete
    host: str = "?"
    started: str | None = None
    finished: str | None = None
    topology: dict[str, Any] | None = None
    extra: dict[str, Any] = {}
    figures: list[_Figure] = []
    findings: list[str | Finding] = []  # a sentence: node checks before findings had fields


def check(where: str, doc: dict[str, Any]) -> None:
    """InputError naming `where` and the field when `doc` (parsed, of the
    node schema) holds what the fleet cannot read."""
    records.convert(where, doc, NodeDoc, WHAT)
