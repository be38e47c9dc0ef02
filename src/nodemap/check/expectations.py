"""Expectations: practical limits per path (with their sources) and the
thresholds of the verdict rules, read from data.

The table ships as expectations.toml beside this module; a site file given
with `--expect` has the same keys: its [thresholds] replace the shipped
ones key by key and its [[limit]] rows are tried before the shipped rows,
so a site can tighten one GPU model or one path without code. Its [fleet]
table (the fleet's verdicts against peers: `FleetRules`) replaces the
shipped one key by key, its [[fleet.rule]] rows tried first. A broken
site file is one line naming the file, line and key (ExpectError, exit 2).
"""

from __future__ import annotations

import fnmatch
import math
import re
import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable

from . import sitefile

SCHEMA = "nodemap.expectations/1"
THRESHOLDS = ("relative_warn", "relative_fail", "latency_warn", "latency_fail", "compare_warn", "compare_fail")
LIMIT_KEYS = {"kind": str, "match": str, "warn": float, "fail": float, "warn_below": float, "fail_below": float,
              "warn_above": float, "fail_above": float, "peak": float, "source": str}
BOUNDS = (("warn", "fail"), ("warn_below", "fail_below"), ("warn_above", "fail_above"))


ExpectError = sitefile.SiteError  # a site expectations file that cannot be used: file, line and key named


@dataclass(frozen=True)
class Limit:
    """One row: which figures (kind, regex on the part) and their bounds."""

    kind: str
    match: str
    source: str
    warn: float | None = None  # fractions of the peak (higher is better)
    fail: float | None = None
    warn_below: float | None = None  # absolute floors, in the figure's unit
    fail_below: float | None = None
    warn_above: float | None = None  # absolute ceilings (latency)
    fail_above: float | None = None
    peak: float | None = None  # replaces the Result's peak when given
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
class FleetRules:
    """[fleet]: the fleet's thresholds (fleet/verdicts.py, links.py), the shipped table's with a site's."""

    warn: float  # of the fleet median (latency: median / value)
    fail: float
    link_bad: float  # of the best pair's bandwidth
    link_latency: float  # x the lowest pair latency
    rail_bad: float  # of the same pair's other rail's bandwidth, every repetition against every one
    rail_latency: float  # x the same pair's other rail's latency, every repetition against every one
    rail_tail: float  # x the same pair's other rail's slowest round trips (fleet/pairs.tail_ratio)
    min_nodes: int  # fewer nodes of a class with a figure: no fleet verdict (the median of two is their mean)
    z_fail: float  # below warn, fails only this many sigmas (the noise) below the median
    z_fail_below_fail: float  # below fail, this many suffice
    rules: tuple[Rule, ...] = ()  # per-figure overrides, first match wins

    def for_figure(self, key: str, node_class: str) -> tuple[float, float]:
        for r in self.rules:
            if fnmatch.fnmatchcase(key, r.key) and fnmatch.fnmatchcase(node_class, r.node_class):
                return r.warn, r.fail
        return self.warn, self.fail


@dataclass(frozen=True)
class Expectations:
    thresholds: dict[str, float]
    limits: tuple[Limit, ...]
    sources: tuple[str, ...] = field(default=("nodemap",))  # the files merged, site last
    fleet: dict[str, Any] = field(default_factory=dict)  # [fleet] as given ("rule": its rows), see `fleet_rules`

    def fleet_rules(self) -> FleetRules:
        """[fleet]: a rule without warn or fail takes the table's."""
        t = {k: v for k, v in self.fleet.items() if k != "rule"}
        rules = tuple(Rule(r.get("key", "*"), r.get("class", "*"), r.get("warn", t["warn"]), r.get("fail", t["fail"]))
                      for r in self.fleet.get("rule", ()))
        return FleetRules(**t, rules=rules)

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
    rules = tuple(site.fleet.get("rule", ())) + tuple(base.fleet.get("rule", ()))
    return Expectations({**base.thresholds, **site.thresholds}, site.limits + base.limits,
                        base.sources + site.sources, {**base.fleet, **site.fleet, "rule": rules})


def parse(text: str, name: str, origin: str, partial: bool = False, data: dict[str, Any] | None = None) -> Expectations:
    """Parse (unless `data` is the text's table already) and validate;
    `partial` allows a subset of thresholds (a site file)."""
    if data is None:
        data = sitefile.parse(text, name)
    where = _Locator(text, name)
    unknown = set(data) - {"schema", "thresholds", "limit", "fleet"}
    if unknown:
        key = sorted(unknown)[0]
        raise ExpectError(f"{where.at(key)}: unknown key {key!r}; use schema, [thresholds], [[limit]] or [fleet]")
    if "schema" in data and data["schema"] != SCHEMA:
        raise ExpectError(f"{where.at('schema')}: key 'schema' is {data['schema']!r}, expected {SCHEMA!r}")
    thresholds = _thresholds(data.get("thresholds", {}), where, partial)
    rows = data.get("limit", [])
    if not isinstance(rows, list):
        raise ExpectError(f"{where.at('limit')}: key 'limit' must be an array of tables, written [[limit]]")
    limits = tuple(_limit(row, i, where, origin) for i, row in enumerate(rows))
    exp = Expectations(thresholds, limits, (origin,), _fleet(data.get("fleet", {}), where))
    if not partial:
        check_order(exp.thresholds, where)
        _fleet_order(exp.fleet_rules(), where)
    return exp


def _thresholds(table: Any, where: "_Locator", partial: bool) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ExpectError(f"{where.at('thresholds')}: 'thresholds' must be a table, written [thresholds]")
    out = {}
    for key, value in table.items():
        if key not in THRESHOLDS:
            raise ExpectError(f"{where.at(key, '[thresholds]')}: unknown key 'thresholds.{key}'; "
                              f"known: {', '.join(THRESHOLDS)}")
        if not _positive(value):
            raise ExpectError(f"{where.at(key, '[thresholds]')}: key 'thresholds.{key}' must be a finite number "
                              f"above 0, got {value!r}")
        _threshold_range(key, float(value), where)
        out[key] = float(value)
    missing = [k for k in THRESHOLDS if k not in out]
    if missing and not partial:
        raise ExpectError(f"{where.name}: [thresholds] lacks {', '.join(missing)}")
    return out


def _limit(row: Any, i: int, where: "_Locator", origin: str) -> Limit:
    at = lambda key: where.at(key, "[[limit]]", i)  # noqa: E731
    if not isinstance(row, dict):
        raise ExpectError(f"{at('limit')}: each [[limit]] must be a table")
    for key, value in row.items():
        want = LIMIT_KEYS.get(key)
        if want is None:
            raise ExpectError(f"{at(key)}: unknown key 'limit.{key}'; known: {', '.join(LIMIT_KEYS)}")
        ok = isinstance(value, str) if want is str else _positive(value)
        if not ok:
            # nan passed here once and crashed the check after it had measured; 0 and inf judge nothing
            raise ExpectError(f"{at(key)}: key 'limit.{key}' must be "
                              f"{'text' if want is str else 'a finite number above 0'}, got {value!r}")
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
    vals = {k: float(v) for k, v in row.items() if LIMIT_KEYS[k] is float}
    _limit_bounds(vals, at)
    return Limit(kind=row["kind"], match=row.get("match", "."), source=row["source"], origin=origin, **vals)


def _positive(value: Any) -> bool:
    """A number of TOML (not a bool) that is finite and above 0."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < value < math.inf


# Thresholds that are fractions of a reference (higher is better) and those
# that are multiples of a minimum (latency); warn must be the milder one.
FRACTIONS = ("relative_warn", "relative_fail", "compare_warn", "compare_fail")
PAIRS = (("relative_warn", "relative_fail", "at least"), ("compare_warn", "compare_fail", "at least"),
         ("latency_warn", "latency_fail", "at most"))


def _threshold_range(key: str, value: float, where: "_Locator") -> None:
    at = where.at(key, "[thresholds]")
    if key in FRACTIONS and value > 1:
        hint = f"write {value / 100:g} for {value:g}%" if value <= 100 else "write a fraction like 0.95"
        raise ExpectError(f"{at}: key 'thresholds.{key}' is {value:g}, a fraction of the reference is at most 1; "
                          f"{hint}")
    if key not in FRACTIONS and value < 1:
        raise ExpectError(f"{at}: key 'thresholds.{key}' is {value:g}, a multiple of the node's minimum is at "
                          "least 1; write e.g. 1.5 for 1.5x")


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
    for key in ("warn", "fail"):
        if key in vals and not 0 < vals[key] <= 1:
            v = vals[key]
            hint = f"write {v / 100:g} for {v:g}%" if 1 < v <= 100 else "write a fraction like 0.85"
            raise ExpectError(f"{at(key)}: key 'limit.{key}' is {v:g}, a fraction of the peak (0 to 1); {hint}")
    for (warn, fail), above in zip(BOUNDS, (False, False, True)):
        if warn in vals and fail in vals and (vals[warn] > vals[fail] if above else vals[warn] < vals[fail]):
            raise ExpectError(f"{at(warn)}: key 'limit.{warn}' = {vals[warn]:g} must be "
                              f"{'at most' if above else 'at least'} 'limit.{fail}' = {vals[fail]:g} "
                              "(warn comes before fail); swap them")


# [fleet]: each key's type and what its numbers may be (fractions of a median or of the best pair, a multiple
# of the lowest latency, a count of nodes; nan, inf, 0 and negative values passed once and drained healthy
# nodes or none)
_FRACTION = (float, lambda v: 0 < v <= 1, "a fraction of the fleet median, above 0 and at most 1")
_SIGMAS = (float, lambda v: 0 < v <= 100, "a number of sigmas, above 0 and at most 100")
FLEET_KEYS = {"warn": _FRACTION, "fail": _FRACTION,
              "link_bad": (float, lambda v: 0 < v <= 1, "a fraction of the best pair, above 0 and at most 1"),
              "link_latency": (float, lambda v: 1 <= v <= 1e6, "a multiple of the lowest pair latency, 1 to 1e6"),
              "rail_bad": (float, lambda v: 0 < v <= 1, "a fraction of the other rail's bandwidth, above 0 and at most 1"),
              "rail_latency": (float, lambda v: 1 <= v <= 1e6, "a multiple of the other rail's latency, 1 to 1e6"),
              "rail_tail": (float, lambda v: 1 <= v <= 1e6,
                            "a multiple of the other rail's slowest round trips, 1 to 1e6"),
              "min_nodes": (int, lambda v: 1 <= v <= 1 << 20, "a count of nodes, 1 to 1048576"),
              "z_fail": _SIGMAS, "z_fail_below_fail": _SIGMAS}
RULE_KEYS = {"key": (str, None, ""), "class": (str, None, ""), "warn": _FRACTION, "fail": _FRACTION}


def _fleet(table: Any, where: "_Locator") -> dict[str, Any]:
    """[fleet] and its [[fleet.rule]] rows, each value typed and in its range."""
    if not isinstance(table, dict):
        raise ExpectError(f"{where.at('fleet')}: fleet must be a table, written [fleet]")
    out = {k: _fleet_value(where.at(k, "[fleet]"), f"fleet.{k}", v, FLEET_KEYS) for k, v in table.items() if k != "rule"}
    rows = table.get("rule", [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ExpectError(f"{where.at('rule')}: fleet.rule must be an array of tables, written [[fleet.rule]]")
    out["rule"] = tuple({k: _fleet_value(where.at(k, "[[fleet.rule]]", i), f"fleet.rule[{i}].{k}", v, RULE_KEYS)
                         for k, v in r.items()} for i, r in enumerate(rows))
    return out


def _fleet_value(at: str, name: str, value: Any, keys: dict[str, tuple[type, Any, str]]) -> Any:
    kind, ok, what = keys.get(name.rpartition(".")[2], (None, None, ""))
    if kind is None:
        raise ExpectError(f"{at}: unknown key {name} (known: {', '.join(sorted(FLEET_KEYS))}; "
                          f"in [[fleet.rule]]: {', '.join(sorted(RULE_KEYS))})")
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ExpectError(f"{at}: {name} = {value!r} must be a {kind.__name__}")
    if ok is not None and not ok(value):
        raise ExpectError(f"{at}: {name} = {value!r} must be {what}")
    return value


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
