"""`nodemap bench jacobi`'s command line (light: bench/kinds.py): a 2D Jacobi solver, multi-GPU models.

A 5-point Jacobi (Laplace) update of an NX x NY grid, cut into row slabs
over GPUs or ranks, periodic in y, fixed values in x, as NVIDIA's
multi-gpu-programming-models solver. Each step updates every slab, then
exchanges one halo row with each neighbour. Variants:
  single              the whole grid on one GPU (the baseline; always run)
  peer[-overlap]      one process, all GPUs: cudaMemcpyPeerAsync
  mpi-staged[-overlap]  one rank per slab: rows through pinned host memory and MPI
  mpi-aware[-overlap]   device rows straight to MPI, only where a verified
                      transfer proved the MPI CUDA-aware (else skipped)
  nccl[-overlap]      grouped ncclSend/ncclRecv
  peer[-overlap]-graph, nccl[-overlap]-graph
                      two steps captured in CUDA graphs, one launch per graph
                      per two steps (no host work per kernel or copy): one
                      graph over every GPU for peer copies, one per GPU for
                      NCCL (either mode)
-overlap: first and last rows on a high-priority stream, their exchange
there, the interior rows concurrently on another stream.
Run one process for all GPUs (`nodemap bench jacobi --gpus 0,1`; a GPU may
be named twice to hold two slabs) or one rank per slab
(`mpiexec -n 2 nodemap bench jacobi`).
Verified: after the timing, every variant restarts from the initial field
(halos poisoned with NaN), runs --iters steps and its residual norm and
per-row sums must equal the single-GPU run's (which equals NumPy's on the
host at small sizes): a wrong halo fails the run (exit 1), it is not a number.
--decomp 2d (or PXxPY) cuts tiles instead of row slabs: rows and columns,
column halos moved by strided copies (NCCL, mpi-aware: packed); every
variant runs on tiles. --weak makes --size each slab's grid.
Reported: time per step (median, spread), cells/s, strong-scaling efficiency
t1 / (GPUs x tN), under --weak the weak-scaling efficiency (slabs/GPUs) x
t1(one slab's grid) / tN, the share of a step outside the stencil kernels
(communication), how much of it the overlap hid, each rank's binding, and
the stencil kernel's bandwidth (2 x word per cell) as % of the HBM peak."""

from __future__ import annotations

from dataclasses import dataclass

from .. import options
from ..options import Ranked, option


@dataclass(frozen=True)
class Variant:
    transport: str  # "peer", "nccl", "mpi-staged", "mpi-aware"
    overlap: bool = False
    graph: bool = False


DTYPES = ("fp32", "fp64")
VARIANTS: dict[str, Variant] = {
    "single": Variant("peer"),
    "peer": Variant("peer"), "peer-overlap": Variant("peer", True),
    "mpi-staged": Variant("mpi-staged"), "mpi-staged-overlap": Variant("mpi-staged", True),
    "mpi-aware": Variant("mpi-aware"), "mpi-aware-overlap": Variant("mpi-aware", True),
    "nccl": Variant("nccl"), "nccl-overlap": Variant("nccl", True), "nccl-graph": Variant("nccl", graph=True),
    "nccl-overlap-graph": Variant("nccl", True, True),
    "peer-graph": Variant("peer", graph=True), "peer-overlap-graph": Variant("peer", True, True),
}
DESCRIPTION = __doc__.split("\n\n", 1)[1]


@dataclass(frozen=True, kw_only=True)
class Options(Ranked):
    """bench jacobi's options, typed (compare builds these), each with its command line."""

    size: str = option("16384x16384", "grid columns x rows, halo rows included (default %(default)s, the "
                                      "reference's; N = NxN)", metavar="NXxNY")
    dtype: str = options.dtype_list("fp32", DTYPES)
    variants: str = option(",".join(VARIANTS), "subset of " + ",".join(VARIANTS)
                           + " (those the launch mode cannot run are skipped)")
    mode: str = options.launch_mode("one rank per slab under MPI, or one process for all slabs (auto: by launcher)")
    gpus: str | None = options.gpu_list("single mode: one slab each, in row order; a GPU named twice holds two slabs")
    iters: int = option(200, "steps per timed repetition and per verification run; even (default %(default)s)",
                        metavar="K")
    decomp: str = option("1d", "1d: row slabs (default); 2d: tiles, a px x py grid balanced as MPI_Dims_create "
                               "does; PXxPY: that grid (tile columns x tile rows). Tiles run every variant",
                    metavar="1d|2d|PXxPY")
    weak: bool = option(False, "weak scaling: --size is each slab's (tile's) grid, the global grid grows with the "
                               "slabs; reports t1/tN at that size beside the strong-scaling efficiency")
    inject_halo_fault: bool = option(False, hidden=True)  # tests: must fail
    # --adaptive is agreed under MPI (every rank sees the slowest process's figure, so all stop at the same
    # repetition); --budget is not: each rank reads its own clock, and one leaving the loop a repetition early
    # starts the verification's exchanges while the others wait in the next repetition's barrier (a hang)
    not_offered = ("budget",)
