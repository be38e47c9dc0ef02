"""`nodemap bench KIND`: dispatch to one benchmark module per measurement.

Each module in nodemap.bench.kinds.BENCHES provides its `Options` (its
command line: bench/options.py) and `plan(options)` (bench/driver.py runs
it). Its parser is built from its options module alone (bench/kinds.py);
the module is imported to run.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect  # dataclasses imports it

from ..bench.options import flag

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DESCRIPTION = """\
Measure a data path of this node against its hardware limit. Every number is
verified (outputs poisoned before, checked after), comes with its statistics
(best, median, spread over repetitions) and names the path it crossed and its
percentage of that path's peak."""


SUBCOMMANDS = True  # add_arguments takes the command line: only the kind named is imported


def add_arguments(p: argparse.ArgumentParser, words: list[str] | None = None) -> None:
    """The kinds' parsers, each from its options module (its help and
    Options), not from the kind's module; with `words` (the command line
    after `bench`), only the kind they name is built, the others are
    help-only stubs (`bench memory --help` imported all ten kinds: 0.6 s
    against 0.1 s for `topo --help`; then its kind's module, the driver and
    the topology model: 106 ms against 32 ms, on the 2-vCPU CI VM)."""
    from ..bench.kinds import BENCHES, options_module
    from . import add_commands

    kind = next((w for w in words if not w.startswith("-")), "") if words is not None else None
    # a stub's module is never imported: only the named kind's options module is looked up
    declared = {name: (options_module(module) if kind in (None, name) else module, help_)
                for name, (module, help_) in BENCHES.items()}
    add_commands(p.add_subparsers(dest="bench", metavar="KIND"), declared, kind, "_bench_options", build=add_options)
    p.set_defaults(_bench_parser=p)


def run(args: argparse.Namespace) -> int:
    import importlib
    import sys

    from ..bench.harness import check_shared
    from ..bench.kinds import BENCHES
    from ..errors import NodemapError
    from ..outfile import check

    if getattr(args, "bench", None) is None:
        args._bench_parser.print_help()
        return 2
    mod = importlib.import_module(BENCHES[args.bench][0])  # what measures: only now, not for --help
    where = f"nodemap bench {args.bench}"  # the kind is named, as argparse names it in usage errors
    try:
        if getattr(args, "output", None):
            check(args.output)  # before any measurement: a bad path costs nothing
        check_shared(args)  # --repeats, --topology: before MPI, GPUs or measuring
    except NodemapError as e:
        if _launcher_rank() <= 0:  # under MPI every rank refuses alike; rank 0 says it
            print(f"{where}: error: {e}", file=sys.stderr)
        return e.exit_code
    from ..bench.driver import main

    try:
        return main(mod, args)
    except NodemapError as e:
        print(f"{where}: error: {e}", file=sys.stderr)
        return e.exit_code


# --- a kind's command line, made of its Options (bench/options.py declares each option once) -------


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


def _launcher_rank() -> int:
    """This process's rank as the launcher set it (before MPI starts); -1 if none or unreadable."""
    import os

    from .. import env

    return env.global_rank_or(os.environ, -1)  # a malformed rank variable: this process says the error
