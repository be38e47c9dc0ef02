#!/usr/bin/env python3
"""Placement planner speed: nodemap's vectorized planner beside a plain
reference implementation of the published greedy (Jaros et al. 2021: sort
chunks by total accesses, replicate from the top while it fits, give every
other accessed chunk to the most-accessing GPU with room, deal never-accessed
chunks round-robin), one chunk at a time in pure Python.

Both plan the same synthetic profile; their decisions must be identical (the
run fails otherwise), then the wall times and their ratio are printed.
Target (issue 7): 1,000,000 chunks x 8 GPUs in <= 1 s.

usage: python benchmarks/placement_speed.py [--chunks N] [--gpus G] [--repeats R] [--replication auto|5%|0]
                                           [--budget-fraction F]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import numpy as np

from nodemap import __version__
from nodemap.placement.planner import HOST, REPLICATED, Layout, Replication, plan_placement

MiB = 1 << 20
TARGET_S = 1.0


def profile(n: int, g: int, seed: int = 7) -> np.ndarray:
    """Per-chunk per-GPU access counts: Zipf-like chunk popularity, each
    chunk read mostly by a few GPUs, 10% of the chunks never read."""
    rng = np.random.default_rng(seed)
    popularity = 1e6 / np.arange(1, n + 1) ** 1.0
    rng.shuffle(popularity)
    share = rng.gamma(0.3, size=(n, g))
    share /= share.sum(axis=1, keepdims=True)
    counts = np.floor(popularity[:, None] * share * 10).astype(np.int64)
    counts[rng.random(n) < 0.10] = 0
    return counts


def reference(counts: np.ndarray, chunk: int, budgets: list[int], rep: Replication) -> np.ndarray:
    """The published greedy, chunk by chunk (equal-sized chunks)."""
    n, g = counts.shape
    totals = [int(t) for t in counts.sum(axis=1)]
    order = sorted(range(n), key=lambda c: (-totals[c], c))
    accessed = [c for c in order if totals[c] > 0]
    never = [c for c in order if totals[c] == 0]
    total_bytes = n * chunk

    # replicate the hottest chunks while every GPU holds them and the rest still fits
    k, fit, cum = 0, 0, 0
    target = rep.value * total_bytes if rep.mode == "fraction" else rep.value
    for i in range(len(accessed)):
        cum += chunk
        room_left = sum(max(b - cum, 0) // chunk * chunk for b in budgets)
        if cum > min(budgets) or room_left < total_bytes - cum:
            break
        fit = i + 1
    if rep.mode == "auto":
        k = fit
    elif rep.value > 0:
        k = min(fit, int(target // chunk))
    decision = [HOST] * n
    room = [b - k * chunk for b in budgets]
    for c in accessed[:k]:
        decision[c] = REPLICATED

    for c in accessed[k:]:  # most-accessing GPU with room, ties to the lower index
        row = counts[c].tolist()
        for gpu in sorted(range(g), key=lambda x: (-row[x], x)):
            if room[gpu] >= chunk:
                decision[c] = gpu
                room[gpu] -= chunk
                break
    nxt = 0
    for c in never:  # round-robin over GPUs with room
        for i in range(g):
            gpu = (nxt + i) % g
            if room[gpu] >= chunk:
                decision[c] = gpu
                room[gpu] -= chunk
                nxt = gpu + 1
                break
    return np.array(decision, dtype=np.int64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--replication", default="auto")
    ap.add_argument("--budget-fraction", type=float, default=0.2,
                    help="each GPU's budget as a fraction of the data (default 0.2: 1.6x the data over 8 GPUs)")
    a = ap.parse_args()

    chunk = 2 * MiB
    counts = profile(a.chunks, a.gpus)
    total = a.chunks * chunk
    budgets = [int(total * a.budget_fraction) // chunk * chunk] * a.gpus
    rep = Replication.parse(a.replication)
    layout = Layout((total,), chunk)

    print(f"{a.chunks:,} chunks x {a.gpus} GPUs, 2 MiB chunks, budget {budgets[0] / 2**30:,.0f} GiB per GPU, "
          f"replication {a.replication}", file=sys.stderr)
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        plan = plan_placement(layout, counts, budgets, rep)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    ref = reference(counts, chunk, budgets, rep)
    t_ref = time.perf_counter() - t0
    if not np.array_equal(plan.decision, ref):
        bad = np.flatnonzero(plan.decision != ref)
        print(f"FAILED: {len(bad)} chunks decided differently (first: chunk {bad[0]}: nodemap "
              f"{plan.decision[bad[0]]}, reference {ref[bad[0]]})", file=sys.stderr)
        return 1

    med = statistics.median(times)
    verdict = "met" if med <= TARGET_S else "MISSED"
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor())
    print(f"## {time.strftime('%Y-%m-%d', time.gmtime())} on {platform.node()}\n")
    print(f"- machine: {cpu}, Python {platform.python_version()}, numpy {np.__version__}, nodemap {__version__}")
    print(f"- input: {a.chunks:,} chunks x {a.gpus} GPUs, replication {a.replication} "
          f"({int((plan.decision == REPLICATED).sum()):,} chunks replicated), identical decisions: yes\n")
    print("| planner | wall s |")
    print("|---|---|")
    print(f"| nodemap `plan_placement` (median of {a.repeats}; min {min(times):.3f}, max {max(times):.3f}) | {med:.3f} |")
    print(f"| reference greedy, pure Python (1 run) | {t_ref:.3f} |")
    print(f"| speed-up | {t_ref / med:.1f}x |")
    print(f"| target <= {TARGET_S:g} s | {verdict} |")
    return 0 if verdict == "met" else 2


if __name__ == "__main__":
    sys.exit(main())
