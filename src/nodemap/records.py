"""Typed documents decoded and validated in one step: the one reader of every
saved nodemap document (DESIGN point 6).

A document's type (a msgspec Struct or a dataclass) says its fields; msgspec
decodes the bytes straight into it and checks every field on the way, ~8x
faster than json + from_dict (benchmarks/records_speed.py). Whatever is
wrong is one InputError naming the file and the field path
("results[3].stats.median is str, not a number"), never a traceback.

Not on the per-rank launch path (`nodemap run`, `show`, mapping/): only
readers and writers of documents import it. `Finite` and `finite` are here,
at the bottom, so a record's module (the watch monitor's timeline) needs
nothing above it to type its numbers.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any, Callable, TypeVar

import msgspec

from . import infile
from .errors import InputError

T = TypeVar("T")

# A number JSON can hold: NaN and Infinity (which Python's json writes) are refused at decode
Finite = Annotated[float, msgspec.Meta(ge=-1.7976931348623157e308, le=1.7976931348623157e308)]


def finite(record: Any, *names: str) -> None:
    """ValueError naming the first of `names` (a number, None, or a tuple of numbers) that is NaN or infinite."""
    for name in names:
        v = getattr(record, name)
        for x in v if isinstance(v, tuple) else () if v is None else (v,):
            if not math.isfinite(x):
                raise ValueError(f"{name} {'holds' if isinstance(v, tuple) else 'is'} {x}, not a finite number")

Hook = Callable[[type, Any], Any]  # msgspec's dec_hook: a value of a type msgspec does not know (CpuSet)

# msgspec's type names in the words the check document's reader has always used
_NAMES = {"float": "a number", "int": "an integer", "str": "text", "bool": "true or false", "object": "an object",
          "array": "a list", "null": "null", "float | null": "a number or null", "int | null": "an integer or null",
          "str | null": "text or null", "object | null": "an object or null"}


# What each of nodemap's documents is, by its schema's name without the version (any version is named): a
# reader given the wrong one says what it got, not only what it wanted. (name, what it is, what wrote it, where
# it goes); longest names first (watch.report before watch).
_KNOWN = (
    ("nodemap.watch.analysis/", "a watch analysis", "nodemap report DIR --json", ""),
    ("nodemap.watch.report/", "a watch report", "nodemap report DIR --json", ""),
    ("nodemap.report.compare/", "a compare document", "nodemap report --compare --json", ""),
    ("nodemap.watch/", "a watch timeline", "nodemap run --watch", "give its folder to nodemap report DIR"),
    ("nodemap.check/", "a check document", "nodemap check", ""),
    ("nodemap.fleet/", "a fleet summary", "nodemap check --fleet", "give the fleet's folder to nodemap check --from DIR"),
    ("nodemap.results/", "bench results", "nodemap bench", ""),
    ("nodemap.compare/", "a bindings comparison", "nodemap compare --json", ""),
    ("nodemap.topology/", "a topology export", "nodemap topo --export", "give it to --input FILE"),
    ("nodemap.expectations/", "an expectations file", "", "give it to --expect FILE"),
    ("nodemap.plan/", "a mapping plan", "nodemap plan", ""),
    ("nodemap.native/", "a native mapping plan", "nodemap plan --json", ""),
    ("nodemap.placement/", "a placement plan", "", ""),
    ("nodemap.runcache/", "nodemap run's plan cache", "", ""),
    ("nodemap.show/", "nodemap show's table", "nodemap show --json", ""),
)


def known(schema: str) -> str:
    """What a nodemap document of `schema` is ("a fleet summary (nodemap.fleet/2, from nodemap check --fleet):
    give the fleet's folder to nodemap check --from DIR"); "" for a schema nodemap does not write."""
    for prefix, noun, origin, use in _KNOWN:
        if schema.startswith(prefix):
            return f"{noun} ({schema}{', from ' + origin if origin else ''})" + (f": {use}" if use else "")
    return ""


def got(schema: str) -> str:
    """What a document of `schema` is, for an error: known(), else its schema, else that it has none."""
    return known(schema) or (f"schema {schema!r}" if schema else "no nodemap schema")


def schema_of(where: str, data: bytes, what: str) -> str:
    """The "schema" of a JSON object ("" when it has none). Damage is named
    as infile's reader names it (line, UTF-8 byte, nesting, digits)."""
    import msgspec

    try:
        schema = msgspec.json.decode(data, type=_head()).schema
        if schema:
            return schema
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        pass
    # no schema: not nodemap's, unless damaged (what json says of it names the damage)
    obj = _parse_slowly(where, data, what)
    if not isinstance(obj, dict):
        raise InputError(where, f"is a JSON {type(obj).__name__}, not a {what} (a JSON object is expected)")
    schema = obj.get("schema", "")
    return schema if isinstance(schema, str) else ""


@functools.cache
def _head() -> type:
    """A document's head: its schema, the rest skipped (a class made once, not per document)."""
    import msgspec

    class _Head(msgspec.Struct):
        schema: str = ""

    return _Head


def decode(where: str, data: bytes, type: type[T], what: str, dec_hook: Hook | None = None) -> T:
    """`data` (JSON) as a `type`, checked field by field."""
    import msgspec

    try:
        return msgspec.json.decode(data, type=type, dec_hook=dec_hook)
    except msgspec.ValidationError as e:
        raise InputError(where, f"{field_problem(e)}; give a {what} as nodemap wrote it") from None
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):  # (text that is not UTF-8)
        pass
    return convert(where, _parse_slowly(where, data, what), type, what, dec_hook=dec_hook)


def parse(where: str, data: bytes, what: str) -> Any:
    """JSON as Python objects, untyped (msgspec: ~7x json.loads on a node
    document); what it refuses is read as `decode` reads it."""
    import msgspec

    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        return _parse_slowly(where, data, what)


def _parse_slowly(where: str, data: bytes, what: str) -> Any:
    # Python's json writes NaN and Infinity, which JSON (and msgspec) refuse: nodemap's own files
    # may hold them, so they are read as json reads them; real damage is named by infile's reader
    # (line, UTF-8 byte, nesting, an integer of 4300 digits)
    return infile.parse_json(where, infile.decode(where, data, what), what)


def convert(where: str, obj: Any, type: type[T], what: str, at: str = "", dec_hook: Hook | None = None) -> T:
    """Python objects (from json, or a part of a document) as a `type`;
    `at` is where `obj` sits in its document ("results[3].params")."""
    import msgspec

    try:
        return msgspec.convert(obj, type, dec_hook=dec_hook)
    except msgspec.ValidationError as e:
        raise InputError(where, f"{field_problem(e, at)}; give a {what} as nodemap wrote it") from None
    except RecursionError:
        raise InputError(where, f"nested too deep to be a {what}; give one as nodemap wrote it") from None


def load(path: str, type: type[T], what: str, limit: int = infile.MAX_DOCUMENT, dec_hook: Hook | None = None) -> T:
    """A regular file of at most `limit` bytes (infile's checks) as a `type`."""
    return decode(path, infile.read(path, limit, what), type, what, dec_hook)


def field_problem(e: Exception, at: str = "") -> str:
    """msgspec's "Expected `float`, got `str` - at `$.results[3].stats.median`"
    as "field results[3].stats.median is str, not a number"."""
    text = str(e)
    text, _, path = text.partition(" - at `")
    key = path.startswith("key` in `")  # "- at `key` in `$.others`": one of that object's keys
    path = path.removeprefix("key` in `").rstrip("`").removeprefix("$").lstrip(".")
    path = ".".join(p for p in (at, path) if p).replace(".[", "[")
    said = _problem(text, path)
    return said.replace("field ", "a key of field ", 1) if key else said


def _problem(text: str, path: str) -> str:
    if text.startswith("Object missing required field `"):
        name = text.split("`")[1]
        return f"field {'.'.join(p for p in (path, name) if p)} is missing"
    if text.startswith("Expected `") and "`, got `" in text:
        want, got = text[len("Expected `"):].split("`, got `", 1)
        return f"field {path or 'the document'} is {got.rstrip('`')}, not {_NAMES.get(want, want)}"
    if text.startswith("Object contains unknown field `"):
        name = text.split("`")[1]
        return f"field {'.'.join(p for p in (path, name) if p)} is not one nodemap writes"
    if text.startswith(("Expected `float` >= -1.7976931348623157e+308", "Expected `float` <= 1.7976931348623157e+308")):
        return f"field {path} is not a finite number"  # NaN or Infinity where a Finite number is typed
    if text.startswith("Invalid enum value "):
        return f"field {path} is {text[len('Invalid enum value '):]}, not one of the values nodemap writes"
    return f"field {path or 'the document'}: {text[:1].lower() + text[1:]}"
