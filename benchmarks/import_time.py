#!/usr/bin/env python3
"""How long importing nodemap's core takes (target: <= 40 ms).

Two measures, each in fresh interpreters:
  importtime  sum of `python -X importtime` self times of every module the
              import pulls in beyond a bare interpreter (what nodemap costs)
  wall        median wall time of `python -c "import ..."` minus the median
              of `python -c pass` (what a user waits for, startup removed)

usage: python benchmarks/import_time.py [--runs N] [--modules a,b,c] [--top K]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT = "nodemap,nodemap.topology.model,nodemap.cli"
TARGET_MS = 40.0

# Users run with bytecode caches; a PYTHONDONTWRITEBYTECODE environment
# would time the compiler instead. Caches go to a private prefix so the
# source tree stays clean.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="nodemap-pycache-")


def wall_ms(code: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=ENV)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def importtime(code: str) -> list[tuple[float, int, str]]:
    """(self ms, depth, module) per module imported, from -X importtime."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                         capture_output=True, text=True, check=True, env=ENV).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cum, name = (x.strip() for x in line[len("import time:"):].split("|"))
        rows.append((int(self_us) / 1e3, len(name) - len(name.lstrip()), name.strip()))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--modules", default=DEFAULT)
    ap.add_argument("--top", type=int, default=8, help="show the K slowest modules")
    args = ap.parse_args()
    code = "import " + ", ".join(args.modules.split(","))
    for warm in ("pass", code):  # write the bytecode caches first
        subprocess.run([sys.executable, "-c", warm], check=True, env=ENV)

    base = {name for _, _, name in importtime("pass")}
    rows = [r for r in importtime(code) if r[2] not in base]
    total = sum(ms for ms, _, _ in rows)
    wall = wall_ms(code, args.runs) - wall_ms("pass", args.runs)

    print(f"python {sys.version.split()[0]}  {code}  (bytecode cached)")
    print(f"importtime: {total:.1f} ms over {len(rows)} modules beyond a bare interpreter")
    print(f"wall:       {wall:.1f} ms (median of {args.runs}, interpreter startup subtracted)")
    for ms, _, name in sorted(rows, reverse=True)[: args.top]:
        print(f"  {ms:7.2f} ms  {name}")
    worst = max(total, wall)
    print(f"target <= {TARGET_MS:.0f} ms: {'met' if worst <= TARGET_MS else 'MISSED'} ({worst:.1f} ms)")
    return 0 if worst <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
