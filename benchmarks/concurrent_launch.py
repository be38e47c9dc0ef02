"""N ranks of one node starting at once: `nodemap run -- true` against
`python -c pass`.

Each sample starts N processes together (as a launcher does on one node)
and times, wall clock, from the first start to the last exit. Cases:
- `python -c pass`: the interpreter floor, N at once;
- `nodemap run -- true`, cold: an empty plan cache, so the first rank of
  the node plans and publishes and the other N-1 wait and read (plan once
  per node);
- the same with --no-cache: every rank reads the topology and plans (what
  every cold start did before plan-once-per-node);
- warm: the plan is already published (later job steps).
Every rank gets its own local rank (--local-rank i --local-size N,
--oversubscribe so N may exceed the PUs). Checked after every sample: every
process exited 0, and after a cold sample the cache holds exactly one plan.

Prints median, min and max seconds per case and N, and the ratio of each
nodemap case to the interpreter floor.

Run: python benchmarks/concurrent_launch.py [--ranks 2,16,64] [--repeat 5]
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


def _batch(cmds: list[list[str]], env: dict[str, str]) -> float:
    t = time.perf_counter()
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
    errs = [(p.wait(), p.stderr.read()) for p in procs]
    dt = time.perf_counter() - t
    for p in procs:
        p.stderr.close()
    bad = [(rc, e) for rc, e in errs if rc != 0]
    if bad:
        raise SystemExit(f"{len(bad)} of {len(cmds)} processes failed; first: exit {bad[0][0]}: {bad[0][1][:300]!r}")
    return dt


def _plans(folder: str) -> int:
    return sum(n.endswith(".bin") for n in os.listdir(folder)) if os.path.isdir(folder) else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,16,64", help="comma-separated N")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    true = shutil.which("true") or "/bin/true"
    script = os.path.join(os.path.dirname(sys.executable), "nodemap")  # the console script users run
    entry = [script] if os.path.exists(script) else [sys.executable, "-m", "nodemap.cli"]
    work = tempfile.mkdtemp(prefix="nodemap-concurrent-")
    print(f"# N concurrent starts, {args.repeat} samples each; {platform.node()} {platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}, "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
    print(f"{'N':>4s} {'case':34s} {'median s':>9s} {'min s':>7s} {'max s':>7s} {'ms/rank':>8s} {'x python':>9s}")
    try:
        for n in (int(x) for x in args.ranks.split(",")):
            ranks = [[*entry, "run", "--oversubscribe", "--local-rank", str(i), "--local-size", str(n)]
                     for i in range(n)]
            cases = {
                "python -c pass": ([[sys.executable, "-c", "pass"]] * n, None),
                "nodemap run -- true (cold)": ([[*r, "--", true] for r in ranks], "cold"),
                "nodemap run --no-cache (all plan)": ([[*r, "--no-cache", "--", true] for r in ranks], None),
                "nodemap run -- true (warm)": ([[*r, "--", true] for r in ranks], "warm"),
            }
            _batch(cases["python -c pass"][0], env)  # warm-up: page cache, byte code
            floor = None
            for name, (cmds, cache) in cases.items():
                times = []
                for k in range(args.repeat):
                    folder = os.path.join(work, f"{n}-{k}-{cache}")
                    e = {**env, "NODEMAP_CACHE_DIR": folder if cache != "warm" else os.path.join(work, f"warm-{n}")}
                    if cache == "warm" and k == 0:
                        _batch(cmds[:1], e)  # publish the plan once
                    times.append(_batch(cmds, e))
                    if cache == "cold" and _plans(folder) != 1:
                        raise SystemExit(f"cold sample left {_plans(folder)} plans, expected 1")
                med = statistics.median(times)
                floor = floor or med
                print(f"{n:4d} {name:34s} {med:9.3f} {min(times):7.3f} {max(times):7.3f} {med / n * 1e3:8.1f} "
                      f"{med / floor:9.2f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
