"""How long ranks waiting for the node's plan take to get it once the
planning rank publishes: the plan cache's lock hand-off, alone.

N processes call plancache.shared_plan on one key at once; the one that
gets the lock "plans" by sleeping --plan-ms (a real plan of a big node takes
~100 ms) and publishes. Each waiter's delay is the time from the planner's
return (just after it published and unlocked) to its own return, on the
system-wide monotonic clock, for the ranks that were already waiting. The figure is the lock's, not the machine's:
scheduling noise adds to every way of waiting alike.

Run: python benchmarks/lock_handoff.py [--ranks 2,16] [--repeat 10] [--plan-ms 300]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RANK = """
import sys, time
from nodemap.mapping import plancache
def make():
    time.sleep(float(sys.argv[1]) / 1e3)
    return {"plan": 1}
began = time.monotonic()
data, cached = plancache.shared_plan("key", make)
print(int(cached), began, time.monotonic())
"""


def sample(n: int, plan_ms: float, folder: str) -> list[float]:
    env = {**os.environ, "NODEMAP_CACHE_DIR": folder}
    procs = [subprocess.Popen([sys.executable, "-c", RANK, str(plan_ms)], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    if any(p.returncode for p in procs) or sum(o[0] == "0" for o in outs) != 1:
        raise SystemExit(f"expected one planner and {n - 1} readers, got {outs}")
    planned = next(float(o[2]) for o in outs if o[0] == "0")
    # only ranks that were waiting when the plan came (late starters read it without the lock)
    return [float(o[2]) - planned for o in outs if o[0] == "1" and float(o[1]) < planned]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,16")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--plan-ms", type=float, default=300.0, help="the planner's time (long enough for all to wait)")
    args = ap.parse_args()
    print(f"# lock hand-off, planner {args.plan_ms:g} ms, {args.repeat} samples; {platform.node()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"{'N':>4s} {'median ms':>10s} {'p90 ms':>8s} {'max ms':>8s}   (waiter return - planner return)  waiters")
    work = tempfile.mkdtemp(prefix="nodemap-handoff-")
    try:
        for n in (int(x) for x in args.ranks.split(",")):
            delays = []
            for k in range(args.repeat):
                delays += sample(n, args.plan_ms, os.path.join(work, f"{n}-{k}"))
            delays.sort()
            print(f"{n:4d} {statistics.median(delays) * 1e3:10.1f} {delays[int(0.9 * (len(delays) - 1))] * 1e3:8.1f} "
                  f"{delays[-1] * 1e3:8.1f}   {len(delays)}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
