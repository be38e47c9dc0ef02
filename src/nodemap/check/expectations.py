"""Expectations: practical limits per path (with their sources) and the
thresholds of the verdict rules, read from data.

The table ships as expectations.toml beside this module; a site file given
with `--expect` has the same keys: its [thresholds] replace the shipped
ones key by key and its [[limit]] rows are tried before the shipped rows,
so a site can tighten one GPU model or one path without code. Its [fleet]
table (the fleet's verdicts against peers: `FleetRules`) replaces the
shipped one key by key, its [[fleet.rule]] rows tried first; so do its
[busy], [node_class], [watch] and [compare] tables (what makes the node
busy, the node against its class, a memory timeline's shapes and findings,
a binding's difference: `BusyRules`, `NodeClassRules`, `WatchRules`,
`CompareRules`). A broken site file is one line naming the file, line and
key (ExpectError, exit 2).
"""

from __future__ import annotations

import fnmatch
import math
import re
import functools
from dataclasses import MISSING, dataclass, field, fields
from importlib import resources
from typing import Any, Callable, TypeVar

from . import sitefile

SCHEMA = "nodemap.expectations/1"
BOUNDS = (("warn", "fail"), ("warn_below", "fail_below"), ("warn_above", "fail_above"))


ExpectError = sitefile.SiteError  # a site expectations file that cannot be used: file, line and key named


# A table's key: its type, what its numbers may be and what it is (said when a value is refused). nan, inf, 0 and
# negative values passed once: the fleet drained healthy nodes or none, a check crashed after it had measured.
Spec = tuple[type, "Callable[[Any], bool] | None", str]


def _key(spec: Spec, default: Any = MISSING) -> Any:
    """A field of a table's record ([[limit]], [fleet], [busy]...) with its spec, read by `_value`."""
    return field(default=default, metadata={"spec": spec})


def _fraction(of: str) -> Spec:
    return float, lambda v: 0 < v <= 1, f"a fraction of {of}, above 0 and at most 1"


def _multiple(of: str) -> Spec:
    return float, lambda v: 1 <= v <= 1e6, f"a multiple of {of}, at least 1 and at most 1e6"


def _share(of: str) -> Spec:
    return float, lambda v: 0 <= v < 0.5, f"a fraction of {of}, from 0 and below 0.5"


def _mebibytes(what: str) -> Spec:
    return float, lambda v: 0 <= v <= 1 << 30, f"{what} in MiB, 0 to 2^30"


def _percent(of: str) -> Spec:
    return float, lambda v: 0 < v <= 100, f"a percentage of {of}, above 0 and at most 100"


_SIGMAS: Spec = (float, lambda v: 0 < v <= 100, "a number of sigmas, above 0 and at most 100")
_TEXT: Spec = (str, None, "text")
# nan passed here once and crashed the check after it had measured; 0 and inf judge nothing
_POSITIVE: Spec = (float, lambda v: 0 < v < math.inf, "a finite number above 0")


@dataclass(frozen=True)
class Limit:
    """One row: which figures (kind, regex on the part) and their bounds."""

    kind: str = _key(_TEXT)
    match: str = _key(_TEXT)
    source: str = _key(_TEXT)
    warn: float | None = _key(_fraction("the peak"), None)  # fractions of the peak (higher is better)
    fail: float | None = _key(_fraction("the peak"), None)
    warn_below: float | None = _key(_POSITIVE, None)  # absolute floors, in the figure's unit
    fail_below: float | None = _key(_POSITIVE, None)
    warn_above: float | None = _key(_POSITIVE, None)  # absolute ceilings (latency)
    fail_above: float | None = _key(_POSITIVE, None)
    peak: float | None = _key(_POSITIVE, None)  # replaces the Result's peak when given
    origin: str = "nodemap"  # "nodemap" or the site file's name

    def applies(self, kind: str, part: str) -> bool:
        return self.kind == kind and re.search(self.match, part, re.IGNORECASE) is not None


@dataclass(frozen=True)
class Rule:
    """[[fleet.rule]]: thresholds of one figure pattern (fnmatch on the key, and on the class)."""

    key: str = "*"
    node_class: str = "*"
    warn: float = 0.95
    fail: float = 0.90


@dataclass(frozen=True)
class Thresholds:
    """[thresholds]: within the node (check/verdicts.py) and `report --compare`; kept as a dict (documents)."""

    relative_warn: float = _key(_fraction("the peers' median"))
    relative_fail: float = _key(_fraction("the peers' median"))
    latency_warn: float = _key(_multiple("the node's minimum"))
    latency_fail: float = _key(_multiple("the node's minimum"))
    compare_warn: float = _key(_fraction("BEFORE's figure"))
    compare_fail: float = _key(_fraction("BEFORE's figure"))


THRESHOLDS = tuple(f.name for f in fields(Thresholds))


@dataclass(frozen=True)
class FleetRules:
    """[fleet]: the fleet's thresholds (fleet/verdicts.py, links.py), the shipped table's with a site's."""

    warn: float = _key(_fraction("the fleet median"))  # of the fleet median (latency: median / value)
    fail: float = _key(_fraction("the fleet median"))
    link_bad: float = _key(_fraction("the best pair"))  # of the best pair's bandwidth
    link_latency: float = _key(_multiple("the lowest pair latency"))  # x the lowest pair latency
    # of the same pair's other rail's bandwidth, every repetition against every one
    rail_bad: float = _key(_fraction("the other rail's bandwidth"))
    rail_latency: float = _key(_multiple("the other rail's latency"))  # x the same pair's other rail's latency
    # x the same pair's other rail's slowest round trips (fleet/pairs.tail_ratio)
    rail_tail: float = _key(_multiple("the other rail's slowest round trips"))
    # fewer nodes of a class with a figure: no fleet verdict (the median of two is their mean)
    min_nodes: int = _key((int, lambda v: 1 <= v <= 1 << 20, "a count of nodes, 1 to 1048576"))
    z_fail: float = _key(_SIGMAS)  # below warn, fails only this many sigmas (the noise) below the median
    z_fail_below_fail: float = _key(_SIGMAS)  # below fail, this many suffice
    # a suspect is measured again (fleet/remeasure.py): a failure, or below warn this many sigmas below the median
    z_suspect: float = _key(_SIGMAS)
    z_drain: float = _key(_SIGMAS)  # drained: its pooled measurements this many sigmas wholly below the warn line
    min_fresh: int = _key((int, lambda v: 1 <= v <= 100, "a count of re-measures, 1 to 100"))  # and at least this many
    z_fresh: float = _key(_SIGMAS)  # re-measures, alone this many of their sigmas below the line
    rules: tuple[Rule, ...] = ()  # per-figure overrides, first match wins

    def for_figure(self, key: str, node_class: str) -> tuple[float, float]:
        for r in self.rules:
            if fnmatch.fnmatchcase(key, r.key) and fnmatch.fnmatchcase(node_class, r.node_class):
                return r.warn, r.fail
        return self.warn, self.fail


@dataclass(frozen=True)
class BusyRules:
    """[busy]: what makes a sample of the node busy (check/busy.py); the reasons: expectations.toml."""

    other_cores: float = _key((float, lambda v: 0 < v <= 1 << 20, "cores of CPU time, above 0"))
    psi_memory: float = _key(_percent("time"))
    mem_available: float = _key(_fraction("MemTotal"))
    gpu_util: float = _key(_percent("utilisation"))


@dataclass(frozen=True)
class NodeClassRules:
    """[node_class]: the node against its node class (check --expect-topology, check/expected.py)."""

    memory_floor: float = _key(_fraction("the class's memory"))


@dataclass(frozen=True)
class WatchRules:
    """[watch]: a memory timeline's shapes and findings (watch/analysis.py)."""

    warmup: float = _key(_share("the run"))
    teardown: float = _key(_share("the run"))
    windows: int = _key((int, lambda v: 2 <= v <= 1000, "a count of windows, 2 to 1000"))
    min_growth_mib: float = _key(_mebibytes("a growth"))
    growth_fraction: float = _key(_fraction("the peak"))
    floor_given_back: float = _key(_fraction("the floor's rise"))
    late_rise: float = _key(_fraction("the trend's rise in the second half"))
    own_share: float = _key(_fraction("the GPU's growth"))
    imbalance: float = _key(_multiple("the peers' median peak"))
    imbalance_min_mib: float = _key(_mebibytes("a peak above the peers' median"))
    near_capacity: float = _key(_fraction("a GPU's memory"))
    host_near_capacity: float = _key(_fraction("the host's memory"))
    foreign_min_mib: float = _key(_mebibytes("another process's memory on a rank's GPU"))


@dataclass(frozen=True)
class CompareRules:
    """[compare]: when a binding's figure differs from the plan's (compare/probes.py)."""

    min_noise: float = _key((float, lambda v: 0 <= v < 1, "a fraction of the plan's figure, from 0 and below 1"))


TABLES = {"fleet": FleetRules, "busy": BusyRules, "node_class": NodeClassRules, "watch": WatchRules,
          "compare": CompareRules}
Table = TypeVar("Table", BusyRules, NodeClassRules, WatchRules, CompareRules)


@dataclass(frozen=True)
class Expectations:
    thresholds: dict[str, float]
    limits: tuple[Limit, ...]
    sources: tuple[str, ...] = field(default=("nodemap",))  # the files merged, site last
    # [fleet] ("rule": its rows), [busy], [watch], [compare] as given: see `fleet_rules` and `table`
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)

    def fleet_rules(self) -> FleetRules:
        """[fleet]: a rule without warn or fail takes the table's."""
        t = {k: v for k, v in self.tables.get("fleet", {}).items() if k != "rule"}
        rules = tuple(Rule(r.get("key", "*"), r.get("class", "*"), r.get("warn", t["warn"]), r.get("fail", t["fail"]))
                      for r in self.tables.get("fleet", {}).get("rule", ()))
        return FleetRules(**t, rules=rules)

    def table(self, record: type[Table]) -> Table:
        """[busy], [watch] or [compare] as its record; a document read back (no tables) judges by the shipped."""
        name = next(n for n, r in TABLES.items() if r is record)
        return record(**{**shipped().tables[name], **self.tables.get(name, {})})

    def limit_for(self, kind: str, part: str) -> Limit | None:
        return next((lim for lim in self.limits if lim.applies(kind, part)), None)

    def dram_peak(self) -> float | None:
        """The DRAM peak (GB/s) a site file's `stream` row gives, for a node that cannot say its own (a VM)."""
        lim = self.limit_for("stream", "DRAM")
        return lim.peak if lim is not None else None


@functools.cache
def shipped() -> Expectations:
    text = resources.files(__package__).joinpath("expectations.toml").read_text()
    return parse(text, "nodemap/check/expectations.toml", "nodemap")


def fleet_defaults() -> FleetRules:
    return shipped().fleet_rules()


def load(site: str | None = None) -> Expectations:
    """The shipped table, with a site file's overrides when given."""
    base = shipped()
    if site is None:
        return base
    text, data = sitefile.load(site)
    own = parse(text, site, site, partial=True, data=data)
    merged = merge(base, own)
    check_order(merged.thresholds, _Locator(text, site), own.thresholds)
    _fleet_order(merged.fleet_rules(), _Locator(text, site))
    return merged


def merge(base: Expectations, site: Expectations) -> Expectations:
    tables = {name: {**base.tables.get(name, {}), **site.tables.get(name, {})} for name in TABLES}
    tables["fleet"]["rule"] = tuple(site.tables["fleet"].get("rule", ())) + tuple(base.tables["fleet"].get("rule", ()))
    return Expectations({**base.thresholds, **site.thresholds}, site.limits + base.limits,
                        base.sources + site.sources, tables)


def parse(text: str, name: str, origin: str, partial: bool = False, data: dict[str, Any] | None = None) -> Expectations:
    """Parse (unless `data` is the text's table already) and validate;
    `partial` allows a subset of thresholds (a site file)."""
    if data is None:
        data = sitefile.parse(text, name)
    where = _Locator(text, name)
    unknown = set(data) - {"schema", "thresholds", "limit", *TABLES}
    if unknown:
        key = sorted(unknown)[0]
        raise ExpectError(f"{where.at(key)}: unknown key {key!r}; use schema, [thresholds], [[limit]], "
                          f"{', '.join(f'[{t}]' for t in TABLES)}")
    if "schema" in data and data["schema"] != SCHEMA:
        raise ExpectError(f"{where.at('schema')}: key 'schema' is {data['schema']!r}, expected {SCHEMA!r}")
    thresholds = _table("thresholds", Thresholds, data.get("thresholds", {}), where, partial)
    rows = data.get("limit", [])
    if not isinstance(rows, list):
        raise ExpectError(f"{where.at('limit')}: key 'limit' must be an array of tables, written [[limit]]")
    limits = tuple(_limit(row, i, where, origin) for i, row in enumerate(rows))
    tables = {name: _table(name, record, data.get(name, {}), where, partial) for name, record in TABLES.items()}
    tables["fleet"]["rule"] = _rules(data.get("fleet", {}).get("rule", []), where)
    exp = Expectations(thresholds, limits, (origin,), tables)
    if not partial:
        check_order(exp.thresholds, where)
        _fleet_order(exp.fleet_rules(), where)
    return exp


def _limit(row: Any, i: int, where: "_Locator", origin: str) -> Limit:
    at = lambda key: where.at(key, "[[limit]]", i)  # noqa: E731
    if not isinstance(row, dict):
        raise ExpectError(f"{at('limit')}: each [[limit]] must be a table")
    row = {k: _value(at(k), f"limit.{k}", v, _specs(Limit)) for k, v in row.items()}
    for key in ("kind", "source"):
        if key not in row:
            raise ExpectError(f"{at('limit')}: [[limit]] number {i + 1} lacks key '{key}'")
    try:
        re.compile(row.get("match", "."))
    except re.error as e:
        raise ExpectError(f"{at('match')}: key 'limit.match' is not a regular expression ({e})") from None
    if not any(w in row or f in row for w, f in BOUNDS):
        raise ExpectError(f"{at('limit')}: [[limit]] number {i + 1} has no bound; give warn/fail (fractions of "
                          "the peak), warn_below/fail_below or warn_above/fail_above")
    vals = {k: v for k, v in row.items() if isinstance(v, float)}
    _limit_bounds(vals, at)
    return Limit(kind=row["kind"], match=row.get("match", "."), source=row["source"], origin=origin, **vals)


# warn must be the milder one: thresholds that are fractions of a reference (higher is better) and those that are
# multiples of a minimum (latency)
PAIRS = (("relative_warn", "relative_fail", "at least"), ("compare_warn", "compare_fail", "at least"),
         ("latency_warn", "latency_fail", "at most"))


def check_order(t: dict[str, float], where: "_Locator", site: dict[str, float] | None = None) -> None:
    """warn must be reached before fail: relative_warn >= relative_fail,
    latency_warn <= latency_fail (after a site file is merged: the line
    named is the site's key of the pair)."""
    for warn, fail, word in PAIRS:
        if warn not in t or fail not in t:
            continue
        ok = t[warn] >= t[fail] if word == "at least" else t[warn] <= t[fail]
        if not ok:
            key = warn if site is None or warn in site else fail
            raise ExpectError(f"{where.at(key, '[thresholds]')}: key 'thresholds.{warn}' = {t[warn]:g} must be "
                              f"{word} 'thresholds.{fail}' = {t[fail]:g} (warn comes before fail); "
                              f"change 'thresholds.{key}'")


def _limit_bounds(vals: dict[str, float], at: Callable[[str], str]) -> None:
    for (warn, fail), above in zip(BOUNDS, (False, False, True)):
        if warn in vals and fail in vals and (vals[warn] > vals[fail] if above else vals[warn] < vals[fail]):
            raise ExpectError(f"{at(warn)}: key 'limit.{warn}' = {vals[warn]:g} must be "
                              f"{'at most' if above else 'at least'} 'limit.{fail}' = {vals[fail]:g} "
                              "(warn comes before fail); swap them")


RULE_KEYS: dict[str, Spec] = {"key": (str, None, ""), "class": (str, None, ""),
                              "warn": _fraction("the fleet median"), "fail": _fraction("the fleet median")}


def _specs(record: type) -> dict[str, Spec]:
    return {f.name: f.metadata["spec"] for f in fields(record) if "spec" in f.metadata}


def _table(name: str, record: type, table: Any, where: "_Locator", partial: bool) -> dict[str, Any]:
    """[name]: each value typed and in its range (the record's specs); the shipped table gives every key."""
    if not isinstance(table, dict):
        raise ExpectError(f"{where.at(name)}: {name} must be a table, written [{name}]")
    specs = _specs(record)
    out = {k: _value(where.at(k, f"[{name}]"), f"{name}.{k}", v, specs) for k, v in table.items()
           if not (k == "rule" and record is FleetRules)}  # [[fleet.rule]]: `_rules`
    missing = [k for k in specs if k not in out]
    if missing and not partial:
        raise ExpectError(f"{where.name}: [{name}] lacks {', '.join(missing)}")
    return out


def _rules(rows: Any, where: "_Locator") -> tuple[dict[str, Any], ...]:
    """[[fleet.rule]] rows, each value typed and in its range."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ExpectError(f"{where.at('rule')}: fleet.rule must be an array of tables, written [[fleet.rule]]")
    return tuple({k: _value(where.at(k, "[[fleet.rule]]", i), f"fleet.rule[{i}].{k}", v, RULE_KEYS)
                  for k, v in r.items()} for i, r in enumerate(rows))


def _value(at: str, name: str, value: Any, specs: dict[str, Spec]) -> Any:
    """One key's value of its spec's type (an integer where a float is wanted is one) and within its bounds; the
    error names the value as written."""
    kind, ok, what = specs.get(name.rpartition(".")[2], (None, None, ""))
    if kind is None:
        raise ExpectError(f"{at}: unknown key {name} (known: {', '.join(sorted(specs))})")
    typed = float(value) if kind is float and isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(typed, kind) or isinstance(typed, bool):
        raise ExpectError(f"{at}: {name} = {value!r} must be a {kind.__name__}")
    if ok is not None and not ok(typed):
        hint = f"; write {typed / 100:g} for {typed:g}%" if what.startswith("a fraction") and 1 < typed <= 100 else ""
        raise ExpectError(f"{at}: {name} = {value!r} must be {what}{hint}")
    return typed


def _fleet_order(th: FleetRules, where: "_Locator") -> None:
    for r in (th, *th.rules):
        if not 0 < r.fail <= r.warn <= 1:
            raise ExpectError(f"{where.at('fail', '[fleet]')}: [fleet] needs 0 < fail <= warn <= 1 (got warn={r.warn}, "
                              f"fail={r.fail})")
    if th.z_fail_below_fail > th.z_fail:
        raise ExpectError(f"{where.at('z_fail_below_fail', '[fleet]')}: [fleet] needs z_fail_below_fail <= z_fail "
                          f"(got z_fail={th.z_fail}, z_fail_below_fail={th.z_fail_below_fail})")


class _Locator:
    """Line numbers for keys of a TOML text (tomllib gives values only)."""

    def __init__(self, text: str, name: str) -> None:
        self.lines = text.splitlines()
        self.name = name

    def at(self, key: str, table: str | None = None, nth: int = 0) -> str:
        start, end = 0, len(self.lines)
        if table is not None:
            heads = [i for i, line in enumerate(self.lines) if line.strip().startswith(table)]
            if nth < len(heads):
                start = heads[nth]
                end = next((i for i, line in enumerate(self.lines) if i > start and line.strip().startswith("[")),
                           end)
        pat = re.compile(rf"^\s*(\[+\s*)?{re.escape(key)}\s*(=|\]|\.)")
        for i in range(start, end):
            if pat.match(self.lines[i]):
                return f"{self.name}, line {i + 1}"
        return f"{self.name}, line {start + 1}" if table is not None else self.name
