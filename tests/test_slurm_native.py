"""`srun $(nodemap plan --launcher srun --emit native) sh -c WRAPPER sh APP`
in the real Slurm test cluster (tests/slurm_cluster.py): every task gets,
checked from inside it, the CPUs, memory policy and environment that
`nodemap plan` gives, with no nodemap run on the task's launch path."""

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slurm]
PY = sys.executable
NODEMAP = [PY, "-m", "nodemap"]
# what a task sees of itself, one JSON line (the probe is not nodemap: plain os calls and the C helper)
PROBE = """
import json, os
from nodemap import native
mode, nodes = native.get_mempolicy()
print(json.dumps({"host": os.environ["SLURMD_NODENAME"], "local": int(os.environ["SLURM_LOCALID"]),
                  "cpus": sorted(os.sched_getaffinity(0)), "mode": mode, "mems": nodes,
                  "env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "NODEMAP_", "UCX_", "NCCL_"))}}))
"""


def nodemap(*args: str) -> str:
    return subprocess.run([*NODEMAP, *args], capture_output=True, text=True, check=True, timeout=60).stdout


# the second differs from what Slurm's own task/affinity would give (task 0 on CPU 0, task 1 on CPU 1)
@pytest.mark.parametrize("request_args", [["--tasks", "2"], ["--tasks", "2", "--cpus", "1", "--oversubscribe"]])
def test_srun_with_the_native_binding_gives_each_task_its_plan(slurm_cluster, request_args):
    from nodemap.topology.cpuset import CpuSet

    plan = json.loads(nodemap("plan", *request_args, "--json", "--env"))["tasks"]
    words = nodemap("plan", *request_args, "--launcher", "srun", "--emit", "native").split()  # as $(...) splits
    wrapper = nodemap("plan", *request_args, "--launcher", "srun", "--emit", "wrapper").strip()
    p = slurm_cluster.srun("-N3", *words, "sh", "-c", wrapper, "sh", PY, "-c", PROBE)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert sorted((r["host"], r["local"]) for r in rows) == [(n, i) for n in ("n1", "n2", "n3") for i in (0, 1)]
    for r in rows:
        task = plan[r["local"]]
        assert CpuSet(r["cpus"]) == CpuSet.parse(task["cpus"]), r
        assert (r["mode"], CpuSet(r["mems"])) == ("bind", CpuSet.parse(task["mems"])), r
        planned = dict(task["env"])
        assert {k: planned[k] for k in r["env"]} == r["env"] and set(planned) - {"CUDA_VISIBLE_DEVICES",
                                                                                  "CUDA_DEVICE_ORDER"} <= set(r["env"])
