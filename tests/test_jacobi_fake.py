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
    from nodemap.bench.gpu import common as gpu_common
    from nodemap.bench.app import jacobi_gpu

    from nodemap.bench.comm import world

    for mod, name in ((gpu_common, "import_cupy"), (gpu_common, "load_topology"), (jacobi_gpu, "_function"),
                      (world, "import_nccl")):
        monkeypatch.setattr(mod, name, getattr(mod, name))  # restored after the test
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")
    return fake_cupy.install(devices=8, nccl=True)


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


TILE_VARIANTS = "peer,peer-overlap,nccl,nccl-overlap"


def test_tiles_2d_verify_against_single(fake, capsys):
    code, d = run(capsys, "--size", "34x21", "--gpus", "0,1,2,3,4,5", "--decomp", "2d", "--dtype", "fp32,fp64",
                  "--iters", "6", "--repeats", "2", "--variants", TILE_VARIANTS + ",mpi-aware")
    assert code == 0, d
    got = [(r["metric"], r["params"]["tiles"]) for r in d["results"] if r["unit"] == "us"]
    for v in TILE_VARIANTS.split(","):
        assert got.count((v, "2x3")) == 2, (v, d["messages"])  # fp32 and fp64, verified (else no result)
    assert not any("not yet" in m for m in d["messages"])
    # the overlapped tile: boundary boxes apart from the interior (34 columns in 2: 16 own columns a tile)
    assert ("box", 2, 6, 2, 16) in fake and ("box", 2, 6, 1, 2) in fake and ("box", 1, 2, 1, 17) in fake


def test_tiles_on_one_gpu_run_peer_overlap(fake, capsys):
    code, d = run(capsys, "--size", "34x21", "--gpus", "0,0,0,0", "--decomp", "2x2", "--iters", "6",
                  "--repeats", "1", "--variants", "peer-overlap,nccl")
    assert code == 0, d
    assert [r["metric"] for r in d["results"] if r["unit"] == "us"] == ["single", "peer-overlap"]
    assert any("Duplicate GPU" in m for m in d["messages"])


def test_overlap_skipped_alone_when_tiles_are_one_column(fake, capsys):
    code, d = run(capsys, "--size", "5x21", "--gpus", "0,1", "--decomp", "2x1", "--iters", "4", "--repeats", "1",
                  "--variants", "nccl,nccl-overlap")
    assert code == 0, d
    assert [r["metric"] for r in d["results"] if r["unit"] == "us"] == ["single", "nccl"]
    assert any(m.startswith("nccl-overlap: NX=5 is too small for 2 tile columns of at least 2") for m in d["messages"])


@pytest.mark.parametrize("decomp", ["2d", "4x1", "1x4"])
@pytest.mark.parametrize("variant", TILE_VARIANTS.split(","))
def test_a_lost_tile_halo_fails(fake, capsys, decomp, variant):
    """Tiles lose tile 0's right halo column (row slabs, 1x4: its top halo row)."""
    code, d = run(capsys, "--size", "34x21", "--gpus", "0,1,2,3", "--decomp", decomp, "--variants", variant,
                  "--iters", "4", "--repeats", "1", "--inject-halo-fault")
    assert code == 1, d
    assert any(f"{variant} fp32: differs from the single-GPU run" in m for m in d["messages"])


def test_tile_overlap_updates_every_cell_once_in_boxes(fake):
    """The overlapped tile's boxes cover its own cells exactly once and no
    halo column; row slabs launch the row kernel as before."""
    import numpy as np

    from nodemap.bench.app import jacobi_grid as jg
    from nodemap.bench.app import jacobi_gpu as jgpu

    for parts, kinds in ((jg.tiles(20, 12, 2, 2), {"box"}), (jg.tiles(20, 12, 1, 2), {"jacobi"})):
        w = jgpu.Slabs(fake_cupy, jgpu.allocate(fake_cupy, 20, parts, [0] * 4, "fp32", False), len(parts))
        fake.clear()
        jgpu.step_overlap(w, "none", 0, True)
        assert {k[0] for k in fake} == kinds
        t = parts[0]
        if kinds == {"box"}:
            hits = np.zeros((t.local_rows, t.local_cols), dtype=int)
            for _, lo, hi, clo, chi in fake[:5]:
                hits[lo:hi, clo:chi] += 1
            assert (hits[1:-1, 1:-1] == 1).all() and hits.sum() == t.count * t.xcount


def test_weak_scaling_holds_the_slab_grid(fake, capsys):
    code, d = run(capsys, "--size", "18x13", "--gpus", "0,0,0", "--weak", "--iters", "4", "--repeats", "2",
                  "--variants", "peer")
    assert code == 0, d
    single = {(r["params"]["nx"], r["params"]["ny"]) for r in d["results"] if r["metric"] == "single"}
    assert single == {(18, 13), (18, 3 * 11 + 2)}  # one slab's grid (t1) and the global grid (the gold)
    peer = [r for r in d["results"] if r["metric"] == "peer"][0]["params"]
    assert (peer["nx"], peer["ny"], peer["slab_grid"]) == (18, 35, "18x13")
    assert peer["weak_efficiency"] > 0 and peer["efficiency"] > 0


def test_weak_scaling_with_tiles(fake, capsys):
    code, d = run(capsys, "--size", "10x9", "--gpus", "0,0,0,0", "--weak", "--decomp", "2x2", "--iters", "4",
                  "--repeats", "1", "--variants", "peer")
    assert code == 0, d
    peer = [r for r in d["results"] if r["metric"] == "peer"][0]["params"]
    assert (peer["nx"], peer["ny"], peer["tiles"]) == (18, 16, "2x2") and peer["weak_efficiency"] is not None


def test_text_shows_strong_and_weak_efficiency(fake, capsys):
    code = cli.main(["bench", "jacobi", "--mode", "single", "--size", "18x13", "--gpus", "0,0", "--weak",
                     "--iters", "4", "--repeats", "1", "--variants", "peer", "-q"])
    out = capsys.readouterr().out
    assert code == 0 and "strong eff" in out and "weak eff" in out


def test_weak_global_grid_too_large_for_the_check_says_so(fake, capsys):
    code = cli.main(["bench", "jacobi", "--mode", "single", "--size", "20000x20000", "--gpus", "0,0,0", "--weak",
                     "--variants", "peer", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "--weak verifies" in err and "smaller --size per slab" in err, err
    assert len(err.strip().splitlines()) == 1


def test_overlap_variants_skipped_alone_when_slabs_are_one_row(fake, capsys):
    code, d = run(capsys, "--size", "64x5", "--gpus", "0,0", "--iters", "4", "--repeats", "1")
    assert code == 0, d
    assert "peer" in {r["metric"] for r in d["results"]}
    assert any(m.startswith("peer-overlap: NY=5 is too small") for m in d["messages"])


def test_every_variant_skipped_is_exit_2(fake, capsys):
    code = cli.main(["bench", "jacobi", "--mode", "single", "--size", "64x5", "--gpus", "0,0", "--variants",
                     "single,peer-overlap,mpi-staged", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "every variant asked for is skipped" in err and "peer-overlap: NY=5" in err
    assert "mpi-staged: needs one rank per slab" in err and len(err.strip().splitlines()) == 1


def test_decomp_that_does_not_multiply_is_one_line(fake, capsys):
    code = cli.main(["bench", "jacobi", "--mode", "single", "--size", "34x21", "--gpus", "0,0,0", "--decomp",
                     "2x2", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "--decomp" in err and len(err.strip().splitlines()) == 1


MPIEXEC = Path(sys.executable).parent / "mpiexec"


AWARE = ("from nodemap.bench.comm import mpi_common as mc; "
         "mc.prove_cuda_aware = lambda comm, aw: mc.Awareness(True, True, 'fake: host memory', True); ")


def mpirun(n: int, *args: str, devices: int = 1, aware: bool = False) -> subprocess.CompletedProcess:
    """`bench jacobi --mode mpi` on n ranks of the fake (with its NCCL), `devices` fake GPUs on the node;
    `aware`: the MPI taken as proven CUDA-aware (the fake's device memory is host memory)."""
    pytest.importorskip("mpi4py")
    code = ("import sys; sys.path.insert(0, %r); import fake_cupy; fake_cupy.install(%d, nccl=True); %s"
            "from nodemap import cli; sys.exit(cli.main(sys.argv[1:]))") % (str(HERE), devices, AWARE * aware)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", NCCL_NVLS_ENABLE="0")
    return subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, "-c", code, "bench", "jacobi", "--mode", "mpi",
                           "--iters", "4", "--repeats", "1", "--json", "-q", *args], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
@pytest.mark.parametrize("fault", [False, True])
def test_mpi_ranks_staged_and_overlapped(fault):
    p = mpirun(3, "--size", "18x13", "--variants", "mpi-staged,mpi-staged-overlap,mpi-aware,peer",
               *(["--inject-halo-fault"] if fault else []))
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


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
@pytest.mark.parametrize("fault", [False, True])
def test_mpi_ranks_staged_tiles(fault):
    p = mpirun(4, "--size", "22x15", "--decomp", "2d", "--variants", "mpi-staged",
               *(["--inject-halo-fault"] if fault else []))
    if fault:
        assert p.returncode == 1, p.stderr
        assert "differs from the single-GPU run" in p.stdout
        return
    assert p.returncode == 0, p.stderr + p.stdout
    staged = [r for r in json.loads(p.stdout)["results"] if r["metric"] == "mpi-staged"]
    assert len(staged) == 1 and staged[0]["params"]["tiles"] == "2x2"


MPI_TILE_VARIANTS = "mpi-staged-overlap,nccl,nccl-overlap,nccl-graph"


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
@pytest.mark.parametrize("fault", [False, True])
def test_mpi_ranks_overlap_and_nccl_on_tiles(fault):
    """Tiles under MPI: staged overlap, NCCL with packed columns (plain,
    overlapped, inside the captured graph); a lost column fails each."""
    p = mpirun(4, "--size", "22x15", "--decomp", "2d", "--variants", MPI_TILE_VARIANTS,
               *(["--inject-halo-fault"] if fault else []), devices=4)
    d = json.loads(p.stdout)
    if fault:
        assert p.returncode == 1, p.stderr
        for v in MPI_TILE_VARIANTS.split(","):
            assert any(m.startswith(f"{v} fp32: differs from the single-GPU run") for m in d["messages"]), v
        return
    assert p.returncode == 0, p.stderr + p.stdout
    got = {(r["metric"], r["params"]["tiles"]) for r in d["results"] if r["unit"] == "us"}
    assert got == {("single", "1x1")} | {(v, "2x2") for v in MPI_TILE_VARIANTS.split(",")}, d["messages"]


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
@pytest.mark.parametrize("decomp,fault", [("1d", False), ("2d", False), ("2d", True)])
def test_mpi_aware_on_slabs_and_tiles(decomp, fault):
    """Device rows and packed columns straight to MPI (taken as proven
    CUDA-aware); a lost column fails both variants."""
    variants = ("mpi-aware", "mpi-aware-overlap")
    p = mpirun(4, "--size", "22x15", "--decomp", decomp, "--variants", ",".join(variants), devices=4, aware=True,
               *(["--inject-halo-fault"] if fault else []))
    d = json.loads(p.stdout)
    if fault:
        assert p.returncode == 1, p.stderr
        assert all(any(m.startswith(f"{v} fp32: differs") for m in d["messages"]) for v in variants), d["messages"]
        return
    assert p.returncode == 0, p.stderr + p.stdout
    tiles = "2x2" if decomp == "2d" else "1x4"
    got = {(r["metric"], r["params"]["tiles"]) for r in d["results"] if r["unit"] == "us"}
    assert got >= {(v, tiles) for v in variants}, d["messages"]


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
def test_mpi_nccl_on_one_tile_row_sends_to_itself():
    """4x1 tiles: up and down are the tile itself (NCCL to self), columns to the sides."""
    p = mpirun(4, "--size", "22x15", "--decomp", "4x1", "--variants", "nccl-overlap,nccl-graph", devices=4)
    assert p.returncode == 0, p.stderr + p.stdout
    assert {r["metric"] for r in json.loads(p.stdout)["results"]} >= {"nccl-overlap", "nccl-graph"}


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
def test_mpi_aware_not_proven_measures_the_staged_path():
    p = mpirun(2, "--size", "18x13", "--variants", "mpi-aware")
    assert p.returncode == 0, p.stderr + p.stdout
    d = json.loads(p.stdout)
    assert "mpi-staged" in {r["metric"] for r in d["results"]}
    assert any("mpi-aware" in m and "mpi-staged measures it" in m for m in d["messages"])


def test_adaptive_repetitions_stop_each_case_within_repeats(fake, capsys):
    """On the driver: --adaptive ends a case once its median's interval is narrow enough (at least 6
    repetitions, at most --repeats; a busy machine may need them all)."""
    code, d = run(capsys, "--size", "34x21", "--gpus", "0,0", "--variants", "peer", "--iters", "4",
                  "--repeats", "40", "--adaptive", "0.999")
    assert code == 0, d
    counts = [r["stats"]["n"] for r in d["results"] if r["unit"] == "us"]
    assert len(counts) == 2 and all(6 <= n <= 40 for n in counts), counts


def test_ctrl_c_in_a_variant_keeps_its_repetitions_and_ends_the_run(fake, capsys, monkeypatch):
    """On the driver: a Ctrl-C in peer's second timed repetition keeps the two (noted, verified),
    the run ends there, exit 130. 18 repetitions before it: each of the baseline's stencil alone and
    single, and the slabs' stencil alone, one warm-up and 5 timed."""
    from nodemap.bench import harness, interrupt
    from nodemap.bench.app import jacobi

    calls = []

    def slowest(world, steps, run):
        once = harness.slowest_rank(world, steps, run)

        def counted():
            calls.append(1)
            if len(calls) == 18 + 1 + 2:
                interrupt.request()
            return once()
        return counted

    monkeypatch.setattr(jacobi, "slowest_rank", slowest)
    code, d = run(capsys, "--size", "34x21", "--gpus", "0,1", "--variants", "peer,peer-overlap", "--iters", "4",
                  "--repeats", "5")
    assert code == 130, d
    assert [(r["metric"], r["stats"]["n"]) for r in d["results"]] == [("stencil kernel", 5), ("single", 5), ("peer", 2)]
    assert "interrupted after 2 of 5 repetitions" in d["results"][-1]["notes"] and not d["complete"]


@pytest.mark.mpi
@pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec next to sys.executable (pip install mpich)")
def test_mpi_ranks_stop_adaptive_repetitions_together():
    """Every rank sees the slowest process's figure, so all leave a case at the same repetition
    (one leaving early would start the verification's exchanges alone: a hang)."""
    p = mpirun(2, "--size", "18x13", "--variants", "mpi-staged,mpi-staged-overlap", "--repeats", "40",
               "--adaptive", "0.999", "--timeout", "60")
    assert p.returncode == 0, p.stderr + p.stdout
    counts = [r["stats"]["n"] for r in json.loads(p.stdout)["results"] if r["unit"] == "us"]
    assert len(counts) == 3 and all(6 <= n <= 40 for n in counts), counts


@pytest.mark.parametrize("px,py,waits", [(2, 1, 1), (2, 2, 1), (3, 1, None), (1, 2, 0)])
def test_tiles_push_columns_after_the_neighbours_stencil(fake, px, py, waits):
    """The fake runs streams in order, so it cannot show the race; it shows the wait."""
    from nodemap.bench.app import jacobi_grid as jg
    from nodemap.bench.app import jacobi_gpu as jgpu

    parts = jg.tiles(20, 12, px, py)
    w = jgpu.Slabs(fake_cupy, jgpu.allocate(fake_cupy, 20, parts, [0] * len(parts), "fp32", False), len(parts))
    jgpu.order_column_pushes(w)
    got = [s.compute.waited for s in w.slabs]
    sides = [sum(v is not None for k, v in jg.tile_neighbours(t).items() if k in ("left", "right")) for t in parts]
    assert got == ([waits] * len(parts) if waits is not None else sides)


def test_row_slabs_still_allocate_as_before(fake):
    """benchmarks/jacobi_kernel_sweep.py allocates jg.slabs directly."""
    from nodemap.bench.app import jacobi_grid as jg
    from nodemap.bench.app import jacobi_gpu as jgpu

    w = jgpu.Slabs(fake_cupy, jgpu.allocate(fake_cupy, 40, jg.slabs(30, 1), [0], "fp64", False), 1)
    s = w.slabs[0]
    assert s.bufs[0].shape == (30, 40) and s.part.cols == (0, 40) and s.nx == 40


GRAPHS = "peer-graph,peer-overlap-graph,nccl-graph,nccl-overlap-graph"


@pytest.mark.parametrize("decomp", ["1d", "2x2"])
def test_graph_variants_in_one_process_verify_against_single(fake, capsys, decomp):
    """One process, four GPUs: every step captured (peer: one graph over all
    GPUs; NCCL: one per GPU), replayed, and equal to the single-GPU run."""
    code, d = run(capsys, "--size", "34x22", "--gpus", "0,1,2,3", "--iters", "6", "--repeats", "2",
                  "--decomp", decomp, "--variants", GRAPHS)
    assert code == 0, d
    got = {r["metric"] for r in d["results"]}
    assert set(GRAPHS.split(",")) <= got, d["messages"]
    assert not fake_cupy._Capture.open  # every capture ended


def test_graphs_launch_once_per_two_steps_per_graph(fake, capsys):
    fake_cupy.cuda.runtime.launched.clear()
    code, d = run(capsys, "--size", "34x22", "--gpus", "0,1,2", "--iters", "8", "--repeats", "1",
                  "--variants", "peer-graph")
    assert code == 0, d
    peer = len(fake_cupy.cuda.runtime.launched)
    fake_cupy.cuda.runtime.launched.clear()
    code, d = run(capsys, "--size", "34x22", "--gpus", "0,1,2", "--iters", "8", "--repeats", "1",
                  "--variants", "nccl-graph")
    assert code == 0, d
    # runs: warm-up, 1 timed, the verification = 3 runs of 8/2 launches; NCCL: one graph per GPU
    assert peer == 3 * 4 and len(fake_cupy.cuda.runtime.launched) == 3 * 4 * 3


@pytest.mark.parametrize("variant", ["peer-graph", "peer-overlap-graph", "nccl-overlap-graph"])
def test_a_lost_halo_inside_a_graph_fails(fake, capsys, variant):
    code, d = run(capsys, "--size", "34x21", "--gpus", "0,1", "--variants", variant, "--iters", "4",
                  "--repeats", "1", "--inject-halo-fault")
    assert code == 1 and f"{variant} fp32: differs from the single-GPU run" in str(d)


def test_a_capture_that_fails_ends_every_capture_and_raises_its_own_error(fake):
    from nodemap.bench.gpu import graphs

    streams = [fake_cupy.cuda.Stream() for _ in range(3)]

    def body():
        raise ValueError("queued something a graph cannot hold")

    with pytest.raises(ValueError, match="cannot hold"):
        graphs.capture(fake_cupy, [[(0, streams[0]), (1, streams[1])], [(2, streams[2])]], body)
    assert not fake_cupy._Capture.open


def test_gpus_without_peer_access_are_said(fake, capsys, monkeypatch):
    """Their copies are staged by the driver: slower, so the run says which pair (as bench ring does)."""
    monkeypatch.setattr(type(fake_cupy.cuda.runtime), "deviceCanAccessPeer", lambda self, a, b: False)
    code, d = run(capsys, "--size", "34x22", "--gpus", "0,1", "--iters", "4", "--repeats", "1", "--variants", "peer")
    assert code == 0, d
    assert "peer: CUDA device 0 cannot access 1 directly: peer copies are staged by the driver" in d["messages"]
