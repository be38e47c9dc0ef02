"""The stencil kernel alone (no halo exchange) at several block shapes,
beside a device-to-device copy of the same bytes (the practical ceiling):
which shape `nodemap bench jacobi` should use (jacobi_gpu.ROWS_PER_BLOCK,
BLOCK). Run on the GPU machine:

    python3 benchmarks/jacobi_kernel_sweep.py [NX NY]

GB/s counts 2 x word per updated cell (read once, written once); the copy
counts bytes read + written. Median of 20 timed runs after 3 warm-ups.
The last line names the shape with the highest fp32 + fp64 rate (without
the norm, as most steps run), as NODEMAP_JACOBI_BLOCK=THREADSxROWS."""

from __future__ import annotations

import statistics
import sys

import cupy as cp

from nodemap.bench import jacobi_grid as jg
from nodemap.bench import jacobi_gpu as jgpu


def timed(fn, reps=20):
    s, e = cp.cuda.Event(), cp.cuda.Event()
    out = []
    for i in range(reps + 3):
        s.record()
        fn()
        e.record()
        e.synchronize()
        if i >= 3:
            out.append(cp.cuda.get_elapsed_time(s, e) * 1e-3)
    return statistics.median(out)


def main() -> None:
    nx, ny = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (16384, 16384)
    total: dict[str, float] = {}
    for dtype in ("fp32", "fp64"):
        word = jgpu.DTYPES[dtype][1]
        parts = jg.slabs(ny, 1)
        w = jgpu.World(cp, jgpu.allocate(cp, nx, parts, [0], dtype, pinned=False), 1)
        s = w.slabs[0]
        s.compute = cp.cuda.Stream.null
        nbytes = jg.stencil_bytes(nx, ny, word)
        a, b = s.bufs
        t = timed(lambda: cp.copyto(b, a))
        print(f"{dtype} copy {2 * a.nbytes / t / 1e9:8.0f} GB/s (read + write)")
        for block in (128, 256, 512):
            for rows in (8, 16, 32, 64, 128):
                w.block = (block, rows)
                t = timed(lambda: jgpu.stencil(w, s, 0, 1, parts[0].count + 1, s.compute, False))
                tn = timed(lambda: jgpu.stencil(w, s, 0, 1, parts[0].count + 1, s.compute, True))
                print(f"{dtype} block {block:3d} rows {rows:3d}: {nbytes / t / 1e9:8.0f} GB/s, "
                      f"with norm {nbytes / tn / 1e9:8.0f} GB/s")
                total[f"{block}x{rows}"] = total.get(f"{block}x{rows}", 0.0) + nbytes / t / 1e9
        jgpu.close(w)
    print(f"best NODEMAP_JACOBI_BLOCK={max(total, key=total.get)}")


if __name__ == "__main__":
    main()
