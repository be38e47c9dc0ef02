"""The fleet's saved documents as the fleet reads them back (`check --fleet
--from`): node documents (nodes.jsonl, nodes/NAME.json), pair results
(pairs.jsonl), the pair tests' conclusion (isolation.json) and the
suspects' re-measures (remeasured.json), checked field by field by
nodemap.records.

The fleet reads less of a node document than `report` does (check/saved.py)
and accepts more: a figure without a verdict, a finding that is a sentence.
What it reads is typed here; the figures' numbers are left to
merge.figure_problem, which names the figure's key with the field.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .. import records
from ..bench.results import finite
from ..check.saved import SCHEMAS
from ..check.verdicts import VERDICTS
from ..finding import Finding

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


# What the fleet reads of a node's topology (Topology.to_dict; fleet/facts.py, merge.measured_on), typed where
# it is read: a full Topology is not required (nodes of older checks, synthetic fleets in the tests)
class _Machine(msgspec.Struct):
    hostname: str = ""
    memory: int = 0


class _Package(msgspec.Struct):
    cpu_model: str = ""


class _Numa(msgspec.Struct):
    os_index: int = 0
    memory: int = 0


class _Pu(msgspec.Struct):
    online: bool = True


class _Gpu(msgspec.Struct):
    index: int = 0
    model: str = ""
    uuid: str = ""
    numa_node: int = -1
    pcie_gen: int = 0
    pcie_width: int = 0


class _Link(msgspec.Struct):
    a: str = ""
    b: str = ""
    kind: str = "link"
    count: int = 1


class _Port(msgspec.Struct):
    number: int = 0
    state: str = "?"
    rate_gbps: float = 0.0


class _Nic(msgspec.Struct):
    name: str = ""
    kind: str = ""
    numa_node: int = -1
    pci_bus_id: str = ""
    ports: list[_Port] = []


class _Pci(msgspec.Struct):
    bus_id: str = ""
    link_gen: int = 0
    link_width: int = 0


class _Topology(msgspec.Struct):
    machine: _Machine | None = None
    packages: list[_Package] = []
    numa_nodes: list[_Numa] = []
    pus: list[_Pu] = []
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
    topology: _Topology | None = None
    extra: dict[str, Any] = {}
    figures: list[_Figure] = []
    findings: list[str | Finding] = []  # a sentence: node checks before findings had fields


class PairResult(msgspec.Struct):  # a line of pairs.jsonl (driver.add_pair)
    a: str
    b: str
    key: str
    value: float  # merge.judge_links divides by it, and by the best of its key
    unit: str = ""
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        finite(self, "value")
        if self.value <= 0:
            raise ValueError(f"value is {self.value}, not a measurement (above 0)")


class _Isolation(msgspec.Struct):  # pairs.conclusion
    bad_nodes: list[str] = []
    bad_links: list[tuple[str, str]] = []
    transient: list[tuple[str, str]] = []
    unsettled: list[str] = []
    tests: int = 0
    rounds: int = 0


class Isolation(msgspec.Struct):  # isolation.json
    isolation: _Isolation


class Remeasured(msgspec.Struct):  # remeasured.json: node -> key -> its records, one, or why none came
    remeasured: dict[str, dict[str, list[_Figure] | _Figure | str]]


def check(where: str, doc: dict[str, Any]) -> None:
    """InputError naming `where` and the field when `doc` (parsed), a
    document of one of the fleet's kinds, holds what the fleet cannot read;
    a document of none of them is left alone (another tool's)."""
    if doc.get("schema") in SCHEMAS:
        kind, what = NodeDoc, WHAT
    elif {"a", "b", "key", "value"} <= doc.keys():
        kind, what = PairResult, "pair result (pairs.jsonl: nodemap check --fleet wrote it)"
    elif set(doc) in ({"isolation"}, {"remeasured"}):
        kind, what = (Isolation, Remeasured)["remeasured" in doc], "fleet document (nodemap check --fleet wrote it)"
    else:
        return
    records.convert(where, doc, kind, what)
