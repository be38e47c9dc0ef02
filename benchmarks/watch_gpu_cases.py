"""`nodemap run --watch` on known GPU memory behaviours: is each flagged as it should be?

Runs the programs of benchmarks/watch_apps.py as ranks under `nodemap run
--watch` (default interval) on GPU 0 and checks the analysis:
  leak    a cache that never frees: a `growth` finding naming CuPy's pool
  steady  a fixed working set and a pooled temporary: no growth finding
  ipc     rank 0 exports a fresh cudaMalloc buffer each iteration through a
          CUDA IPC handle and frees it; rank 1 opens each handle and never
          closes it: an `ipc-growth` finding (the importer grows beside a
          steady exporter, even with both ranks planned on one GPU)
Prints each case's ranks (peak, growth, shape), findings and PASS/FAIL, the
programs' own NVML view at their end, and writes everything as JSON; the
timelines are kept (tar.gz) for `nodemap.watch`.

Run: python benchmarks/watch_gpu_cases.py [--out DIR] [--iters 40] [--mib 256]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time

from nodemap.watch import analysis, summary, timeline

HERE = os.path.dirname(os.path.abspath(__file__))
APPS = os.path.join(HERE, "watch_apps.py")


def _rank(local: int, size: int, wdir: str, app: list[str]) -> list[str]:
    return [sys.executable, "-m", "nodemap", "run", "--local-rank", str(local), "--local-size", str(size),
            "--watch", "--watch-dir", wdir, "--", sys.executable, APPS, *app]


def _run(cmds: list[list[str]]) -> list[dict]:
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    out = []
    for p in procs:
        o, e = p.communicate(timeout=300)
        last = o.strip().splitlines()[-1] if o.strip() else "{}"
        try:
            app = json.loads(last)
        except ValueError:
            app = {"stdout": o[-2000:]}
        out.append({"rc": p.returncode, "app": app, "stderr": e[-6000:]})
    return out


def case(name: str, root: str, iters: int, mib: int) -> dict:
    wdir = os.path.join(root, name)
    if name == "ipc":
        fifo = tempfile.mkdtemp(prefix="watch-ipc-")
        os.mkfifo(os.path.join(fifo, "handles"))
        os.mkfifo(os.path.join(fifo, "acks"))
        runs = _run([_rank(0, 2, wdir, ["ipc-export", str(iters), str(mib // 4), fifo]),
                     _rank(1, 2, wdir, ["ipc-import", str(iters), str(mib // 4), fifo])])
    else:
        runs = _run([_rank(0, 1, wdir, [name, str(iters), str(mib)])])
    jobs = analysis.by_job(timeline.read_dir(wdir))
    a = analysis.analyse(jobs[0] if jobs else [])
    kinds = [f.kind for f in a.findings]
    if name == "leak":
        ok = "growth" in kinds and any("CuPy" in f.evidence for f in a.findings if f.kind == "growth")
    elif name == "steady":
        ok = not any(k.endswith("growth") for k in kinds) and bool(a.ranks) and a.ranks[0].gpu.kind in ("steady", "ramp")
    else:  # both ranks planned on one GPU (a 1-GPU node): the importer grows beside a steady exporter
        ok = "ipc-growth" in kinds
    ok = ok and all(r["rc"] == 0 for r in runs)
    return {"case": name, "ok": ok, "runs": runs, "analysis": a.to_dict(), "summary": summary.render(a, wdir)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".", help="folder for watch_gpu_cases.json and the timelines")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--cases", default="leak,steady,ipc")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    root = tempfile.mkdtemp(prefix="watch-gpu-")
    print(f"# nodemap run --watch on GPU memory behaviours; {platform.node()}, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M %Z')}", flush=True)
    results = []
    for name in args.cases.split(","):
        r = case(name, root, args.iters, args.mib)
        results.append(r)
        print(f"## {name}: {'PASS' if r['ok'] else 'FAIL'}\n{r['summary']}", flush=True)
        for run in r["runs"]:
            print(f"  app rc {run['rc']}: {json.dumps(run['app'])[:600]}", flush=True)
            if run["rc"]:
                print(run["stderr"][-1500:], flush=True)
    with open(os.path.join(args.out, "watch_gpu_cases.json"), "w") as f:
        json.dump({"host": platform.node(), "date": time.strftime("%Y-%m-%d %H:%M %Z"), "cases": results}, f, indent=1)
    with tarfile.open(os.path.join(args.out, "watch_gpu_timelines.tar.gz"), "w:gz") as t:
        t.add(root, arcname="timelines")
    print("cases: " + ", ".join(f"{r['case']} {'PASS' if r['ok'] else 'FAIL'}" for r in results))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
