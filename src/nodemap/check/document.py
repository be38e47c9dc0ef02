"""The check document: one versioned JSON object per node (docs/check.md).

Holds everything the report and fleet need without measuring again: the
Topology, the environment, the ResultSets, the expectations used, the
judged figures, inventory checks, findings and what was skipped. `judge`
rebuilds figures, verdicts and findings from the ResultSets and checks, so
`report` can re-judge a saved document against another expectations file.

`CheckFile` is the document's one shape, both ways: `check` encodes it
(msgspec) and every reader (`report`, `check --from`, the fleet's
nodefile.py reads a part of it) decodes it into the same records (Judged,
Check, Finding, Skipped, Limit, Busy, Spent, Remeasured), each field's type
and each enumeration (verdicts, causes, areas) checked on the way; the
first problem is one InputError naming the file and the field path
("figures[3].verdict"). A file can be damaged, foreign or hostile: a
verdict that is markup reached the HTML page, a figure whose value is text
crashed the renderer.

A /1 document's findings named their ranking number `severity`: it is
read as the finding's `shortfall` (nodemap/finding.py), all else alike.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from .. import __version__, records
from ..outfile import json_text
from ..bench import resultfile
from ..bench.results import ResultFile, ResultSet
from ..launcher import node_name
from ..topology import model, saved as saved_records
from ..topology.model import Topology
from ..bench.figures import AREAS
from . import figures as figs
from .busy import Busy, Sample, under_interference
from .expectations import SCHEMA as EXPECTATIONS, Expectations, Limit
from ..finding import Finding
from .findings import NodeState, derive
from .inventory import VERIFICATION, Check, Skipped
from .verdicts import Judged, judge, on_a_vm, worst

# /2: a finding's ranking number is `shortfall` (nodemap/finding.py), /1's `severity`; both are read
SCHEMA = "nodemap.check/2"
V1 = "nodemap.check/1"
SCHEMAS = (V1, SCHEMA)
WHAT = "check document"


class Spent(msgspec.Struct, frozen=True):
    """What a --budget spent (check/budget.py's Budget is its clock): its seconds, those spent
    measuring, the steps it left out, those it let run (absent in documents older than it) and the one it cut."""

    seconds: float = 0.0
    spent: float = 0.0
    left_out: tuple[str, ...] = ()
    ran: tuple[str, ...] = ()
    cut: str = ""

    def describe(self) -> str:
        """In one line, for the terminal and HTML reports."""
        return (f"budget {self.seconds:g} s, {self.spent:.1f} s spent measuring"
                + (f"; cut at its end: {self.cut}" if self.cut else "")
                + (f"; left out: {', '.join(self.left_out)}" if self.left_out else "; nothing left out"))

    def by_choice(self) -> bool:
        """Whether the budget, not a failure, is why nothing was measured."""
        return bool(self.left_out) and all(s == self.cut for s in self.ran)


class Remeasured(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A step measured again for its undecided figures (check/remeasure.py)."""

    step: str
    kind: str = ""
    rounds: int
    seconds: float
    figures: list[str]
    still_noisy: list[str] = []
    note: str = ""  # why it was not measured again (budget)


class Summary(msgspec.Struct):
    """What the document's verdicts add up to (written for people and scripts; derived again when read)."""

    verdict: str = ""
    node: str = ""
    environment: str = ""
    environment_reasons: list[str] = []
    areas: dict[str, str] = {}
    counts: dict[str, int] = {}


class Environment(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the node ran and what the findings' fixes depend on (check/node.py's `environment`,
    findings.NodeState); None: not recorded (a document older than the field), a package's "": not installed."""

    nodemap: str = ""
    python: str = ""
    kernel: str = ""
    machine: str = ""
    variables: dict[str, str] | None = None  # the relevant ones (inventory.relevant_environment)
    transparent_hugepage: str | None = None  # its mode: always | madvise | never | "" (unreadable)
    virtual_machine: bool | None = None
    cupy_cuda12x: str = msgspec.field(default="", name="cupy-cuda12x")
    cupy_cuda13x: str = msgspec.field(default="", name="cupy-cuda13x")
    nvidia_ml_py: str = msgspec.field(default="", name="nvidia-ml-py")
    mpi4py: str = ""
    numpy: str = ""
    matplotlib: str = ""
    fault_injected: str = ""  # fleet/nodecheck.py's test hook scaled the figures: how


class Extra(msgspec.Struct, frozen=True, omit_defaults=True):
    """What `check --fleet` adds to a node's document (fleet/nodecheck.py, fleet/driver.py: a replaced record)."""

    boot_id: str = ""  # /proc/sys/kernel/random/boot_id where it was measured: nodes of one host contend
    fleet_silent_ranks: tuple[int, ...] = ()  # the node's local ranks that stopped answering its MPI step


class SavedExpectations(msgspec.Struct):
    """The expectations a document was judged by (check/expectations.py's table, without its [fleet])."""

    schema: str = EXPECTATIONS
    sources: list[str] = []
    thresholds: dict[str, float] = {}
    limits: list[Limit] = []


# The node as topology/saved.py reads a Topology export, decoded in the document's own pass (its damage named
# by its path in the document: "topology.numa_nodes[2].cpuset"); written as Topology.to_dict writes it
SavedTopology = saved_records.document(Topology, model.SCHEMA)


class CheckFile(msgspec.Struct, kw_only=True):
    """The document as saved and read. What every check writes and `report` prints (its header) is
    required: a document of only its schema is refused, not reported as an empty check."""

    schema: Literal[SCHEMAS]
    nodemap_version: str = ""
    host: str
    hostname: str = ""
    started: str
    finished: str = ""
    level: str
    complete: bool
    command: str = ""
    summary: Summary | None = None
    busy: Busy | None = None
    remeasured: list[Remeasured] | None = None
    budget: Spent | None = None
    topology: SavedTopology | None = None  # its names checked by from_file
    environment: Environment = Environment()
    expectations: SavedExpectations = msgspec.field(default_factory=SavedExpectations)
    results: list[ResultFile] = []  # each checked against its kind's parameters (bench/resultfile.py)
    figures: list[Judged] = []
    checks: list[Check] = []
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    extra: Extra = Extra()


@dataclass
class CheckDoc:
    level: str
    topology: Topology | None
    expectations: Expectations
    results: list[ResultSet] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    environment: Environment = field(default_factory=Environment)
    host: str = field(default_factory=lambda: node_name(os.environ))  # Slurm's node name, else the hostname
    hostname: str = field(default_factory=socket.gethostname)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    finished: str = ""
    complete: bool = True
    command: str = ""
    judged: list[Judged] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    extra: Extra = field(default_factory=Extra)
    busy: Busy | None = None  # check/busy.py's summary: None when not sampled
    # figures measured again because their interval left them undecided (check/remeasure.py)
    remeasured: list[Remeasured] = field(default_factory=list)
    budget: Spent | None = None  # --budget's account (check/budget.py); None without

    def origin(self) -> str:
        """What measured it: 'nodemap check --level full', or for bench
        results judged by `nodemap report` (no level) 'nodemap bench memory, bench gpu'."""
        if self.level:
            return f"nodemap check --level {self.level}"
        return "nodemap " + ", ".join(dict.fromkeys(rs.command for rs in self.results)) if self.results else "nodemap"

    def incomplete_why(self) -> str:
        """Why an incomplete document is: a check's only way is an interruption; bench results judged by
        `report` also end at a case past --timeout or a part that failed (check/failed.py)."""
        from .failed import why_incomplete

        whys = [why_incomplete(rs) for rs in self.results if not rs.complete] if not self.level else []
        return "; ".join(dict.fromkeys(whys)) or "interrupted"

    def is_busy(self) -> bool:
        return self.busy is not None and self.busy.busy

    def rejudge(self) -> None:
        """Figures, verdicts and findings from the results and checks."""
        peak = self.expectations.dram_peak()
        judged = judge(figs.extract(self.results, self.topology, peak), self.expectations)
        state = NodeState.of(self.environment, self.checks)
        self.judged = on_a_vm(under_interference(judged, self.results, self.topology, peak), state.vm)
        self.findings = derive(self.judged, self.checks, state)

    def areas(self) -> dict[str, str]:
        """Worst verdict per area, in the order of AREAS (bench/figures.py)."""
        out: dict[str, list[str]] = {}
        for c in self.checks:
            out.setdefault(c.area, []).append(c.verdict)
        for j in self.judged:
            out.setdefault(j.figure.area, []).append(j.verdict)
        order = {a: i for i, a in enumerate(AREAS)}
        return {a: worst(v) for a, v in sorted(out.items(), key=lambda kv: order.get(kv[0], 99))}

    def verdict(self) -> str:
        """The worst of everything, configuration included (see node_verdict)."""
        return worst(self.areas().values())

    def causes(self) -> dict[str, str]:
        """Figure or check key -> "hardware" | "configuration": a finding's
        cause (hardware wins where findings disagree), else a check's own,
        else hardware (a figure is the node's until a finding says otherwise).
        A check that passed (or only records) without a cause is the node's
        (its PCIe links, NICs, class): so a healthy health level is "pass",
        not "info" as if nothing had been judged; a warning or failure
        without a cause stays the environment's (never fails the node unsaid)."""
        out = {c.key: c.cause or ("hardware" if c.verdict in ("pass", "info") else "configuration")
               for c in self.checks}
        named: dict[str, str] = {}
        for f in self.findings:
            for k in f.keys:
                named[k] = "hardware" if "hardware" in (f.cause, named.get(k)) else f.cause
        return {**out, **named}

    def _items(self) -> list[tuple[str, str]]:
        return [(j.figure.key, j.verdict) for j in self.judged] + [(c.key, c.verdict) for c in self.checks]

    def node_verdict(self) -> str:
        """The node's own verdict: everything but configuration causes (the
        job's environment: see environment_verdict). fail = unhealthy;
        inconclusive = could not judge (busy, nothing measured: exit 2),
        whatever its figures say; pass = healthy; info = nothing it holds
        has a rule (recorded only)."""
        causes = self.causes()
        v = worst(v for k, v in self._items() if causes.get(k, "hardware") != "configuration")
        return "inconclusive" if v != "fail" and not_judged(self) else v

    def environment_verdict(self) -> str:
        """The job environment's verdict (configuration causes: MPI not
        CUDA-aware, thread placement, variables); "pass" when none is off."""
        causes = self.causes()
        return worst([v for k, v in self._items() if causes.get(k) == "configuration"] + ["pass"])

    def environment_reasons(self) -> list[str]:
        """Short names of the configuration findings at the environment's verdict."""
        v = self.environment_verdict()
        return [re.split(r": |; ", f.text)[0] for f in self.findings if f.cause == "configuration" and f.verdict == v]

    def counts(self) -> dict[str, int]:
        out = {v: 0 for v in ("pass", "info", "inconclusive", "warn", "fail")}
        for _, v in self._items():
            out[v] += 1
        return out

    def saved(self) -> CheckFile:
        """The document as it is saved."""
        return CheckFile(
            schema=SCHEMA, nodemap_version=__version__, host=self.host, hostname=self.hostname,
            started=self.started, finished=self.finished, level=self.level, complete=self.complete,
            command=self.command,
            summary=Summary(self.verdict(), self.node_verdict(), self.environment_verdict(),
                            self.environment_reasons(), self.areas(), self.counts()),
            busy=self.busy, remeasured=self.remeasured, budget=self.budget,
            topology=self.topology.to_dict() if self.topology is not None else None,
            environment=self.environment,
            expectations=SavedExpectations(EXPECTATIONS, list(self.expectations.sources),
                                           dict(self.expectations.thresholds), list(self.expectations.limits)),
            results=[rs.saved() for rs in self.results], figures=self.judged, checks=self.checks,
            findings=self.findings, skipped=self.skipped, extra=self.extra)

    def to_json(self) -> str:
        """The saved document's JSON (what outfile.write writes)."""
        return json_text(self.saved())


def decode(where: str, data: bytes, expectations: Expectations | None = None) -> CheckDoc:
    """A saved document's bytes, checked to the last field (an InputError naming `where` and the
    field); re-judged when `expectations` is given, else its own verdicts are kept as saved."""
    f = records.decode(where, data, CheckFile, WHAT, dec_hook=saved_records.cpuset)
    if f.schema == V1:  # read again as /1 wrote its findings
        old = records.decode(where, data, _V1File, WHAT, dec_hook=saved_records.cpuset).findings
        f.findings = [Finding(**msgspec.structs.asdict(x)) for x in old]
    return from_file(f, expectations, where)


def from_dict(d: Any, expectations: Expectations | None = None, where: str = "check document") -> CheckDoc:
    """A saved document already parsed, as `decode` (its JSON as json writes it: NaN read as there)."""
    return decode(where, json_text(d, None).encode(), expectations)


class _V1Finding(Finding, frozen=True):
    shortfall: float = msgspec.field(default=0.0, name="severity")  # a /1 finding's name for how far off


class _V1File(CheckFile, kw_only=True):
    findings: list[_V1Finding] = []


# A kind's message that leaves a figure without its absolute rule -> what is skipped (check/node.py).
UNJUDGED = (("DRAM peak unknown", "STREAM against the DRAM peak (host/stream/best)"),)


def _still_skipped(skipped: list[Skipped], exp: Expectations) -> list[Skipped]:
    """A saved document's skipped list under the expectations it is judged by again: a site file that
    gives the DRAM peak judges the STREAM figure the check skipped for want of one."""
    answered = {what for _, what in UNJUDGED} if exp.dram_peak() else set()
    return [s for s in skipped if s.what not in answered]


def from_file(f: CheckFile, expectations: Expectations | None = None, where: str = "check document") -> CheckDoc:
    """A decoded CheckFile as a CheckDoc; its results and topology are checked here (an InputError
    naming `where` and the field)."""
    saved = Expectations(dict(f.expectations.thresholds), tuple(f.expectations.limits),
                         tuple(f.expectations.sources))
    results = [resultfile.result_set(where, r, f"results[{i}]", WHAT) for i, r in enumerate(f.results)]
    for i, rs in enumerate(results):  # a step's busy sample (busy.busy_figures reads it)
        if "busy" in rs.environment:
            rs.environment["busy"] = records.convert(where, rs.environment["busy"], Sample, WHAT,
                                                     f"results[{i}].environment.busy")
    topo = saved_records.record(f.topology) if f.topology else None
    if topo is not None:  # a saved node's names are not the kernel's
        from ..topology import names

        names.check(topo, where, "topology.")
    doc = CheckDoc(
        level=f.level, topology=topo,
        expectations=expectations or saved, results=results, checks=f.checks, skipped=list(f.skipped),
        environment=f.environment, host=f.host, hostname=f.hostname or f.host, started=f.started,
        finished=f.finished, complete=f.complete, command=f.command, extra=f.extra, busy=f.busy,
        remeasured=f.remeasured or [], budget=f.budget if f.budget != Spent() else None)  # /2 wrote {} for none
    if expectations is not None:
        doc.skipped = _still_skipped(doc.skipped, expectations)
        doc.rejudge()
    else:
        doc.judged, doc.findings = f.figures, f.findings
    return doc


# Exit statuses of `nodemap check` and `nodemap report` (docs/check.md), for schedulers (issue 30)
HEALTHY, UNHEALTHY, NOT_JUDGED, INTERRUPTED = 0, 1, 2, 130


def exit_status(doc: CheckDoc, saved: bool = False) -> int:
    """The one mapping from a check document to an exit status.

    130 interrupted (this command's own run; `saved`: a document read
    again, where incomplete is not an interruption), 1 unhealthy (a
    hardware-cause fail, decided by its whole interval), 2 could not judge
    (the node was busy, check/busy.py, or nothing could be measured: retry
    it, never drain), else 0 healthy: pass, info,
    warn, inconclusive, and configuration findings of any verdict (printed,
    the job's environment, not the node). A check within --budget is
    complete, what it left out named in `budget` and `skipped`: it exits as
    any other, 0 when nothing it measured failed."""
    if not doc.complete and not saved:
        return INTERRUPTED
    if doc.node_verdict() == "fail":
        return UNHEALTHY
    return NOT_JUDGED if not_judged(doc) else HEALTHY


def not_judged(doc: CheckDoc) -> str:
    """Why the node could not be judged ("" when it could): it was busy, or
    a measuring level measured nothing (every step failed: missing tools).
    A step whose output was wrong (a verification/ check, check/failed.py)
    was measured: it judges the node (hardware) or the job environment
    (configuration: the node is not shown unhealthy, exit 0, as any
    configuration finding), never "could not judge".
    A budget that left every step out (or cut the one it ran) measured
    nothing by choice: the node is judged on its inventory, as the health
    level judges it; a step it let run that failed is as without a budget."""
    if doc.is_busy():
        return "busy"
    verified = any(c.key.startswith(VERIFICATION) for c in doc.checks)
    by_choice = doc.budget is not None and doc.budget.by_choice()
    if doc.level in ("quick", "full") and doc.complete and not (doc.judged or verified) and not by_choice:
        return "nothing measured"
    return ""
