"""`nodemap bench nccl`'s command line (light: bench/kinds.py): NCCL collectives, algbw and busbw per size.

Two modes, as nccl-tests:
  mpi     one process per GPU under the launcher (the portable mode; the
          NCCL unique id goes to every rank by MPI broadcast):
            mpiexec -n 2 nodemap bench nccl
  single  one process drives every visible GPU (ncclCommInitAll, the work
          of all GPUs queued between groupStart and groupEnd):
            nodemap bench nccl --mode single
Operations: all_reduce, all_gather, reduce_scatter, broadcast, reduce,
alltoall (grouped send/recv), sendrecv (ring: send to the next rank, receive
from the previous). Sizes are the larger buffer in bytes, as nccl-tests
counts them; algbw = size / time, busbw = algbw x 2(n-1)/n for all_reduce,
(n-1)/n for all_gather, reduce_scatter and alltoall, 1 for broadcast,
reduce and sendrecv. Out-of-place and in-place. After timing, every buffer
is re-initialized, the operation runs once more and every element is
compared with its exact expected value (small integers in float32): the
count of wrong elements is reported, and a non-zero count fails the run.
--graph captures a repetition's --iters operations in one CUDA graph (per
op, size and place) and times its launch: the time per operation is the
graph's over --iters, without the host's per-operation launch cost.
NCCL_NVLS_ENABLE=0 is always set before NCCL starts (NVLink multicast can
take a shared node's GPUs out of service)."""

from __future__ import annotations

from dataclasses import dataclass

from ..options import Ranked, gpu_list, launch_mode, option

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv")
DESCRIPTION = __doc__.split("\n\n", 1)[1]


@dataclass(frozen=True, kw_only=True)
class Options(Ranked):
    """bench nccl's options, typed (check builds these), each with its command line."""

    ops: str = option(",".join(OPS), f"subset of {','.join(OPS)}")
    sizes: str = option("8:1GiB", "LO:HI by factor 2 (default %(default)s) or a list", metavar="SPEC")
    mode: str = launch_mode("one process per GPU under MPI, or one process for all GPUs (auto: mpi when launched "
                            "by mpiexec/srun with more than one rank)")
    inplace: str = option("both", "out-of-place, in-place or both (default)", choices=("both", "out", "in"))
    gpus: str | None = gpu_list("single mode only")
    iters: int = option(20, "operations per timed repetition (default %(default)s)", minimum=1,
                        what="operation per repetition")
    graph: bool = option(False, "capture each repetition's --iters operations in one CUDA graph, launched once per "
                                "repetition (nccl-tests' -G): no per-operation launch cost from Python")
    # ranks must run the same repetitions (each holds collectives): no stop that a rank's own clock decides
    not_offered = ("adaptive", "budget")
