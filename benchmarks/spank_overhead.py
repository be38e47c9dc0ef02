"""Cost per step of binding with nodemap under Slurm, side by side with plain
srun in one run of the real test cluster (tests/slurm_cluster.py; docs/slurm.md):

  .venv/bin/python benchmarks/spank_overhead.py [--tasks 4,16] [--repeats 15] [--quick] [-o results/spank_overhead.md]

Each repeat times, by wall clock around srun, in turn: plain `srun -n T true`;
`srun --nodemap` as a job's later steps run it (the node's plan cache holds
the plan: the SPANK plugin built from slurm/ reads it in C, no Python);
`srun --nodemap` with an empty plan cache (a first step: one `nodemap plan`
per node); srun with the plan's native options and the sh wrapper
(`--emit native`/`--emit wrapper`, planned once before); and `srun nodemap
run -- true` (Python and a plan-cache rendezvous per rank). --quick leaves out
the last two. T tasks on one node (oversubscribed when T exceeds its PUs),
for each T given.

A variant's extra over plain srun at the same T, three ways: its fastest
repeat minus plain srun's (the shared machine's load only ever adds time),
the ratio of the two, and the median of the repeats' paired differences
(variants run interleaved, so a repeat's pair saw the same load). Its growth
per added task separates a per-task cost from a fixed one. The table goes
to stdout, and with -o to a Markdown file with the machine, date and commit.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]

from slurm_cluster import Cluster  # noqa: E402

NODEMAP = [sys.executable, "-m", "nodemap"]
PLAIN, CACHED, FIRST = "srun (Slurm's binding)", "srun --nodemap, a later step (plan cache)", \
    "srun --nodemap, a first step (no plan cached)"


def variants(t: int, quick: bool) -> dict[str, list[str]]:
    # every CPU of the node for the step (-c all, overcommitted): the native masks name them all
    base = ["-N1", f"-n{t}", "--overcommit", f"-c{os.cpu_count()}"]
    out = {PLAIN: [*base, "true"], CACHED: ["--nodemap", *base, "true"], FIRST: ["--nodemap", *base, "true"]}
    if quick:
        return out
    plan = [*NODEMAP, "plan", "--tasks", str(t), "--oversubscribe", "--launcher", "srun"]
    native = subprocess.run([*plan, "--emit", "native"], capture_output=True, text=True, check=True).stdout
    wrapper = subprocess.run([*plan, "--emit", "wrapper"], capture_output=True, text=True, check=True).stdout
    # -n T --overcommit instead of its --ntasks-per-node=T (more than the node's CPUs)
    out["srun native options + sh wrapper"] = [*base, *(w for w in native.split() if "ntasks" not in w), "sh", "-c",
                                               wrapper.strip(), "sh", "true"]
    out["srun nodemap run -- true"] = [*base, *NODEMAP, "run", "--", "true"]
    return out


def measure(cluster: Cluster, runs: dict, repeats: int, folder: str) -> dict[tuple[str, int], list[float]]:
    times: dict[tuple[str, int], list[float]] = {}
    warm = os.path.join(folder, "warm")  # the plan cache later steps read (made by the first repeat)
    for r in range(repeats):
        for t, vs in runs.items():
            for name, argv in vs.items():  # interleaved: drift hits every variant alike
                env = {"NODEMAP_CACHE_DIR": warm}
                if name == FIRST:
                    env["NODEMAP_CACHE_DIR"] = os.path.join(folder, f"cold-{t}-{r}")  # absent: nothing cached
                t0 = time.monotonic()
                p = cluster.srun(*argv, timeout=300, env=env)
                dt = time.monotonic() - t0
                if p.returncode or "nodemap:" in p.stderr:
                    sys.exit(f"{name}, {t} tasks: exit {p.returncode}\n{p.stderr}")
                times.setdefault((name, t), []).append(dt)
    return times


def table(times: dict, names: list[str], counts: list[int]) -> list[str]:
    best = {k: min(v) for k, v in times.items()}
    lo, hi = counts[0], counts[-1]
    rows = ["| variant | " + " | ".join(f"{t} tasks: min (median) s | extra (ratio) | paired median extra"
                                       for t in counts) + f" | extra per added task ({lo} to {hi}) |",
            "|---" * (3 * len(counts) + 2) + "|"]
    for name in names:
        cells = []
        for t in counts:
            vals, plain = times[(name, t)], times[(PLAIN, t)]
            cells.append(f"{best[(name, t)]:.3f} ({statistics.median(vals):.3f})")
            if name == PLAIN:
                cells += ["-", "-"]
                continue
            extra = best[(name, t)] - best[(PLAIN, t)]
            paired = statistics.median(a - b for a, b in zip(vals, plain))
            cells += [f"{extra * 1000:+.1f} ms ({best[(name, t)] / best[(PLAIN, t)]:.2f}x)", f"{paired * 1000:+.1f} ms"]
        slope = ((best[(name, hi)] - best[(PLAIN, hi)]) - (best[(name, lo)] - best[(PLAIN, lo)])) / (hi - lo)
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {'-' if name == PLAIN else f'{slope * 1000:+.1f} ms'} |")
    return rows


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "CPU unknown")
    except OSError:
        return "CPU unknown"


def commit() -> str:
    p = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (p.stdout.strip() or "unknown") + (" with uncommitted changes" if dirty else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="4,16", help="task counts per node, comma-separated (default 4,16)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="plain srun and the plugin only")
    ap.add_argument("-o", "--output", help="write the table as Markdown here")
    args = ap.parse_args()
    counts = [int(x) for x in args.tasks.split(",")]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(["make", "-C", str(ROOT / "slurm"), f"BUILD_DIR={out}"], check=True, capture_output=True)
        cluster = Cluster.start(plugstack=f"required {out}/nodemap_spank.so\n", nodes=1)
        try:
            runs = {t: variants(t, args.quick) for t in counts}
            times = measure(cluster, runs, args.repeats, out)
        finally:
            cluster.stop()
    rows = table(times, list(runs[counts[0]]), counts)
    machine = f"{os.cpu_count()}-vCPU {platform.machine()} VM ({cpu_model()}), Linux {platform.release()}"
    head = (f"one node of the test cluster, {args.repeats} repeats, load {os.getloadavg()[0]:.1f} at the end; "
            f"{machine}; commit {commit()}")
    print(head + "\n" + "\n".join(rows))
    if args.output:
        Path(args.output).write_text(
            "# Binding under Slurm: plugin, native options, `nodemap run` (benchmarks/spank_overhead.py)\n\n"
            f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {head}\n"
            f"- command: `.venv/bin/python benchmarks/spank_overhead.py --tasks {args.tasks} --repeats "
            f"{args.repeats}{' --quick' if args.quick else ''} -o {args.output}`\n"
            "- extra: the fastest wall time of the srun (of the repeats: load only adds) minus plain srun's at the "
            "same task count, and their ratio; paired: the median of each repeat's difference to the plain srun "
            "run beside it; per added task: the growth of the extra from the smallest to the largest count (the "
            "plugin's one plan per node is a fixed cost; `nodemap run` pays per rank)\n\n" + "\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
