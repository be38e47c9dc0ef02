"""`nodemap bench numa`'s command line: its help and its Options (on
HostOptions, shared with `bench memory`: stream_options.py). Light
(bench/kinds.py): `bench numa --help` imports nothing that measures."""

from __future__ import annotations

from dataclasses import dataclass

from ..options import option
from .stream_options import HostOptions

DESCRIPTION = """\
NUMA matrices: bandwidth with the threads of node i (one per core) on
memory of node j, and idle latency of one thread on node i chasing through
memory of node j, beside the SLIT distances the firmware reports."""

EPILOG = """\
examples:
  nodemap bench numa
  nodemap bench numa --kernel sum --size 1G --json
"""


@dataclass(frozen=True, kw_only=True)
class Options(HostOptions):
    kernel: str = option("triad", "STREAM kernel of the bandwidth matrix (default %(default)s)")
    latency_size: str | None = option(None, "bytes chased for the latency matrix (default 4x the LLC)",
                                      metavar="BYTES")
    no_latency: bool = option(False, "bandwidth matrix only")
