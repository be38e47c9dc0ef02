"""`nodemap bench jacobi` on a real GPU (skipped without CuPy and a device):
every single-process variant verified against the single-GPU run and NumPy,
two slabs on one GPU, a broken halo failing, a grid too large refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

cp = pytest.importorskip("cupy")
try:
    NGPU = cp.cuda.runtime.getDeviceCount()
except Exception:  # no driver
    NGPU = 0
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(NGPU == 0, reason="no CUDA GPU visible")]


def jacobi(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "nodemap", "bench", "jacobi", "--mode", "single", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_every_single_process_variant_is_verified_on_one_gpu():
    p = jacobi("--size", "258x130", "--dtype", "fp32,fp64", "--gpus", "0", "--iters", "20", "--repeats", "2",
               "--json", "-q")
    assert p.returncode == 0, p.stderr + p.stdout
    d = json.loads(p.stdout)
    got = {(r["metric"], r["params"]["dtype"]) for r in d["results"]}
    for dtype in ("fp32", "fp64"):
        for v in ("single", "peer", "peer-overlap", "nccl", "nccl-overlap", "stencil kernel"):
            assert (v, dtype) in got, (v, dtype, d["messages"])
    assert all(r["verified"] for r in d["results"])
    assert any("NumPy" in r["verification"] for r in d["results"] if r["metric"] == "single")


def test_two_slabs_share_one_gpu():
    p = jacobi("--size", "130x96", "--gpus", "0,0", "--iters", "10", "--repeats", "2", "--json", "-q")
    assert p.returncode == 0, p.stderr + p.stdout
    d = json.loads(p.stdout)
    peer = [r for r in d["results"] if r["metric"] in ("peer", "peer-overlap")]
    assert len(peer) == 2 and all(r["params"]["slabs"] == 2 for r in peer)
    assert any("Duplicate GPU" in m for m in d["messages"])  # NCCL said why it did not run


def test_a_broken_halo_fails_the_run():
    p = jacobi("--size", "130x96", "--gpus", "0,0", "--variants", "peer", "--iters", "10", "--repeats", "1",
               "--inject-halo-fault", "-q")
    assert p.returncode == 1, p.stderr + p.stdout
    assert "differs from the single-GPU run" in p.stdout and "peer fp32" in p.stdout


def test_a_grid_too_large_names_the_largest_that_fits():
    p = jacobi("--size", "1000000x1000000", "-q")
    assert p.returncode == 2 and "largest square grid that fits" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("vector", ["", "2"])
def test_tiles_on_one_gpu_are_verified(vector, monkeypatch):
    """--decomp 2d: four tiles on one GPU, column halos by cudaMemcpy2DAsync;
    with a vector kernel too (it rewrites the edge columns a neighbour pushes into);
    peer-overlap: the box kernel (jacobi_box_*) for the boundary and the interior."""
    monkeypatch.setenv("NODEMAP_JACOBI_VECTOR", vector)
    p = jacobi("--size", "258x130", "--gpus", "0,0,0,0", "--decomp", "2d", "--dtype", "fp32,fp64",
               "--variants", "peer,peer-overlap", "--iters", "10", "--repeats", "2", "--json", "-q")
    assert p.returncode == 0, p.stderr + p.stdout
    for v in ("peer", "peer-overlap"):
        got = [r for r in json.loads(p.stdout)["results"] if r["metric"] == v]
        assert len(got) == 2 and all(r["params"]["tiles"] == "2x2" and r["verified"] for r in got), v


@pytest.mark.skipif(NGPU < 2, reason="NCCL needs a GPU per tile")
@pytest.mark.parametrize("fault", [False, True])
def test_nccl_tiles_on_two_gpus(fault):
    """2x1 tiles on two GPUs: NCCL with packed columns, plain and
    overlapped, and peer-overlap; a lost column fails each."""
    variants = "peer-overlap,nccl,nccl-overlap"
    p = jacobi("--size", "258x130", "--gpus", "0,1", "--decomp", "2x1", "--dtype", "fp32,fp64", "--variants",
               variants, "--iters", "10", "--repeats", "2", "--json", "-q", *(["--inject-halo-fault"] if fault else []))
    verified_or_failed(p, variants, fault)


def verified_or_failed(p: subprocess.CompletedProcess, variants: str, fault: bool) -> None:
    """Without the fault every variant has a (verified) result on 2x1 tiles;
    with it, each one fails the run with its reason."""
    d = json.loads(p.stdout)
    if fault:
        assert p.returncode == 1, p.stderr + p.stdout
        for v in variants.split(","):
            assert any(m.startswith(f"{v} fp32: differs from the single-GPU run") for m in d["messages"]), v
        return
    assert p.returncode == 0, p.stderr + p.stdout
    got = {(r["metric"], r["params"]["tiles"]) for r in d["results"] if r["unit"] == "us"}
    assert {(v, "2x1") for v in variants.split(",")} <= got, d["messages"]


def test_a_broken_tile_halo_fails_the_run():
    p = jacobi("--size", "130x96", "--gpus", "0,0,0,0", "--decomp", "2x2", "--variants", "peer", "--iters", "10",
               "--repeats", "1", "--inject-halo-fault", "-q")
    assert p.returncode == 1 and "differs from the single-GPU run" in p.stdout, p.stderr + p.stdout


def test_weak_scaling_on_one_gpu():
    p = jacobi("--size", "258x130", "--gpus", "0,0", "--weak", "--variants", "peer,peer-overlap", "--iters", "10",
               "--repeats", "2", "--json", "-q")
    assert p.returncode == 0, p.stderr + p.stdout
    d = json.loads(p.stdout)
    peer = [r for r in d["results"] if r["metric"] in ("peer", "peer-overlap")]
    assert len(peer) == 2 and all(r["params"]["weak_efficiency"] and r["params"]["ny"] == 2 * 128 + 2 for r in peer)


def test_one_row_slabs_skip_only_the_overlap_variants():
    p = jacobi("--size", "64x5", "--gpus", "0,0", "--iters", "10", "--repeats", "1", "--json", "-q")
    assert p.returncode == 0, p.stderr + p.stdout
    d = json.loads(p.stdout)
    assert "peer" in {r["metric"] for r in d["results"]}
    assert any(m.startswith("peer-overlap: NY=5") for m in d["messages"])


def mpi_launcher() -> list[str] | None:
    """mpiexec beside this Python (MPICH from pip), else the image's Open MPI mpirun."""
    import shutil
    from pathlib import Path

    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return [str(here)]
    exe = shutil.which("mpirun")
    if exe is None:
        return None
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    return [exe, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"] if "Open MPI" in version else [exe]


@pytest.mark.mpi
@pytest.mark.parametrize("extra", [[], ["--decomp", "2d", "--variants", "mpi-staged,mpi-staged-overlap"]],
                         ids=["1d", "2d"])
def test_ranks_sharing_one_gpu(extra):
    """Every variant a launch of ranks can run, the ranks sharing GPU 0 (2 ranks; 4 for tiles)."""
    import os

    launcher = mpi_launcher()
    if launcher is None:
        pytest.skip("no mpiexec/mpirun")
    n = "4" if extra else "2"
    p = subprocess.run([*launcher, "-n", n, sys.executable, "-m", "nodemap", "bench", "jacobi", "--mode", "mpi",
                        "--size", "258x130", "--iters", "10", "--repeats", "2", "--json", "-q", *extra],
                       capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES="0", NCCL_NVLS_ENABLE="0"))
    assert p.returncode == 0, p.stderr + p.stdout
    d = json.loads(p.stdout)
    got = {r["metric"] for r in d["results"]}
    assert {"single", "mpi-staged", "mpi-staged-overlap"} <= got and all(r["verified"] for r in d["results"])


@pytest.mark.mpi
@pytest.mark.skipif(NGPU < 2, reason="NCCL needs a GPU per rank")
@pytest.mark.parametrize("fault", [False, True])
def test_nccl_tiles_under_mpi(fault):
    """2x1 tiles, one rank per GPU: NCCL with packed columns, plain,
    overlapped and captured in the graph; a lost column fails each."""
    import os

    launcher = mpi_launcher()
    if launcher is None:
        pytest.skip("no mpiexec/mpirun")
    variants = "nccl,nccl-overlap,nccl-graph,mpi-staged-overlap"
    p = subprocess.run([*launcher, "-n", "2", sys.executable, "-m", "nodemap", "bench", "jacobi", "--mode", "mpi",
                        "--size", "258x130", "--decomp", "2x1", "--iters", "10", "--repeats", "2", "--variants",
                        variants, "--json", "-q", *(["--inject-halo-fault"] if fault else [])],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, NCCL_NVLS_ENABLE="0"))
    verified_or_failed(p, variants, fault)


@pytest.mark.mpi
def test_a_broken_halo_inside_the_nccl_graph_fails():
    """The fault reaches the captured graph: one rank, NCCL to itself, one halo received into the wrong row."""
    import os

    launcher = mpi_launcher()
    if launcher is None:
        pytest.skip("no mpiexec/mpirun")
    p = subprocess.run([*launcher, "-n", "1", sys.executable, "-m", "nodemap", "bench", "jacobi", "--mode", "mpi",
                        "--size", "258x130", "--iters", "10", "--repeats", "1", "--variants", "nccl-graph",
                        "--inject-halo-fault", "-q"], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES="0", NCCL_NVLS_ENABLE="0"))
    if p.returncode == 0 and "nccl variants:" in p.stdout:
        pytest.skip("NCCL cannot run here: " + p.stdout.split("nccl variants:")[1].splitlines()[0])
    assert p.returncode == 1 and "nccl-graph fp32: differs from the single-GPU run" in p.stdout, p.stderr + p.stdout
