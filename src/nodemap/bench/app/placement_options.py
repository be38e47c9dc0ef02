"""`nodemap bench placement`'s command line (light: bench/kinds.py): its
help, its Options and the strategies it offers."""

from __future__ import annotations

from dataclasses import dataclass

from .. import options
from ..options import Common, option

DESCRIPTION = """`nodemap bench placement`: when does access-analysis placement pay?

A table of fixed-size rows, larger than one GPU's budget, gathered by every
GPU at once with Zipf-distributed keys (rows permuted so hot rows scatter
over chunks; each GPU mixes a hot set of its own with a shared one), reduced
to a checksum that must equal the one computed from the row formula alone.
Every strategy runs the same keys; lookups/s in total (JSON: per GPU too) after
warm-up, first-iteration time, profile/plan/apply costs, memory per GPU, and
predicted vs measured local fraction are reported.

Memory safety: each GPU's free memory is first cut down with plain cudaMalloc
ballast so that it holds the table plus a margin, never less: managed memory
is never oversubscribed (that can hang a shared GPU). The per-GPU *budget*
(default 60% of the table) is what the planner must respect.
"""

EPILOG = """\
examples:
  nodemap bench placement                               defaults: 8 GiB table, Zipf 0,0.8,1.0,1.2
  nodemap bench placement --table 4GiB --zipf 1.0 --strategies copies,round-robin,analysis
  nodemap bench placement --chunks 2MiB,16MiB,64MiB --replication 0,1%,2%,5%,auto --json -o placement.json
  nodemap bench placement --zipf 1.0 --object-bytes 2MiB   hot rows kept together in 2 MiB objects

The table gives Mlookups/s over all GPUs, the ratio to `copies` (a full copy
per GPU: the upper bound) and to `round-robin`, and the predicted and
measured share of lookups served from the GPU's own memory; --json adds each
GPU's own rate, the bytes each GPU holds and the profile/plan/apply costs.
"""

STRATEGIES = ("gpu0", "round-robin", "split", "no-hints", "replicate-all", "copies", "analysis")
# no-hints is opt-in: with 4 GPUs gathering from one table, fault-driven
# migration thrashed for over 3 minutes on an H200 node without finishing.
DEFAULT_STRATEGIES = tuple(s for s in STRATEGIES if s != "no-hints")


@dataclass(frozen=True, kw_only=True)
class Options(Common):
    """bench placement's options, typed, each with its command line (--iterations: the old --repeats)."""

    repeats: int = options.repeat_count(5, old=("--iterations",))
    table: str = option("8GiB", "table size (default %(default)s)")
    row_bytes: int = option(256, "bytes per row, a multiple of 16 (default %(default)s)")
    lookups: int = option(1 << 24, "lookups per GPU per iteration (default 16M)", minimum=1, what="lookup per GPU")
    zipf: str = option("0,0.8,1.0,1.2", "Zipf exponents s to run (0 = uniform)")
    hot_mix: float = option(0.5, "share of lookups drawn from the GPU's own hot set (default %(default)s)")
    object_bytes: str | None = option(None, "hot rows come in objects of this size, each object kept whole and the "
                                            "objects scattered (default: one row, every row scattered on its own: "
                                            "the hardest case for chunks)")
    budget_fraction: float = option(0.6, "per-GPU budget as a fraction of the table (default %(default)s)",
                                    positive=True)
    chunks: str = option("2MiB,16MiB,64MiB", "chunk sizes for the analysis strategy")
    replication: str = option("0,1%,2%,5%,auto", "replication settings for the analysis strategy")
    strategies: str = option(",".join(DEFAULT_STRATEGIES), f"subset of {','.join(STRATEGIES)} (default: all but "
                                                           "no-hints, which can thrash for minutes)")
    gpus: str | None = options.gpu_list("each holds its share once")
