"""The one world on real GPUs (skipped without CuPy, a GPU and an MPI
launcher: the embedded MPICH's mpiexec next to the interpreter, else Open
MPI's mpirun on PATH, as on the GPU machines): under MPI each rank of `bench mpi`, `nccl` and `ring`
drives the GPU the node's plan gives it (`nodemap plan --tasks N`), or under
`nodemap run` the one it was placed on, and the results say how; ranks that
share a GPU are named."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

cp = pytest.importorskip("cupy")
try:
    NGPU = cp.cuda.runtime.getDeviceCount()
except Exception:  # no driver
    NGPU = 0
_HYDRA = Path(sys.executable).parent / "mpiexec"
# Open MPI binds small runs to cores and refuses root unless told: neither is the launch under test
LAUNCH = [str(_HYDRA)] if _HYDRA.exists() else \
    [shutil.which("mpirun"), "--oversubscribe", "--bind-to", "none", "-x", "NCCL_NVLS_ENABLE", "-x", "PATH"] + \
    (["-x", "PYTHONPATH"] if os.environ.get("PYTHONPATH") else []) if shutil.which("mpirun") else []
ROOT_OK = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
pytestmark = [pytest.mark.gpu, pytest.mark.mpi, pytest.mark.skipif(NGPU == 0, reason="no CUDA GPU visible"),
              pytest.mark.skipif(not LAUNCH, reason="no MPI launcher (pip install mpich, or Open MPI's mpirun)")]
NODEMAP = [sys.executable, "-m", "nodemap"]


def ranks(n: int, *argv: str, wrap: tuple[str, ...] = (), env: dict | None = None) -> dict:
    p = subprocess.run([*LAUNCH, "-n", str(n), *NODEMAP, *wrap, *argv, "--json", "-q"], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, NCCL_NVLS_ENABLE="0", **ROOT_OK, **(env or {})))
    assert p.returncode == 0, p.stderr + p.stdout
    return json.loads(p.stdout)


def planned(n: int) -> list[str]:
    """Each local rank's first GPU in the node's plan ("GPU3"; "" for none), as nodemap run would place it."""
    p = subprocess.run([*NODEMAP, "plan", "--tasks", str(n), "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [f"GPU{t['gpus'][0]}" if t["gpus"] else "" for t in json.loads(p.stdout)["tasks"]]


def check_choice(d: dict, got: list[str]) -> None:
    """Every rank on its planned GPU (or a note saying why not); a shared GPU named."""
    msgs = d["messages"]
    plan = planned(len(got))
    assert any(m.startswith("each rank's GPU chosen by") for m in msgs), msgs
    for r, (g, want) in enumerate(zip(got, plan)):
        assert g == want or any(m.startswith("rank") and str(r) in m.split(":")[0] and "not by the node's plan" in m
                                for m in msgs), (r, g, want, msgs)
    if len(set(got)) < len(got):
        assert any(" share " in m for m in msgs), msgs


def test_mpi_device_buffers_on_each_ranks_planned_gpu():
    d = ranks(2, "bench", "mpi", "--buffers", "DD", "--tests", "latency", "--sizes", "8", "--repeats", "1")
    check_choice(d, [p["gpu"] for p in d["environment"]["places"]])
    assert d["results"] and all(r["verified"] for r in d["results"])


def test_nccl_ranks_on_their_planned_gpus():
    n = min(2, NGPU)  # NCCL refuses two ranks on one GPU
    d = ranks(n, "bench", "nccl", "--mode", "mpi", "--ops", "all_reduce", "--sizes", "1MiB", "--repeats", "2")
    check_choice(d, [k.split(":", 1)[1] for k in d["environment"]["gpus"]])
    assert len(set(d["environment"]["gpus"])) == n and all(r["verified"] for r in d["results"])


def test_ring_staged_ranks_say_a_shared_gpu():
    d = ranks(2, "bench", "ring", "--mode", "mpi", "--transports", "mpi-staged", "--sizes", "64KiB", "--steps", "2",
              "--repeats", "2", "--no-overlap")
    check_choice(d, [k.split(":", 1)[1] for k in d["environment"]["gpus"]])
    assert d["results"] and all(r["verified"] for r in d["results"])


def test_ring_ranks_on_one_gpu_skip_nccl_with_its_reason():
    """Issue 36: two ranks on one GPU (one GPU visible to both) ended in NCCL_ERROR_INVALID_USAGE's
    traceback; the staged ring runs and nccl is a skipped transport with its reason."""
    d = ranks(2, "bench", "ring", "--mode", "mpi", "--transports", "mpi-staged,nccl", "--sizes", "64KiB",
              "--steps", "2", "--repeats", "2", "--no-overlap", env={"CUDA_VISIBLE_DEVICES": "0"})
    msgs = d["messages"]
    assert len(set(d["environment"]["gpus"])) == 1 and any(" share " in m for m in msgs), msgs
    assert {r["params"]["transport"] for r in d["results"]} == {"mpi-staged"} and all(r["verified"] for r in d["results"])
    assert any(m.startswith("nccl: ranks 0,1 share") and "NCCL refuses two ranks on one GPU" in m for m in msgs), msgs


def test_under_nodemap_run_a_rank_keeps_the_gpu_it_was_placed_on():
    d = ranks(2, "bench", "mpi", "--buffers", "DD", "--tests", "latency", "--sizes", "8", "--repeats", "1",
              wrap=("run", "--", *NODEMAP))
    msgs = d["messages"]
    assert any("device visibility" in m or "not by the node's plan" in m for m in msgs), msgs
    plan = planned(2)
    got = [p["gpu"] for p in d["environment"]["places"]]
    assert [g for g, w in zip(got, plan) if w] == [w for w in plan if w], (got, plan)
