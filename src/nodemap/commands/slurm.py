"""`nodemap slurm`: this node's Slurm configuration from its topology."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
Write this node's Slurm configuration from its discovered topology (or a
saved one, --input): `gres` prints gres.conf lines for the GPUs
(Name=gpu Type=MODEL File=/dev/nvidiaN Cores=LOCAL CORES Links=NVLINKS)
and the fabric NICs (Name=nic Type=NAME Count=1 Cores=LOCAL CORES), with
the slurm.conf Gres= they need; `features` prints the node's features
(GPU model and count, NVLink class, NIC count and rate, NUMA layout) as
the Features= to add to the node's own slurm.conf NodeName line (a second
NodeName line for one node is fatal to slurmctld). Cores are logical core indexes
(Core L#, as lstopo -l and gres.conf number them). docs/slurm.md."""

EPILOG = """\
examples:
  nodemap slurm gres                         this node's gres.conf lines
  nodemap slurm gres --input node.json       a saved node (topo --export, hwloc XML, sysfs snapshot)
  nodemap slurm features --node-name gpu017  Features=a100-sxm4-40gb,gpus8,... for NodeName=gpu017's line
  nodemap slurm gres --json                  the same as JSON
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="slurm_cmd", metavar="ACTION")
    for name, help_ in (("gres", "gres.conf lines for the GPUs and NICs, with their local cores"),
                        ("features", "the node's features, to add to its slurm.conf NodeName line")):
        s = sub.add_parser(name, help=help_, description=help_, epilog=EPILOG)
        s.add_argument("--input", metavar="PATH",
                       help="a saved node (topology JSON, hwloc XML, sysfs snapshot, or a check document: its "
                            "topology) instead of this one")
        s.add_argument("--node-name", metavar="NAME",
                       help="the NodeName (default $SLURMD_NODENAME, else the topology's short hostname)")
        s.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(_slurm_parser=p)


def run(args: argparse.Namespace) -> int:
    import json
    import os

    from ..launcher import node_name
    from ..outfile import json_text
    from ..slurm import config

    if args.slurm_cmd is None:
        args._slurm_parser.print_help()
        return 2
    topo = _topology(args.input)
    name = node_name(os.environ, args.node_name, for_slurm=True, hostname=topo.machine.hostname or None)
    if args.slurm_cmd == "gres":
        items = config.gres(topo)  # (features need none of it: its Links= are GPUs x GPUs numbers)
        if args.json:
            print(json_text({"node": name, "gres": items, "lines": [g.line() for g in items],
                             "node_gres": config.gres_counts(items)}))
            return 0
        if not items:  # a GresTypes=gpu for a node with nothing to share would be a line to undo
            print(f"# {name} has no GPU and no RDMA NIC: no GRES to configure (no gres.conf lines, no Gres= in "
                  "slurm.conf)")
            return 0
        print(f"# gres.conf for {name} (nodemap slurm gres); slurm.conf: GresTypes="
              f"{','.join(dict.fromkeys(g.name for g in items))}, and Gres={config.gres_counts(items)} added to "
              f"NodeName={name}'s existing line")
        for g in items:
            print(f"NodeName={name} {g.line()}")
        return 0
    if args.json:
        print(json.dumps({"node": name, "features": config.features(topo), "word": config.features_line(topo)},
                         indent=1))
    else:
        print(config.merge_note(name, "this Features="))
        print(config.features_line(topo))
    return 0


def _topology(path: str | None):
    if path is None:  # the whole node, not this process's share: the configuration is the node's
        from ..topology.discover import discover

        return discover()
    from ..bench.harness import read_topology

    return read_topology(path, "--input")
