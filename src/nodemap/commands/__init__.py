"""One module per command: DESCRIPTION, EPILOG, add_arguments(parser), run(args)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms of every `nodemap topo` (tests/test_topology_record.py)
if TYPE_CHECKING:
    import argparse


def formatter(prog: str):
    """argparse's RawDescriptionHelpFormatter (cli.Parser's default), its width read by text.columns, not by
    shutil: argparse makes a formatter for every option it adds, to check its metavar."""
    import argparse

    from ..text import columns

    return argparse.RawDescriptionHelpFormatter(prog, width=columns(80) - 2)


def add_command(sub, name: str, mod, help_: str, words: list[str] | None = None, build=None) -> argparse.ArgumentParser:
    """The parser of one (sub)command from its module: DESCRIPTION, EPILOG,
    add_arguments (a bench kind: `build(parser, its Options)`); errors in its arguments are reported by this
    parser, with its own usage line. `words`: the rest of the command line, given to a
    module with subcommands (SUBCOMMANDS true) so it builds only the one named."""
    sp = sub.add_parser(name, help=help_, description=getattr(mod, "DESCRIPTION", help_),
                        epilog=getattr(mod, "EPILOG", None))
    if words is not None and getattr(mod, "SUBCOMMANDS", False):
        mod.add_arguments(sp, words)
    elif hasattr(mod, "add_arguments"):
        mod.add_arguments(sp)
    else:  # a bench kind: its command line is its Options' (bench/options.py)
        build(sp, mod.Options)
    sp.set_defaults(_parser=sp)
    return sp


def add_commands(sub, registry: dict[str, tuple[str, str]], only: str | None, module_dest: str,
                 words: list[str] | None = None, build=None) -> None:
    """A parser per entry of `registry` (name -> (module, help)), its module
    stored in `module_dest`; with `only`, every other entry is a help-only
    stub whose module is not imported (the per-rank launch time of `nodemap
    run`, `bench KIND --help` without importing every kind)."""
    import importlib

    for name, (modname, help_) in registry.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_)
            continue
        mod = importlib.import_module(modname)
        add_command(sub, name, mod, help_, words, build).set_defaults(**{module_dest: mod})
