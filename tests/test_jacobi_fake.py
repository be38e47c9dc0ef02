"""`nodemap bench jacobi`'s orchestration on a NumPy stand-in for CuPy
(tests/fake_cupy.py): slabs, every exchange order, the overlapped step,
verification against the single-GPU run and NumPy, the results and the
failure of a broken halo, in single-process mode and under real MPI ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fake_cupy
from nodemap import cli

HERE = Path(__file__).parent


@pytest.fixture
def fake(monkeypatch):
    from nodemap.bench import gpu_common, jacobi_gpu

    for mod, name in ((gpu_common, "import_cupy"), (gpu_common, "load_topology"), (jacobi_gpu, "_function")):
        monkeypatch.setattr(mod, name, getattr(mod, name))  # restored after the test
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    return fake_cupy.install()


def run(capsys, *args):
    code = cli.main(["bench", "jacobi", "--mode", "single", *args, "--json", "-q"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip().startswith("{") else out


def test_slabs_on_one_gpu_verify_against_single_and_numpy(fake, capsys):
    code, d = run(capsys, "--size", "34x21", "--gpus", "0,0,0", "--dtype", "fp32,fp64", "--iters", "6",
                  "--repeats", "2", "--variants", "peer,peer-overlap,nccl,mpi-staged")
    assert code == 0, d
    got = {(r["metric"], r["params"]["dtype"]) for r in d["results"]}
    for dtype in ("fp32", "fp64"):
        assert {("single", dtype), ("peer", dtype), ("peer-overlap", dtype), ("stencil kernel", dtype)} <= got
    assert any("mpiexec" in m for m in d["messages"])  # mpi-staged needs ranks
    assert any("nccl" in m for m in d["messages"])  # no NCCL here (or a GPU named twice)
    single = [r for r in d["results"] if r["metric"] == "single"]
    assert all("NumPy" in r["verification"] for r in single)
    peer = [r for r in d["results"] if r["metric"] == "peer-overlap"][0]
    assert peer["params"]["slabs"] == 3 and peer["params"]["gpus"] == 1
    # the overlapped step updates first/last rows apart from the interior
    assert ("jacobi", 1, 2) in fake and ("jacobi", 2, 6) in fake


def test_a_lost_halo_fails(fake, capsys):
    code, d = run(capsys, "--size", "34x21", "--gpus", "0,0", "--variants", "peer", "--iters", "4",
                  "--repeats", "1", "--inject-halo-fault")
    assert code == 1
    assert any("peer fp32: differs from the single-GPU run" in m for m in d["messages"])
    assert [r["metric"] for r in d["results"] if r["unit"] == "us"] == ["single"]


def test_grid_too_small_for_the_slabs(fake, capsys):
    code = cli.main(["bench", "jacobi", "--mode", "single", "--size", "34x5", "--gpus", "0,0,0,0", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "too small" in err and len(err.strip().splitlines()) == 1


def test_grid_too_large_names_the_largest_that_fits(fake, capsys):
    code = cli.main(["bench", "jacobi", "--mode", "single", "--size", "100000x100000", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "largest square grid that fits is" in err, err


MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
@pytest.mark.parametrize("fault", [False, True])
def test_mpi_ranks_staged_and_overlapped(fault):
    pytest.importorskip("mpi4py")
    code = ("import sys; sys.path.insert(0, %r); import fake_cupy; fake_cupy.install(); from nodemap import cli; "
            "sys.exit(cli.main(sys.argv[1:]))" % str(HERE))
    args = ["bench", "jacobi", "--mode", "mpi", "--size", "18x13", "--iters", "4", "--repeats", "1", "--json", "-q",
            "--variants", "mpi-staged,mpi-staged-overlap,mpi-aware,peer"] + (["--inject-halo-fault"] if fault else [])
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", NCCL_NVLS_ENABLE="0")
    p = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=120, env=env)
    if fault:
        assert p.returncode == 1, p.stderr
        assert "differs from the single-GPU run" in p.stdout
        return
    assert p.returncode == 0, p.stderr + p.stdout
    d = json.loads(p.stdout)
    got = {r["metric"] for r in d["results"]}
    assert {"single", "mpi-staged", "mpi-staged-overlap"} <= got
    assert any("mpi-aware" in m for m in d["messages"]) and any("CUDA IPC" in m for m in d["messages"])
    assert len(d["environment"]["binding"]) == 3
