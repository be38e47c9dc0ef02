"""`nodemap bench copies`'s command line (light: bench/kinds.py): host<->device and device<->device copy matrices.

Two engines, as nvbandwidth: CE (cudaMemcpyAsync, the DMA copy engines) and
SM (a kernel of 16-byte loads and stores, 4 blocks of 512 threads per SM).
Cases:
  h2d, d2h, h2d+d2h   per GPU from pinned host memory bound to each NUMA node
                      (--host-memory own: one placement, this process's own);
                      "host" is the three, each also selectable alone
  d2d (read, write)   every ordered GPU pair; read = issued by the
                      destination GPU (SM: kernel on dst reads src), write =
                      issued by the source (SM: kernel on src writes dst)
  d2d bidir           both directions of a pair at once
  all-to-one, one-to-all, local (a copy within one GPU)
  staged              peer access off: D2H then H2D through pinned host
                      chunks, pipelined (timed by the host clock)
Timing: a spin kernel holds each stream while `--iters` copies and their
events are queued, then all streams are released together; bandwidth is
bytes copied over the slowest stream's time, repeated --repeats times.
Every destination is poisoned before and checked word by word after.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..options import Common, gpu_list, option, repeat_count

CASES = ("host", "d2d", "bidir", "local", "all", "staged")  # the default: every case
HOST_CASES = ("h2d", "d2h", "h2d+d2h")  # the host case's directions, each selectable alone (compare's h2d probe)
HOST_MEMORY = ("each", "own")
DESCRIPTION = __doc__.split("\n\n", 1)[1]


@dataclass(frozen=True, kw_only=True)
class Options(Common):
    """bench copies' options, typed (check builds these), each with its command line."""

    repeats: int = repeat_count(5)
    gpus: str | None = gpu_list()
    size: str | None = option(None, "bytes per buffer (default 512MiB, as nvbandwidth)", metavar="BYTES")
    iters: int = option(8, "copies per timed repetition (default %(default)s)", minimum=1, what="copy per repetition")
    engine: str = option("ce,sm", "ce, sm or both (default)")
    cases: str = option(",".join(CASES), f"subset of {','.join(CASES)}; host is {','.join(HOST_CASES)}, each "
                                         "also alone")
    # compare's ranks: every rank's one host row measured in the same repetitions (one placement each,
    # not every node's row one after another while the other ranks measure other nodes' rows)
    host_memory: str = option("each", "where the host cases' (and --latency's) pinned host memory is: each "
                                      "(a row per NUMA node, its pages bound there; default) or own (one row, "
                                      "placed by this process's memory policy, e.g. numactl --membind, else "
                                      "first touch: what a bound rank's memory gets)", choices=HOST_MEMORY)
    latency: bool = option(False, "also measure load latency and small-copy latency")
    matrix: bool = option(False, "print nvbandwidth-style matrices (rows src, cols dst)")
