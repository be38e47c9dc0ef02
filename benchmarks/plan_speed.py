"""Time plan(topology, request) on a 256-PU node and a 16,384-PU node.

Targets (issue 3): a 2-socket, 256-PU, 8-GPU, 4-NIC node with 256 tasks in
<= 5 ms; a generated 16,384-PU node in <= 100 ms. Prints best and median
of N runs per case (one process, warm imports, cold planner: nothing is
cached between calls). Run: python benchmarks/plan_speed.py [--repeat N]

Peer: mpibind (LLNL) cannot be installed here (not on PyPI or Debian, and
github.com is unreachable). The closest planner that is: hwloc's
`hwloc-distrib` (Debian package hwloc), which spreads N tasks over a node's
CPUs. It plans CPUs only (nodemap also picks GPUs, NICs, memory nodes and
OpenMP places), so the comparison is command against command, wall time of
`hwloc-distrib --input NODE N` beside `nodemap plan --input NODE --tasks N`
on the same saved nodes (mpibind's own test topologies and a 256-PU
snapshot), median of --cli-repeat runs each.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
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


FIXTURES = Path(os.environ.get("NODEMAP_FIXTURES", Path(__file__).resolve().parents[2] / "shared" / "fixtures"))
PEER_NODES = [  # (label, fixture path, tasks)
    ("coral-lassen (160 PUs, 4 GPUs)", "mpibind/topo-xml/coral-lassen.xml", 160),
    ("coral-lassen (160 PUs, 4 GPUs)", "mpibind/topo-xml/coral-lassen.xml", 4),
    ("epyc-corona (96 PUs, 8 GPUs)", "mpibind/topo-xml/epyc-corona.xml", 96),
    ("256ia64 snapshot (256 PUs, 64 NUMA)", "hwloc-linux/256ia64-64n2s2c.tar.bz2", 256),
]


def wall_ms(cmd: list[str], repeat: int, env: dict) -> float:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)  # works, and warms caches
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def peer(repeat: int) -> None:
    distrib = shutil.which("hwloc-distrib")
    if distrib is None:
        print("peer: hwloc-distrib not found (apt-get install hwloc): peer comparison skipped")
        return
    if not FIXTURES.is_dir():
        print(f"peer: fixtures not found at {FIXTURES} (set NODEMAP_FIXTURES): peer comparison skipped")
        return
    here = Path(sys.executable).parent
    nodemap = str(here / "nodemap") if (here / "nodemap").exists() else shutil.which("nodemap")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # users have .pyc files
    version = subprocess.run([distrib, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"\npeer: {version}, command against command, median of {repeat} runs (ms)")
    print(f"{'node':38s} {'tasks':>5s} {'hwloc-distrib':>13s} {'nodemap plan':>12s} {'ratio':>6s}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, rel, n in PEER_NODES:
            path = FIXTURES / rel
            if rel.endswith(".tar.bz2"):
                with tarfile.open(path) as t:
                    t.extractall(tmp)
                path = Path(tmp) / Path(rel).name[: -len(".tar.bz2")]
            ms_peer = wall_ms([distrib, "--input", str(path), str(n)], repeat, env)
            ms_nm = wall_ms([nodemap, "plan", "--input", str(path), "--tasks", str(n)], repeat, env)
            print(f"{label:38s} {n:5d} {ms_peer:13.1f} {ms_nm:12.1f} {ms_nm / ms_peer:5.1f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cli-repeat", type=int, default=10, help="runs per command of the peer comparison (0: skip it)")
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
    if args.cli_repeat > 0:
        peer(args.cli_repeat)
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
