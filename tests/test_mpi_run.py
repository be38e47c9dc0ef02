"""Real MPI ranks: mpiexec (the mpich wheel next to this Python) starts
`nodemap run -- nodemap show --json`; rank 0 gathers every row."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nodemap.topology.cpuset import CpuSet


def _mpiexec() -> str:
    pytest.importorskip("mpi4py")
    found = Path(sys.executable).parent / "mpiexec"
    path = str(found) if found.exists() else shutil.which("mpiexec")
    if not path:
        pytest.skip("no mpiexec next to this Python or on PATH")
    return path


def test_two_ranks_are_pinned_and_gathered(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 PUs")
    mpiexec = _mpiexec()
    # no rank variables of an enclosing job; Open MPI's own settings (OMPI_MCA_*: the lent GPU
    # machines set plm_rsh_agent, having no ssh) stay
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMP_", "SLURM_", "OMPI_", "PMI_")) or k.startswith(("OMPI_MCA_", "OMPI_ALLOW"))}
    env["NODEMAP_CACHE_DIR"] = str(tmp_path)
    if os.geteuid() == 0:  # Open MPI refuses root without both (lent GPU machines run as root); MPICH ignores them
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    nodemap = [sys.executable, "-m", "nodemap.cli"]
    # unbound ranks, as docs/mapping.md tells users (Open MPI binds to cores by default; MPICH takes it too)
    cmd = [mpiexec, "--bind-to", "none", "-n", "2", *nodemap, "run", "--", *nodemap, "show", "--json", "--timeout", "50"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]  # only rank 0 prints: stdout is one JSON document
    assert [x["rank"] for x in rows] == [0, 1] and sorted(x["local_rank"] for x in rows) == [0, 1]
    # what `nodemap plan` says for 2 tasks on this machine is what each rank got
    planned = json.loads(subprocess.run([*nodemap, "plan", "--tasks", "2", "--json", "--env"], env=env,
                                        capture_output=True, text=True, timeout=60, check=True).stdout)["tasks"]
    pus = [CpuSet.parse(x["cpus"]) for x in rows]
    assert pus[0].isdisjoint(pus[1])  # each rank its own PUs
    for x, p in zip(sorted(rows, key=lambda x: x["local_rank"]), planned):
        assert CpuSet.parse(x["cpus"]) == CpuSet.parse(p["cpus"]) and x["cpu"] in CpuSet.parse(p["cpus"])
        env_planned = dict(p["env"])
        assert x["thread_env"] == {k: env_planned[k] for k in ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND")}
        assert x["mem_policy"] == "bind" and x["verdicts"] == []


def test_eight_ranks_show_their_threads(tmp_path):
    """`mpiexec -n 8 nodemap run -- nodemap show --threads`: the launcher's 8 ranks
    may outnumber this machine's PUs (they then share them, said once)."""
    mpiexec = _mpiexec()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMP_", "SLURM_", "OMPI_", "PMI_")) or k.startswith(("OMPI_MCA_", "OMPI_ALLOW"))}
    env["NODEMAP_CACHE_DIR"] = str(tmp_path)
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    nodemap = [sys.executable, "-m", "nodemap.cli"]
    cmd = [mpiexec, "--bind-to", "none", "-n", "8", *nodemap, "run", "--", *nodemap, "show", "--threads", "--json",
           "--timeout", "100"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert [x["rank"] for x in rows] == list(range(8))
    for x in rows:
        assert x["threads"], x
        assert all(set(t["cpus"]) <= set(CpuSet.parse(x["cpus"])) for t in x["threads"])
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".bin")]) == 1  # planned once for the node
