"""`nodemap bench gpu`'s command line (light: bench/kinds.py): GPU memory bandwidth with BabelStream's kernels.

Per GPU and dtype: init a=0.1, b=0.2, c=0.0; then `repeats` rounds of copy,
mul, add, triad, dot (BabelStream's classic order, scalar 0.4), then
`repeats` rounds of nstream. Each kernel is timed alone between CUDA events
behind a spin kernel (launch cost excluded). Afterwards every element of
a, b, c and the last dot are checked against gold values replayed on the
host in the same dtype. With several GPUs the same runs again on all of them
at once, one stream each, released together: the node aggregate is the
total bytes over the slowest GPU's time.

Bytes counted as BabelStream: copy/mul/dot 2, add/triad 3, nstream 4 arrays
of N elements per kernel; write-allocate traffic is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import options
from ..options import Common, option

CLASSIC = ("copy", "mul", "add", "triad", "dot")  # BabelStream's classic order
KERNELS = CLASSIC + ("nstream",)

DTYPES = ("float64", "float32")

# One vector per thread: unroll 2/4 were 0.5-4% slower on H200 and H100
# (benchmarks/results/gpu_vs_peers.md). The best block differs by GPU and
# kernel (H200 copy: 128; H100 triad: 1024, +0.6%), so by default each kernel
# takes the fastest of AUTO_BLOCKS in a short calibration on the GPU itself.
BLOCK, UNROLL = 128, 1
AUTO_BLOCKS = (128, 256, 512, 1024)

DESCRIPTION = __doc__.split("\n\n", 1)[1]


@dataclass(frozen=True, kw_only=True)
class Options(Common):
    """bench gpu's options, typed (check builds these), each with its command line."""

    repeats: int = options.repeat_count(20)
    gpus: str | None = options.gpu_list()
    size: str | None = option(None, "bytes per array (default: the larger of 1 GiB and 4x L2)", metavar="BYTES")
    dtype: str = options.dtype_list(",".join(DTYPES), DTYPES)
    kernels: str = option(",".join(KERNELS), f"subset of {','.join(KERNELS)}")
    block: int = option(0, "threads per block (default 0: per kernel the fastest of "
                           f"{', '.join(map(str, AUTO_BLOCKS))}, chosen before timing; dot always uses 1024)")
    unroll: int = option(UNROLL, "16-byte vectors per thread, all loaded before the first store "
                                 "(default %(default)s)", choices=(1, 2, 4))
    grid_per_sm: int = option(0, "persistent grid of N blocks per SM striding over the arrays (default 0: one pass)",
                              metavar="N", minimum=0, what="blocks per SM (0: auto)")
    no_aggregate: bool = option(False, "skip the all-GPUs-at-once run")
