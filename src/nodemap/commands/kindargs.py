"""A bench kind's command line, built from its Options: bench/options.py
declares each option once (a dataclass field with its help, metavar and
parser), here argparse is made of it. Used for `nodemap bench KIND` (and its
--help without the kind's module) and by the tests' parsers of a kind."""

from __future__ import annotations

import argparse
import dataclasses
import inspect  # dataclasses imports it

from ..bench.options import flag

TYPE_CHECKING = False  # typing costs ~3 ms of every `bench KIND --help`
if TYPE_CHECKING:
    from typing import Any


def add_options(p: argparse.ArgumentParser, cls: type) -> None:
    """The command line of the kind whose Options is `cls` (bench/options.py declares it): its own options
    (the most derived class's first, each class's in declaration order),
    the shared ones (Common's, less the kind's `not_offered`), then
    --json, -o and -q."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in getattr(cls, "not_offered", ())}
    for f in fields.values():
        if "cli" not in f.metadata:
            raise TypeError(f"{cls.__module__}.{cls.__qualname__}.{f.name}: declare it with options.option()")
    own = dict.fromkeys(n for c in cls.__mro__ for n in inspect.get_annotations(c)
                        if n in fields and not fields[n].metadata["cli"]["shared"])
    groups: dict[str, Any] = {}
    for f in [fields[n] for n in own] + [f for f in fields.values() if f.metadata["cli"]["shared"]]:
        cli = f.metadata["cli"]
        if cli["group"] and cli["group"] not in groups:
            groups[cli["group"]] = p.add_mutually_exclusive_group()
        at = groups[cli["group"]] if cli["group"] else p
        kw = _argparse(f, cli)
        shown = argparse.SUPPRESS if cli["hidden"] else cli["help"]
        at.add_argument(flag(f), *cli["aliases"], dest=f.name, help=shown, **kw)
        if cli["old"]:
            at.add_argument(*cli["old"], dest=f.name, **kw | {"default": argparse.SUPPRESS}, help=argparse.SUPPRESS)
    add_output(p, getattr(cls, "ranks", False))


def _argparse(f: dataclasses.Field, cli: dict[str, Any]) -> dict[str, Any]:
    """add_argument's action, type, default, metavar and choices of field `f`."""
    kw: dict[str, Any] = {"default": f.default}
    kind = (f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")).replace("| None", "").strip()
    if cli["spelled"]:
        kw["action"] = Spelled
    elif kind == "bool":
        kw["action"] = "store_true"
    elif kind.startswith("tuple"):  # repeatable: argparse appends to a list; driver.options makes it a tuple
        kw |= {"action": "append", "default": list(f.default)}
    elif cli["parse"] or kind in ("int", "float"):
        kw["type"] = cli["parse"] or {"int": int, "float": float}[kind]
    return kw | {k: cli[k] for k in ("metavar", "choices") if cli[k] is not None}


def add_output(p: argparse.ArgumentParser, ranks: bool = False) -> None:
    """--json, -o/--output, -q/--quiet: where the ResultSet goes (`ranks`: rank 0's under MPI)."""
    p.add_argument("--json", action="store_true",
                   help="print the result set as JSON on stdout" + (" (rank 0)" if ranks else ""))
    p.add_argument("-o", "--output", metavar="FILE",
                   help="save the result set as JSON to FILE, updated after every case (- = stdout)"
                        + (" (rank 0)" if ranks else ""))
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


class Spelled(argparse.Action):
    """Stores the value and which spelling the user typed (--topology or its
    alias --input), so an error names the option as it was written."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"_{self.dest}_option", option_string)
