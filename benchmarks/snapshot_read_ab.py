"""`nodemap topo --input X.tar.bz2` and `--input X/` (the same tree unpacked) of git revisions, interleaved.

Issue 37's target: a sysfs tarball, read without unpacking it to disk, costs
at most 2x the same tree unpacked. topo_vs_lstopo.sh times one revision; this
script alternates single runs of every revision on the tarball and on its
tree (CPU from wait4, with any child's, and wall), as xml_read_ab.py does for
XML, so that a shared machine's load weighs on every case alike. Each
revision's src/ comes from git archive and runs with `python -S` (the editable
install's import hook kept out).

Run: python benchmarks/snapshot_read_ab.py REV... --snapshot X.tar.bz2 [--repeat 11]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch_ab import _tree, summary  # noqa: E402  (one way to extract a revision and sum its runs)
from xml_read_ab import _topo, interleaved  # noqa: E402  (one way to run a revision's topo --input, interleaved)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revs", nargs="+")
    ap.add_argument("--snapshot", required=True, help="an hwloc sysfs tarball (tests/hwloc/linux/*.tar.bz2)")
    ap.add_argument("--repeat", type=int, default=11)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="nodemap-snapab-")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # time what users run
    env["PYTHONPYCACHEPREFIX"] = os.path.join(work, "pycache")
    try:
        unpacked = os.path.join(work, "unpacked")
        os.makedirs(unpacked)
        subprocess.run(["tar", "-xf", args.snapshot, "-C", unpacked], check=True)
        name = os.path.basename(args.snapshot)
        inputs = {name: args.snapshot, name.split(".tar")[0] + "/": unpacked}
        trees = {rev: _tree(rev, os.path.join(work, f"rev{i}")) for i, rev in enumerate(args.revs)}
        cases = [(f"{rev} {label}", _topo(trees[rev], path)) for rev in args.revs for label, path in inputs.items()]
        cases.append(("python -S -c pass", [sys.executable, "-S", "-c", "pass"]))
        load0 = " ".join(f"{x:.1f}" for x in os.getloadavg())
        runs = interleaved(cases, env, args.repeat)
        load1 = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"# {' vs '.join(args.revs)}: {args.repeat} interleaved runs each; {os.cpu_count()} CPUs, load {load0} "
              f"before, {load1} after, Python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print("| case | CPU median ms | CPU best | wall median ms | wall best |")
        print("|---|---|---|---|---|")
        sums = {label: summary(xs) for label, xs in runs.items()}
        for label, (cpu_med, cpu_best, wall_med, wall_best) in sums.items():
            print(f"| `{label}` | {cpu_med:.1f} | {cpu_best:.1f} | {wall_med:.1f} | {wall_best:.1f} |")
        tar, tree = inputs
        for rev in args.revs:
            a, b = sums[f"{rev} {tar}"], sums[f"{rev} {tree}"]
            print(f"| {rev}: tarball / tree (target <= 2x) | {a[0] / b[0]:.2f}x CPU | | {a[2] / b[2]:.2f}x wall | |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
