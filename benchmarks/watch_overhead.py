"""What `nodemap run --watch` costs the application: the same loop with and without it.

Runs a fixed compute loop as a rank under `nodemap run` (plan cached), in
alternating pairs: plain, then with --watch at the default interval (200 ms).
The loop times itself (its own clock, from its first to its last iteration,
so start-up and the monitor's exit are excluded) and checks its result; with
--watch it also reads the monitor's CPU time (/proc/PID/stat of its parent, the
launcher that stays as the monitor: its start-up included)
just before it exits. Prints median, min, max per mode, the overhead of the
medians and of the best times, and the monitor's CPU per sample.

Loops: `cpu` (pure-Python integer arithmetic, one PU) and `gpu` (CuPy
matrix products, synchronised each iteration; needs CuPy and a GPU).
Target (issue 20): < 1% of the loop's time at the default interval.

Run: python benchmarks/watch_overhead.py [--loop cpu|gpu] [--pairs 5] [--seconds 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TARGET = 0.01

LOOP = r"""
import json, os, sys, time
kind, seconds = sys.argv[1], float(sys.argv[2])
if kind == "gpu":
    import cupy as cp
    a = cp.random.random((4096, 4096), dtype=cp.float32); b = cp.eye(4096, dtype=cp.float32)
    def step():
        c = a @ b
        cp.cuda.Stream.null.synchronize()
        return c
    c = step()  # warm-up (kernel selection)
else:
    def step():
        s = 0
        for i in range(200000):
            s += i * i
        return s
t = time.perf_counter(); step(); n = max(1, int(seconds / (time.perf_counter() - t)))
n = int(os.environ.get("WATCH_BENCH_ITERS", n))
print(json.dumps({"iters": n}), flush=True)
sys.stdin.readline()  # the driver fixes the iteration count from the first (plain) run
t0 = time.perf_counter()
for _ in range(n):
    c = step()
dt = time.perf_counter() - t0
if kind == "gpu":
    ok = bool(cp.allclose(c, a))  # a @ I == a: the product was computed
else:
    ok = c == sum(i * i for i in range(200000))
mon = {}
parent = os.getppid()  # with --watch the launcher stays as the monitor, the loop's parent
if b"--watch" in open(f"/proc/{parent}/cmdline", "rb").read().split(b"\0"):
    f = open(f"/proc/{parent}/stat").read().rsplit(")", 1)[1].split()
    mon = {"monitor_cpu_s": (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")}
print(json.dumps({"loop_s": dt, "iters": n, "ok": ok, **mon}), flush=True)
"""


def _once(cmd: list[str], env: dict[str, str], iters: int | None) -> dict:
    e = dict(env)
    if iters:
        e["WATCH_BENCH_ITERS"] = str(iters)
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
    first = json.loads(p.stdout.readline())
    p.stdin.write("\n")
    p.stdin.flush()
    out, err = p.communicate()
    if p.returncode != 0:
        raise SystemExit(f"loop failed ({p.returncode}): {err.strip()[-500:]}")
    res = json.loads(out.strip().splitlines()[-1])
    if not res["ok"]:
        raise SystemExit("the loop's result is wrong: no figure reported")
    res["iters"] = first["iters"] if not iters else iters
    return res


def _stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loop", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of one loop (default 10 s)")
    ap.add_argument("--interval", default="200ms")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["NODEMAP_CACHE_DIR"] = tempfile.mkdtemp(prefix="nodemap-bench-")
    wdir = tempfile.mkdtemp(prefix="nodemap-watch-bench-")
    base = [sys.executable, "-m", "nodemap", "run", "--local-rank", "0", "--local-size", "1"]
    app = ["--", sys.executable, "-c", LOOP, args.loop, str(args.seconds)]
    plain_cmd = base + app
    watch_cmd = base + ["--watch", "--watch-interval", args.interval, "--watch-dir", wdir] + app
    print(f"# nodemap run --watch overhead, {args.loop} loop of ~{args.seconds:g} s, {args.pairs} pairs, interval "
          f"{args.interval}; {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M %Z')}", flush=True)
    first = _once(plain_cmd, env, None)  # fixes the iteration count for every run
    iters = first["iters"]
    plain, watch, mon = [], [], []
    for i in range(args.pairs):
        plain.append(_once(plain_cmd, env, iters)["loop_s"])
        w = _once(watch_cmd, env, iters)
        watch.append(w["loop_s"])
        mon.append(w.get("monitor_cpu_s", float("nan")))
        print(f"pair {i + 1}: plain {plain[-1]:.3f} s, --watch {watch[-1]:.3f} s, monitor CPU {mon[-1]:.3f} s",
              flush=True)
    sp, sw = _stats(plain), _stats(watch)
    over_med = sw["median"] / sp["median"] - 1
    over_min = sw["min"] / sp["min"] - 1
    samples = statistics.median(watch) / _interval_s(args.interval)
    per_sample_ms = 1e3 * statistics.median(mon) / samples
    print(f"{'mode':10s} {'median s':>9s} {'min s':>8s} {'max s':>8s}")
    for name, s in (("plain", sp), ("--watch", sw)):
        print(f"{name:10s} {s['median']:9.3f} {s['min']:8.3f} {s['max']:8.3f}")
    print(f"overhead: {100 * over_med:+.2f}% (medians), {100 * over_min:+.2f}% (best); monitor CPU "
          f"{statistics.median(mon):.3f} s per run, {per_sample_ms:.2f} ms per sample "
          f"({100 * statistics.median(mon) / sw['median']:.2f}% of one PU); target < {100 * TARGET:.0f}%: "
          f"{'met' if max(over_med, over_min) < TARGET else 'MISSED'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"loop": args.loop, "iters": iters, "interval": args.interval, "plain_s": plain,
                       "watch_s": watch, "monitor_cpu_s": mon, "overhead_median": over_med,
                       "overhead_best": over_min, "monitor_ms_per_sample": per_sample_ms,
                       "host": platform.node(), "date": time.strftime("%Y-%m-%d %H:%M %Z")}, f, indent=1)
    shutil.rmtree(env["NODEMAP_CACHE_DIR"], ignore_errors=True)
    shutil.rmtree(wdir, ignore_errors=True)
    return 0


def _interval_s(text: str) -> float:
    from nodemap.watch.monitor import parse_interval

    return parse_interval(text)


if __name__ == "__main__":
    sys.exit(main())
