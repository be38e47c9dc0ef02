"""What the GPU kinds share, by concern, under one import for the kinds:

- gpu_devices: CuPy, the GPUs and their Topology names and peaks, device
  memory, the kinds' common options and start (`open_bench`)
- gpu_kernels: .cu kernels compiled with NVRTC, launch, the data pattern
- gpu_timing: the spin-kernel gate and stream timing (nvbandwidth's method)
- host_buffer: pinned host memory on a NUMA node
- the generic table of GPU Results (`results_text`) lives here.
"""

from __future__ import annotations

from typing import Any, Sequence

from .devices import (CUDA_MISSING, NO_GPU, Gpu, describe, device_memory, enable_peer_access,  # noqa: F401
                      ensure_free, environment, gpu_pcie, gpus, import_cupy, key, load_topology, match_gpu,
                      open_bench, ordinal_key)
from .kernels import kernel, launch, pattern  # noqa: F401
from .timing import Gate, Job, gate, time_streams  # noqa: F401
from .host_buffer import HostBuffer  # noqa: F401


def result_row(r: Any) -> list[str]:
    eff = r.efficiency
    dtype = r.params.get("dtype", "")
    return [r.metric + (f" {dtype}" if dtype else ""), r.path, r.path_class,
            f"{r.stats.best:,.1f}", f"{r.stats.median:,.1f}", f"{r.stats.spread * 100:.1f}%",
            f"{eff * 100:.1f}%" if eff is not None else "-", r.unit]


RESULT_HEADER = ("metric", "path", "class", "best", "median", "spread", "of peak", "unit")


def results_text(results: Sequence[Any]) -> str:
    from ...text import table

    return table(RESULT_HEADER, [result_row(r) for r in results], right=[False] * 3 + [True] * 4 + [False])
