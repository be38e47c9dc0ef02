"""`nodemap bench ring`'s command line (light: bench/kinds.py): a 1D periodic ring halo exchange.

Every GPU holds a field [left halo | interior | right halo]; each step it
sends its first interior cells to the left neighbour's right halo and its
last ones to the right neighbour's left halo (periodic: the last GPU's right
neighbour is the first). Transports:
  peer        cudaMemcpyPeerAsync on each GPU's stream  (one process, all GPUs)
  nccl        grouped ncclSend/ncclRecv                  (either mode)
  mpi-aware   device buffers straight to MPI             (under MPI, only when
              the library is CUDA-aware and a verified transfer proved it)
  mpi-staged  D2H into pinned memory, MPI, H2D           (under MPI)
Run with one process for all GPUs (`nodemap bench ring`) or one process per
GPU on every node (`mpiexec -n 8 nodemap bench ring`). Bandwidth per step
counts the bytes each GPU sends (2 halos) over the step time. Overlap: a
compute kernel (tuned to last as long as the exchange) runs on its own
stream while the exchange runs; overlap efficiency = (t_comp + t_comm -
t_both) / min(t_comp, t_comm): 100% hides the shorter one completely, 0%
serializes them. Halos are poisoned before one more exchange and compared
with the neighbours' boundary cells after timing."""

from __future__ import annotations

from dataclasses import dataclass

from ..options import Ranked, gpu_list, launch_mode, option

TRANSPORTS = ("peer", "nccl", "mpi-aware", "mpi-staged")
DESCRIPTION = __doc__.split("\n\n", 1)[1]


@dataclass(frozen=True, kw_only=True)
class Options(Ranked):
    """bench ring's options, typed, each with its command line."""

    transports: str = option(",".join(TRANSPORTS), f"subset of {','.join(TRANSPORTS)}")
    sizes: str = option("64KiB,1MiB,16MiB,64MiB", "halo bytes per direction: a list or LO:HI doubling "
                                                  "(default %(default)s)", metavar="SPEC")
    mode: str = launch_mode("one process per GPU under MPI, or one process for all GPUs (auto: by launcher)")
    gpus: str | None = gpu_list("single mode: in ring order")
    steps: int = option(20, "exchange steps per timed repetition (default %(default)s)", minimum=1,
                        what="exchange per repetition")
    no_overlap: bool = option(False, "skip the compute-overlap measurement")
    # ranks must run the same repetitions (each holds collectives): no stop that a rank's own clock decides
    not_offered = ("adaptive", "budget")
