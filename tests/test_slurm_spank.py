"""The SPANK plugin (slurm/nodemap_spank.c), built from the checkout and
loaded through the test cluster's own plugstack.conf: `srun --nodemap`
gives each task, checked from inside it, the CPUs, memory policy and
environment that `nodemap plan` gives for the node's task count; it stays
out of the way when off, and a broken nodemap costs one line, not the job
(unless --nodemap=strict)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_cluster import ROOT, Cluster, unavailable
from test_slurm_native import PROBE  # what a task sees of itself, one JSON line

pytestmark = [pytest.mark.slurm]
PY = sys.executable


@pytest.fixture(scope="module")
def plugin(tmp_path_factory) -> Path:
    """slurm/nodemap_spank.so built from the checkout by `make -C slurm`."""
    if unavailable():
        pytest.skip(unavailable())
    if not shutil.which("cc") or not any(Path(p).exists() for p in ("/usr/include/slurm/spank.h",
                                                                     "/usr/local/include/slurm/spank.h")):
        pytest.skip("the SPANK plugin needs a C compiler and Slurm's spank.h (apt-get install libslurm-dev)")
    out = tmp_path_factory.mktemp("spank")
    subprocess.run(["make", "-C", str(ROOT / "slurm"), f"BUILD_DIR={out}"], check=True, capture_output=True, timeout=120)
    return out / "nodemap_spank.so"


def cluster_with(plugstack: str):
    cluster = Cluster.start(plugstack=plugstack, nodes=2)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def spank_cluster(plugin):
    yield from cluster_with(f"required {plugin}\n")


@pytest.fixture(scope="module")
def default_on_cluster(plugin):
    yield from cluster_with(f"required {plugin} default_on\n")


def rows_of(p) -> list[dict]:
    assert p.returncode == 0, p.stdout + p.stderr
    return [json.loads(line) for line in p.stdout.splitlines()]


def planned(*request: str) -> list[dict]:
    return json.loads(subprocess.run([PY, "-m", "nodemap", "plan", *request, "--json", "--env"], capture_output=True,
                                     text=True, check=True, timeout=60).stdout)["tasks"]


@pytest.mark.parametrize("option,per_node,request_args", [
    ("--nodemap", 2, ()), ("--nodemap=threads=2,verbose", 2, ("--threads", "2"))])
def test_srun_nodemap_binds_every_task_by_the_plan(spank_cluster, option, per_node, request_args):
    from nodemap.topology.cpuset import CpuSet

    plan = planned("--tasks", str(per_node), *request_args)
    p = spank_cluster.srun(option, "-N2", f"--ntasks-per-node={per_node}", PY, "-c", PROBE)
    rows = rows_of(p)
    assert sorted((r["host"], r["local"]) for r in rows) == [(n, i) for n in ("n1", "n2") for i in range(per_node)]
    for r in rows:
        task = plan[r["local"]]
        assert CpuSet(r["cpus"]) == CpuSet.parse(task["cpus"]), r
        assert (r["mode"], CpuSet(r["mems"])) == ("bind", CpuSet.parse(task["mems"])), r
        env = dict(task["env"])
        assert r["env"] == {k: v for k, v in env.items() if k.startswith(("OMP_", "NODEMAP_", "UCX_", "NCCL_"))}, r
    assert ("nodemap: task 0: PUs" in p.stderr) == ("verbose" in option)


@pytest.mark.parametrize("cpus_per_task", [1, 2])
def test_the_plan_stays_within_the_steps_cores(spank_cluster, cpus_per_task):
    """One task a node: Slurm gives the step 1 core (or 2 with -c2); the plan is made within them."""
    from nodemap.topology.cpuset import CpuSet

    p = spank_cluster.srun("--nodemap=verbose", "-N1", "-n1", f"-c{cpus_per_task}", PY, "-c", PROBE)
    (row,) = rows_of(p)
    assert len(row["cpus"]) == cpus_per_task and row["env"]["OMP_NUM_THREADS"] == str(cpus_per_task), row
    assert row["env"]["OMP_PLACES"] == ",".join(f"{{{c}}}" for c in row["cpus"]), row
    assert CpuSet(row["cpus"]).issubset(CpuSet.parse(planned("--tasks", "1")[0]["cpus"]))


@pytest.mark.parametrize("option", [None, "--nodemap=off"])
def test_without_nodemap_the_task_keeps_slurms_binding(spank_cluster, option):
    p = spank_cluster.srun(*([option] if option else []), "-N1", "-n1", PY, "-c", PROBE)
    (row,) = rows_of(p)
    assert row["env"] == {} and "nodemap" not in p.stderr
    assert len(row["cpus"]) == 1  # Slurm's own binding: the one CPU it allocated (the plan would give both)


def test_a_broken_nodemap_costs_one_line_not_the_job(spank_cluster, tmp_path):
    bad = tmp_path / "nodemap"
    bad.write_text("#!/bin/sh\necho 'nodemap: broken install (test)' >&2\nexit 3\n")
    bad.chmod(0o755)
    path = f"{tmp_path}:/usr/bin:/bin"  # the broken one first in the job's PATH
    p = spank_cluster.srun("--nodemap", "-N2", "--ntasks-per-node=2", PY, "-c", PROBE, env={"PATH": path})
    rows = rows_of(p)
    assert len(rows) == 4 and all(r["env"] == {} for r in rows)
    lines = [x for x in p.stderr.splitlines() if x.startswith("nodemap:")]
    assert len(lines) == 2 and all("broken install (test)" in x and "Slurm's binding" in x for x in lines), p.stderr
    strict = spank_cluster.srun("--nodemap=strict", "-N1", "-n1", PY, "-c", PROBE, env={"PATH": path})
    # the task never starts; the reason reaches the user (Slurm 22.05's srun still exits 0 on a failed launch)
    assert strict.stdout == "" and "launch failed" in strict.stderr
    assert "broken install (test); --nodemap=strict: the step does not start" in strict.stderr


def test_a_wrong_option_is_refused_by_srun(spank_cluster):
    p = spank_cluster.srun("--nodemap=threads=x;y", "-N1", "-n1", "true")
    assert p.returncode != 0 and "is not an option" in p.stderr


@pytest.mark.parametrize("args,bound", [
    ((), True),  # default_on: every step
    (("--cpu-bind=cores",), False), (("--gpu-bind=none",), False),  # the job binds itself: Slurm's binding
    (("--cpu-bind=cores", "--nodemap"), True),  # asked for both: --nodemap wins
    (("--nodemap=off",), False),
])
def test_default_on_steps_aside_for_a_job_that_binds_itself(default_on_cluster, args, bound):
    p = default_on_cluster.srun(*args, "-N1", "-n1", PY, "-c", PROBE)
    (row,) = rows_of(p)
    # the plan's environment and memory policy, or none of them (Slurm's task plugin sets no policy here)
    assert bool(row["env"]) == bound and (row["mode"] == "bind") == bound, (row, p.stderr)


@pytest.mark.parametrize("env,app_args,bound", [
    ({"SLURM_CPU_BIND": "cores"}, (), False),  # a job script's export: srun reads it as --cpu-bind
    ({"SLURM_GPU_BIND": "closest"}, (), False),
    ({"SLURM_CPU_BIND": "verbose"}, (), True),  # verbosity alone asks for no binding
    ({}, ("--cpu-bind=cores",), True),  # the application's own argument, not srun's option
])
def test_default_on_reads_srun_s_environment_but_not_the_application_s_arguments(default_on_cluster, env, app_args,
                                                                                 bound):
    p = default_on_cluster.srun("-N1", "-n1", PY, "-c", PROBE, *app_args, env=env)
    (row,) = rows_of(p)
    assert bool(row["env"]) == bound and (row["mode"] == "bind") == bound, (row, p.stderr)
