"""`nodemap bench KIND`: dispatch to one benchmark module per measurement.

Each module in BENCHES provides `add_arguments(parser)` and `run(args) -> int`,
like a top-level command, and builds Results through nodemap.bench.harness.
"""

from __future__ import annotations

import argparse
import importlib


DESCRIPTION = """\
Measure a data path of this node against its hardware limit. Every number is
verified (outputs poisoned before, checked after), comes with its statistics
(best, median, spread over repetitions) and names the path it crossed and its
percentage of that path's peak."""

BENCHES: dict[str, tuple[str, str]] = {
    "memory": ("nodemap.bench.host_memory", "STREAM bandwidth for one thread order, or --sweep over thread orders"),
    "numa": ("nodemap.bench.numa", "NUMA bandwidth and idle-latency matrices (threads on node i, memory on node j)"),
    "latency": ("nodemap.bench.latency", "load latency against working-set size, L1 through DRAM"),
    "gpu": ("nodemap.bench.gpu_memory", "GPU memory bandwidth (BabelStream kernels) per GPU and all at once"),
    "copies": ("nodemap.bench.copies", "host<->device and device<->device copy matrices (copy engine and SM)"),
    "mpi": ("nodemap.bench.mpi_p2p", "MPI latency and bandwidth, host and GPU buffers, staged and CUDA-aware"),
    "nccl": ("nodemap.bench.collectives", "NCCL collectives: algbw and busbw per size"),
    "ring": ("nodemap.bench.ring", "1D periodic ring halo exchange over every GPU transport"),
    "placement": ("nodemap.bench.placement_bench", "data larger than one GPU: placement strategies compared"),
    "jacobi": ("nodemap.bench.jacobi", "2D Jacobi proxy app: step time per multi-GPU programming model, verified"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..cli import add_command

    sub = p.add_subparsers(dest="bench", metavar="KIND")
    for name, (modname, help_) in BENCHES.items():
        mod = importlib.import_module(modname)
        add_command(sub, name, mod, help_).set_defaults(_bench_module=mod)
    p.set_defaults(_bench_parser=p)


def run(args: argparse.Namespace) -> int:
    import sys

    from ..bench.harness import check_shared
    from ..errors import NodemapError
    from ..outfile import check

    mod = getattr(args, "_bench_module", None)
    if mod is None:
        args._bench_parser.print_help()
        return 2
    where = f"nodemap bench {args.bench}"  # the kind is named, as argparse names it in usage errors
    try:
        if getattr(args, "output", None):
            check(args.output)  # before any measurement: a bad path costs nothing
        check_shared(args)  # --repeats, --topology: before MPI, GPUs or measuring
    except NodemapError as e:
        if _launcher_rank() <= 0:  # under MPI every rank refuses alike; rank 0 says it
            print(f"{where}: error: {e}", file=sys.stderr)
        return e.exit_code
    try:
        return int(mod.run(args) or 0)
    except NodemapError as e:
        print(f"{where}: error: {e}", file=sys.stderr)
        return e.exit_code


def _launcher_rank() -> int:
    """This process's rank as the launcher set it (before MPI starts); -1 if none or unreadable."""
    import os

    from .. import env

    try:
        rank = env.global_rank(os.environ)
    except NodemapError:  # a malformed rank variable: this process says the error
        return -1
    return -1 if rank is None else rank
