"""Per-chunk, per-GPU access counts: the profiler writes them, the planner reads them.

File format (.npz, no pickles): `counts` int64 [chunks x GPUs], `alloc_sizes`
int64 [allocations], `chunk_size` int64 scalar, optional `sample_every`
(1-in-k sampling used when profiling; counts are as recorded, not scaled).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import NodemapError
from .planner import Layout, _atomic_npz, _open_npz


@dataclass
class AccessCounts:
    layout: Layout
    counts: np.ndarray  # [chunks, gpus]
    sample_every: int = 1

    def __post_init__(self) -> None:
        if self.counts.ndim != 2 or self.counts.shape[0] != self.layout.n_chunks:
            raise NodemapError(
                f"access counts have shape {self.counts.shape}, the allocations have {self.layout.n_chunks} chunks "
                f"of {self.layout.chunk_size} bytes"
            )

    @property
    def n_gpus(self) -> int:
        return self.counts.shape[1]

    def save(self, path: str | Path) -> None:
        _atomic_npz(
            path,
            counts=self.counts.astype(np.int64),
            alloc_sizes=np.asarray(self.layout.alloc_sizes, dtype=np.int64),
            chunk_size=np.int64(self.layout.chunk_size),
            sample_every=np.int64(self.sample_every),
        )

    @classmethod
    def load(cls, path: str | Path) -> "AccessCounts":
        if not Path(path).exists():
            raise NodemapError(f"{path}: no such counts file (write one with nodemap.placement.profiler or AccessCounts.save)")
        with _open_npz(path, ("counts", "alloc_sizes", "chunk_size")) as z:
            sizes, chunk = z.array("alloc_sizes", "iu", 1), z.array("chunk_size", "iu", 0)
            layout = Layout(tuple(int(s) for s in sizes), int(chunk))
            counts = z.array("counts", "iu", 2)
            se = int(z.array("sample_every", "iu", 0)) if "sample_every" in z.files else 1
        return cls(layout, counts.astype(np.int64), se)

    def rechunk(self, chunk_size: int) -> "AccessCounts":
        """Counts for a coarser chunk size (a multiple of the recorded one)."""
        old = self.layout.chunk_size
        if chunk_size == old:
            return self
        if chunk_size % old:
            raise NodemapError(
                f"chunk size {chunk_size} is not a multiple of the profiled chunk size {old}: "
                "profile with a smaller chunk or pick a multiple"
            )
        f = chunk_size // old
        new = Layout(self.layout.alloc_sizes, chunk_size)
        groups = np.concatenate([np.arange(n) // f + s for n, s in zip(self.layout.chunks_per_alloc, np.cumsum(new.chunks_per_alloc) - new.chunks_per_alloc)])
        out = np.zeros((new.n_chunks, self.n_gpus), dtype=np.int64)
        np.add.at(out, groups, self.counts)
        return AccessCounts(new, out, self.sample_every)
