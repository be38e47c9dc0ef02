"""The STREAM options both host kinds offer (`bench memory`, `bench numa`):
the kernels and HostOptions. Light, as a kind's options module is
(bench/kinds.py): imports only bench/options.py."""

from __future__ import annotations

from dataclasses import dataclass

from ..options import Common, option

KERNELS = ("copy", "scale", "add", "triad", "sum")  # NM_K_* order of native/stream.c (host/kernels.py)


@dataclass(frozen=True, kw_only=True)
class HostOptions(Common):
    """Options shared with `nodemap bench numa`."""

    size: str | None = option(None, "bytes per array, e.g. 2G, 512M (default 4x LLC)", metavar="BYTES")
    mem: str | None = option(None, "NUMA nodes to bind the arrays to (default: first touch by each thread)")
    peak: float | None = option(None, "DRAM peak of this machine to compare with (default: from its SMBIOS "
                                      "memory records where readable)", metavar="GB/S")
