"""Fleet verdicts: every node's figures judged against its peers.

Pure: node documents in, a `Fleet` out. For each class of node (GPU model,
else CPU model) and each figure key (node-independent: "gpu/hbm triad/GPU5"),
the baseline is the median of the nodes' values, with the median absolute
deviation (MAD) beside it to show how much the fleet itself varies. A
node's figure is judged by its ratio to that median (for latency the
inverse, so that below 1 is always worse) and by how far that is beyond
the noise: a robust z, (ratio - 1) / sigma, where sigma is the larger of
the fleet's own spread (1.4826 MAD / median) and the repetition noise of
the figure (half its median's interval, or half the range of its
repetitions: the fleet's typical one, or the node's own when wider). Below
95% of the median a figure warns (superbench's baseline rule, the
procurement rule of 5% spread); it fails only beyond the noise too: z <=
-4 (a site may ask less below 90%: z_fail_below_fail). Where the noise is unknown (no
spreads, MAD 0) the ratios alone judge (fail below 90%). A failed figure
(or one below 95% and Z_SUSPECT of its figure's noise below the median) is
a suspect: the driver measures it again, round by round (`suspects`,
`settle`), and the node is drained only once its measurements, pooled
(`pooled`), lie wholly below the `warn` line against the same baseline. Nodes measured
at the same time on one host (ranks acting as nodes, co-scheduled checks)
contend for it: their speed failures are warnings, said in a note. The median, not the mean, so
that the outliers being looked for do not move the baseline they are
judged by. Pairwise links are judged by ClusterKit's
rule (`pairs.bad_pairs`). Topology differences come from `facts`. The
ranked drain list puts a missing node first, then nodes with failures,
worst ratio first.
"""

from __future__ import annotations

import fnmatch
import gc
import math
import statistics
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterable, Iterator

from ..bench.intervals import Interval
from ..finding import Finding
from ..text import clipped, printable
from . import facts as factsmod
from .nodecheck import BOOT_ID
from .pairs import bad_pairs, replay

SCHEMA = "nodemap.fleet/2"  # /2: findings are nodemap/finding.py's (verdict, keys; /1: severity, key)


@dataclass(frozen=True)
class Rule:
    """Thresholds of one figure pattern (fnmatch on the key, and on the class)."""

    key: str = "*"
    node_class: str = "*"
    warn: float = 0.95
    fail: float = 0.90


@dataclass(frozen=True)
class Thresholds:
    """Fleet thresholds as data; a site file's [fleet] table overrides them."""

    warn: float = 0.95  # of the fleet median (latency: median / value)
    fail: float = 0.90
    link_bad: float = 0.93  # of the best pair's bandwidth
    link_latency: float = 2.1  # x the lowest pair latency
    min_nodes: int = 3  # fewer nodes of a class with a figure: no fleet verdict (the median of two is their mean)
    z_fail: float = 4.0  # below warn, fails only this many sigmas (the noise) below the median
    # below fail, this many suffice: the same by default (3 drained 1-3 healthy nodes in 100,000 under
    # heavy-tailed noise, 4 none: benchmarks/results/fleet_false_drain_20261127.md)
    z_fail_below_fail: float = 4.0
    rules: tuple[Rule, ...] = ()  # per-figure overrides, first match wins

    def for_figure(self, key: str, node_class: str) -> tuple[float, float]:
        for r in self.rules:
            if fnmatch.fnmatchcase(key, r.key) and fnmatch.fnmatchcase(node_class, r.node_class):
                return r.warn, r.fail
        return self.warn, self.fail


DEFAULTS = Thresholds()


# --- inputs --------------------------------------------------------------------


@dataclass
class Node:
    """One node as the fleet sees it."""

    name: str
    status: str = "complete"  # complete | incomplete | missing
    node_class: str = "unknown"
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> figure record
    facts: dict[str, Any] = field(default_factory=dict)
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


# A saved document's texts reach the summary, the HTML page and fleet.json:
# each is shown printable and bounded (text.printable), names so that no two
# nodes (classes, keys) ever show alike, however long or hostile (issue 36).
NAME_CHARS = 128  # a node's name, its class, a figure key
BUSY_CHARS = 200  # the busy reason a node's report line carries


def name(value: Any) -> str:
    """A name from a document as the fleet shows it (`text.printable`: told apart from every other)."""
    return printable(value, NAME_CHARS)


def cleaned(obj: Any) -> Any:
    """`obj` (parsed JSON) with each text and key printable and bounded."""
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, list):
        return [cleaned(v) for v in obj]
    if isinstance(obj, dict):
        return {printable(k): cleaned(v) for k, v in obj.items()}
    return obj


def node_from_doc(doc: dict[str, Any]) -> Node:
    """A node check document (schema nodemap.check/2 or /1) as the fleet sees it.
    A figure that is not a finite number >= 0 is left out and named in
    `rejected` (the reader refuses the file, the driver says it)."""
    topo = doc.get("topology")
    figs, rejected, aside = {}, [], set()
    for i, f in enumerate(doc.get("figures") or ()):
        if not isinstance(f, dict) or not f.get("key"):
            continue
        f = cleaned(f) | {"key": name(f["key"])}
        bad = figure_problem(f)
        if bad:
            rejected.append(f"figures[{i}].value ({f['key']}) = {clipped(repr(f.get('value')), 60)}: {bad}")
            aside.add(f["key"])
        elif NOT_JUDGED in str(f.get("label", "")):
            aside.add(f["key"])
        elif judged_value(f) > 0:
            figs[f["key"]] = f
            if f.get("verdict") == INCONCLUSIVE:  # in the fleet's median and heatmap, but no verdict of its own
                aside.add(f["key"])
    return Node(
        name=name(doc.get("host", "?")),
        status="complete" if doc.get("complete", True) else "incomplete",
        node_class=name(factsmod.node_class(topo)),
        figures=figs,
        facts=cleaned(factsmod.facts(topo)),
        findings=[_own(x) for x in doc.get("findings", ())],
        busy=_busy(doc),
        rejected=rejected,
        set_aside=aside,
        **measured_on(doc),
    )


def _busy(doc: dict[str, Any]) -> str:
    """The first reason a node's own check gave for the node being busy; "" when it was not."""
    busy = doc.get("busy")
    if not isinstance(busy, dict) or busy.get("busy") is not True:
        return ""
    reasons = [printable(r) for r in busy.get("reasons") or () if r]
    return clipped(reasons[0], BUSY_CHARS) if reasons else "other work shared the node"


def figure_problem(f: dict[str, Any]) -> str:
    """Why a figure's value (or, where the fleet judges it, the median of
    its repetitions and that median's interval) cannot be a measurement ("" when it can)."""
    for name in ("value", *(("median", "low", "high") if _has_interval(f) else ())):
        v = f.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return "not a number" + (f" ({name})" if name != "value" else "")
        if not math.isfinite(v):
            return "not a finite number" + (f" ({name} = {v!r})" if name != "value" else "")
        if v < 0:
            return "negative" + (f" ({name} = {v!r})" if name != "value" else "")
    return ""


def _has_interval(f: dict[str, Any]) -> bool:
    n = f.get("n")
    return isinstance(n, int) and not isinstance(n, bool) and n >= 2


def judged_value(f: dict[str, Any]) -> float:
    """The statistic the fleet compares: the median of the figure's
    repetitions where the document has their interval (n >= 2: the
    statistic its own check judges, bench/intervals.py), else its value
    (the best repetition, as documents before intervals hold)."""
    return float(f["median"]) if _has_interval(f) else float(f["value"])


def measured_on(doc: dict[str, Any]) -> dict[str, Any]:
    """Where a document was measured and when: {} where it does not say.
    Its places: the kernel's boot id where the fleet recorded one (containers
    of one machine share it under different hostnames; two machines of one
    name do not), else its hostname; and its GPUs' UUIDs."""
    topo = doc.get("topology") or {}
    host = name((topo.get("machine") or {}).get("hostname") or "")
    boot = name((doc.get("extra") or {}).get(BOOT_ID) or "")
    start, end = _when(doc.get("started")), _when(doc.get("finished"))
    if not (host or boot) or start is None or end is None:
        return {}
    gpus = tuple(f"GPU {name(g['uuid'])}" for g in topo.get("gpus", ()) if isinstance(g, dict) and g.get("uuid"))
    return {"host": host, "places": (f"host (boot id {boot}" if boot else f"host ({host}",) + gpus,
            "window": (start, end)}


def _when(stamp: Any) -> float | None:
    from datetime import datetime

    try:
        return datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


def _own(finding: Any) -> Finding:
    """A node check's finding, fail or warn (the oldest node documents held a sentence)."""
    if isinstance(finding, str):
        return Finding("warn", printable(finding))
    return Finding("fail" if finding.get("verdict") == "fail" else "warn",
                   printable(finding.get("text") or finding.get("message") or finding),
                   keys=tuple(name(k) for k in finding.get("keys") or ()),
                   cause="configuration" if finding.get("cause") == "configuration" else "",
                   area=printable(finding.get("area", "")))


def _configuration(f: Finding) -> str:
    """What a configuration finding is ("MPI:mpi/DD/bw"), so one the whole
    fleet shares is told apart; "" for any other."""
    return f"{f.area}:{','.join(f.keys)}" if f.cause == "configuration" else ""


def missing_node(name: str, last_state: str) -> Node:
    return Node(name=name, status="missing", last_state=last_state)


# --- outputs -------------------------------------------------------------------


@dataclass
class Baseline:
    node_class: str
    key: str
    label: str
    path: str
    unit: str
    higher_is_better: bool
    n: int
    median: float
    mad: float
    min: float
    max: float
    noise: float = 0.0  # sigma, relative to the median: max(1.4826 MAD / median, typical repetition noise)
    repetition: float = 0.0  # the typical (median) repetition noise of the figure on these nodes


@dataclass
class Drain:
    node: str
    rank: int
    reason: str
    evidence: list[str]


@dataclass
class Fleet:
    nodes: list[Node]
    baselines: list[Baseline]
    keys: list[str]  # figure keys, columns of `ratios`
    ratios: dict[str, list[float | None]]  # node -> ratio to its class median per key
    findings: list[Finding]
    links: list[dict[str, Any]]  # judged pair results
    drain: list[Drain]
    thresholds: Thresholds
    notes: list[str] = field(default_factory=list)  # what the merge could not judge, and why
    isolation: dict[str, Any] = field(default_factory=dict)  # the pair tests' conclusion (pairs.conclusion)
    complete: bool = True
    remeasured: dict[str, Any] = field(default_factory=dict)  # the suspects' re-measures (`Remeasured`)

    def verdict(self, node: str) -> str:
        sev = [f.verdict for f in self.findings if f.node == node]
        return "fail" if "fail" in sev else "warn" if sev else "pass"

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "complete": self.complete,
            "thresholds": asdict(self.thresholds),
            "nodes": [{"name": n.name, "status": n.status, "class": n.node_class, "last_state": n.last_state,
                       "verdict": self.verdict(n.name), "figures": len(n.figures)} for n in self.nodes],
            "baselines": [asdict(b) for b in self.baselines],
            "keys": self.keys,
            "ratios": self.ratios,
            "findings": [f.to_dict() for f in self.findings],
            "links": self.links,
            "isolation": self.isolation,
            "notes": self.notes,
            "drain": [asdict(d) for d in self.drain],
            "remeasured": self.remeasured,
        }


# --- the merge -----------------------------------------------------------------


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: building a million small objects
    (10,000 nodes x 86 figures) otherwise triggers full collections that
    rescan every live one, which made the merge grow as n^2 (5,000 nodes:
    8.9 s with, benchmarks/fleet_scale.py). Nothing here makes cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# node -> key -> its re-measured figure records in order (one: a dict), or a str: why none came
Remeasured = dict[str, dict[str, Any]]


def merge(nodes: list[Node], pair_results: Iterable[dict[str, Any]] = (),
          thresholds: Thresholds = DEFAULTS, isolation: dict[str, Any] | None = None,
          remeasured: Remeasured | None = None) -> Fleet:
    """`isolation`: the pair tests' conclusion (`pairs.conclusion`); without
    it, it is replayed from the pair results. `remeasured`: the suspects'
    figures measured again (`suspects` names them, round by round; the
    driver measures); None where nothing could be (saved documents): a
    failure then says so."""
    with no_gc():
        return _merge(nodes, pair_results, thresholds, isolation, remeasured)


def _merge(nodes: list[Node], pair_results: Iterable[dict[str, Any]], thresholds: Thresholds,
           isolation: dict[str, Any] | None, remeasured: Remeasured | None) -> Fleet:
    nodes = sorted(nodes, key=lambda n: n.name)
    present = [n for n in nodes if n.status != "missing"]
    baselines, keys, ratios, findings = judge_figures(present, thresholds)
    findings = confirm(findings, baselines, remeasured, thresholds, present)
    remeasure_notes = [said_remeasured(findings)] if remeasured else []
    shared, contention_notes = co_hosted(present)
    own, own_notes = own_findings(present)
    findings += own
    findings += topology_findings(present)
    findings += status_findings(nodes)
    pair_results = list(pair_results)
    if isolation is None and pair_results:
        isolation = replay(pair_results, thresholds.link_bad, thresholds.link_latency)
    links, link_findings = judge_links(pair_results, thresholds, isolation)
    findings += link_findings
    findings = [contended(f, shared) for f in findings]
    order = {"missing": 0, "fail": 1, "warn": 2}
    findings.sort(key=lambda f: (f.node, order.get(f.kind if f.kind == "missing" else f.verdict, 3),
                                 f.ratio if f.ratio is not None else 0.0))
    return Fleet(nodes=nodes, baselines=baselines, keys=keys, ratios=ratios, findings=findings, links=links,
                 drain=drain_list(findings), thresholds=thresholds, isolation=isolation or {},
                 notes=own_notes + remeasure_notes + contention_notes + too_few_notes(baselines, thresholds),
                 remeasured=remeasured or {},
                 complete=all(n.status == "complete" for n in nodes))


def judge_figures(nodes: list[Node], th: Thresholds
                  ) -> tuple[list[Baseline], list[str], dict[str, list[float | None]], list[Finding]]:
    groups: dict[tuple[str, str], list[tuple[Node, dict[str, Any]]]] = {}
    for n in nodes:
        for key, f in n.figures.items():
            groups.setdefault((n.node_class, key), []).append((n, f))
    keys = sorted({k for _, k in groups})
    col = {k: i for i, k in enumerate(keys)}
    ratios: dict[str, list[float | None]] = {n.name: [None] * len(keys) for n in nodes}
    baselines: list[Baseline] = []
    findings: list[Finding] = []
    for (cls, key), members in sorted(groups.items()):
        b = baseline(cls, key, members)
        baselines.append(b)
        if b.n < th.min_nodes:
            continue
        for n, f in members:
            r = ratio(judged_value(f), b)
            ratios[n.name][col[key]] = r
            found = judge(f, b, th) if key not in n.set_aside else None
            if found:
                findings.append(Finding(found[0], found[1], keys=(key,), node=n.name, kind="figure", ratio=r,
                                        z=found[2]))
        findings += absent_figures(cls, key, members, nodes, b)
    return baselines, keys, ratios, findings


def own_noise(f: dict[str, Any]) -> float:
    """A figure's repetition noise relative to its statistic: half the
    width of its median's interval (bench/intervals.py: order statistics,
    the range for up to 5 repetitions) where the document has one, else
    half the range of its repetitions (`spread` is (max - min) / median); 0 when unknown."""
    if _has_interval(f) and f["median"] > 0:
        return Interval(f["low"], f["high"], f["n"], float(f.get("coverage") or 0.0), f["median"]).width() / 2
    s = f.get("spread")
    return s / 2 if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s > 0 else 0.0


def judge(f: dict[str, Any], b: Baseline, th: Thresholds) -> tuple[str, str, float | None] | None:
    """(fail | warn, the sentence with the rule that decided, robust z) or
    None: below `warn` of the median it warns; it fails when it is beyond
    the noise as well (z <= -z_fail, or <= -z_fail_below_fail under `fail`);
    with no noise known, under `fail` alone."""
    warn, fail = th.for_figure(b.key, b.node_class)
    r = ratio(judged_value(f), b)
    if r >= warn:
        return None
    sigma = max(b.noise, own_noise(f))
    if sigma <= 0:
        sev = "fail" if r < fail else "warn"
        rule = f"{sev} {_below(b, fail if r < fail else warn)}; the fleet's noise is unknown (MAD 0, no repetitions)"
        return sev, f"{_shortfall(f, b, r)} ({b.node_class}, {b.n} nodes; {rule})", None
    z = (r - 1) / sigma
    beyond = z <= -th.z_fail or (r < fail and z <= -th.z_fail_below_fail)
    noise = f"robust z {z:.1f}, sigma {sigma:.1%}: {_sigma_source(b, f)}"
    if beyond:
        rule = f"fail {_below(b, warn)} and beyond the noise ({noise}; fail at z <= -{th.z_fail:g}" + (
            f", or <= -{th.z_fail_below_fail:g} {_below(b, fail)})" if th.z_fail_below_fail < th.z_fail else ")")
    elif r < fail:
        rule = f"noisy: {_below(b, fail)} but within the noise ({noise}), a warning, not a failure"
    else:
        rule = f"warn {_below(b, warn)} ({noise})"
    return ("fail" if beyond else "warn"), f"{_shortfall(f, b, r)} ({b.node_class}, {b.n} nodes; {rule})", z


def _sigma_source(b: Baseline, f: dict[str, Any]) -> str:
    own = own_noise(f)
    if own > b.noise:
        return f"its own repetitions (spread {2 * own:.1%})"
    if b.repetition >= b.noise:
        return f"the figure's repetition noise on these nodes (median spread {2 * b.repetition:.1%})"
    return "the fleet's spread (1.4826 MAD / median)"


def _below(b: Baseline, limit: float) -> str:
    return f"below {limit:.0%}" if b.higher_is_better else f"above {1 / limit:.2f}x"


def _shortfall(f: dict[str, Any], b: Baseline, r: float) -> str:
    if b.higher_is_better:
        how = f"{r:.0%} of the fleet median {_num(b.median)} {b.unit}"
    else:  # latency: say it the way it is read, a multiple of the median
        how = f"{1 / r:.2f}x the fleet median {_num(b.median)} {b.unit}"
    what = "median " if _has_interval(f) else ""
    return f"{_label(b, f.get('path', ''))} {what}{_num(judged_value(f))} {b.unit} = {how}"


REMEASURES = 5  # at most this many re-measures of one suspect figure


def suspects(nodes: list[Node], th: Thresholds = DEFAULTS, remeasured: Remeasured | None = None
             ) -> dict[str, list[str]]:
    """node -> the figure keys to measure (again) on it: those that fail
    against the fleet, or lie below `warn` by Z_SUSPECT of the figure's
    noise where re-measures can resolve it (`_suspect`), and that the re-measures so far (`remeasured`) have not settled; {}
    when none is left. The driver calls it round after round (`settle`)."""
    present = [n for n in nodes if n.status != "missing"]
    shared, _ = co_hosted(present)
    baselines, _, _, findings = judge_figures(present, th)
    by = _baselines_of(baselines, present)
    figures = {n.name: n.figures for n in present}
    out: dict[str, list[str]] = {}
    for f in findings:
        if _suspect(f, th, by) and f.node not in shared:
            rounds = _rounds((remeasured or {}).get(f.node, {}).get(f.key))
            first = figures[f.node][f.key]
            if not isinstance(rounds, str) and settle(f, first, rounds or [], by[(f.node, f.key)], th)[0] == "open":
                out.setdefault(f.node, []).append(f.key)
    return out


def _baselines_of(baselines: list[Baseline], nodes: list[Node]) -> dict[tuple[str, str], Baseline]:
    """(node, key) -> the baseline its figure is judged by."""
    by = {(b.node_class, b.key): b for b in baselines}
    return {(n.name, k): by[(n.node_class, k)] for n in nodes for k in n.figures if (n.node_class, k) in by}


# Who is measured again: a figure below `warn` of the median and this many
# sigmas below it (a first-pass z; a failure is one too). Lower than z_fail:
# a re-measure is cheap, and the drain needs the pooled evidence (`settle`).
Z_SUSPECT = 2.5
# The drain: the pooled statistic's one-sided interval (this many sigmas of
# the pooled mean) lies wholly below the figure's `warn` line.
Z_DRAIN = 3.0
MIN_FRESH = 2  # re-measures before a drain: one heavy-tailed outlier of a healthy node cannot confirm another
Z_FRESH = 2.0  # the re-measures alone, without the first pass that picked the suspect, this far below the line


def _suspect(f: Finding, th: Thresholds, by: dict[tuple[str, str], Baseline]) -> bool:
    """A figure failure, or one below `warn` at least Z_SUSPECT of the
    figure's typical sigmas (`Baseline.noise`, not the node's own: a noisy
    first pass is the one to measure again) below the median: a re-measure
    can tell it from noise (a figure whose noise is
    so wide that even this is within it, as in a fleet of co-scheduled
    checks, is left a warning)."""
    if f.kind != "figure" or (f.node, f.key) not in by:
        return False
    b = by[(f.node, f.key)]
    warn, fail = th.for_figure(f.key, b.node_class)
    return f.verdict == "fail" or (f.ratio is not None and b.noise > 0 and f.ratio < warn
                                    and (f.ratio - 1) / b.noise <= -Z_SUSPECT and resolvable(b, warn, fail))


def resolvable(b: Baseline, warn: float, fail: float) -> bool:
    """Whether all the re-measures a suspect may get could confirm a fault
    in the middle of the band the fleet looks for (as far below `fail` as
    `fail` is below `warn`: 85% by default) wholly below the `warn` line:
    the pooled interval of 1 + REMEASURES measurements of the figure's
    typical noise fits in warn - (2 fail - warn). Where it cannot (checks
    co-scheduled on one machine: sigma 17-46%) a re-measure settles
    nothing, and the pooled mean of a few such skewed, heavy-tailed
    measurements is no normal one: only a failure is measured again."""
    return Z_DRAIN * (b.repetition or b.noise) / math.sqrt(1 + REMEASURES) <= 2 * (warn - fail)


def _rounds(got: Any) -> list[dict[str, Any]] | str | None:
    """Re-measures as recorded: a list of figure records, one (a dict), a
    reason none came (a str), or None (not asked)."""
    if got is None or isinstance(got, str):
        return got
    got = [got] if isinstance(got, dict) else got if isinstance(got, list) else []
    return [g for g in got if isinstance(g, dict)]


@dataclass(frozen=True)
class Pooled:
    """A suspect figure's measurements pooled: the inverse-variance weighted
    mean of their ratios to the median and its sigma (each measurement's
    sigma its own repetition noise, at least the figure's typical one on
    these nodes), and the same over the re-measures alone."""

    ratio: float
    sigma: float
    k: int  # measurements pooled (the first pass and the re-measures)
    fresh: float  # the re-measures' weighted mean ratio (the first pass picked the suspect: it cannot drain alone)
    fresh_sigma: float  # and its sigma


def pooled(first: dict[str, Any], rounds: list[dict[str, Any]], b: Baseline) -> Pooled | None:
    """The first pass and each re-measure that is a measurement; None
    before a re-measure is. The fleet median is known far more precisely
    (1.25 sigma / sqrt(nodes)) than one node: its uncertainty is left out."""
    floor = b.repetition or b.noise  # the fleet's spread stands in where no repetitions were recorded
    fresh = [g for g in rounds if not figure_problem(g) and judged_value(g) > 0]
    if not fresh:
        return None
    ms = [(ratio(judged_value(g), b), max(own_noise(g), floor)) for g in [first, *fresh]]
    if any(s <= 0 for _, s in ms):  # noise unknown: the plain mean, no interval
        mean = statistics.fmean(r for r, _ in ms)
        return Pooled(mean, 0.0, len(ms), statistics.fmean(r for r, _ in ms[1:]), 0.0)

    def weighted(part: list[tuple[float, float]]) -> tuple[float, float]:
        w = [1 / s ** 2 for _, s in part]
        return sum(r * x for (r, _), x in zip(part, w)) / sum(w), 1 / math.sqrt(sum(w))

    def scattered(part: list[tuple[float, float]]) -> tuple[float, float]:
        mean, sigma = weighted(part)
        if len(part) >= 3:  # the measurements' own scatter, where it says more than their recorded noise
            sigma = max(sigma, statistics.stdev(r for r, _ in part) / math.sqrt(len(part)))
        return mean, sigma

    return Pooled(*scattered(ms), len(ms), *scattered(ms[1:]))


def settle(f: Finding, first: dict[str, Any], rounds: list[dict[str, Any]], b: Baseline, th: Thresholds
           ) -> tuple[str, list[str], Pooled | None]:
    """Where a suspect stands after its re-measures, pooled with its first
    pass (`pooled`): "drain" once the pooled interval's upper end (Z_DRAIN
    sigmas) lies below the figure's `warn` line and the re-measures alone
    are below it by Z_FRESH of their sigmas (the first pass was picked for
    being low: a heavy-tailed outlier of a healthy node must not drain it); "clear" once the pooled ratio is at least that line;
    "unsettled" after REMEASURES without either, else "open" (measure it
    again). With no noise known, the line is `fail` and the pooled ratio
    alone decides. Also each re-measure's value, for the text."""
    said = ["?" if figure_problem(g) or judged_value(g) <= 0 else _num(judged_value(g)) for g in rounds]
    p = pooled(first, rounds, b)
    if p is not None:
        warn, fail = th.for_figure(b.key, b.node_class)
        line = warn if p.sigma > 0 else fail
        if (p.k > MIN_FRESH and p.ratio + Z_DRAIN * p.sigma < line
                and p.fresh + Z_FRESH * p.fresh_sigma < line):
            return "drain", said, p
        if p.ratio >= line or p.fresh - Z_FRESH * p.fresh_sigma >= line:
            return "clear", said, p
    return ("unsettled" if len(rounds) >= REMEASURES else "open"), said, p


def _pooled_text(p: Pooled | None, b: Baseline, th: Thresholds) -> str:
    if p is None:
        return "no re-measure was a measurement"
    line = th.for_figure(b.key, b.node_class)[0 if p.sigma > 0 else 1]
    if p.sigma <= 0:
        return f"{p.k} measurements pooled: {_as_read(p.ratio, b)} (noise unknown: against {_below(b, line)})"
    hi = p.ratio + Z_DRAIN * p.sigma
    return (f"{p.k} measurements pooled: {_as_read(p.ratio, b)}, {Z_DRAIN:g} sigma ({p.sigma:.1%}) up to "
            f"{_as_read(hi, b)}, against the line {_below(b, line)}")


def _as_read(r: float, b: Baseline) -> str:
    return f"{r:.1%}" if b.higher_is_better else f"{1 / r:.3f}x" if r > 0 else "inf"


def confirm(findings: list[Finding], baselines: list[Baseline], remeasured: Remeasured | None,
            th: Thresholds, nodes: list[Node]) -> list[Finding]:
    """A suspect figure drains its node only when its measurements, the
    first pass and the re-measures pooled against the same baseline (the
    first pass's: a re-measure does not move the line it is judged by),
    settle it below the line (`settle`); one cleared is transient, one
    unsettled after REMEASURES a warning."""
    by = _baselines_of(baselines, nodes)
    figures = {n.name: n.figures for n in nodes}
    out = []
    for f in findings:
        if not _suspect(f, th, by):
            out.append(f)
            continue
        rounds = _rounds((remeasured or {}).get(f.node, {}).get(f.key))
        if rounds is None or isinstance(rounds, str):
            why = "saved documents" if remeasured is None else rounds or "no value came back"
            out.append(replace(f, text=f.text + f"; not re-measured ({why})") if f.verdict == "fail" else f)
            continue
        b = by[(f.node, f.key)]
        state, values, p = settle(f, figures[f.node][f.key], rounds, b, th)
        v = f"re-measured {', '.join(values)} {b.unit}".rstrip() + f" ({_pooled_text(p, b, th)})"
        if state == "drain":
            out.append(replace(f, verdict="fail", text=f.text + f"; {v}: {OUTCOMES['drained']}"))
        elif state == "clear":
            out.append(replace(f, verdict="warn", text=f.text + f"; {v}: {OUTCOMES['transient']}"))
        else:
            out.append(replace(f, verdict="warn", text=f.text + f"; {v}: neither wholly below the line nor above "
                               f"it in {REMEASURES}: {OUTCOMES['unsettled']}"))
    return out


# What `confirm` appends to a re-measured suspect's text, by outcome (said_remeasured counts them).
OUTCOMES = {"drained": "still beyond, confirmed below the line", "transient": "transient, not drained",
            "unsettled": "unsettled, not drained"}


def said_remeasured(findings: list[Finding]) -> str:
    """One line on the re-measures: how many suspects, and how each ended."""
    counts = {k: sum(1 for f in findings if f.kind == "figure" and v in f.text) for k, v in OUTCOMES.items()}
    asked = sum(counts.values())
    nodes = len({f.node for f in findings if f.kind == "figure" and any(v in f.text for v in OUTCOMES.values())})
    return (f"re-measured {asked} suspect figure{'s' * (asked != 1)} on {nodes} node{'s' * (nodes != 1)} before "
            f"draining: {counts['drained']} confirmed (drained), {counts['transient']} passed (transient), "
            f"{counts['unsettled']} unsettled (warnings)")


def co_hosted(nodes: list[Node]) -> tuple[set[str], list[str]]:
    """Nodes measured at overlapping times on one host, or on one GPU (ranks
    acting as nodes, checks co-scheduled on one machine): their figures
    contend for its memory, caches and PCIe, so a shortfall among them is
    not a fault of any one. Returns those nodes and a note per place."""
    by_place: dict[str, list[Node]] = {}
    for n in nodes:
        if n.window:
            for p in n.places:
                by_place.setdefault(p, []).append(n)
    shared: set[str] = set()
    notes = []
    for place, group in sorted(by_place.items(), key=lambda kv: (not kv[0].startswith("host"), kv[0])):
        together = overlapping(group)
        if len(together) > 1 and not together <= shared:
            shared |= together
            hosts = sorted({n.host for n in group if n.name in together and n.host})
            # "host (vm", "host (boot id ...", "GPU (GPU-6030..."
            where = place.replace("GPU ", "GPU (", 1) if place.startswith("GPU") else place
            named = "" if where == f"host ({','.join(hosts)}" else f"; hostname {', '.join(hosts)}" if hosts else ""
            notes.append(f"{len(together)} nodes ({', '.join(sorted(together))}) were measured at the same time on "
                         f"one {where}{named}): their checks contend for its memory, "
                         "caches and PCIe, so their speed failures (against the fleet or their own checks' limits) "
                         "are warnings, not drains; run one check per host to judge them")
    return shared, notes


def overlapping(group: list[Node]) -> set[str]:
    """The nodes whose measuring window overlaps another's (a sweep by start)."""
    out: set[str] = set()
    latest: Node | None = None
    for n in sorted(group, key=lambda x: x.window or (0, 0)):
        if latest is not None and n.window[0] < latest.window[1]:  # type: ignore[index]
            out |= {n.name, latest.name}
        if latest is None or n.window[1] > latest.window[1]:  # type: ignore[index]
            latest = n
    return out


def contended(f: Finding, shared: set[str]) -> Finding:
    """A speed failure of a node measured beside other checks on its host
    (against the fleet, or its own check's limits): a warning. Its inventory
    and topology failures stand: contention does not remove a GPU."""
    if f.node in shared and f.kind in ("figure", "check") and f.key and f.verdict == "fail":
        return replace(f, verdict="warn", kind="contention", text=f.text + "; measured beside other checks on "
                       "the same host: contention, not drained")
    return f


def too_few_notes(baselines: list[Baseline], th: Thresholds) -> list[str]:
    """Classes, or figures of a class, too few nodes measured for a fleet
    median: judged by the node checks' own rules only. Figures can fall short
    where the class does not (nodes whose GPUs are numbered differently)."""
    nodes: dict[str, int] = {}
    short: dict[str, list[Baseline]] = {}
    for b in baselines:
        nodes[b.node_class] = max(nodes.get(b.node_class, 0), b.n)
        if b.n < th.min_nodes:
            short.setdefault(b.node_class, []).append(b)
    rule = (f"fleet-relative verdicts need >= {th.min_nodes} nodes of a class (min_nodes), so these are judged "
            "by their own checks' rules (absolute limits, topology) only")
    out = []
    for cls, few in sorted(short.items()):
        n = nodes[cls]
        if n < th.min_nodes:
            out.append(f"{cls}: {n} node{'s' * (n != 1)}; {rule}")
            continue
        keys = ", ".join(b.key for b in few[:4]) + (f" and {len(few) - 4} more" if len(few) > 4 else "")
        out.append(f"{cls}: {n} nodes, but {len(few)} figure{'s' * (len(few) != 1)} measured on fewer than "
                   f"{th.min_nodes} of them ({keys}); {rule}")
    return out


def own_findings(nodes: list[Node]) -> tuple[list[Finding], list[str]]:
    """What each node's own check found (absolute limits, its inventory),
    whatever the fleet size, and notes. A configuration failure every node
    shares (MPI without CUDA support on every node) is the fleet's to fix once:
    a note, and on each node a warning, not a reason to drain them all."""
    shared = set.intersection(*({_configuration(f) for f in n.findings if f.verdict == "fail"} - {""}
                                for n in nodes)) if len(nodes) > 1 else set()
    out, notes = [], {}
    for n in nodes:
        for f in n.findings:
            verdict, what = f.verdict, _configuration(f)
            if what in shared:
                verdict = "warn"
                notes.setdefault(what, f"every node ({len(nodes)}), e.g. {n.name}: {f.text}; configuration the whole "
                                       "fleet shares: fix it once, no node is drained for it")
            # the measured figures it rests on (not inventory): one measured beside other checks is told apart
            measured = tuple(k for k in f.keys if not k.startswith("inventory/"))
            out.append(Finding(verdict, f"its own check: {f.text}", keys=measured, node=n.name, kind="check"))
    return out, list(notes.values())


def baseline(cls: str, key: str, members: list[tuple[Node, dict[str, Any]]]) -> Baseline:
    values = sorted(judged_value(f) for _, f in members)
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    reps = [own_noise(f) for _, f in members]
    rep = statistics.median(reps) if any(reps) else 0.0
    f0 = members[0][1]
    return Baseline(cls, key, str(f0.get("label") or key), str(f0.get("path", "")), str(f0.get("unit", "")),
                    bool(f0.get("higher_is_better", True)), len(values), med, mad, values[0], values[-1],
                    noise=max(1.4826 * mad / med if med else 0.0, rep), repetition=rep)


def ratio(value: float, b: Baseline) -> float:
    """Below 1 is worse, whichever way the unit goes."""
    return value / b.median if b.higher_is_better else b.median / value


def _label(b: Baseline, path: str) -> str:
    return f"{path} {b.label}" if path and path not in b.label else b.label


def absent_figures(cls: str, key: str, members: list[tuple[Node, dict[str, Any]]], nodes: list[Node],
                   b: Baseline) -> list[Finding]:
    """A figure most nodes of the class have but a complete node lacks (a GPU gone, a test that failed)."""
    peers = [n for n in nodes if n.node_class == cls]
    if len(members) * 2 <= len(peers) or len(members) == len(peers):
        return []
    have = {id(n) for n, _ in members}
    return [Finding("fail", f"{_label(b, b.path)} not measured where {len(members)} of {len(peers)} {cls} nodes "
                    f"measured it (median {_num(b.median)} {b.unit})", node=n.name, kind="absent")
            for n in peers if id(n) not in have and n.status == "complete" and key not in n.set_aside]


def topology_findings(nodes: list[Node]) -> list[Finding]:
    by_class: dict[str, dict[str, dict[str, Any]]] = {}
    for n in nodes:
        if n.facts:
            by_class.setdefault(n.node_class, {})[n.name] = n.facts
    out = []
    for group in by_class.values():
        for node, diffs in factsmod.differences(group).items():
            out += [Finding(verdict, text, node=node, kind="topology") for verdict, text in diffs]
    return out


def status_findings(nodes: list[Node]) -> list[Finding]:
    out = []
    for n in nodes:
        if n.status == "missing":
            out.append(Finding("fail", f"did not answer; last known state: {n.last_state or 'none'}", node=n.name,
                               kind="missing"))
        elif n.status == "incomplete":
            out.append(Finding("warn", "its check did not complete (interrupted or a part failed): judged on what "
                               "it measured", node=n.name, kind="incomplete"))
        if n.busy:  # its own check could not judge it (exit 2): not a pass, nor a drain
            out.append(Finding("warn", f"its own check found the node busy ({n.busy}): its figures measured then "
                               "are not judged for speed; check it again when it is idle", node=n.name, kind="busy"))
    return out


def judge_links(results: list[dict[str, Any]], th: Thresholds, isolation: dict[str, Any] | None = None
                ) -> tuple[list[dict[str, Any]], list[Finding]]:
    """Pair results (a, b, key, unit, value, higher_is_better), each pair
    marked by ClusterKit's rule per key for the link heatmap; the findings
    come from the re-test isolation only (`pairs.isolate`, its conclusion
    given, or replayed from the results): a bad node is a finding of its own
    and its partners are spared, a bad link a finding on both its nodes, a
    node with bad pairs no re-test could settle a warning."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_key.setdefault(r["key"], []).append(r)
    judged = []
    for key, rs in sorted(by_key.items()):
        values = {tuple(sorted((r["a"], r["b"]))): float(r["value"]) for r in rs}  # the last test of a pair counts
        nics = {tuple(sorted((r["a"], r["b"]))): _nics_by_node(r) for r in rs if r.get("nics")}
        unit, hib = rs[0].get("unit", ""), bool(rs[0].get("higher_is_better", True))
        bad = bad_pairs(values, hib, th.link_bad, th.link_latency)
        best = max(values.values()) if hib else min(values.values())
        for (a, b), v in sorted(values.items()):
            judged.append({"a": a, "b": b, "key": key, "unit": unit, "value": v, "higher_is_better": hib,
                           "of_best": v / best if hib else best / v, "verdict": "fail" if (a, b) in bad else "pass",
                           **({"nics": nics[(a, b)]} if (a, b) in nics else {})})
    if not results:
        return judged, []
    if isolation is None:
        isolation = replay(results, th.link_bad, th.link_latency)
    return judged, isolation_findings(isolation, judged, th)


def isolation_findings(iso: dict[str, Any], judged: list[dict[str, Any]], th: Thresholds) -> list[Finding]:
    out = []
    for x in iso.get("bad_nodes", ()):
        ev = _worst_bad(judged, lambda j: x in (j["a"], j["b"]))
        out.append(Finding("fail", f"node {x}: its pairs stay bad against other, good partners "
                           f"({_evidence(ev, th)})", node=x, kind="link", ratio=_of_best(ev), evidence=_worst(ev)))
    for a, b in iso.get("bad_links", ()):
        ev = _worst_bad(judged, lambda j: {j["a"], j["b"]} == {a, b})
        text = f"link {a} <-> {b}: bad when re-tested, both nodes good with other partners ({_evidence(ev, th)})"
        out += [Finding("fail", text, node=x, kind="link", ratio=_of_best(ev), evidence=_worst(ev)) for x in (a, b)]
    for x in iso.get("unsettled", ()):
        ev = _worst_bad(judged, lambda j: x in (j["a"], j["b"]))
        out.append(Finding("warn", f"node {x}: bad pairs that no re-test could settle (no good partner "
                           f"left; {_evidence(ev, th)})", node=x, kind="link", ratio=_of_best(ev)))
    return out


def _nics_by_node(r: dict[str, Any]) -> dict[str, str]:
    """A rail record's NICs ([a's, b's]) by node."""
    return {node: str(nic) for node, nic in zip((r["a"], r["b"]), r["nics"]) if nic}


def _worst_bad(judged: list[dict[str, Any]], which: Any) -> list[dict[str, Any]]:
    """The worst bad pair of each key among those `which` picks, worst first: a rail's own figure
    (named with its NICs) before the total it is part of."""
    worst: dict[str, dict[str, Any]] = {}
    for j in judged:
        if j["verdict"] == "fail" and which(j):
            if j["key"] not in worst or j["of_best"] < worst[j["key"]]["of_best"]:
                worst[j["key"]] = j
    return sorted(worst.values(), key=lambda j: (j["of_best"], "rail" not in j["key"]))


def _worst(ev: list[dict[str, Any]]) -> str:
    """The worst bad figure alone ("mpi bw host rail1 n1 (rail1) <-> n2 (rail1) 0.0022 GB/s = 12% of the best
    pair 0.0186 GB/s"): what a one-line drain reason can hold."""
    return _evidence(ev[:1], None) if ev else ""


def _of_best(ev: list[dict[str, Any]]) -> float | None:
    return min((j["of_best"] for j in ev), default=None)


def _evidence(ev: list[dict[str, Any]], th: Thresholds | None) -> str:
    if not ev:
        return "its last values are within the rule"
    parts = []
    for j in ev:
        hib = j["higher_is_better"]
        best = j["value"] / j["of_best"] if hib else j["value"] * j["of_best"]
        rule = ("" if th is None else f"bad below {th.link_bad:.0%} of the best pair" if hib else
                f"bad above {th.link_latency:g}x the lowest")
        nics = j.get("nics") or {}
        ends = " <-> ".join(f"{x} ({nics[x]})" if nics.get(x) else x for x in (j["a"], j["b"]))
        parts.append(f"{j['key']} {ends} {_vs_best(j['value'], best, j['unit'], hib)}" + (f"; {rule}" if rule else ""))
    return "; ".join(parts)


def _vs_best(v: float, best: float, unit: str, hib: bool) -> str:
    if hib:
        return f"{_num(v)} {unit} = {v / best:.0%} of the best pair {_num(best)} {unit}"
    return f"{_num(v)} {unit} = {v / best:.1f}x the lowest pair {_num(best)} {unit}"


# Which finding states a node's reason first: a measured shortfall of the node
# before the topology difference that may explain it; the node's own topology
# (a NIC port down) before its pairs, which are the symptom of it (with a rail
# down both ranks share the other rail, and its pairs are slow); a figure a node
# could not measure last (its cause is usually the topology difference above it).
KIND_ORDER = {"missing": 0, "figure": 1, "check": 1, "topology": 2, "link": 3, "absent": 4, "incomplete": 5}


def cause_first(findings: list[Finding]) -> list[Finding]:
    """A node's findings in the order its reason names them (KIND_ORDER, then the worst ratio)."""
    return sorted(findings, key=lambda f: (KIND_ORDER.get(f.kind, 5), f.ratio if f.ratio is not None else 1.0))


def drain_list(findings: list[Finding]) -> list[Drain]:
    """Nodes with a failure: missing ones first, then by their worst ratio
    (to the fleet median or to the best pair), then by how many failures."""
    per: dict[str, list[Finding]] = {}
    for f in findings:
        if f.verdict == "fail":
            per.setdefault(f.node, []).append(f)

    def rank_key(item: tuple[str, list[Finding]]) -> tuple[int, float, int, str]:
        node, fs = item
        worst = min((f.ratio for f in fs if f.ratio is not None), default=1.0)
        return (0 if any(f.kind == "missing" for f in fs) else 1, worst, -len(fs), node)

    out = []
    for i, (node, fs) in enumerate(sorted(per.items(), key=rank_key), 1):
        fs = cause_first(fs)
        out.append(Drain(node, i, fs[0].text, [f.text for f in fs[:8]]))
    return out


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.3g}"


# --- the site file -------------------------------------------------------------

_GLOBAL_KEYS = {"warn": float, "fail": float, "link_bad": float, "link_latency": float, "min_nodes": int,
                "z_fail": float, "z_fail_below_fail": float}
_RULE_KEYS = {"key": str, "class": str, "warn": float, "fail": float}


def load_thresholds(path: str, base: Thresholds = DEFAULTS) -> Thresholds:
    """The [fleet] table of a site file (TOML, the file `--expect` reads):

        [fleet]
        warn = 0.95          # of the fleet median
        fail = 0.90
        link_bad = 0.93      # of the best pair
        link_latency = 2.1   # x the lowest pair latency
        min_nodes = 3        # fewer nodes of a class: no fleet-relative verdict
        z_fail = 4.0         # below warn, fail only this many sigmas (the noise) below the median
        z_fail_below_fail = 4.0  # below fail, this many suffice
        [[fleet.rule]]       # first match wins
        key = "gpu/hbm*"     # fnmatch on the figure key
        class = "*H100*"     # and on the node class (GPU or CPU model)
        warn = 0.97
        fail = 0.93

    A file without [fleet] keeps the defaults; a wrong key or value is one
    line naming the file and the key path, before anything is measured."""
    from ..check import sitefile
    from ..errors import NodemapError

    table = sitefile.load(path)[1].get("fleet", {})
    if not isinstance(table, dict):
        raise NodemapError(f"{path}: fleet must be a table, written [fleet]")
    values: dict[str, Any] = {}
    for k, v in table.items():
        if k == "rule":
            continue
        values[k] = _typed(path, f"fleet.{k}", v, _GLOBAL_KEYS.get(k))
    rows = table.get("rule", [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise NodemapError(f"{path}: fleet.rule must be an array of tables, written [[fleet.rule]]")
    rules = []
    for i, r in enumerate(rows):
        got = {k: _typed(path, f"fleet.rule[{i}].{k}", v, _RULE_KEYS.get(k)) for k, v in r.items()}
        got.setdefault("warn", values.get("warn", base.warn))
        got.setdefault("fail", values.get("fail", base.fail))
        rules.append(Rule(key=got.get("key", "*"), node_class=got.get("class", "*"), warn=got["warn"], fail=got["fail"]))
    th = Thresholds(**{**asdict(base), **values, "rules": tuple(rules) + base.rules})
    for r in (th, *th.rules):
        if not 0 < r.fail <= r.warn <= 1:
            raise NodemapError(f"{path}: [fleet] needs 0 < fail <= warn <= 1 (got warn={r.warn}, fail={r.fail})")
    if th.z_fail_below_fail > th.z_fail:
        raise NodemapError(f"{path}: [fleet] needs z_fail_below_fail <= z_fail (got z_fail={th.z_fail}, "
                           f"z_fail_below_fail={th.z_fail_below_fail})")
    return th


# What each number of [fleet] may be: fractions of a median or of the best
# pair, a multiple of the lowest latency, a count of nodes. nan, inf, 0 and
# negative values passed once and drained healthy nodes or none.
def _fraction(v: float) -> bool:
    return 0 < v <= 1  # false for nan


_RANGES = {"warn": (_fraction, "a fraction of the fleet median, above 0 and at most 1"),
           "fail": (_fraction, "a fraction of the fleet median, above 0 and at most 1"),
           "link_bad": (_fraction, "a fraction of the best pair, above 0 and at most 1"),
           "link_latency": (lambda v: 1 <= v <= 1e6, "a multiple of the lowest pair latency, 1 to 1e6"),
           "min_nodes": (lambda v: 1 <= v <= 1 << 20, "a count of nodes, 1 to 1048576"),
           "z_fail": (lambda v: 0 < v <= 100, "a number of sigmas, above 0 and at most 100"),
           "z_fail_below_fail": (lambda v: 0 < v <= 100, "a number of sigmas, above 0 and at most 100")}


def _typed(path: str, name: str, value: Any, kind: type | None) -> Any:
    from ..errors import NodemapError

    if kind is None:
        raise NodemapError(f"{path}: unknown key {name} (known: {', '.join(sorted(_GLOBAL_KEYS))}; "
                           f"in [[fleet.rule]]: {', '.join(sorted(_RULE_KEYS))})")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise NodemapError(f"{path}: {name} = {value!r} must be a {kind.__name__}")
    ok, what = _RANGES.get(name.rpartition(".")[2], (None, ""))
    if ok is not None and not ok(value):
        raise NodemapError(f"{path}: {name} = {value!r} must be {what}")
    return value
