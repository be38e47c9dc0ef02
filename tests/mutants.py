"""Hypothesis strategies for damaged documents: a valid document (made by
nodemap's own writer) with one change anywhere in it, as a bad disk, a
hand edit or another tool's writer leaves it."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import strategies as st

# what a value is replaced with: every JSON type, numbers JSON cannot hold (json writes them), a huge one
VALUES = st.sampled_from(["text", "", 1.5, -1, 0, 10 ** 30, None, True, [], {}, [1, "a"], {"a": 1},
                          float("nan"), float("inf"), float("-inf")])


def paths(obj: Any, at: tuple = ()) -> list[tuple]:
    """Every place a value sits in `obj`, its root first."""
    out = [at]
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out += paths(v, at + (k,))
    return out


def _at(obj: Any, path: tuple) -> Any:
    for k in path:
        obj = obj[k]
    return obj


def change(doc: Any, path: tuple, remove: bool, value: Any = None) -> tuple[str, Any]:
    """(what was done, a copy of `doc` with the value at `path` removed, or replaced by `value`)."""
    d = copy.deepcopy(doc)
    parent = _at(d, path[:-1])
    if remove:
        del parent[path[-1]]
        return f"removed {list(path)}", d
    parent[path[-1]] = value
    return f"{list(path)} = {value!r}", d


@st.composite
def changed(draw, doc: Any) -> tuple[str, Any]:
    """(what was done, the document with one value replaced or one field/item removed)."""
    path = draw(st.sampled_from(paths(doc)[1:]))
    remove = draw(st.booleans())
    return change(doc, path, remove, None if remove else draw(VALUES))


@st.composite
def damaged(draw, doc: Any) -> tuple[str, bytes]:
    """(what was done, bytes): one change (`changed`), or the text cut short."""
    if draw(st.integers(0, 4)) == 0:
        text = json.dumps(doc).encode()
        n = draw(st.integers(0, len(text) - 1))
        return f"cut at byte {n}", text[:n]
    what, d = draw(changed(doc))
    return what, json.dumps(d).encode()
