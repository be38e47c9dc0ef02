"""What `nodemap run` adds to starting a rank, against taskset and numactl.

Times N sequential launches of `true` (fork + exec + wait, wall clock) for:
a plain exec, `taskset -c 0 true`, `numactl --cpunodebind=0 --membind=0
true`, `nodemap run -- true` with this node's plan cached (every rank after
the first of a node, every later job step) and with --no-cache (plans the
node: reads sysfs, builds the Topology). Prints the median and best in ms,
the overhead over a plain exec and the ratio to taskset. Target (issue 3):
<= 60 ms over a plain exec.

Python's byte-code cache is on (as in any installed package): a
PYTHONDONTWRITEBYTECODE in the environment is dropped, and one warm-up run
per case fills it. numactl is installed with apt-get when missing (and
skipped if that fails).

Run: python benchmarks/launch_overhead.py [--repeat 50]
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

TARGET_MS = 60.0


def _numactl() -> str | None:
    if shutil.which("numactl"):
        return shutil.which("numactl")
    try:
        subprocess.run(["apt-get", "install", "-y", "-q", "numactl"], capture_output=True, timeout=300, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return shutil.which("numactl")


def _time(cmd: list[str], env: dict[str, str], repeat: int) -> list[float]:
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)  # warm-up: page cache, byte code
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["NODEMAP_CACHE_DIR"] = tempfile.mkdtemp(prefix="nodemap-bench-")
    true = shutil.which("true") or "/bin/true"
    script = os.path.join(os.path.dirname(sys.executable), "nodemap")  # the console script users run
    entry = [script] if os.path.exists(script) else [sys.executable, "-m", "nodemap.cli"]
    nodemap = [*entry, "run", "--local-rank", "0", "--local-size", "1"]
    cases = [("plain exec: true", [true]), ("taskset -c 0 true", ["taskset", "-c", "0", true])]
    numactl = _numactl()
    if numactl:
        cases.append(("numactl --cpunodebind=0 --membind=0 true", [numactl, "--cpunodebind=0", "--membind=0", true]))
    cases += [("python -c pass (interpreter floor)", [sys.executable, "-c", "pass"]),
              ("nodemap run -- true (plan cached)", [*nodemap, "--", true]),
              ("nodemap run --no-cache -- true", [*nodemap, "--no-cache", "--", true])]
    print(f"# launch overhead, {args.repeat} runs each; {platform.node()} {platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M %Z')}")
    medians: dict[str, float] = {}
    print(f"{'command':45s} {'median ms':>10s} {'best ms':>8s} {'over exec':>10s} {'x taskset':>10s}")
    for name, cmd in cases:
        ms = _time(cmd, env, args.repeat)
        medians[name] = statistics.median(ms)
        base = medians["plain exec: true"]
        ts = medians.get("taskset -c 0 true", base)
        print(f"{name:45s} {medians[name]:10.1f} {min(ms):8.1f} {medians[name] - base:10.1f} {medians[name] / ts:10.1f}")
    worst = max(v for k, v in medians.items() if k.startswith("nodemap")) - medians["plain exec: true"]
    cached = medians["nodemap run -- true (plan cached)"] - medians["plain exec: true"]
    print(f"overhead over a plain exec: {cached:.1f} ms cached, {worst:.1f} ms uncached "
          f"(target <= {TARGET_MS:.0f} ms: {'met' if cached <= TARGET_MS else 'MISSED'} cached, "
          f"{'met' if worst <= TARGET_MS else 'MISSED'} uncached)")
    shutil.rmtree(env["NODEMAP_CACHE_DIR"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
