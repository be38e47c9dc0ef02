"""The options and the entry of `nodemap check --fleet` (the check command
hands over to `run` when --fleet or --from is given)."""

from __future__ import annotations

import argparse
import os
import time

from ..errors import NodemapError
from ..units import seconds

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..check.document import CheckFile

FLEET_HELP = """\
fleet (--fleet, under the launcher, all ranks of all nodes):
  srun --mpi=pmi2 -N 64 --ntasks-per-node=4 nodemap check --fleet -o DIR
  mpirun -npernode 4 nodemap check --fleet -o DIR      (Open MPI)
  mpiexec -ppn 4 -f hosts nodemap check --fleet -o DIR (MPICH/Hydra)
  flux run -N 64 --tasks-per-node=4 nodemap check --fleet -o DIR
  mpiexec -n 256 --ppn 4 nodemap check --fleet -o DIR  (PALS)
One leader per node runs the node check; rank 0 writes DIR/nodes.jsonl (one
line per node as it finishes), then DIR/fleet.json and DIR/fleet.html:
every figure as % of the fleet median for the same GPU (or CPU) model,
pair bandwidth/latency between nodes, topology differences, and the ranked
list of nodes to drain. `--from DIR...` builds the same from node documents
saved by separate jobs (nodemap check -o DIR on each node). docs/fleet.md."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fleet", FLEET_HELP)
    g.add_argument("--fleet", action="store_true",
                   help="check every node of the allocation over MPI and judge each against the fleet")
    g.add_argument("--from", dest="from_dirs", nargs="+", metavar="DIR",
                   help="build the fleet report from saved node documents instead of measuring")
    g.add_argument("--join-timeout", type=seconds, default=60.0, metavar="S",
                   help="seconds every rank has to join (default 60)")
    g.add_argument("--check-timeout", type=seconds, default=1800.0, metavar="S",
                   help="seconds every node has for its check; later ones are reported missing (default 1800)")
    g.add_argument("--pair-timeout", type=seconds, default=60.0, metavar="S",
                   help="seconds one node pair test may take (default 60)")
    g.add_argument("--no-pairs", action="store_true", help="skip the MPI pair tests between nodes")
    g.add_argument("--pair-size", default="4MiB", metavar="BYTES",
                   help="message size of the pair bandwidth test (default 4MiB; 16 per window)")
    g.add_argument("--pair-buffers", default="host,device", metavar="KINDS",
                   help="buffer kinds of the pair tests: host, device (GPU memory through CuPy: CUDA-aware MPI "
                        "where proven, else staged through pinned host memory; skipped without GPUs) "
                        "(default host,device)")
    g.add_argument("--no-html", action="store_true", help="write fleet.json only (large fleets, no matplotlib)")


def config(args: argparse.Namespace) -> "object":
    from ..check import expectations
    from . import pairtest
    from .driver import Config

    # a bad site file stops every rank here, in one line, before MPI starts
    th = expectations.load(args.expect).fleet_rules() if getattr(args, "expect", None) else expectations.fleet_defaults()
    size = _size(args.pair_size)
    return Config(outdir=args.output or f"nodemap-fleet-{time.strftime('%Y%m%d-%H%M%S')}",
                  level=getattr(args, "level", "quick"), expect=getattr(args, "expect", None),
                  join_timeout=args.join_timeout, check_timeout=args.check_timeout,
                  pair_timeout=args.pair_timeout, pairs=not args.no_pairs,
                  sizes=pairtest.Sizes(bw_bytes=size), buffers=_buffers(args.pair_buffers), thresholds=th,
                  html=not args.no_html,
                  json_out=getattr(args, "json", False), quiet=getattr(args, "quiet", False),
                  slurm=((args.slurm_drain == "dry-run", args.slurm_timeout) if getattr(args, "slurm_drain", None)
                         and not args.from_dirs else None))


def _size(text: str) -> int:
    from ..units import parse_size

    return parse_size(text, "--pair-size", minimum=1)


def _buffers(text: str) -> tuple[str, ...]:
    from ..bench.options import choices
    from .pairtest import KINDS

    return tuple(choices(text, KINDS, "--pair-buffers"))


def run(args: argparse.Namespace) -> int:
    from ..outfile import writable_folder
    from . import driver

    cfg = config(args)
    writable_folder(cfg.outdir, "--output", "the fleet report")
    if args.from_dirs:
        return driver.run_from(args.from_dirs, cfg)
    if getattr(args, "slurm_drain", None):
        import functools

        return driver.main(cfg, functools.partial(node_check, slurm=(
            args.slurm_drain == "dry-run", args.slurm_timeout, args.node_name)))
    return driver.main(cfg, node_check)


def node_check(node: str, level: str, expect: str | None, in_job: object = None,
               slurm: tuple[bool, float, str | None] | None = None) -> CheckFile:
    """What each node's leader runs: `nodemap check`'s own entry, silent
    (rank 0 reports each node as it finishes), as its JSON document; its
    MPI step is `in_job` (fleet/localpair.py: with the node's second rank).
    `slurm` (--slurm-drain: dry run, scontrol timeout, --node-name): the
    leader drains or resumes its own node on its own document, as `nodemap
    check --slurm-drain` does; what only the fleet sees (bad pairs, a part
    its peers have) rank 0 drains after the merge (fleet/drain.py)."""
    from ..check import expectations
    from ..check.node import run_check

    doc = run_check(level, expectations.load(expect), command=f"nodemap check --fleet --level {level}",
                    in_job=in_job)
    if slurm is not None:
        _drain(doc, *slurm)
    return doc.saved()


LOCK_WAIT = 10.0  # s a leader waits for its node's lock (a health check holds it ~1 s) before leaving it be


def _drain(doc, dry_run: bool, timeout: float, given: str | None) -> None:
    """One line on stderr: what was done to this node in Slurm, or why nothing."""
    import sys

    from ..launcher import node_name
    from ..slurm import drain, verdict

    try:
        name = node_name(os.environ, given, for_slurm=True)
        with drain.NodeLock(drain.runtime_dir(os.environ), name, wait=LOCK_WAIT, level=doc.level):
            said = drain.act(name, *verdict.health(doc), verdict.scope(doc), dry_run=dry_run, timeout=timeout)
    except NodemapError as e:  # scontrol, the lock, the node name: the document still counts, only the drain is off
        said = f"not acted on: {e}"
    print(f"nodemap check --fleet: slurm: {said}", file=sys.stderr, flush=True)
