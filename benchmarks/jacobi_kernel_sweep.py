"""The stencil kernel alone (no halo exchange) at several block shapes and
vector widths, beside a device-to-device copy of the same bytes (the
practical ceiling): which shape and width `nodemap bench jacobi` should use
(jacobi_gpu.BLOCK, ROWS_PER_BLOCK, VECTOR). Run on the GPU machine:

    python3 benchmarks/jacobi_kernel_sweep.py [NX NY] [--json FILE]

GB/s counts 2 x word per updated cell (read once, written once); the copy
counts bytes read + written. Median of 20 timed runs after 3 warm-ups, the
shapes interleaved in rounds so drift favours none. Every vector width's
output is compared bit for bit with the scalar kernel's (the fixed columns
and the sum order are the same), and its norm within 1e-9 relative (the
sum runs in another order).
The last lines name the best shape per precision, and the shape whose
slower precision is fastest (the default of jacobi_gpu)."""

from __future__ import annotations

import json
import statistics
import sys

import cupy as cp

from nodemap.bench.app import jacobi_grid as jg
from nodemap.bench.app import jacobi_gpu as jgpu

BLOCKS = (128, 256, 512)
ROWS = (2, 4, 8, 16, 32)


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


def result_of(w, s, count, vector):
    """The updated buffer and norm of one step with `vector` columns per thread."""
    w.vector, w.block = vector, (256, 8)
    a = s.bufs[0]
    a[0], a[count + 1] = a[count], a[1]  # the periodic halos one slab would exchange with itself (NaN otherwise)
    s.bufs[1].fill(float("nan"))
    s.norm.fill(0)
    jgpu.stencil(w, s, 0, 1, count + 1, s.compute, True)
    cp.cuda.Device().synchronize()
    # the scalar kernel leaves the fixed columns alone (NaN here); compare the rest
    return cp.asnumpy(s.bufs[1][1:count + 1, 1:-1]), float(s.norm.get()[0])


def sweep(dtype, nx, ny):
    word = jgpu.DTYPES[dtype][1]
    parts = jg.slabs(ny, 1)
    w = jgpu.World(cp, jgpu.allocate(cp, nx, parts, [0], dtype, pinned=False), 1)
    s = w.slabs[0]
    s.compute = cp.cuda.Stream.null
    count = parts[0].count
    nbytes = jg.stencil_bytes(nx, ny, word)
    a, b = s.bufs
    copy = 2 * a.nbytes / timed(lambda: cp.copyto(b, a)) / 1e9
    print(f"{dtype} copy {copy:8.0f} GB/s (read + write)")
    gold, gold_norm = result_of(w, s, count, 1)
    rows_out = []
    for v in jgpu.VECTOR_WIDTHS[dtype]:
        got, norm = result_of(w, s, count, v)
        same = bool((got.view(f"u{word}") == gold.view(f"u{word}")).all())
        rel = abs(norm - gold_norm) / abs(gold_norm)
        print(f"{dtype} vector {v}: cells bit-identical to scalar {same} (cells differing: "
              f"{int((got != gold).sum())}), norm relative difference {rel:.1e} (summation order only)")
        if not same or rel > 1e-9:
            raise SystemExit(f"{dtype} vector {v} disagrees with the scalar kernel")
    shapes = [(v, blk, r) for v in jgpu.VECTOR_WIDTHS[dtype] for blk in BLOCKS for r in ROWS]
    times = {k: [] for k in shapes}
    for _ in range(3):  # rounds: each shape timed once per round
        for v, blk, r in shapes:
            w.vector, w.block = v, (blk, r)
            times[(v, blk, r)].append(timed(lambda: jgpu.stencil(w, s, 0, 1, count + 1, s.compute, False)))
    for v, blk, r in shapes:
        t = statistics.median(times[(v, blk, r)])
        gbs = nbytes / t / 1e9
        rows_out.append({"dtype": dtype, "vector": v, "block": blk, "rows": r, "gbs": gbs, "of_copy": gbs / copy})
        print(f"{dtype} v{v} block {blk:3d} rows {r:3d}: {gbs:8.0f} GB/s ({gbs / copy:6.1%} of copy)")
    jgpu.close(w)
    return copy, rows_out


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else None
    if out in args:
        args.remove(out)
    nx, ny = (int(args[0]), int(args[1])) if len(args) > 1 else (16384, 16384)
    doc = {"nx": nx, "ny": ny, "gpu": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "rows": [],
           "copy": {}}
    for dtype in ("fp32", "fp64"):
        doc["copy"][dtype], rows = sweep(dtype, nx, ny)
        doc["rows"] += rows
        best = max(rows, key=lambda r: r["gbs"])
        print(f"best {dtype}: vector {best['vector']} block {best['block']}x{best['rows']} "
              f"{best['gbs']:.0f} GB/s ({best['of_copy']:.1%} of copy)")
    widths = {d: max((r for r in doc["rows"] if r["dtype"] == d), key=lambda r: r["gbs"])["vector"]
              for d in ("fp32", "fp64")}
    worst: dict[tuple, float] = {}  # per shape, the slower precision at its best width
    for r in doc["rows"]:
        if r["vector"] == widths[r["dtype"]]:
            k = (r["block"], r["rows"])
            worst[k] = min(worst.get(k, float("inf")), r["gbs"])
    blk, r = max(worst, key=worst.get)
    print(f"best shape for both (highest slower precision) at widths {widths}: NODEMAP_JACOBI_BLOCK={blk}x{r}")
    if out:
        with open(out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
