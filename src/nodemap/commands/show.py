"""`nodemap show`: the binding in effect for every rank, with verdicts."""

from __future__ import annotations

import argparse
import sys

DESCRIPTION = """\
Report what each rank really got: host, rank, local rank, the PUs it may run
on and the one it runs on now, its memory policy, the GPUs its environment
lets it see (physical index, UUID, NUMA node), NIC and OpenMP variables, and
verdicts: a GPU not local to the rank's CPUs, CPUs spanning NUMA domains,
PUs shared with another rank of the node, more threads than PUs or an
OMP_NUM_THREADS that is not a count, a CUDA_VISIBLE_DEVICES or
ROCR_VISIBLE_DEVICES entry that names no GPU of the node, GPUs other than
the ones nodemap run planned (NODEMAP_GPUS), and with --threads, threads
that run outside the rank's PUs or share PUs.

Started by an MPI launcher with mpi4py installed, rank 0 gathers every row
and prints one table sorted by node and rank; otherwise each rank prints its
own line. Waits are bounded by --timeout: a broken MPI start ends with an
error, never a hang."""

EPILOG = """\
examples:
  mpiexec -n 4 nodemap run -- nodemap show        check what nodemap run applied
  srun --cpu-bind=cores nodemap show              check Slurm's own binding
  nodemap show --json                             this process, as JSON
  mpiexec -n 8 nodemap run -- nodemap show --threads   every OpenMP thread of every rank
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print rows as JSON")
    p.add_argument("--no-mpi", action="store_true", help="do not use MPI even under an MPI launcher")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="give up after S seconds of MPI start-up and gathering (default 60)")
    p.add_argument("--input", metavar="TOPO",
                   help="resolve GPUs and NUMA nodes on a saved node instead of this one (any file topo --input "
                        "reads: JSON export, check.json, hwloc XML, sysfs snapshot)")
    p.add_argument("--threads", action="store_true",
                   help="also one row per OpenMP thread (like xthi): the OpenMP runtime starts and binds the team "
                        "from OMP_NUM_THREADS/OMP_PLACES/OMP_PROC_BIND; each thread's CPU and PUs")


def run(args: argparse.Namespace) -> int:
    import os

    from .. import launcher
    from ..mapping import show
    from ..topology.discover import discover

    if not 0 < args.timeout <= 1e6:  # also refuses nan
        from ..errors import NodemapError

        raise NodemapError(f"--timeout {args.timeout:g} is out of range: give seconds above 0 (default 60)")
    topo = discover(args.input)
    comm = None
    if not args.no_mpi and launcher.launched(os.environ):
        with _deadline(args.timeout, "starting MPI (MPI_Init)"):
            comm = _mpi_comm(os.environ)
    if comm is not None and comm.Get_size() == 1:
        # a world of one: srun's tasks without a PMI (--mpi=pmi2; Debian's MpiDefault=none) each init
        # alone; the launcher's rank variable still tells them apart
        comm = None
        _alone_note(os.environ)
    rank = comm.Get_rank() if comm is not None else None
    row = show.own_row(topo, os.environ, rank, threads=args.threads)
    if comm is None:
        _print(args, show.judge([row], topo), show)
        return 0
    with _deadline(args.timeout, "gathering the rows of all ranks"):
        rows = comm.gather(row, root=0)
    if rows is not None:
        _print(args, show.judge(rows, topo), show)
    return 0


def _alone_note(env) -> None:
    from .. import env as launcher_env
    from ..launcher import ALONE_FIX, srun_tasks

    tasks = srun_tasks(env)
    if tasks > 1 and launcher_env.global_rank(env) == 0:
        print(f"nodemap show: note: MPI sees 1 rank of the {tasks} srun started ({ALONE_FIX}, gathering every row "
              "in one table); each task prints its own row", file=sys.stderr)


def _print(args, rows, show) -> None:
    # One write: where each rank prints its own rows, ranks' outputs share the launcher's stdout, and under
    # Open MPI (a pty, so line-buffered) print's line-by-line writes interleaved two ranks' JSON
    if args.json:
        import json

        text = json.dumps({"schema": "nodemap.show/1", "rows": show.sort_rows(rows)}, indent=1) + "\n"
    else:
        text = show.table(rows)
    sys.stdout.write(text)
    sys.stdout.flush()


def _deadline(seconds: float, what: str):
    """proc.deadline: MPI_Init holds the GIL, so only a watchdog outside the interpreter ends a hang."""
    from ..proc import deadline

    return deadline(seconds, f"nodemap show: error: {what} took more than {seconds:g} s: check that every rank "
                             "starts (the launch command, the MPI library), or pass --no-mpi")


def _mpi_comm(env):
    """COMM_WORLD when mpi4py imports and its library can join this launcher;
    else None (each rank prints its own row, with a note saying why)."""
    try:
        import mpi4py
    except ImportError:
        return None
    mpi4py.rc.threads = False
    mpi4py.rc.initialize = False  # the library is named before MPI_Init, which may abort the process
    mpi4py.rc.finalize = True
    from mpi4py import MPI

    from .. import env as launcher_env
    from ..launcher import foreign_mpi

    why = foreign_mpi(env, MPI.Get_library_version())
    if why:
        if launcher_env.global_rank(env) == 0:
            print(f"nodemap show: note: {why}; each rank prints its own row", file=sys.stderr)
        return None
    if not MPI.Is_initialized():
        MPI.Init()  # bounded by the caller's deadline
    return MPI.COMM_WORLD
