"""Expectations: practical limits per path (with their sources) and the
thresholds of the verdict rules, read from data.

The table ships as expectations.toml beside this module; a site file given
with `--expect` has the same keys: its [thresholds] replace the shipped
ones key by key and its [[limit]] rows are tried before the shipped rows,
so a site can tighten one GPU model or one path without code. A broken
site file is one line naming the file, line and key (ExpectError, exit 2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from ..errors import NodemapError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

SCHEMA = "nodemap.expectations/1"
THRESHOLDS = ("relative_warn", "relative_fail", "latency_warn", "latency_fail", "compare_warn", "compare_fail")
LIMIT_KEYS = {"kind": str, "match": str, "warn": float, "fail": float, "warn_below": float, "fail_below": float,
              "warn_above": float, "fail_above": float, "peak": float, "source": str}
BOUNDS = (("warn", "fail"), ("warn_below", "fail_below"), ("warn_above", "fail_above"))


class ExpectError(NodemapError):
    """A site expectations file that cannot be used: file, line and key named."""


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

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class Expectations:
    thresholds: dict[str, float]
    limits: tuple[Limit, ...]
    sources: tuple[str, ...] = field(default=("nodemap",))  # the files merged, site last

    def limit_for(self, kind: str, part: str) -> Limit | None:
        return next((lim for lim in self.limits if lim.applies(kind, part)), None)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "sources": list(self.sources), "thresholds": dict(self.thresholds),
                "limits": [lim.to_dict() for lim in self.limits]}


def shipped() -> Expectations:
    text = resources.files(__package__).joinpath("expectations.toml").read_text()
    return parse(text, "nodemap/check/expectations.toml", "nodemap")


def load(site: str | None = None) -> Expectations:
    """The shipped table, with a site file's overrides when given."""
    base = shipped()
    if site is None:
        return base
    try:
        with open(site, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ExpectError(f"--expect {site}: cannot read it ({e.strerror or e}); give a readable TOML file")
    except UnicodeDecodeError:
        raise ExpectError(f"--expect {site}: not UTF-8 text; give a TOML file") from None
    return merge(base, parse(text, site, site, partial=True))


def merge(base: Expectations, site: Expectations) -> Expectations:
    return Expectations({**base.thresholds, **site.thresholds}, site.limits + base.limits,
                        base.sources + site.sources)


def parse(text: str, name: str, origin: str, partial: bool = False) -> Expectations:
    """Parse and validate; `partial` allows a subset of thresholds (a site file)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ExpectError(f"{name}: not valid TOML: {e}") from None
    where = _Locator(text, name)
    unknown = set(data) - {"schema", "thresholds", "limit", "fleet"}  # [fleet]: read by fleet/merge.py
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
    return Expectations(thresholds, limits, (origin,))


def _thresholds(table: Any, where: "_Locator", partial: bool) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ExpectError(f"{where.at('thresholds')}: 'thresholds' must be a table, written [thresholds]")
    out = {}
    for key, value in table.items():
        if key not in THRESHOLDS:
            raise ExpectError(f"{where.at(key, '[thresholds]')}: unknown key 'thresholds.{key}'; "
                              f"known: {', '.join(THRESHOLDS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ExpectError(f"{where.at(key, '[thresholds]')}: key 'thresholds.{key}' must be a positive "
                              f"number, got {value!r}")
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
        ok = isinstance(value, str) if want is str else (not isinstance(value, bool) and isinstance(value, (int, float)))
        if not ok:
            raise ExpectError(f"{at(key)}: key 'limit.{key}' must be {'text' if want is str else 'a number'}, "
                              f"got {value!r}")
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
    return Limit(kind=row["kind"], match=row.get("match", "."), source=row["source"], origin=origin, **vals)


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
