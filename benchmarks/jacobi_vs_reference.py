"""Side by side: `nodemap bench jacobi` result sets and the reference's
(NVIDIA multi-gpu-programming-models) -csv lines from the same run.

    python3 benchmarks/jacobi_vs_reference.py REFERENCE_CSV RESULTS.json... \
        [--strong NXxNY] [--weak NXxNY] [--markdown PATH]

The reference prints one line per run: name, nx, ny, iterations, nccheck,
[GPUs, 1, seconds, single-GPU seconds] (single_gpu: name, nx, ny,
iterations, nccheck, seconds). Its time per step is seconds / iterations,
the median over its repetitions; nodemap's is the median of its timed
repetitions. ratio = reference / nodemap: >= 1.00 means nodemap's step is
at least as fast. Pairs: single <-> single_gpu, peer <-> multi_threaded_p2p
and multi_threaded_copy, peer-overlap <-> multi_threaded_copy_overlap and
multi_threaded_p2p_opt, nccl[-overlap] <-> nccl[_overlap], nccl-graph <->
nccl_graphs, and each -graph variant <-> its plain twin's (same grid, GPU
count and iterations).

--strong NXxNY / --weak NXxNY add the scaling tables (markdown, also
written to --markdown): per series (nodemap mode and variant beside each
paired reference variant) and per GPU count G, both step times, the ratio
and each side's scaling efficiency against its own 1-GPU time: strong
t1 / (G x tG) at the fixed NXxNY, weak t1 / tG where NXxNY is each GPU's
slab and the global grid is nodemap's weak_grid (the reference was run at
that global grid). Runs with one slab per GPU only; the 'single' baseline
counts in 1-GPU runs."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict

from nodemap.bench.app.jacobi import parse_grid
from nodemap.bench.app.jacobi_grid import weak_grid

PAIRS = {
    "single": ("single_gpu",),
    "peer": ("multi_threaded_p2p", "multi_threaded_copy"),
    "peer-overlap": ("multi_threaded_copy_overlap", "multi_threaded_p2p_opt"),
    "nccl": ("nccl",),
    "nccl-overlap": ("nccl_overlap",),
    "nccl-graph": ("nccl_graphs",),
    "nccl-overlap-graph": ("nccl_graphs",),
    "peer-graph": ("multi_threaded_p2p", "multi_threaded_copy"),
    "peer-overlap-graph": ("multi_threaded_copy_overlap", "multi_threaded_p2p_opt"),
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
        mode, run_slabs = d["environment"].get("mode"), d["environment"].get("slabs")
        weak = "--weak" in d.get("command", "")
        for r in d["results"]:
            if r["unit"] == "us":
                rows.append({"file": p.rsplit("/", 1)[-1], "mode": mode, "run_slabs": run_slabs, "weak": weak,
                             **r["params"], "median": r["stats"]["median"], "spread": r["stats"]["spread"]})
            elif r["unit"] == "GB/s":
                pct = f" = {100 * r['stats']['median'] / r['peak']:.1f}% of {r['peak_source']}" if r["peak"] else ""
                print(f"stencil kernel {r['params']['dtype']} {r['params']['nx']}x{r['params']['ny']} ({p.rsplit('/', 1)[-1]}):"
                      f" {r['stats']['median']:.0f} GB/s median, best {r['stats']['best']:.0f}{pct}")
    return rows


def pairs_table(ref: dict[tuple[str, int, int, int], list[float]], rows: list[dict]) -> None:
    """Every nodemap row beside the reference variants run at its grid and GPU count."""
    print()
    head = f"{'nodemap variant':<20} {'dtype':<5} {'slabs':>5} {'GPUs':>4} {'us/step':>9} {'spread':>7} {'eff':>5}  " \
           f"{'reference':<28} {'us/step':>9} {'ratio':>6}  from"
    print(head)
    print("-" * len(head))
    for r in rows:
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


def run_gpus(r: dict) -> int | None:
    """G of a nodemap row on the scaling axis: its GPUs where it runs one slab
    per GPU; None for shared GPUs and for the 'single' baseline (whole grid,
    one GPU) of a run on several."""
    if r["slabs"] != r["gpus"] or (r["variant"] == "single" and r["run_slabs"] != 1):
        return None
    return r["gpus"]


def series(rows: list[dict]) -> dict[tuple[str, str, str, str, str], dict[int, float]]:
    """(scaling, per-GPU or fixed grid, mode, variant, dtype) -> {G: us per
    step}; runs repeated at one G give the median of their medians."""
    got: dict[tuple[str, str, str, str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        g = run_gpus(r)
        if g is None:
            continue
        grid = r.get("slab_grid") or f"{r['nx']}x{r['ny']}"
        got[("weak" if r["weak"] else "strong", grid, r["mode"], r["variant"], r["dtype"])][g].append(r["median"])
    return {k: {g: statistics.median(t) for g, t in v.items()} for k, v in got.items()}


def global_grid(scaling: str, grid: str, g: int) -> tuple[int, int]:
    """The whole grid at G GPUs: fixed under strong scaling, weak_grid's under weak (row slabs)."""
    nx, ny = parse_grid(grid)
    return weak_grid(nx, ny, 1, g) if scaling == "weak" else (nx, ny)


def scaling_efficiency(scaling: str, t1: float | None, tg: float | None, g: int) -> float | None:
    """strong t1 / (G x tG), weak t1 / tG; None without both times."""
    if not t1 or not tg:
        return None
    return t1 / ((g if scaling == "strong" else 1) * tg)


def reference_series(ref: dict[tuple[str, int, int, int], list[float]], scaling: str, grid: str,
                     name: str) -> dict[int, float]:
    """{G: us per step} of one reference variant along a scaling series."""
    out = {}
    for (n, nx, ny, g), secs in ref.items():
        if n == name and (nx, ny) == global_grid(scaling, grid, g):
            out[g] = statistics.median(secs) * 1e6
    return out


def scaling_rows(ref: dict[tuple[str, int, int, int], list[float]], rows: list[dict],
                 grids: dict[str, str]) -> list[dict]:
    """One row per series, paired reference variant and G (the reference's
    variants without a nodemap row are listed alone)."""
    ours_by = series(rows)
    out = []
    for scaling, grid in grids.items():
        keys = sorted(k for k in ours_by if k[:2] == (scaling, grid))
        paired = set()
        for k in keys:
            mine = ours_by[k]
            names = PAIRS.get(k[3], ()) if k[4] == "fp32" else ()  # the reference runs float
            for name in names or ("",):
                theirs = reference_series(ref, scaling, grid, name) if name else {}
                paired.add(name)
                out += series_rows(scaling, grid, k[2], k[3], k[4], name, mine, theirs)
        for name in sorted({n for n, *_ in ref} - paired):
            theirs = reference_series(ref, scaling, grid, name)
            if theirs:
                out += series_rows(scaling, grid, "-", "-", "fp32", name, {}, theirs)
    return out


def series_rows(scaling: str, grid: str, mode: str, variant: str, dtype: str, name: str, mine: dict[int, float],
                theirs: dict[int, float]) -> list[dict]:
    rows = []
    for g in sorted(set(mine) | set(theirs)):
        t, u = mine.get(g), theirs.get(g)
        whole = "x".join(map(str, global_grid(scaling, grid, g)))
        rows.append({"scaling": scaling, "grid": grid, "G": g, "global": whole,
                     "mode": mode, "variant": variant, "dtype": dtype, "reference": name or "-", "ours_us": t,
                     "ours_eff": scaling_efficiency(scaling, mine.get(1), t, g), "ref_us": u,
                     "ref_eff": scaling_efficiency(scaling, theirs.get(1), u, g),
                     "ratio": u / t if t and u else None})
    return rows


def markdown(rows: list[dict]) -> str:
    """The scaling rows as one markdown table per scaling and grid."""
    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"

    out = []
    for scaling, grid in dict.fromkeys((r["scaling"], r["grid"]) for r in rows):
        what = f"fixed {grid} grid" if scaling == "strong" else f"{grid} per GPU"
        eff = "t1 / (G x tG)" if scaling == "strong" else "t1 / tG"
        out += [f"## {scaling.capitalize()} scaling, {what} (efficiency {eff}; ratio = reference / nodemap)", "",
                "| mode | nodemap variant | dtype | G | grid | us/step | eff | reference | us/step | eff | ratio |",
                "| --- | --- | --- | ---: | --- | ---: | ---: | --- | ---: | ---: | ---: |"]
        for r in rows:
            if (r["scaling"], r["grid"]) == (scaling, grid):
                out.append(f"| {r['mode']} | {r['variant']} | {r['dtype']} | {r['G']} | {r['global']} | "
                           f"{num(r['ours_us'], '.1f')} | {pct(r['ours_eff'])} | {r['reference']} | "
                           f"{num(r['ref_us'], '.1f')} | {pct(r['ref_eff'])} | {num(r['ratio'], '.2f')} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("reference", help="the reference's -csv lines (a missing file: none)")
    p.add_argument("results", nargs="*", help="`nodemap bench jacobi` result sets (JSON)")
    p.add_argument("--strong", metavar="NXxNY", help="the fixed grid of the strong-scaling runs")
    p.add_argument("--weak", metavar="NXxNY", help="the per-GPU grid of the weak-scaling runs")
    p.add_argument("--markdown", metavar="PATH", help="also write the scaling tables here")
    a = p.parse_args(argv)
    ref, rows = reference(a.reference), ours(a.results)
    pairs_table(ref, rows)
    grids = {k: "x".join(map(str, parse_grid(v))) for k, v in (("strong", a.strong), ("weak", a.weak)) if v}
    if grids:
        text = markdown(scaling_rows(ref, rows, grids))
        print("\n" + text)
        if a.markdown:
            with open(a.markdown, "w") as f:
                f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
