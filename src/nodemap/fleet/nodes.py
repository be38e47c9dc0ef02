"""A node as the fleet sees it: its typed node document (fleet/nodefile.py)
reduced to what the fleet compares, each text from the document printable
and bounded (issue 36: a saved document's texts reach the summary, the HTML
page and fleet.json)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from ..finding import Finding
from ..text import clipped, printable
from . import facts as factsmod
from .nodefile import BusyView, Fig, NodeDoc, PairResult, typed_node


@dataclass
class Node:
    """One node as the fleet sees it."""

    name: str
    status: str = "complete"  # complete | incomplete | missing
    node_class: str = "unknown"
    figures: dict[str, Fig] = field(default_factory=dict)  # key -> figure record
    facts: factsmod.Facts = field(default_factory=dict)
    last_state: str = ""  # for a missing node: the last thing it said
    busy: str = ""  # its own check found the node busy (check/busy.py): the first reason; "" when idle
    findings: list[Finding] = field(default_factory=list)  # its own check's (`_own`)
    rejected: list[str] = field(default_factory=list)  # figures left out as impossible ("figures[3].value = inf ...")
    set_aside: set[str] = field(default_factory=set)  # keys that are no evidence (rejected, not judged, inconclusive)
    # where and when it was measured (`measured_on`): nodes sharing a host at the same time contend
    host: str = ""  # its hostname, for people
    places: tuple[str, ...] = ()  # what it shares with a co-scheduled check: its boot id (else hostname), GPUs
    window: tuple[float, float] | None = None


# A figure its own check recorded but did not judge (a cache level the
# latency curve contradicts: check/figures.py) is no evidence for the fleet
# either; one measured while the node was busy (check/busy.py's
# "inconclusive") counts in the fleet's median but gets no verdict.
NOT_JUDGED = "not judged"
INCONCLUSIVE = "inconclusive"


# Each text is shown printable and bounded (text.printable), names so that no two
# nodes (classes, keys) ever show alike, however long or hostile (issue 36).
NAME_CHARS = 128  # a node's name, its class, a figure key
BUSY_CHARS = 200  # the busy reason a node's report line carries


@functools.lru_cache(maxsize=1 << 16)
def name(value: Any) -> str:
    """A name from a document as the fleet shows it (`text.printable`: told apart from every other);
    cached: 10,000 nodes repeat the same 86 keys, labels and units."""
    return printable(value, NAME_CHARS)


@functools.lru_cache(maxsize=1 << 16)
def _text(value: str) -> str:
    return printable(value)


def shown(f: Fig) -> Fig:
    """A figure with its texts as the fleet shows them (in place: it is the fleet's own copy)."""
    f.key, f.label, f.path, f.unit = _texts(f.key, f.label, f.path, f.unit)
    return f


def shown_pair(r: PairResult) -> PairResult:
    """A pair result read back with its texts as the fleet shows them (its own copy: changed in place)."""
    r.a, r.b, r.key = name(r.a), name(r.b), name(r.key)
    r.unit, r.buffers, r.transport, r.why, r.error = (_text(x) for x in (r.unit, r.buffers, r.transport, r.why,
                                                                         r.error))
    r.nics, r.gpus = [_text(x) for x in r.nics], [_text(x) for x in r.gpus]
    return r


@functools.lru_cache(maxsize=1 << 16)
def _texts(key: str, label: str, path: str, unit: str) -> tuple[str, str, str, str]:
    return name(key), _text(label), _text(path), _text(unit)


def node_from_doc(doc: NodeDoc | dict[str, Any]) -> Node:
    """A node check document (schema nodemap.check/2 or /1) as the fleet sees it.
    A figure that is not a finite number >= 0 is left out and named in
    `rejected` (the reader refuses the file, the driver says it)."""
    doc = doc if isinstance(doc, NodeDoc) else typed_node("node document", doc)  # a test's
    figs, rejected, aside = {}, [], set()
    for i, f in enumerate(doc.figures):
        if not f.key:
            continue
        f = shown(f)
        bad = f.problem()
        if bad:
            rejected.append(f"figures[{i}].value ({f.key}) = {clipped(repr(f.value), 60)}: {bad}")
            aside.add(f.key)
        elif NOT_JUDGED in f.label:
            aside.add(f.key)
        elif f.stat() > 0:
            figs[f.key] = f
            if f.verdict == INCONCLUSIVE:  # in the fleet's median and heatmap, but no verdict of its own
                aside.add(f.key)
    return Node(
        name=name(doc.host),
        status="complete" if doc.complete else "incomplete",
        node_class=name(factsmod.node_class(doc.topology)),
        figures=figs,
        facts={_text(k): _text(v) if isinstance(v, str) else v for k, v in factsmod.facts(doc.topology).items()},
        findings=[_own(x) for x in doc.findings],
        busy=_busy(doc.busy),
        rejected=rejected,
        set_aside=aside,
        **measured_on(doc),
    )


def _busy(busy: BusyView | None) -> str:
    """The first reason a node's own check gave for the node being busy; "" when it was not."""
    if busy is None or not busy.busy:
        return ""
    reasons = [printable(r) for r in busy.reasons if r]
    return clipped(reasons[0], BUSY_CHARS) if reasons else "other work shared the node"


def measured_on(doc: NodeDoc) -> dict[str, Any]:
    """Where a document was measured and when: {} where it does not say.
    Its places: the kernel's boot id where the fleet recorded one (containers
    of one machine share it under different hostnames; two machines of one
    name do not), else its hostname; and its GPUs' UUIDs."""
    topo = doc.topology
    host = name(topo.machine.hostname if topo is not None and topo.machine is not None else "")
    boot = name(doc.extra.boot_id)
    start, end = _when(doc.started), _when(doc.finished)
    if not (host or boot) or start is None or end is None:
        return {}
    gpus = tuple(f"GPU {name(g.uuid)}" for g in topo.gpus if g.uuid) if topo is not None else ()
    return {"host": host, "places": (f"host (boot id {boot}" if boot else f"host ({host}",) + gpus,
            "window": (start, end)}


def _when(stamp: Any) -> float | None:
    from datetime import datetime

    try:
        return datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def _own(finding: str | Finding) -> Finding:
    """A node check's finding, fail or warn (the oldest node documents held a sentence)."""
    if isinstance(finding, str):
        return Finding("warn", printable(finding))
    return Finding("fail" if finding.verdict == "fail" else "warn", printable(finding.text),
                   keys=tuple(name(k) for k in finding.keys),
                   cause="configuration" if finding.cause == "configuration" else "", area=printable(finding.area))


def missing_node(name: str, last_state: str) -> Node:
    return Node(name=name, status="missing", last_state=last_state)
