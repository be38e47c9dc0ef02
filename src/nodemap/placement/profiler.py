"""Host side of the access counter (kernels/access_counter.cuh).

Usage in an application's pre-pass:

    prof = Profiler(layout, devices=[0, 1])
    # in your kernel on GPU g, for a read of allocation a at byte offset off:
    #   nm_count_access(counts_g_a, off, chunk_shift)
    # where counts_g_a = prof.counts_ptr(g, a) and chunk_shift = prof.chunk_shift
    ...
    prof.collect().save("counts.npz")   # -> nodemap place plan --counts counts.npz

`header()` returns the counter's source to prepend to NVRTC code (or pass
`include_dir()` to nvcc -I).
"""

from __future__ import annotations

from importlib import resources

import numpy as np

from ..errors import NodemapError
from .counts import AccessCounts
from .planner import Layout


def include_dir() -> str:
    return str(resources.files("nodemap") / "kernels")


def header() -> str:
    return (resources.files("nodemap") / "kernels" / "access_counter.cuh").read_text()


class Profiler:
    def __init__(self, layout: Layout, devices: list[int], sample_every: int = 1) -> None:
        import cupy

        cs = layout.chunk_size
        if cs & (cs - 1):
            raise NodemapError(f"profiling needs a power-of-two chunk size, got {cs}")
        self.layout = layout
        self.devices = list(devices)
        self.sample_every = max(1, int(sample_every))
        self.chunk_shift = cs.bit_length() - 1
        self._starts = np.cumsum(layout.chunks_per_alloc) - layout.chunks_per_alloc
        self._counts = []
        for dev in self.devices:
            with cupy.cuda.Device(dev):
                self._counts.append(cupy.zeros(layout.n_chunks, dtype=cupy.uint64))

    def counts_ptr(self, gpu: int, alloc: int = 0) -> int:
        """Device pointer to GPU `gpu`'s counters of allocation `alloc`."""
        return self._counts[gpu].data.ptr + int(self._starts[alloc]) * 8

    def reset(self) -> None:
        for c in self._counts:
            c.fill(0)

    def collect(self) -> AccessCounts:
        cols = [c.get().astype(np.int64) for c in self._counts]
        return AccessCounts(self.layout, np.stack(cols, axis=1), self.sample_every)
