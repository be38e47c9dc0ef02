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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "SLURM_", "OMPI_", "PMI_"))}
    env["NODEMAP_CACHE_DIR"] = str(tmp_path)
    nodemap = [sys.executable, "-m", "nodemap.cli"]
    cmd = [mpiexec, "-n", "2", *nodemap, "run", "--", *nodemap, "show", "--json", "--timeout", "50"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]  # only rank 0 prints: stdout is one JSON document
    assert [x["rank"] for x in rows] == [0, 1] and sorted(x["local_rank"] for x in rows) == [0, 1]
    pus = [CpuSet.parse(x["cpus"]) for x in rows]
    assert all(len(p) == 1 for p in pus) and pus[0].isdisjoint(pus[1])  # each rank its own PU
    for x, p in zip(rows, pus):
        assert x["cpu"] in p
        assert x["thread_env"] == {"OMP_NUM_THREADS": "1", "OMP_PLACES": "{%d}" % p.first(), "OMP_PROC_BIND": "close"}
        assert x["mem_policy"] == "bind" and x["verdicts"] == []
