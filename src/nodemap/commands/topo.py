"""`nodemap topo`: show the node as a tree, a GPU/NIC path matrix, or JSON."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

DESCRIPTION = """\
Show this node (or a saved one): packages, NUMA nodes with memory, L3
groups, cores and PUs as ranges, GPUs and NICs under the NUMA node they are
local to. --matrix shows the path between every two GPUs/NICs the way
`nvidia-smi topo -m` does (NV#, PIX, PXB, PHB, NODE, SYS) with CPU and
NUMA affinity."""

EPILOG = """\
examples:
  nodemap topo                              this machine as a tree
  nodemap topo --matrix                     GPU/NIC path matrix and legend
  nodemap topo --json > node.json           the full model as JSON
  nodemap topo --export node.json           same, written atomically to a file
  nodemap topo --input node.json --matrix   a saved node, shown elsewhere
  nodemap topo --input lstopo.xml           an hwloc XML export (lstopo --of xml)
  nodemap topo --input snapshot.tar.bz2     a sysfs snapshot (directory or tarball)
  nodemap topo --input check.json           the node a nodemap check document holds
  nodemap topo --source hwloc               this machine read through lstopo

sources (--source, for this machine):
  auto   sysfs on Linux + the allowed set + AMD SMI and NVML where present (default)
  sysfs  /sys only;  hwloc  lstopo-no-graphics;  nvml  sysfs + NVML;  amdsmi  sysfs + AMD SMI
"""


SOURCES = ("auto", "sysfs", "hwloc", "nvml", "amdsmi")  # = nodemap.topology.discover.SOURCES


# The options, declared once: add_arguments builds argparse's parser from them, and a command line
# made only of them is read without argparse (cli.plain_args: argparse's import and parser are ~15% of
# `nodemap topo`). (option, metavar: None for a flag, choices, default, help)
OPTIONS = (
    ("--matrix", None, None, False, "GPU/NIC path matrix (like nvidia-smi topo -m)"),
    ("--json", None, None, False, "print the topology as JSON (with --matrix: add the paths)"),
    ("--input", "PATH", None, None, "read a saved node: hwloc XML, sysfs snapshot dir/tarball, nodemap JSON (topo --export) "
                                    "or a check document (check.json: its topology)"),
    ("--source", "", SOURCES, "auto", "how to read this machine (default: auto)"),
    ("--export", "FILE", None, None, "also write the topology JSON to FILE (atomically)"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    for option, metavar, choices, default, help_ in OPTIONS:
        if metavar is None:
            p.add_argument(option, action="store_true", help=help_)
        else:  # "": argparse's own (the choices)
            p.add_argument(option, metavar=metavar or None, choices=choices, default=default, help=help_)


def run(args: argparse.Namespace) -> int:
    from ..topology.discover import discover

    if args.export:  # checked before reading the node: a bad path costs nothing
        from ..outfile import check, write

        check(args.export, "--export")
    topo = discover(args.input, args.source)
    if args.export:
        write(args.export, topo.to_json() + "\n", "--export")
    if args.json:
        print(_json(topo, args.matrix))
    elif args.matrix:
        from ..topology.render import matrix

        print(matrix(topo), end="")
    else:
        from ..topology.render import tree

        print(tree(topo), end="")
    return 0


def _json(topo, with_matrix: bool) -> str:
    import json

    d = topo.to_dict()
    if not with_matrix:
        return json.dumps(d, indent=1)
    from ..topology.paths import matrix_to_dict, path_matrix

    return json.dumps({"topology": d, "paths": matrix_to_dict(path_matrix(topo))}, indent=1)
