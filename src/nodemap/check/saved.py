"""A saved check document (nodemap.check/2, and /1) decoded and checked before use.

`report` and `check --fleet --from` read documents nodemap wrote, but a
file can be damaged, foreign or hostile: a verdict that is markup reached
the HTML page, a figure whose value is text crashed the renderer. The
document is decoded by nodemap.records (msgspec) into CheckFile: each
record into the dataclass it becomes (Figure, Check, Finding, Skipped,
Limit, the ResultSets by bench/resultfile.py) with every field's type
checked, and each enumeration (verdicts, causes, areas) against its values;
the first problem is one InputError naming the file and the field path
("figures[3].verdict").

A /1 document's findings named their ranking number `severity`: it is
read as the finding's `shortfall` (nodemap/finding.py), all else alike.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .. import records
from ..bench import resultfile
from ..bench.results import ResultSet, finite
from ..finding import Cause, Finding
from .expectations import Limit
from ..bench.figures import AREAS, Figure
from .inventory import Check, Skipped
from .verdicts import VERDICTS

SCHEMA = "nodemap.check/2"  # document.SCHEMA (tested equal): document imports this module
V1 = "nodemap.check/1"  # read too: its findings' `severity` is their shortfall
SCHEMAS = (V1, SCHEMA)
WHAT = "check document"


class _Expectations(msgspec.Struct):
    thresholds: dict[str, float] = {}
    limits: list[Limit] = []
    sources: list[str] = []


class CheckFile(msgspec.Struct, kw_only=True):
    """The document as saved; its records are checked by `records_of`.
    What every check writes and `report` prints (its header) is required:
    a document of only its schema is refused, not reported as an empty check."""

    schema: Literal[SCHEMAS]
    host: str
    hostname: str = ""
    started: str
    finished: str = ""
    level: str
    complete: bool
    command: str = ""
    busy: dict[str, Any] | None = None
    remeasured: list[dict[str, Any]] | None = None
    budget: dict[str, Any] | None = None
    topology: dict[str, Any] | None = None
    environment: dict[str, Any] = {}
    expectations: _Expectations = msgspec.field(default_factory=_Expectations)
    results: list[resultfile.ResultFile] = []
    figures: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    findings: list[dict[str, Any]] = []
    skipped: list[Skipped] = []
    extra: dict[str, Any] = {}


# The enumerations of each record, beside the dataclass that holds its fields
class _Judgement(msgspec.Struct):  # a figure's verdict (check/verdicts.py Judged), and its numbers finite
    verdict: Literal[VERDICTS]
    rule: str
    area: Literal[AREAS]
    expectation: dict[str, Any] = {}
    relative: float | None = None
    noisy: bool = False
    # what the reports divide and format (NaN was an IndexError in text.number on the HTML page)
    value: float = 0.0
    peak: float | None = None
    median: float = 0.0
    spread: float = 0.0
    low: float = 0.0
    high: float = 0.0
    coverage: float = 0.0
    peak_spread: float = 0.0
    peak_median: float = 0.0
    peak_low: float = 0.0
    peak_high: float = 0.0

    def __post_init__(self) -> None:
        finite(self, *self.__struct_fields__[6:], "relative")


class _Words(msgspec.Struct):  # a check's; for a finding, its area (its verdict and cause are typed in Finding)
    verdict: Literal[VERDICTS]
    cause: Cause = ""
    area: Literal[AREAS] = "inventory"


# The parts of the header the reports read (busy, remeasured, budget): typed, the rest kept as saved
class Busy(msgspec.Struct):  # check/busy.py summary (the fleet reads it too: fleet/nodefile.py)
    busy: bool = False
    reasons: list[str] = []


class _Remeasured(msgspec.Struct):  # check/remeasure.py record
    step: str
    rounds: int
    seconds: float
    figures: list[str]
    still_noisy: list[str] = []
    note: str = ""


class _Budget(msgspec.Struct):  # check/budget.py Budget.to_dict
    seconds: float
    spent: float = 0.0
    left_out: list[str] = []
    ran: list[str] = []
    cut: str = ""


class Records(msgspec.Struct):
    """The typed records of a CheckFile."""

    results: list[ResultSet]
    judged: list[tuple[Figure, _Judgement]]
    checks: list[Check]
    findings: list[Finding]


def decode(where: str, data: bytes) -> tuple[CheckFile, Records]:
    """A check document's bytes, checked to the last field."""
    f = records.decode(where, data, CheckFile, WHAT)
    return f, records_of(where, f)


def convert(where: str, d: Any) -> tuple[CheckFile, Records]:
    """A check document already parsed (`document.from_dict`)."""
    f = records.convert(where, d, CheckFile, WHAT)
    return f, records_of(where, f)


def records_of(where: str, f: CheckFile) -> Records:
    for part, cls in ((f.busy, Busy), (f.budget, _Budget)):
        if part:
            _as(where, part, cls, "busy" if cls is Busy else "budget")
    for i, r in enumerate(f.remeasured or []):
        _as(where, r, _Remeasured, f"remeasured[{i}]")
    return Records(
        results=[resultfile.result_set(where, r, f"results[{i}]", WHAT) for i, r in enumerate(f.results)],
        judged=[(_as(where, d, Figure, f"figures[{i}]"), _as(where, d, _Judgement, f"figures[{i}]"))
                for i, d in enumerate(f.figures)],
        checks=[_words(where, d, Check, _Words, f"checks[{i}]") for i, d in enumerate(f.checks)],
        findings=[_words(where, _v1(d) if f.schema == V1 else d, Finding, _Words, f"findings[{i}]")
                  for i, d in enumerate(f.findings)])


def _v1(d: Any) -> Any:
    """A /1 finding as /2 holds it: its `severity` (how far off) is the shortfall."""
    if not isinstance(d, dict) or "severity" not in d:
        return d
    return {**{k: v for k, v in d.items() if k != "severity"}, "shortfall": d["severity"]}


def _words(where: str, d: dict[str, Any], cls: type, words: type, at: str) -> Any:
    _as(where, d, words, at)
    return _as(where, d, cls, at)


def _as(where: str, d: dict[str, Any], cls: type, at: str) -> Any:
    return records.convert(where, d, cls, WHAT, at)
