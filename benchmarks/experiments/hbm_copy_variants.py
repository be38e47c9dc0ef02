#!/usr/bin/env python3
"""Which load/store form gives the fastest HBM copy (c = a, float64)?

An experiment behind `nodemap bench gpu`'s copy kernel: the same 16-byte
vector copy with default caching, streaming loads/stores (__ldcs/__stcs:
evict-first), no-L1 loads (__ldcg), and 1-4 vectors per thread, at block
sizes 128-512, one pass over the arrays (grid = vectors / threads). Each
variant: best and median of --repeats timed launches (CUDA events), the
destination poisoned before and checked after. GB/s counts 2 x bytes per
array (read a, write c), as BabelStream does.

usage: python3 benchmarks/experiments/hbm_copy_variants.py [--gib 2] [--repeats 20] [--device 0]
"""

from __future__ import annotations

import argparse
import statistics

import cupy as cp

SRC = r"""
struct alignas(16) V { double x[2]; };
template <int U, int MODE>
__device__ __forceinline__ void run(const V *__restrict__ a, V *__restrict__ c, long long n) {
    long long bd = blockDim.x, i = blockIdx.x * bd * U + threadIdx.x;
    V r[U];
#pragma unroll
    for (int k = 0; k < U; k++) {
        if (i + k * bd >= n) continue;
        const double2 *p = reinterpret_cast<const double2 *>(a + i + k * bd);
        double2 v = MODE == 1 ? __ldcs(p) : MODE == 2 ? __ldcg(p) : *p;
        r[k].x[0] = v.x; r[k].x[1] = v.y;
    }
#pragma unroll
    for (int k = 0; k < U; k++) {
        if (i + k * bd >= n) continue;
        double2 v = make_double2(r[k].x[0], r[k].x[1]);
        double2 *q = reinterpret_cast<double2 *>(c + i + k * bd);
        if (MODE == 1 || MODE == 3) __stcs(q, v); else *q = v;
    }
}
#define K(U, M) extern "C" __global__ void copy_u##U##_m##M(const V *a, V *c, long long n) { run<U, M>(a, c, n); }
K(1,0) K(2,0) K(4,0) K(1,1) K(2,1) K(4,1) K(1,2) K(2,2) K(1,3) K(2,3)
"""
MODES = {0: "default", 1: "ldcs+stcs (streaming)", 2: "ldcg (L2 only)", 3: "default load + stcs"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=2.0, help="GiB per array")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args()
    cp.cuda.Device(a.device).use()
    mod = cp.RawModule(code=SRC, options=("-std=c++17",))
    nvec = int(a.gib * 2**30) // 16
    src = cp.arange(2 * nvec, dtype=cp.float64)
    dst = cp.empty_like(src)
    name = cp.cuda.runtime.getDeviceProperties(a.device)["name"].decode()
    print(f"{name}, {a.gib:g} GiB per array, best/median of {a.repeats} (GB/s = 2 x bytes / time)")
    print(f"{'variant':38s} {'block':>5s} {'best GB/s':>10s} {'median':>8s}")
    for mode, label in MODES.items():
        for u in (1, 2, 4):
            try:
                fn = mod.get_function(f"copy_u{u}_m{mode}")
            except Exception:
                continue
            for block in (128, 256, 512):
                grid = -(-nvec // (block * u))
                dst.fill(-1.0)  # poison: a variant that skips elements fails the check
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                times = []
                for r in range(a.repeats + 1):
                    e0.record()
                    fn((grid,), (block,), (src, dst, cp.int64(nvec)))
                    e1.record()
                    e1.synchronize()
                    if r:
                        times.append(cp.cuda.get_elapsed_time(e0, e1) * 1e-3)
                if not bool((dst == src).all()):
                    raise SystemExit(f"copy_u{u}_m{mode} block {block}: wrong result")
                gbs = [2 * nvec * 16 / t / 1e9 for t in times]
                print(f"{label + f' x{u}/thread':38s} {block:5d} {max(gbs):10.1f} {statistics.median(gbs):8.1f}")


if __name__ == "__main__":
    main()
