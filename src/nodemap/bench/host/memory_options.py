"""`nodemap bench memory`'s command line: its help, its Options (on
HostOptions, shared with `bench numa`: stream_options.py).
Light (bench/kinds.py): `bench memory --help` imports nothing that measures."""

from __future__ import annotations

from dataclasses import dataclass

from ..options import option
from .stream_options import KERNELS, HostOptions


DESCRIPTION = """\
STREAM bandwidth (copy, scale, add, triad, and a read-only sum) with one
pinned thread per CPU. Each array defaults to 4x the last-level caches of
the CPUs used, capped by free memory. --sweep measures the thread orders the
topology suggests (one thread per L3 group, core, PU, NUMA node, and thread
counts in spread order) and names the best one with its OpenMP environment.
GB = 1e9 bytes."""

EPILOG = """\
examples:
  nodemap bench memory                        one thread per core, all kernels
  nodemap bench memory --sweep                thread-order sweep with a recommendation
  nodemap bench memory --cpus 0-7 --size 2G --nt-stores
  nodemap bench memory --threads 4 --order compact --mem 1 --json
  nodemap bench memory --cpus 0-15 --kernels triad --repeats 3 --batch 20
                                              timed like likwid-bench -i 20 (see
                                              benchmarks/stream_vs_likwid.sh)
"""


@dataclass(frozen=True, kw_only=True)
class Options(HostOptions):
    cpus: str | None = option(None, "explicit CPU list, one thread per CPU (e.g. 0-7,16)", group="where")
    threads: int | None = option(None, "number of threads, on CPUs in --order", group="where", minimum=1,
                                 what="thread")
    order: str = option("spread", "order of CPUs for --threads (default %(default)s)", aliases=("--placement",),
                        choices=("spread", "compact"))
    kernels: str = option(",".join(KERNELS), "comma list of copy,scale,add,triad,sum (default all)")
    nt_stores: bool = option(False, "non-temporal stores (no write-allocate traffic)")
    batch: int = option(1, "time K repetitions back to back as one sample, with no barrier between them "
                           "(likwid-bench's timing: a slow thread's tail is paid once per sample); default 1, "
                           "every repetition timed on its own as STREAM does", metavar="K", minimum=1,
                      what="repetition per sample")
    sweep: bool = option(False, "measure every thread order derived from the topology")
