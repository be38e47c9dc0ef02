"""One module per command: DESCRIPTION, EPILOG, add_arguments(parser), run(args)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs ~2 ms of every `nodemap topo` (tests/test_topology_record.py)
if TYPE_CHECKING:
    import argparse


def add_command(sub, name: str, mod, help_: str) -> argparse.ArgumentParser:
    """The parser of one (sub)command from its module: DESCRIPTION, EPILOG,
    add_arguments; errors in its arguments are reported by this parser, with
    its own usage line."""
    import argparse

    sp = sub.add_parser(name, help=help_, description=getattr(mod, "DESCRIPTION", help_),
                        epilog=getattr(mod, "EPILOG", None), formatter_class=argparse.RawDescriptionHelpFormatter)
    mod.add_arguments(sp)
    sp.set_defaults(_parser=sp)
    return sp
