"""The fleet's saved documents as the fleet reads them back (`check --fleet
--from`): node documents (nodes.jsonl, nodes/NAME.json), pair results
(pairs.jsonl: the driver writes these records), the pair tests' conclusion
(isolation.json) and the suspects' re-measures (remeasured.json), checked
field by field by nodemap.records; and the records of fleet.json a pair and
a node are written as (Link, NodeRow: merge.FleetFile).

The fleet reads less of a node document than `report` does (check/document.py)
and accepts more: a figure without a verdict, a finding that is a sentence.
What it reads is typed here, decoded straight from the bytes (10,000
documents' topologies are mostly skipped, not built as dicts), and the
fleet judges these typed records; a figure's numbers are checked by
`Fig.problem`, which names the figure's key with the field.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

import msgspec

from .. import records
from ..records import finite
from ..check.document import SCHEMAS, Extra
from ..check.verdicts import VERDICTS, Judged
from ..errors import InputError
from ..finding import Finding

WHAT = "node document (nodemap check --fleet wrote it)"


# gc=False: records decoded from JSON hold no cycles, and 10,000 documents make ~3 million of them
class Fig(msgspec.Struct, gc=False):
    """A judged figure as the check document holds it (check/verdicts.Judged), as the fleet reads it."""

    key: str = ""  # a figure without one is passed over
    label: str = ""
    path: str = ""
    unit: str = ""
    higher_is_better: bool = True
    verdict: Literal[VERDICTS + ("",)] = ""
    n: int = 0
    coverage: float | None = None
    value: Any = None  # `problem`: finite, >= 0, named with the key
    median: Any = None
    low: Any = None
    high: Any = None
    spread: Any = None

    def has_interval(self) -> bool:
        return self.n >= 2

    def stat(self) -> float:
        """The statistic the fleet compares: the median of the figure's
        repetitions where the document has their interval (n >= 2: the
        statistic its own check judges, bench/intervals.py), else its value
        (the best repetition, as documents before intervals hold)."""
        return float(self.median if self.n >= 2 else self.value)

    def problem(self) -> str:
        """Why its value (or, where the fleet judges it, the median of its
        repetitions and that median's interval) cannot be a measurement ("" when it can)."""
        if self.n < 2 and type(self.value) is float and 0 <= self.value < math.inf:  # most: 860,000 at 10,000 nodes
            return ""
        for name in ("value", *(("median", "low", "high") if self.n >= 2 else ())):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return "not a number" + (f" ({name})" if name != "value" else "")
            if not math.isfinite(v):
                return "not a finite number" + (f" ({name} = {v!r})" if name != "value" else "")
            if v < 0:
                return "negative" + (f" ({name} = {v!r})" if name != "value" else "")
        return ""


# What the fleet reads of a node's topology (Topology.to_dict; fleet/facts.py, nodes.measured_on), typed where
# it is read: a full Topology is not required (nodes of older checks, synthetic fleets in the tests)
class _Machine(msgspec.Struct, gc=False):
    hostname: str = ""
    memory: int = 0


class _Package(msgspec.Struct, gc=False):
    cpu_model: str = ""


class _Numa(msgspec.Struct, gc=False):
    os_index: int = 0
    memory: int = 0


class _Pu(msgspec.Struct, gc=False):  # decoded once per distinct PU list (pus_of), not per document
    online: bool = True


class _Gpu(msgspec.Struct, gc=False):
    index: int = 0
    model: str = ""
    uuid: str = ""
    numa_node: int = -1
    pcie_gen: int = 0
    pcie_width: int = 0


class _Link(msgspec.Struct, gc=False):
    a: str = ""
    b: str = ""
    kind: str = "link"
    count: int = 1


class _Port(msgspec.Struct, gc=False):
    number: int = 0
    state: str = "?"
    rate_gbps: float = 0.0


class _Nic(msgspec.Struct, gc=False):
    name: str = ""
    cpuset: str = ""  # its local CPUs (driver.nearest_nic)
    kind: str = ""
    numa_node: int = -1
    pci_bus_id: str = ""
    ports: list[_Port] = []


class _Pci(msgspec.Struct, gc=False):
    bus_id: str = ""
    link_gen: int = 0
    link_width: int = 0


class BusyView(msgspec.Struct, gc=False):
    """What the fleet reads of check/document.Busy: its verdict and reasons (the same fields, tested), not
    its samples (before, steps: 1.2 s vs 0.18 s to decode 10,000 of 8 steps each, 2-vCPU VM, 2026-12-02)."""

    busy: bool = False
    reasons: list[str] = []


NO_PUS = msgspec.Raw(b"[]")


class TopologyView(msgspec.Struct, gc=False):
    machine: _Machine | None = None
    packages: list[_Package] = []
    numa_nodes: list[_Numa] = []
    # the PUs' JSON as it stands, counted by pus_of: the fleet reads only how many are online; decoding each
    # for that (256 records a node, 2.56 M at 10,000) was 9 of a document's 62 us (fleet_scale_20261202c)
    pus: msgspec.Raw = NO_PUS
    gpus: list[_Gpu] = []
    links: list[_Link] = []
    nics: list[_Nic] = []
    pci_devices: list[_Pci] = []


class NodeDoc(msgspec.Struct):
    schema: Literal[SCHEMAS]
    complete: bool  # required: a document that does not say it is complete is not taken as complete
    host: str = "?"
    started: str | None = None
    finished: str | None = None
    topology: TopologyView | None = None
    extra: Extra = Extra()  # what the fleet added: the boot id, the silent ranks
    figures: list[Fig] = []
    busy: BusyView | None = None  # check/busy.py's summary
    findings: list[str | Finding] = []  # a sentence: node checks before findings had fields


class PairResult(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """One pair figure: a line of pairs.jsonl, written by the driver (driver.add_pair) and read back by
    `--from`; what the fleet judges (links.judge_links, pairs.replay). A rail's test that failed is a figure
    of 0 with its `error`."""

    a: str
    b: str
    key: str
    unit: str = ""
    value: float  # links.judge_links divides by it, and by the best of its key
    higher_is_better: bool = True
    round: int = 0
    samples: list[float] = []
    floors: list[float] = []  # latency: each repetition's fastest half round trip (pairtest.FLOOR)
    ceilings: list[float] = []  # latency: each repetition's slowest half round trip (pairtest.CEILING)
    nics: list[str] = []  # a rail's NIC on each side ([a's, b's]; "" where none is known)
    gpus: list[str] = []  # device buffers: each side's GPU
    rails: int = 0  # a pair's total: over how many rails
    buffers: str = ""
    transport: str = ""
    why: str = ""
    error: str = ""

    def __post_init__(self) -> None:
        finite(self, "value")
        if self.value <= 0 and not self.error:
            raise ValueError(f"value is {self.value}, not a measurement (above 0)")

    def nics_by_node(self) -> dict[str, str]:
        """A rail record's NICs by node."""
        return {node: nic for node, nic in zip((self.a, self.b), self.nics) if nic}


class Link(msgspec.Struct, omit_defaults=True, gc=False):
    """A pair judged (fleet.json's "links", the heatmap's cells): `of_best`, its share of the best pair
    (a rail against its sibling: how far below it, 1 at par or better)."""

    a: str
    b: str
    key: str
    unit: str
    value: float
    higher_is_better: bool
    of_best: float
    verdict: str
    sibling: bool = False  # a rail against the same pair's other rail (pairs.sibling_key)
    nics: dict[str, str] | None = None  # a rail's NIC by node ({}: a rail record naming none)


class NodeRow(msgspec.Struct, gc=False):
    """A node's line of fleet.json."""

    name: str
    status: str
    node_class: str = msgspec.field(name="class")
    last_state: str
    verdict: str
    figures: int  # how many it holds


class Conclusion(msgspec.Struct):
    """What the pair tests' re-tests concluded (pairs.conclusion), by node name: what the drain list says.
    Written to isolation.json and fleet.json, read back by `--from`."""

    bad_nodes: list[str] = []
    bad_links: list[tuple[str, str]] = []
    transient: list[tuple[str, str]] = []  # bad once, good when re-tested
    unsettled: list[str] = []  # had bad pairs, no good partner left to settle it
    tests: int = 0
    rounds: int = 0
    all_pairs: int = 0  # what testing every pair would have taken


class NoPairTests(msgspec.Struct):
    """fleet.json's isolation without pair tests: {}, as it has always said."""


class Isolation(msgspec.Struct):  # isolation.json
    isolation: Conclusion


# The suspects' re-measures: node -> key -> its figure records in order, as the check judged them (its own
# class: remeasured.json and fleet.json keep every field), or why none came
Remeasured = dict[str, dict[str, list[Judged] | str]]


class RemeasuredFile(msgspec.Struct):
    """remeasured.json: written by the driver (output.FleetOutput.remeasured), read back by `--from`
    (output.read_remeasured; one record not in a list: as files before the driver kept them in order)."""

    remeasured: dict[str, dict[str, list[Judged] | Judged | str]]


def pus_of(topo: TopologyView) -> tuple[int, int]:
    """(online, all) of a topology's PUs (their JSON checked when the document was read: `_checked`)."""
    return _count_pus(bytes(topo.pus))


@functools.lru_cache(maxsize=64)  # a fleet's nodes of one kind hold the same bytes: decoded once
def _count_pus(pus: bytes) -> tuple[int, int]:
    got = msgspec.json.decode(pus, type=list[_Pu])
    return sum(p.online for p in got), len(got)


def _checked(where: str, doc: NodeDoc) -> NodeDoc:
    """`doc` with its PUs' JSON checked as the rest was (one line naming the field)."""
    if doc.topology is not None:
        try:
            pus_of(doc.topology)
        except msgspec.ValidationError as e:
            raise InputError(where, f"{records.field_problem(e, 'topology.pus')}; give a {WHAT} as nodemap "
                                    "wrote it") from None
    return doc


class _Schema(msgspec.Struct):
    schema: Any = None


_NODE_DOC = msgspec.json.Decoder(NodeDoc)


def node_document(where: str, data: bytes) -> NodeDoc | None:
    """A node document's bytes decoded and checked as the fleet reads them; None for bytes of another kind."""
    try:
        # most: read once, the schema with the rest (a schema read first was a second pass, 34 us of 54 KB)
        return _checked(where, _NODE_DOC.decode(data))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        pass
    try:
        if msgspec.json.decode(data, type=_Schema).schema not in SCHEMAS:
            return None
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        return None  # not an object, or damaged: read as any other document (its damage named there)
    return _checked(where, records.decode(where, data, NodeDoc, WHAT))  # the field it cannot read named


def typed_node(where: str, doc: Any) -> NodeDoc:
    """A node document already parsed (nodecheck's replayed one, a test's, a file json had to read) as a NodeDoc,
    checked as `node_document` checks one."""
    if isinstance(doc, dict) and isinstance(doc.get("topology"), dict) and "pus" in doc["topology"]:
        topo = doc["topology"]  # its PUs as the JSON they would be read from
        doc = {**doc, "topology": {**topo, "pus": msgspec.Raw(msgspec.json.encode(topo["pus"]))}}
    return _checked(where, records.convert(where, doc, NodeDoc, WHAT))


def check(where: str, doc: dict[str, Any]) -> Any:
    """`doc` (parsed), a document of one of the fleet's kinds, typed; an
    InputError naming `where` and the field when it holds what the fleet
    cannot read; a document of none of them is left alone (another tool's: None)."""
    if doc.get("schema") in SCHEMAS:
        return typed_node(where, doc)
    if {"a", "b", "key", "value"} <= doc.keys():
        kind, what = PairResult, "pair result (pairs.jsonl: nodemap check --fleet wrote it)"
    elif set(doc) in ({"isolation"}, {"remeasured"}):
        kind, what = (Isolation, RemeasuredFile)["remeasured" in doc], "fleet document (nodemap check --fleet wrote it)"
    else:
        return None
    return records.convert(where, doc, kind, what)
