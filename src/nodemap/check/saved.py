"""A saved check document or bench result file checked before it is used.

`report` and `check --fleet --from` read documents nodemap wrote, but a
file can be damaged, foreign or hostile: a verdict that is markup reached
the HTML page, a figure whose value is text crashed the renderer. Each
record is checked against the fields of the dataclass it becomes (their
annotations: str, float, int, bool, optional, lists of text) and each
enumeration (verdicts, causes, areas) against its values; the first
problem is one InputError naming the file and the field path
("figures[3].verdict").
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..bench import resultfile
from ..errors import InputError
from .figures import AREAS, Figure
from .findings import Finding
from .inventory import Check, Skipped
from .verdicts import RANK

CAUSES = ("configuration", "hardware")

_NUMBER = (int, float)
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "str": ((str,), "text"),
    "float": (_NUMBER, "a number"),
    "int": ((int,), "an integer"),
    "bool": ((bool,), "true or false"),
    "float | None": (_NUMBER + (type(None),), "a number or null"),
    "dict[str, Any]": ((dict,), "an object"),
    "list[str]": ((list,), "a list of text"),
    "tuple[str, ...]": ((list,), "a list of text"),
    "tuple[float, ...]": ((list,), "a list of numbers"),
}


class _Bad(Exception):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field} {problem}")


def check_document(d: dict[str, Any], name: str) -> None:
    """A check document (nodemap.check/1) as `document.from_dict` reads it."""
    try:
        _document(d, name)
    except _Bad as e:
        raise InputError(name, f"field {e}; give a check document as nodemap wrote it") from None


def _document(d: dict[str, Any], name: str) -> None:
    _fields(d, "", {"host": "str", "started": "str", "finished": "str", "level": "str", "command": "str",
                    "complete": "bool", "environment": "dict[str, Any]", "extra": "dict[str, Any]"}, required=())
    for i, r in enumerate(_list(d, "results", "")):
        resultfile.convert(name, r, f"results[{i}]", "check document")
    for i, f in enumerate(_list(d, "figures", "")):
        at = f"figures[{i}]"
        _record(Figure, f, at)
        _fields(f, at + ".", {"verdict": "str", "rule": "str", "expectation": "dict[str, Any]",
                              "relative": "float | None"}, required=("verdict", "rule"))
        _enum(f, "verdict", tuple(RANK), at)
        _enum(f, "area", AREAS, at)
    for i, c in enumerate(_list(d, "checks", "")):
        at = f"checks[{i}]"
        _record(Check, c, at)
        _enum(c, "verdict", tuple(RANK), at)
        _enum(c, "cause", ("",) + CAUSES, at)
        _enum(c, "area", AREAS, at)
    for i, f in enumerate(_list(d, "findings", "")):
        at = f"findings[{i}]"
        _record(Finding, f, at)
        _enum(f, "verdict", tuple(RANK), at)
        _enum(f, "cause", CAUSES, at)
        _enum(f, "area", AREAS, at)
    for i, s in enumerate(_list(d, "skipped", "")):
        _record(Skipped, s, f"skipped[{i}]")


def _record(cls: type, d: Any, at: str) -> None:
    """`d` holds every field of dataclass `cls` without a default, and each
    field it holds has the field's type (fields unknown to nodemap are kept)."""
    _object(d, at)
    fields = dataclasses.fields(cls)
    required = tuple(f.name for f in fields
                     if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
    _fields(d, at + ".", {f.name: f.type for f in fields}, required)


def _fields(d: dict[str, Any], at: str, types: dict[str, str], required: tuple[str, ...]) -> None:
    for name in required:
        if name not in d:
            raise _Bad(at + name, "is missing")
    for name, annotation in types.items():
        if name not in d or annotation not in _TYPES:
            continue
        kinds, what = _TYPES[annotation]
        v = d[name]
        if not isinstance(v, kinds) or (isinstance(v, bool) and bool not in kinds):
            raise _Bad(at + name, f"is {_show(v)}, not {what}")
        if annotation.endswith("str, ...]") or annotation == "list[str]":
            if not all(isinstance(x, str) for x in v):
                raise _Bad(at + name, f"is {_show(v)}, not {what}")


def _list(d: dict[str, Any], key: str, at: str) -> list[Any]:
    v = d.get(key, [])
    if not isinstance(v, list):
        raise _Bad(at + key, f"is {_show(v)}, not a list")
    return v


def _object(d: Any, at: str) -> None:
    if not isinstance(d, dict):
        raise _Bad(at, f"is {_show(d)}, not an object")


def _enum(d: dict[str, Any], key: str, choices: tuple[str, ...], at: str) -> None:
    if key in d and d[key] not in choices:
        raise _Bad(f"{at}.{key}", f"is {_show(d[key])}, not one of {', '.join(c or repr(c) for c in choices)}")


def _show(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"
