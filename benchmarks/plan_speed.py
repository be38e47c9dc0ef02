"""Time plan(topology, request) on a 256-PU node and a 16,384-PU node.

Targets (issue 3): a 2-socket, 256-PU, 8-GPU, 4-NIC node with 256 tasks in
<= 5 ms; a generated 16,384-PU node in <= 100 ms. Prints best and median
of N runs per case (one process, warm imports, cold planner: nothing is
cached between calls). Run: python benchmarks/plan_speed.py [--repeat N]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import nodes  # noqa: E402  (synthetic nodes shared with the tests)

from nodemap.mapping.plan import plan  # noqa: E402
from nodemap.mapping.request import Request  # noqa: E402

CASES = [
    # (name, node builder, request, target ms or None)
    ("256 PUs, 8 GPUs, 4 NICs, 256 tasks", nodes.bench_node, Request(tasks=256), 5.0),
    ("256 PUs, 8 GPUs, 4 NICs, 8 tasks", nodes.bench_node, Request(tasks=8), None),
    ("16,384 PUs, 64 GPUs, 16 NICs, 64 tasks", nodes.huge_node, Request(tasks=64), 100.0),
    ("16,384 PUs, no GPUs, 1 task", nodes.huge_node, Request(tasks=1, gpus_per_task=0), 100.0),
    # beyond the targets: one task per core of the huge node
    ("16,384 PUs, 64 GPUs, 16 NICs, 8,192 tasks", nodes.huge_node, Request(tasks=8192), None),
]


def time_case(build, req: Request, repeat: int) -> list[float]:
    topo = build()
    plan(topo, req)  # warm imports and code paths
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan(topo, req)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()} ({platform.node()}), {args.repeat} runs each")
    print(f"{'case':44s} {'best ms':>8s} {'median ms':>10s} {'target':>7s}  verdict")
    worst = 0
    for name, build, req, target in CASES:
        ms = time_case(build, req, args.repeat)
        best, med = min(ms), statistics.median(ms)
        if target is None:
            print(f"{name:44s} {best:8.2f} {med:10.2f} {'-':>7s}")
            continue
        ok = med <= target
        worst |= not ok
        print(f"{name:44s} {best:8.2f} {med:10.2f} {target:7.0f}  {'ok' if ok else 'SLOW'}")
    print("peer: mpibind (LLNL) is a C library, not on PyPI; see benchmarks/results/plan_speed.md")
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
