"""How fast the real Slurm test cluster starts and stops, and a first job in
it, as the tests use it (scripts/slurm-test-cluster; docs/slurm.md).

  python3 benchmarks/slurm_cluster_speed.py [--nodes 3] [--repeats 5]

Each repeat: `start DIR --json` (munged, slurmctld, N slurmd; returns once
sinfo shows every node idle), one `srun -N N true`, `stop DIR` (jobs
cancelled, every daemon TERMed by its pid). Timed by wall clock around each
command, as a user or the pytest fixture runs them. Prints the median and
range of each; needs root and Debian's slurm packages
(scripts/install-test-packages).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "slurm-test-cluster")


def timed(cmd: list[str], **kw) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return time.monotonic() - t0, p


def one(nodes: int) -> dict[str, float]:
    top = tempfile.mkdtemp(prefix="nmslurm-bench-")
    try:
        start, p = timed([sys.executable, SCRIPT, "start", top, "--json", "--nodes", str(nodes)])
        conf = json.loads(p.stdout)["slurm_conf"]
        job, _ = timed(["srun", f"-N{nodes}", f"-n{nodes}", "true"], env=dict(os.environ, SLURM_CONF=conf))
    finally:
        stop, _ = timed([sys.executable, SCRIPT, "stop", top])
    subprocess.run(["rm", "-rf", top], check=False)
    return {"start (nodes idle)": start, "first srun": job, "stop": stop}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    runs = [one(args.nodes) for _ in range(args.repeats)]
    print(f"{args.nodes} nodes, {args.repeats} repeats, load {os.getloadavg()[0]:.1f}")
    for what in runs[0]:
        vals = [r[what] for r in runs]
        print(f"{what:20} median {statistics.median(vals):.2f} s  (min {min(vals):.2f}, max {max(vals):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
