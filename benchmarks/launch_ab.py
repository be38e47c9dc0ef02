"""`nodemap run -- true` of two git revisions, launches interleaved.

Launch overhead measured one case after another (launch_overhead.py) drifts
with the load of a shared machine by more than the difference between two
versions. This script extracts both revisions' src/ (git archive) and
alternates single launches of each (cached plan, and --no-cache), taking
the CPU time (user + sys, from wait4: less sensitive to other jobs than
wall time) and the wall time of each. `python -S` keeps the editable
install's import hook out, so each tree is imported as it is; the memory
policy is left alone (--mem-policy none: no native library needed).
Prints median and best per case, and `python -S -c pass` as the floor.

Run: python benchmarks/launch_ab.py REV_BEFORE REV_AFTER [--repeat 40]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def _tree(rev: str, into: str) -> str:
    os.makedirs(into)
    archive = subprocess.run(["git", "archive", rev, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return os.path.join(into, "src")


def _cmd(tree: str, extra: list[str]) -> list[str]:
    code = (f"import sys; sys.path.insert(0, {tree!r}); from nodemap.cli import main; sys.argv[0] = 'nodemap'; "
            "sys.exit(main())")
    return [sys.executable, "-S", "-c", code, "run", "--local-rank", "0", "--local-size", "1", "--mem-policy", "none",
            *extra, "--", shutil.which("true") or "/bin/true"]


def _one(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        raise SystemExit(f"exit status {status}: {' '.join(cmd[:3])} ...")
    return (ru.ru_utime + ru.ru_stime) * 1e3, wall * 1e3


def summary(xs: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    """(CPU median, CPU best, wall median, wall best) of _one's results."""
    cpu, wall = [x[0] for x in xs], [x[1] for x in xs]
    return statistics.median(cpu), min(cpu), statistics.median(wall), min(wall)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--repeat", type=int, default=40)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="nodemap-ab-")
    try:
        trees = {name: _tree(rev, os.path.join(work, name)) for name, rev in (("before", args.before),
                                                                                ("after", args.after))}
        envs = {name: {**os.environ, "NODEMAP_CACHE_DIR": os.path.join(work, f"cache-{name}")} for name in trees}
        cases = [(f"{name} {kind}", _cmd(tree, extra), envs[name]) for name, tree in trees.items()
                 for kind, extra in (("cached", []), ("--no-cache", ["--no-cache"]))]
        cases.append(("python -S -c pass", [sys.executable, "-S", "-c", "pass"], dict(os.environ)))
        for _, cmd, env in cases:  # warm-up: byte code, the published plan
            _one(cmd, env)
            _one(cmd, env)
        res: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in cases}
        for _ in range(args.repeat):
            for name, cmd, env in cases:
                res[name].append(_one(cmd, env))
        print(f"# {args.before} -> {args.after}: {args.repeat} interleaved launches each; {os.cpu_count()} CPUs, "
              f"load {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print(f"{'case':22s} {'CPU median ms':>14s} {'CPU best':>9s} {'wall median':>12s} {'wall best':>10s}")
        for name, xs in res.items():
            cpu_med, cpu_best, wall_med, wall_best = summary(xs)
            print(f"{name:22s} {cpu_med:14.1f} {cpu_best:9.1f} {wall_med:12.1f} {wall_best:10.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
