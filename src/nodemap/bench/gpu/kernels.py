"""CUDA kernels of nodemap/kernels/*.cu: compiled with NVRTC (CuPy) per
device, launched over n items, and the host twin of their data pattern."""

from __future__ import annotations

from typing import Any

_MODULES: dict[tuple[str, int], Any] = {}


def kernel(cp: Any, source: str, name: str) -> Any:
    """Function `name` of nodemap/kernels/`source`, for the current device."""
    dev = cp.cuda.Device().id
    mod = _MODULES.get((source, dev))
    if mod is None:
        mod = cp.RawModule(code=kernel_source(source), options=("-std=c++17",))
        _MODULES[(source, dev)] = mod
    return mod.get_function(name)


def kernel_source(source: str) -> str:
    from importlib import resources

    return (resources.files("nodemap") / "kernels" / source).read_text()


def launch(cp: Any, fn: Any, n: int, args: tuple, stream: Any, block: int = 256, max_grid: int = 0) -> None:
    """Launch over n items, one per thread, or max_grid blocks grid-striding."""
    grid = max(1, -(-n // block))
    if max_grid:
        grid = min(grid, max_grid)
    fn((grid,), (block,), args, stream=stream)


SRC_SEED, POISON_SEED = 0x5EED, 0xBAD  # what sources are filled with, and outputs before a copy


def pattern(start: int, count: int, seed: int) -> Any:
    """numpy twin of copies.cu's nm_pattern: words start..start+count."""
    import numpy as np

    i = np.arange(start, start + count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (i & 0xFFFFFFFF).astype(np.uint32) * np.uint32(0x9E3779B1)
        x ^= (i >> np.uint64(32)).astype(np.uint32) ^ np.uint32(seed)
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
    return x
