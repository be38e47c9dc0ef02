"""Side by side: `nodemap bench jacobi` result sets and the reference's
(NVIDIA multi-gpu-programming-models) -csv lines from the same run.

    python3 benchmarks/jacobi_vs_reference.py REFERENCE_CSV RESULTS.json...

The reference prints one line per run: name, nx, ny, iterations, nccheck,
[GPUs, 1, seconds, single-GPU seconds] (single_gpu: name, nx, ny,
iterations, nccheck, seconds). Its time per step is seconds / iterations,
the median over its repetitions; nodemap's is the median of its timed
repetitions. ratio = reference / nodemap: >= 1.00 means nodemap's step is
at least as fast. Pairs: single <-> single_gpu, peer <-> multi_threaded_p2p
and multi_threaded_copy, peer-overlap <-> multi_threaded_copy_overlap and
multi_threaded_p2p_opt, nccl[-overlap] <-> nccl[_overlap], nccl-graph <->
nccl_graphs (same grid, GPU count and iterations)."""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict

PAIRS = {
    "single": ("single_gpu",),
    "peer": ("multi_threaded_p2p", "multi_threaded_copy"),
    "peer-overlap": ("multi_threaded_copy_overlap", "multi_threaded_p2p_opt"),
    "nccl": ("nccl",),
    "nccl-overlap": ("nccl_overlap",),
    "nccl-graph": ("nccl_graphs",),
}


def reference(path: str) -> dict[tuple[str, int, int, int], list[float]]:
    """(variant, nx, ny, GPUs) -> seconds per step of each repetition."""
    out: dict[tuple[str, int, int, int], list[float]] = defaultdict(list)
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return out
    for line in lines:
        f = [x.strip() for x in line.split(",")]
        try:
            name, nx, ny, iters = f[0], int(f[1]), int(f[2]), int(f[3])
            gpus, secs = (1, float(f[5])) if len(f) == 6 else (int(f[5]), float(f[7]))
        except (IndexError, ValueError):
            continue
        out[(name, nx, ny, gpus)].append(secs / iters)
    return out


def ours(paths: list[str]) -> list[dict]:
    rows = []
    for p in paths:
        d = json.load(open(p))
        mode = d["environment"].get("mode")
        for r in d["results"]:
            if r["unit"] == "us":
                rows.append({"file": p.rsplit("/", 1)[-1], "mode": mode, **r["params"], "median": r["stats"]["median"],
                             "spread": r["stats"]["spread"]})
            elif r["unit"] == "GB/s":
                pct = f" = {100 * r['stats']['median'] / r['peak']:.1f}% of {r['peak_source']}" if r["peak"] else ""
                print(f"stencil kernel {r['params']['dtype']} {r['params']['nx']}x{r['params']['ny']} ({p.rsplit('/', 1)[-1]}):"
                      f" {r['stats']['median']:.0f} GB/s median, best {r['stats']['best']:.0f}{pct}")
    return rows


def main(argv: list[str]) -> int:
    ref = reference(argv[0])
    print()
    head = f"{'nodemap variant':<20} {'dtype':<5} {'slabs':>5} {'GPUs':>4} {'us/step':>9} {'spread':>7} {'eff':>5}  " \
           f"{'reference':<28} {'us/step':>9} {'ratio':>6}  from"
    print(head)
    print("-" * len(head))
    for r in ours(argv[1:]):
        pairs = [n for n in PAIRS.get(r["variant"], ()) if (n, r["nx"], r["ny"], r["gpus"]) in ref]
        if r["dtype"] != "fp32" or r["slabs"] != r["gpus"]:
            pairs = []  # the reference runs float, one slab per GPU
        base = (f"{r['variant']:<20} {r['dtype']:<5} {r['slabs']:>5} {r['gpus']:>4} {r['median']:>9.1f} "
                f"{100 * r['spread']:>6.1f}% {100 * r['efficiency']:>4.0f}%  ")
        if not pairs:
            print(base + f"{'-':<28} {'-':>9} {'-':>6}  {r['file']}")
        for n in pairs:
            t = statistics.median(ref[(n, r["nx"], r["ny"], r["gpus"])]) * 1e6
            print(base + f"{n:<28} {t:>9.1f} {t / r['median']:>6.2f}  {r['file']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
