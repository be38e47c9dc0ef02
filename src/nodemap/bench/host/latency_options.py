"""`nodemap bench latency`'s command line: its help and its Options. Light
(bench/kinds.py): `bench latency --help` imports nothing that measures."""

from __future__ import annotations

from dataclasses import dataclass

from ..options import Common, option, repeat_count

DESCRIPTION = """\
Idle load latency (ns per dependent load) against working-set size, from
4 KiB through L1, L2, L3 to DRAM, on one pinned thread. Each row is labelled
with the cache level the topology predicts; transparent huge pages are
requested so the DRAM plateau is memory latency, not page walks."""

EPILOG = """\
examples:
  nodemap bench latency                  CPU = first allowed CPU, memory local
  nodemap bench latency --cpu 8 --mem 1  latency from CPU 8 into NUMA node 1
  nodemap bench latency --max-size 64M --json
"""


@dataclass(frozen=True, kw_only=True)
class Options(Common):
    repeats: int = repeat_count(3)
    cpu: int | None = option(None, "CPU to run on (default: the first allowed CPU)")
    max_size: str | None = option(None, "largest working set (default 4x the CPU's largest cache)", metavar="BYTES")
    loads: int = option(1 << 20, "minimum loads per repetition (default %(default)s)")
    mem: str | None = option(None, "NUMA node to place the buffer on (default: first touch, local)")
    dram_top_only: bool = option(False, "above the largest cache measure only the largest working set (the DRAM "
                                        "figure's): skips the slow cache-to-DRAM transition (check's quick level)")
