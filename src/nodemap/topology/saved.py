"""Saved records (a Topology export, a plan) read back, every field checked.

The records are plain classes (record.py); msgspec checks a document
against a Struct made here from each record class's own declarations (its
"mirror": the same fields, types and defaults, nested records as their
mirrors), so a malformed file is one InputError naming the field path
("numa_nodes[2].cpuset is int, not text"), as records.py says every
document's damage. The checked mirror is then copied into the record.
Nothing here is on `nodemap topo`'s own path: only reading a saved file
imports it (with msgspec).
"""

from __future__ import annotations

import functools
import sys
import typing

import msgspec

from .. import records
from ..errors import InputError
from .cpuset import CpuSet
from .record import Record, defaults, fields

R = typing.TypeVar("R", bound=Record)


def decode(where: str, data: bytes | str, cls: type[R], schema: str, what: str, got: str | None = None) -> R:
    """The `cls` record saved as JSON (with a "schema" field), every field checked; a document of another
    schema (`got`, else read here) is refused first, so a foreign file is named as one, not by its first
    unknown field."""
    if isinstance(data, str):  # (to_json's text)
        data = data.encode("utf-8", "surrogatepass")
    check_schema(where, records.schema_of(where, data, what) if got is None else got, schema, what)
    return record(records.decode(where, data, document(cls, schema), what, dec_hook=cpuset))


def check_schema(where: str, got: object, schema: str, what: str) -> None:
    if got != schema:
        raise InputError(where, f"not a {what} (schema {got!r}, expected {schema!r}); give one as nodemap wrote it")


# --- the mirrors ---------------------------------------------------------------


@functools.cache
def mirror(cls: type[Record]) -> type[msgspec.Struct]:
    """A Struct of `cls`'s fields that refuses unknown ones (a file of another schema or a typo is not read
    as defaults). Every number with a fraction must be finite: JSON holds no other (NaN, written by
    Python's json, is refused)."""
    module = vars(sys.modules[cls.__module__])
    spec = []
    for name, tp in fields(cls).items():
        typed = _mirrored(eval(tp, module) if isinstance(tp, str) else tp)  # (a module postponing annotations)
        spec.append((name, typed, defaults(cls)[name]) if name in defaults(cls) else (name, typed))
    return msgspec.defstruct(cls.__name__, spec, forbid_unknown_fields=True, namespace={"_record": cls},
                             module=__name__)


@functools.cache
def document(cls: type[Record], schema: str) -> type[msgspec.Struct]:
    """The mirror of a record saved as a document, with its schema. A field of another document typed so is
    checked in that document's own pass, its damage named by its whole path there ("topology.numa_nodes[2].
    cpuset"; that decode's dec_hook is `cpuset`); `record` makes it the record."""
    return msgspec.defstruct(cls.__name__, [("schema", typing.Literal[schema])], bases=(mirror(cls),),
                             kw_only=True, module=__name__)


def _mirrored(tp: object) -> object:
    """A declared type with records as their mirrors and floats as records.Finite."""
    if isinstance(tp, type) and issubclass(tp, Record):
        return mirror(tp)
    if tp is float:
        return records.Finite
    args = typing.get_args(tp)
    if not args:
        return tp
    inner = tuple(a if a is Ellipsis else _mirrored(a) for a in args)
    return tuple[inner] if typing.get_origin(tp) is tuple else typing.Union[inner]  # (X | None: the only other)


def record(value: object) -> object:
    """A checked mirror as its record (nested ones too)."""
    cls = getattr(type(value), "_record", None)
    if cls is not None:
        return cls(**{name: record(getattr(value, name)) for name in fields(cls)})
    if type(value) is tuple and value and not isinstance(value[0], (int, str)):
        return tuple(map(record, value))
    return value


def cpuset(tp: type, obj: object) -> CpuSet:
    """msgspec's dec_hook: a CPU list ("0-3,8") as a CpuSet."""
    if tp is not CpuSet:
        raise NotImplementedError(f"{tp} in a record")
    if not isinstance(obj, str):
        raise TypeError(f"Expected `str`, got `{type(obj).__name__}`")
    return CpuSet.parse(obj)  # its CpuSetError is a ValueError: named with the field
