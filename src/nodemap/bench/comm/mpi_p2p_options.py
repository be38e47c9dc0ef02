"""`nodemap bench mpi`'s command line (light: bench/kinds.py): MPI point-to-point latency and bandwidth.

Run it under the launcher, one process per rank:
  mpiexec -n 2 nodemap bench mpi                  (host buffers, 1 B - 64 MiB)
  mpiexec -n 2 nodemap bench mpi --buffers HH,DD  (GPU buffers too)
  mpiexec -n 4 nodemap bench mpi --multirail      (all pairs at once)

Tests, as the OSU micro-benchmarks define them:
  latency  ping-pong; half the round trip (us)
  bw       a window of 64 non-blocking sends, acknowledged per window (GB/s);
           above 8 MiB the window shrinks (to >= 8) so one moves <= 512 MiB
  bibw     both ranks send a window to each other at once (GB/s, both ways)
Buffers at each end: H (host) or D (GPU, CuPy). D goes straight to MPI only
when the library says it is CUDA-aware (MPIX_Query_cuda_support) and a
verified device transfer proved it; otherwise it is staged through pinned
host memory, chunks pipelined (the D2H of chunk i+1 runs while chunk i is
sent), and the report says "MPI is not CUDA-aware: measuring the staged
path instead". Pairs: --pair A,B, or one pair per distance class the ranks'
placement gives (same NUMA, other NUMA, other socket, other node). Every
receive buffer is poisoned before and checked after; every wait has a
timeout (--timeout)."""

from __future__ import annotations

from dataclasses import dataclass

from ..options import Ranked, option

TESTS = ("latency", "bw", "bibw")
SMALL = 8192  # OSU's large-message threshold
DESCRIPTION = __doc__.split("\n\n", 1)[1]


@dataclass(frozen=True, kw_only=True)
class Options(Ranked):
    """bench mpi's options, typed (check builds these), each with its command line."""

    sizes: str = option("1:64MiB", "message sizes: LO:HI doubling (default %(default)s) or a list 8,1KiB,1MiB",
                        metavar="SPEC")
    tests: str = option(",".join(TESTS), f"subset of {','.join(TESTS)}")
    buffers: str = option("HH", "buffer kinds sender+receiver: HH,HD,DH,DD (D = GPU memory; default %(default)s)",
                          metavar="LIST")
    pair: tuple[str, ...] = option((), "measure ranks A and B (repeatable; default: one pair per distance class)",
                                   metavar="A,B")
    multirail: bool = option(False, "also run every rank pair (first half <-> second half, or node <-> node) at once")
    window: int = option(64, "sends per window in bw/bibw (default %(default)s, as OSU)", minimum=1,
                         what="send per window")
    chunk: str = option("1MiB", "staging chunk for GPU buffers (default %(default)s)", metavar="BYTES")
    iters_scale: float = option(1.0, "scale the per-size iteration counts (default 1; 0.1 for a quick look)",
                                metavar="X", positive=True)
    small_repeats: int | None = option(
        None, f"timed repetitions of messages up to {SMALL // 1024} KiB (default: --repeats): one takes about a "
              "millisecond, so a single preemption of a rank decides its mean; 9 or more let the median's 95%% "
              "interval leave such a repetition out at no cost", metavar="N", minimum=1, what="repetition")
    # each size's repetitions are its own (--small-repeats); ranks stop only where they agree
    not_offered = ("adaptive", "budget")
