"""`nodemap bench KIND`: dispatch to one benchmark module per measurement.

Each module in nodemap.bench.kinds.BENCHES provides its `Options` (its
command line: bench/options.py) and `plan(options)` (bench/driver.py runs
it). Its parser is built from its options module alone (bench/kinds.py);
the module is imported to run.
"""

from __future__ import annotations

import argparse

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
    add_commands(p.add_subparsers(dest="bench", metavar="KIND"), declared, kind, "_bench_options")
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


def _launcher_rank() -> int:
    """This process's rank as the launcher set it (before MPI starts); -1 if none or unreadable."""
    import os

    from .. import env
    from ..errors import NodemapError

    try:
        rank = env.global_rank(os.environ)
    except NodemapError:  # a malformed rank variable: this process says the error
        return -1
    return -1 if rank is None else rank
