"""The SPANK plugin's binding applied to real GPUs, without Slurm (issue 25):

  source benchmarks/device_setup.sh && make -C slurm driver &&
    python3 benchmarks/spank_apply_gpu.py --out $OUT/spank_apply.json

`slurm/nodemap_apply N` (apply.c: the plugin's own `nodemap plan` command
line and per-task binding code) starts N probes at once, each bound as its
local task. Each probe reports what it got: CPU affinity, memory policy
(get_mempolicy, /proc/self/status Mems_allowed_list, and the NUMA node of
the pages it touched), the plan's variables, and through CuPy the devices
CUDA shows and their PCI bus ids. Each is checked against the same plan
from `nodemap plan --json --env --gpu-ids pci`: PUs, memory bound to the
planned nodes, every variable, and CUDA device 0 the planned GPU. N is one
task per GPU (--tasks to change). One verdict line per task; exit 0 when
every task holds its plan, 1 when one does not, 2 when the check cannot run;
without CuPy or a GPU it says so and exits 0 (--no-gpu checks the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nodemap import outfile
from nodemap.topology.cpuset import CpuSet
from nodemap.topology.model import norm_bus_id

ROOT = Path(__file__).resolve().parent.parent
DRIVER = ROOT / "slurm" / "nodemap_apply"
# the variables the plan is made within (the plugin passes the job's to `nodemap plan`)
READ_BY_PLAN = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")

# What a task got, as JSON in FOLDER/TASK.json (tasks run at once: no shared pipe to interleave);
# argv[1]: the variables to report, argv[2]: "gpu" to ask CUDA, argv[3]: FOLDER.
PROBE = r"""
import ctypes, json, mmap, os, sys
from nodemap import native
from nodemap.bench.gpu.host_buffer import page_nodes

mode, nodes = native.get_mempolicy()
allowed = next(line.split(":", 1)[1].strip() for line in open("/proc/self/status")
               if line.startswith("Mems_allowed_list"))
size = 16 << 20
buf = mmap.mmap(-1, size)
buf.write(b"\1" * size)  # first touch, under the task's policy
touched = sorted(page_nodes(ctypes.addressof(ctypes.c_char.from_buffer(buf)), size))
row = {"task": int(os.environ["NODEMAP_APPLY_TASK"]), "cpus": sorted(os.sched_getaffinity(0)), "mode": mode,
       "mems": nodes, "mems_allowed": allowed, "pages_on": touched,
       "env": {k: os.environ.get(k) for k in json.loads(sys.argv[1])}}
if sys.argv[2] == "gpu":
    import cupy
    n = cupy.cuda.runtime.getDeviceCount()
    row["cuda"] = {"count": n, "pci": [cupy.cuda.Device(i).pci_bus_id for i in range(n)]}
with open(os.path.join(sys.argv[3], f"{row['task']}.json"), "w") as f:
    json.dump(row, f)
"""


def gpu_count() -> tuple[int, str]:
    """CUDA devices CuPy shows here, or 0 and why not."""
    try:
        import cupy
    except ImportError as e:
        return 0, f"no CuPy ({e})"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver, no device
        return 0, f"CUDA shows no device ({str(e).splitlines()[0]})"
    return n, "" if n else "CUDA shows no device"


def plan(nodemap: str, ntasks: int, request: list[str]) -> list[dict]:
    """The plan the driver applies (its command line: --oversubscribe), each GPU's bus id beside it."""
    out = subprocess.run([nodemap, "plan", "--tasks", str(ntasks), "--oversubscribe", *request, "--json", "--env",
                          "--gpu-ids", "pci"], capture_output=True, text=True, timeout=60)
    if out.returncode:
        raise SystemExit(f"spank_apply_gpu: `nodemap plan` failed: {out.stderr.strip()}")
    tasks = json.loads(out.stdout)["tasks"]
    for t in tasks:
        env = dict(t["env"])
        pci = env.pop("NODEMAP_GPU_PCI", "")  # --gpu-ids pci only (the driver plans without it)
        t["env"], t["gpu_pci"] = env, [b for b in pci.split(",") if b]
    return tasks


def run_tasks(driver: str, nodemap: str, tasks: list[dict], options: str, gpu: bool) -> tuple[list[dict], str]:
    """Each task's probe, run under the driver; (rows by task, the driver's stderr)."""
    keys = sorted({k for t in tasks for k in t["env"]})
    # the plan's variables must come from the driver: none inherited (the job's own values would win)
    env = {k: v for k, v in os.environ.items() if k not in keys or k in READ_BY_PLAN}
    with tempfile.TemporaryDirectory() as folder:
        argv = [driver, f"--nodemap-path={nodemap}", *([f"--nodemap={options}"] if options else []),
                str(len(tasks)), "--", sys.executable, "-c", PROBE, json.dumps(keys), "gpu" if gpu else "-", folder]
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        rows = {int(f.stem): json.loads(f.read_text()) for f in Path(folder).glob("*.json")}
    if p.returncode or len(rows) != len(tasks):
        raise SystemExit(f"spank_apply_gpu: the driver exited {p.returncode} with {len(rows)} of {len(tasks)} "
                         f"tasks reporting: {(p.stdout + p.stderr).strip()[-2000:]}")
    return [rows[t["task"]] for t in tasks], p.stderr


def problems(row: dict, task: dict, gpu: bool) -> list[str]:
    """What differs between what the task got and its plan; [] when it holds the plan."""
    bad = []
    cpus, want_cpus = CpuSet(row["cpus"]), CpuSet.parse(task["cpus"])
    if cpus != want_cpus:
        bad.append(f"PUs {cpus.format()} != plan {want_cpus.format()}")
    if task["mems"]:
        mems, want = CpuSet(row["mems"]), CpuSet.parse(task["mems"])
        if (row["mode"], mems) != ("bind", want):
            bad.append(f"memory {row['mode']}:{mems.format()} != plan bind:{want.format()}")
        if not want.issubset(CpuSet.parse(row["mems_allowed"])):
            bad.append(f"Mems_allowed_list {row['mems_allowed']} lacks plan's {want.format()}")
        if not row["pages_on"] or min(row["pages_on"]) < 0 or not CpuSet(row["pages_on"]).issubset(want):
            bad.append(f"touched pages on NUMA {row['pages_on']}, not within {want.format()}")
    for k, v in task["env"].items():
        if row["env"].get(k) != v:
            bad.append(f"{k}={row['env'].get(k)} != plan {v}")
    if gpu:
        got = [norm_bus_id(b) for b in row["cuda"]["pci"]]
        want_pci = [norm_bus_id(b) for b in task["gpu_pci"]]
        if got != want_pci:
            bad.append(f"CUDA shows {got or 'no device'} != plan's GPUs {want_pci}")
    return bad


def verdict(row: dict, task: dict, bad: list[str], gpu: bool) -> str:
    if bad:
        return f"task {task['task']}: FAIL  " + "; ".join(bad)
    mems = f"memory bind:{task['mems']} (pages on {','.join(map(str, row['pages_on']))})" if task["mems"] else \
        "no memory binding planned"
    cuda = f", CUDA device 0 = {row['cuda']['pci'][0]} of {row['cuda']['count']}" if gpu and row["cuda"]["count"] \
        else ""
    return f"task {task['task']}: PASS  PUs {task['cpus']}, {mems}, {len(task['env'])} variables{cuda} as planned"


def check(driver: str, nodemap: str, ntasks: int, options: str = "", request: tuple[str, ...] = (),
          gpu: bool = False) -> dict:
    """Plan, run every task's probe under the driver, judge each against its plan."""
    tasks = plan(nodemap, ntasks, list(request))
    rows, stderr = run_tasks(driver, nodemap, tasks, options, gpu)
    results = []
    for row, task in zip(rows, tasks):
        bad = problems(row, task, gpu)
        results.append({"task": task["task"], "ok": not bad, "problems": bad, "verdict": verdict(row, task, bad, gpu),
                        "planned": task, "got": row})
    return {"tasks": results, "ok": all(r["ok"] for r in results), "driver_stderr": stderr}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--tasks", type=int, help="tasks on this node (default: one per GPU CUDA shows)")
    ap.add_argument("--nodemap", dest="options", default="",
                    help="the plugin's options, as srun --nodemap=OPTS (e.g. threads=2,verbose)")
    ap.add_argument("--driver", default=str(DRIVER), help="the driver (default: slurm/nodemap_apply)")
    ap.add_argument("--no-gpu", action="store_true", help="check PUs, memory and variables only")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    start = time.monotonic()
    nodemap = shutil.which("nodemap")
    if not nodemap:
        print("spank_apply_gpu: nodemap is not in PATH (source benchmarks/device_setup.sh, or activate the venv)",
              file=sys.stderr)
        return 2
    if not os.access(args.driver, os.X_OK):
        print(f"spank_apply_gpu: no driver at {args.driver} (build it: make -C slurm driver)", file=sys.stderr)
        return 2
    ngpu, why = (0, "--no-gpu") if args.no_gpu else gpu_count()
    if not ngpu and not args.no_gpu:
        print(f"spank_apply_gpu: skipped: {why} (--no-gpu checks PUs, memory and variables)")
        return 0
    result = check(args.driver, nodemap, args.tasks or ngpu or 2, args.options, gpu=bool(ngpu))
    result.update(host=os.uname().nodename, gpus=ngpu, seconds=round(time.monotonic() - start, 2),
                  date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    for r in result["tasks"]:
        print(r["verdict"])
    if args.out:
        outfile.write(args.out, json.dumps(result, indent=1) + "\n", option="--out")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
