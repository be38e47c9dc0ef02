"""Frozen records of plain Python: the Topology's and the plan's classes.

A record class declares its fields as annotations, with defaults; it gets
construction by position or keyword, frozen fields, equality and hash by
value, a repr naming every field, and `replace`. No msgspec and no typing:
`nodemap topo` imported both only for these classes, ~20 ms of its ~57
(benchmarks/results/topo_vs_lstopo_20261202c.md). Saved records are
decoded and checked field by field by topology/saved.py, from these same
declarations; `to_builtins` writes them.

A default is one shared value, so it must be immutable (a CpuSet, a tuple,
another record).
"""

from __future__ import annotations

from .cpuset import CpuSet

TYPE_CHECKING = False  # typing costs ~7 ms to import, more than `nodemap topo` reads
if TYPE_CHECKING:
    from typing import Any, TypeVar

    R = TypeVar("R", bound="Record")

__all__ = ["Record", "asdict", "defaults", "fields", "replace", "to_builtins"]


class _Declared(type):
    """Reads a record class's fields from its annotations (its bases' first), once, at class creation."""

    def __new__(mcls, name: str, bases: tuple, ns: dict, **kw: Any):
        cls = super().__new__(mcls, name, bases, ns, **kw)
        own = ns.get("__annotations__", {})
        cls._types = {**{n: t for b in reversed(bases) for n, t in getattr(b, "_types", {}).items()}, **own}
        cls._fields = tuple(cls._types)
        cls._defaults = {**{n: v for b in reversed(bases) for n, v in getattr(b, "_defaults", {}).items()},
                         **{n: ns[n] for n in own if n in ns}}
        late = [n for n in cls._fields[len(cls._fields) - len(cls._defaults):] if n not in cls._defaults]
        if late:  # as a function's parameters: positional construction fills the required ones
            raise TypeError(f"{name}: field {late[0]!r} without a default follows one with a default")
        return cls


class Record(metaclass=_Declared):
    """Base of the records (see the module's doc)."""

    # _types, _fields, _defaults: the class's, set by _Declared (not annotated here: they are no fields)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # (one generic __init__, no generated one per class: compiling 15 costs ~1 ms of every `nodemap topo`)
        values = dict(self._defaults)
        values.update(zip(self._fields, args))
        if kwargs:
            values.update(kwargs)
        if values.keys() != self._types.keys() or len(args) > len(self._fields) or (
                args and kwargs and not kwargs.keys().isdisjoint(self._fields[:len(args)])):
            raise TypeError(_wrong(type(self), args, kwargs))
        _set(self, "__dict__", values)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"immutable type: {type(self).__name__!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"immutable type: {type(self).__name__!r}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        values = self.__dict__
        return hash(tuple(values[n] for n in self._fields))

    def __repr__(self) -> str:
        values = self.__dict__
        return f"{type(self).__name__}({', '.join(f'{n}={values[n]!r}' for n in self._fields)})"


_set = object.__setattr__  # (a record's own __setattr__ refuses every field)


def _wrong(cls: type[Record], args: tuple, kwargs: dict[str, Any]) -> str:
    """What is wrong with the arguments of a record's construction."""
    names = cls._fields
    if len(args) > len(names):
        return f"{cls.__name__} takes at most {len(names)} positional arguments ({len(args)} given)"
    given = [*names[:len(args)], *kwargs]
    wrong = next((n for n in kwargs if n not in cls._types or given.count(n) > 1), None)
    if wrong is not None:
        return f"{cls.__name__}: unexpected or repeated argument {wrong!r}"
    missing = next(n for n in names if n not in given and n not in cls._defaults)
    return f"{cls.__name__}: missing required argument {missing!r}"


def replace(record: R, **changes: Any) -> R:
    """A copy of `record` with `changes` to its fields."""
    cls = type(record)
    wrong = next((n for n in changes if n not in cls._types), None)
    if wrong is not None:
        raise TypeError(f"{cls.__name__} has no field {wrong!r}")
    new = cls.__new__(cls)
    _set(new, "__dict__", {**record.__dict__, **changes})
    return new


def fields(cls: type[Record]) -> dict[str, Any]:
    """A record class's fields and their declared types, in order (strings where its module postpones annotations)."""
    return cls._types


def defaults(cls: type[Record]) -> dict[str, Any]:
    """A record class's fields that have a default, and their defaults."""
    return cls._defaults


def asdict(record: Record) -> dict[str, Any]:
    """A record's fields and values, in order (nested records kept as they are)."""
    return {n: getattr(record, n) for n in record._fields}


def to_builtins(value: Any) -> Any:
    """A record as JSON's types: nested records as objects, a CpuSet as its list ("0-3,8"), tuples as lists."""
    if isinstance(value, Record):
        return {n: to_builtins(v) for n, v in asdict(value).items()}
    if isinstance(value, tuple):
        return [to_builtins(v) for v in value]
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, CpuSet):
        return value.format()
    raise NotImplementedError(f"{type(value).__name__} in a record")
