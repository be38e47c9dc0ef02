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

pytestmark = [pytest.mark.slurm]
PY = sys.executable
# what a task sees of itself, one JSON line
PROBE = """
import json, os
from nodemap import native
mode, nodes = native.get_mempolicy()
print(json.dumps({"host": os.environ["SLURMD_NODENAME"], "local": int(os.environ["SLURM_LOCALID"]),
                  "cpus": sorted(os.sched_getaffinity(0)), "mode": mode, "mems": nodes,
                  "env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "NODEMAP_", "UCX_", "NCCL_"))}}))
"""


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


@pytest.mark.parametrize("option,reason", [
    ("threads=x;y", "--nodemap=threads=x;y: threads=x;y: T must be a whole number from 1 to 1048576"),
    ("thread=2", "--nodemap=thread=2: 'thread=2' is not an option (use off, strict, verbose, threads=T, "),
    # these three passed srun; each task printed `nodemap plan`'s first usage line and ran with Slurm's binding
    ("threads=abc", "--nodemap=threads=abc: threads=abc: T must be a whole number from 1 to 1048576"),
    ("threads=0", "--nodemap=threads=0: threads=0: T must be a whole number from 1 to 1048576"),
    ("threads=", "--nodemap=threads=: threads=: T must be a whole number from 1 to 1048576"),
    ("smt=-1", "--nodemap=smt=-1: smt=-1: K must be a whole number from 0 to 1048576"),
    ("threads=1," * 60, "--nodemap=threads=1,threads=1,threads=1,threads=1,...: too long (600 characters, at most 511"),
])
def test_a_wrong_option_is_refused_by_srun_with_its_reason(spank_cluster, option, reason):
    p = spank_cluster.srun(f"--nodemap={option}", "-N1", "-n1", "true")
    said = [line for line in p.stderr.splitlines() if "nodemap:" in line]
    assert p.returncode != 0 and len(said) == 1 and said[0].startswith(f"srun: error: nodemap: {reason}"), p.stderr


@pytest.mark.parametrize("binding,asked", [
    (("--cpu-bind=map_cpu:1,0",), "--cpu-bind=map_cpu:1,0"), (("--cpu-bind", "map_cpu:1,0"), "--cpu-bind=map_cpu:1,0"),
    (("--cpu-bind=cores",), "--cpu-bind=cores"), (("--gpu-bind=closest",), "--gpu-bind=closest"),
    (("--cpu-bind=verbose,mask_cpu:0x1",), "--cpu-bind=verbose,mask_cpu:0x1"),
    (("--cpu-bind=none", "--gpu-bind=closest"), "--gpu-bind=closest"),
    # abbreviations srun takes (getopt_long) as those options
    (("--cpu-b=cores",), "--cpu-bind=cores"), (("--cpu-bi", "cores"), "--cpu-bind=cores"),
    (("--cpu_b=cores",), "--cpu_bind=cores"), (("--gpu-b=closest",), "--gpu-bind=closest")])
def test_nodemap_beside_a_binding_srun_was_given_is_refused(spank_cluster, binding, asked):
    """Both asked on srun's command line: the plugin replaced the user's binding without a word."""
    p = spank_cluster.srun("--nodemap", *binding, "-N1", "-n2", PY, "-c", PROBE)
    said = [line for line in p.stderr.splitlines() if "nodemap:" in line]
    assert p.returncode != 0 and p.stdout == "" and len(said) == 1, p.stderr
    assert said[0] == (f"srun: error: nodemap: --nodemap and {asked} both bind the tasks: give one "
                       "(leave out --nodemap, or --nodemap=off, for Slurm's binding; --cpu-bind=none, or no "
                       "--cpu-bind, for nodemap's)")


@pytest.mark.parametrize("option,shortest", [("cpu-bind", 5), ("cpu_bind", 4), ("gpu-bind", 5)])
def test_the_plugins_shortest_abbreviations_are_srun_s(spank_cluster, option, shortest):
    """slurm/nodemap_spank.c's binding_options: srun takes the shortest, refuses one shorter."""
    src = (ROOT / "slurm" / "nodemap_spank.c").read_text()
    assert f'{{"{option}", {shortest}}}' in src
    taken = spank_cluster.srun(f"--{option[:shortest]}=none", "-N1", "-n1", "true")
    ambiguous = spank_cluster.srun(f"--{option[:shortest - 1]}=none", "-N1", "-n1", "true")
    assert taken.returncode == 0, taken.stderr
    assert ambiguous.returncode != 0 and "is ambiguous" in ambiguous.stderr, ambiguous.stderr


@pytest.mark.parametrize("words", [("--cpu-bind=none",), ("--cpu-bind=verbose",), ("--gpu-bind=none",)])
def test_nodemap_beside_a_binding_word_that_binds_nothing_binds_by_the_plan(spank_cluster, words):
    from nodemap.topology.cpuset import CpuSet

    rows = rows_of(spank_cluster.srun("--nodemap", *words, "-N1", "-n2", PY, "-c", PROBE))
    plan = planned("--tasks", "2")
    assert sorted((r["local"], CpuSet(r["cpus"])) for r in rows) == [(i, CpuSet.parse(plan[i]["cpus"])) for i in (0, 1)]


def test_a_failed_plan_shows_its_error_line(spank_cluster, tmp_path):
    """`nodemap plan`'s stderr: usage lines, then its error; the task showed the first usage line."""
    stand_in = tmp_path / "nodemap"
    stand_in.write_text(f"#!/bin/sh\nexec {PY} -m nodemap \"$@\" --no-such-option\n")
    stand_in.chmod(0o755)
    p = spank_cluster.srun("--nodemap", "-N1", "-n1", PY, "-c", PROBE, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    (row,) = rows_of(p)
    assert row["env"] == {} and [x for x in p.stderr.splitlines() if "nodemap" in x] == [
        "nodemap: `nodemap plan` failed: nodemap plan: error: unrecognized arguments: --no-such-option; the task "
        "runs with Slurm's binding"], p.stderr


def test_the_planner_runs_as_the_jobs_user_only(spank_cluster):
    """slurmstepd calls user_init with only its effective uid the job's; exec kept the real uid 0,
    and a `nodemap` first in the job's PATH set its uid back to 0: any user was root on every node."""
    import os
    import pwd
    import tempfile

    nobody = pwd.getpwnam("nobody")
    python = "/usr/bin/python3"  # one the job's user may run
    if not os.access(python, os.X_OK):
        pytest.skip(f"needs {python}")
    for folder in (spank_cluster.top, spank_cluster.top / "munge"):  # srun, as nobody, reaches munge's socket
        folder.chmod(0o711)
    shared = Path(tempfile.mkdtemp(prefix="nm-uid-"))
    try:
        shared.chmod(0o755)
        (shared / "nodemap").write_text(
            f"#!{python} -I\nimport os, sys\ntry:\n    os.setuid(0)\n    said = 'root again'\nexcept OSError:\n"
            "    said = 'no root'\nsys.exit(f'nodemap: {os.getresuid()} {said}')\n")
        (shared / "nodemap").chmod(0o755)
        p = spank_cluster.srun("--nodemap", f"--uid={nobody.pw_uid}", f"--gid={nobody.pw_gid}", "--chdir=/", "-N1",
                               "-n1", "true", env={"PATH": f"{shared}:/usr/bin:/bin"})
    finally:
        shutil.rmtree(shared)
    u = nobody.pw_uid
    assert f"nodemap: `nodemap plan` failed: nodemap: ({u}, {u}, {u}) no root; the task runs" in p.stderr, p.stderr


def test_later_steps_take_the_plan_from_the_nodes_cache(spank_cluster, tmp_path):
    """A step's plan from the node's cache (no Python), the one `nodemap plan` makes, on every node."""
    from nodemap.topology.cpuset import CpuSet

    calls, cache = tmp_path / "calls", tmp_path / "cache"
    cache.mkdir(mode=0o700)
    counting = tmp_path / "nodemap"
    counting.write_text(f"#!/bin/sh\necho $SLURMD_NODENAME >> {calls}\nexec {PY} -m nodemap \"$@\"\n")
    counting.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "NODEMAP_CACHE_DIR": str(cache)}
    first = spank_cluster.srun("--nodemap=verbose", "-N2", "--ntasks-per-node=2", PY, "-c", PROBE, env=env)
    later = spank_cluster.srun("--nodemap=verbose", "-N2", "--ntasks-per-node=2", PY, "-c", PROBE, env=env)
    assert first.stderr.count("made by `nodemap plan`") == 2 and later.stderr.count("from its plan cache") == 2, (
        first.stderr, later.stderr)
    assert len(calls.read_text().splitlines()) == 2  # the first step's, one a node
    plan = planned("--tasks", "2")
    for r in rows_of(later):
        assert CpuSet(r["cpus"]) == CpuSet.parse(plan[r["local"]]["cpus"]) and r["env"]["OMP_PLACES"] == dict(
            plan[r["local"]]["env"])["OMP_PLACES"], r


@pytest.mark.parametrize("args,bound", [
    ((), True),  # default_on: every step
    (("--cpu-bind=cores",), False), (("--gpu-bind=none",), False),  # the job binds itself: Slurm's binding
    (("--cpu-bi=cores",), False), (("--gpu-b", "none"), False),  # abbreviated, as srun takes them
    (("--nodemap=off",), False),
])
def test_default_on_steps_aside_for_a_job_that_binds_itself(default_on_cluster, args, bound):
    p = default_on_cluster.srun(*args, "-N1", "-n1", PY, "-c", PROBE)
    (row,) = rows_of(p)
    # the plan's environment and memory policy, or none of them (Slurm's task plugin sets no policy here)
    assert bool(row["env"]) == bound and (row["mode"] == "bind") == bound, (row, p.stderr)


def test_default_on_refuses_nodemap_beside_a_binding_srun_was_given(default_on_cluster):
    """Asked for both (it ran nodemap's binding, the user's dropped without a word)."""
    for binding in ("--cpu-bind=cores", "--cpu-bin=cores"):
        p = default_on_cluster.srun(binding, "--nodemap", "-N1", "-n1", PY, "-c", PROBE)
        assert p.returncode != 0 and "nodemap: --nodemap and --cpu-bind=cores both bind the tasks: give one" in p.stderr
    # a binding in srun's environment yields to --nodemap on its command line (Slurm's own order)
    (row,) = rows_of(default_on_cluster.srun("--nodemap", "-N1", "-n1", PY, "-c", PROBE, env={"SLURM_CPU_BIND": "cores"}))
    assert row["env"] and row["mode"] == "bind", row


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


@pytest.mark.parametrize("env", [{}, {"SLURM_CPU_BIND": "cores"}])
def test_default_on_binds_the_steps_srun_starts_not_the_batch_script(default_on_cluster, tmp_path, env):
    """The batch script is no task of the job: bound by a plan of one task, its OMP_* and the rest
    reached every srun in it (srun exports the script's environment), a step that binds itself too."""
    from nodemap.topology.cpuset import CpuSet

    (tmp_path / "probe.py").write_text(PROBE)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n{PY} {tmp_path}/probe.py\nsrun -n1 {PY} {tmp_path}/probe.py\n")
    out = tmp_path / "out"
    p = default_on_cluster.run("sbatch", "--wait", "-N1", "-n1", f"--output={out}", str(script), env=env)
    assert p.returncode == 0, p.stderr + (out.read_text() if out.exists() else "")
    batch, step = [json.loads(line) for line in out.read_text().splitlines() if line.startswith("{")]
    assert batch["env"] == {} and batch["mode"] != "bind", batch
    if env:  # the step binds itself (SLURM_CPU_BIND): Slurm's binding, none of a plan's variables
        assert step["env"] == {} and step["mode"] != "bind", step
    else:
        plan = planned("--tasks", "1")[0]
        assert step["mode"] == "bind" and CpuSet(step["cpus"]).issubset(CpuSet.parse(plan["cpus"])), step


def test_a_task_line_of_many_variables_is_applied_whole(spank_cluster, tmp_path):
    """The plugin kept the first 256 variables of a task line and dropped the rest without a word."""
    extra = "".join(f"\\tNODEMAP_EXTRA{i}={i}" for i in range(300))
    stand_in = tmp_path / "nodemap"
    stand_in.write_text(f"#!/bin/sh\n{PY} -m nodemap \"$@\" | sed 's/$/{extra}/'\n")
    stand_in.chmod(0o755)
    (row,) = rows_of(spank_cluster.srun("--nodemap", "-N1", "-n1", PY, "-c", PROBE,
                                        env={"PATH": f"{tmp_path}:/usr/bin:/bin"}))
    assert {k: v for k, v in row["env"].items() if k.startswith("NODEMAP_EXTRA")} == {
        f"NODEMAP_EXTRA{i}": str(i) for i in range(300)}, sorted(row["env"])
