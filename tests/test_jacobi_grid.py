"""`nodemap bench jacobi` without a GPU: the slab decomposition and halo
arithmetic (hypothesis), a NumPy simulation of the slabs and their halo
copies against the whole-grid solve, the derived figures, and bad input."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodemap.bench import jacobi_grid as jg
from nodemap.bench import jacobi_host as jh


@given(ny=st.integers(3, 5000), n=st.integers(1, 64))
def test_slabs_cover_the_interior_once_and_balance(ny, n):
    if ny - 2 < n:
        with pytest.raises(ValueError):
            jg.slabs(ny, n)
        return
    parts = jg.slabs(ny, n)
    assert [p.rank for p in parts] == list(range(n))
    assert parts[0].start == 1 and parts[-1].stop == ny - 1
    assert all(a.stop == b.start for a, b in zip(parts, parts[1:]))
    counts = [p.count for p in parts]
    assert max(counts) - min(counts) <= 1 and min(counts) >= 1
    assert counts == sorted(counts)  # the reference's order: short slabs first


@given(ny=st.integers(3, 3000), n=st.integers(1, 40))
def test_halo_copies_pair_each_halo_with_the_neighbouring_row(ny, n):
    if ny - 2 < n:
        return
    parts = jg.slabs(ny, n)
    copies = jg.halo_copies(parts)
    assert len(copies) == 2 * n
    filled = {(c.dst, c.dst_row) for c in copies}
    assert filled == {(p.rank, 0) for p in parts} | {(p.rank, p.count + 1) for p in parts}  # every halo once
    for c in copies:
        src, dst = parts[c.src], parts[c.dst]
        g_src = src.start + c.src_row - 1
        # the global row a halo mirrors: the row above the slab's first, or below its last, periodic
        g_dst = dst.start - 1 if c.dst_row == 0 else dst.stop
        if g_dst == 0:
            g_dst = ny - 2
        elif g_dst == ny - 1:
            g_dst = 1
        assert g_src == g_dst
        assert jg.owner(parts, g_src) == (c.src, c.src_row)


def simulate(nx: int, ny: int, n: int, iters: int, dtype, drop: int | None = None):
    """The slabs in NumPy, exchanging halos by halo_copies; `drop`: one copy lost."""
    parts = jg.slabs(ny, n)
    a = [np.full((p.local_rows, nx), np.nan, dtype=dtype) for p in parts]
    for s, p in zip(a, parts):
        s[1:-1] = jh.initial(nx, range(p.start, p.stop), dtype)
    b = [s.copy() for s in a]
    copies = jg.halo_copies(parts)

    def exchange(bufs):
        for i, c in enumerate(copies):
            if i != drop:
                bufs[c.dst][c.dst_row] = bufs[c.src][c.src_row]

    exchange(a)
    sq = 0.0
    for _ in range(iters):
        sq = sum(jh.step(s, t) for s, t in zip(a, b))
        exchange(b)
        a, b = b, a
    return float(np.sqrt(sq)), np.concatenate([jh.row_sums(s[1:-1]) for s in a])


@settings(max_examples=25, deadline=None)
@given(nx=st.integers(3, 24), ny=st.integers(4, 40), n=st.integers(1, 6), iters=st.integers(1, 6),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_slabs_with_halo_copies_equal_the_whole_grid(nx, ny, n, iters, dtype):
    if ny - 2 < n:
        return
    gold = jh.solve(nx, ny, iters, dtype)
    got = simulate(nx, ny, n, iters, dtype)
    assert jh.disagree(*got, *gold) == ""


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_lost_halo_fails_the_check(n):
    gold = jh.solve(16, 20, 4, np.float32)
    for drop in range(2 * n):
        why = jh.disagree(*simulate(16, 20, n, 4, np.float32, drop=drop), *gold)
        assert why, f"dropping copy {drop} went unnoticed"


def test_a_stale_halo_fails_the_check():
    """A halo written once and then never again (no NaN left) is still caught."""
    gold = jh.solve(16, 20, 6, np.float64)
    parts = jg.slabs(20, 2)
    a = [np.empty((p.local_rows, 16)) for p in parts]
    for s, p in zip(a, parts):
        s[1:-1] = jh.initial(16, range(p.start, p.stop), np.float64)
    copies = jg.halo_copies(parts)
    for c in copies:
        a[c.dst][c.dst_row] = a[c.src][c.src_row]
    b = [s.copy() for s in a]
    for _ in range(6):
        sq = sum(jh.step(s, t) for s, t in zip(a, b))
        for c in copies[1:]:  # the first copy stays as it was at the start
            b[c.dst][c.dst_row] = b[c.src][c.src_row]
        a, b = b, a
    rows = np.concatenate([jh.row_sums(s[1:-1]) for s in a])
    assert jh.disagree(float(np.sqrt(sq)), rows, *gold)


def test_host_field_is_never_zero_and_exact():
    a = jh.initial(64, range(1, 63), np.float32)
    assert np.count_nonzero(a) > 0.9 * a.size
    assert np.array_equal(a.astype(np.float64), jh.initial(64, range(1, 63), np.float64))


def test_solve_runs_the_reference_update():
    norm, rows = jh.solve(5, 5, 1, np.float64)
    a = np.empty((5, 5))
    a[1:-1] = jh.initial(5, range(1, 4), np.float64)
    jh.wrap(a)
    new = 0.25 * (a[1:-1, 2:] + a[1:-1, :-2] + a[2:, 1:-1] + a[:-2, 1:-1])
    assert norm == pytest.approx(np.sqrt(((new - a[1:-1, 1:-1]) ** 2).sum()), rel=1e-12)


@given(nx=st.integers(1, 100), ny=st.integers(1, 100), n=st.integers(1, 50), overlap=st.booleans())
def test_check_grid_agrees_with_slabs(nx, ny, n, overlap):
    why = jg.check_grid(nx, ny, n, overlap)
    if why:
        assert "\n" not in why and ("NX" in why or "NY" in why)
        return
    parts = jg.slabs(ny, n)
    assert min(p.count for p in parts) >= jg.min_rows(overlap) and nx >= 3


@given(free=st.integers(0, 1 << 40), word=st.sampled_from([4, 8]), k=st.integers(1, 4))
def test_largest_square_fits_and_one_more_does_not(free, word, k):
    side = jg.largest_square(free, word, k)
    if side:
        assert jg.grid_bytes_on_gpu(side, side, k, k, word) <= free
    if side + 1 >= 3 and side + 1 - 2 >= k:
        assert jg.grid_bytes_on_gpu(side + 1, side + 1, k, k, word) > free


def test_derived_figures():
    assert jg.cells(10, 12) == 8 * 10
    assert jg.stencil_bytes(10, 12, 4) == 2 * 80 * 4
    assert jg.efficiency(1.0, 0.5, 2) == pytest.approx(1.0)
    assert jg.efficiency(1.0, 1.0, 2) == pytest.approx(0.5)
    assert jg.comm_share(10.0, 8.0) == pytest.approx(0.2)
    assert jg.comm_share(8.0, 10.0) == 0.0
    assert jg.overlap_hidden(10.0, 8.0, 8.0) == pytest.approx(1.0)
    assert jg.overlap_hidden(10.0, 10.0, 8.0) == pytest.approx(0.0)
    assert jg.overlap_hidden(8.0, 8.0, 8.0) is None


def test_bad_input_is_one_line_exit_2():
    from nodemap.bench import jacobi

    for argv, words in ((["--size", "12xfoo"], "NXxNY"), (["--dtype", "fp16"], "choose from"),
                        (["--variants", "mpi,bogus"], "choose from"), (["--iters", "3"], "even")):
        r = subprocess.run([sys.executable, "-m", "nodemap", "bench", "jacobi", *argv], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2, r.stderr
        assert words in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert jacobi.parse_grid("64") == (64, 64) and jacobi.parse_grid("16x8") == (16, 8)


def test_no_gpu_is_one_line_exit_2():
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed: the GPU tests cover this machine")
    except ImportError:
        pass
    r = subprocess.run([sys.executable, "-m", "nodemap", "bench", "jacobi", "--size", "64x64", "--mode", "single"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "CuPy" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_variant_choice_by_launch_mode():
    from nodemap.bench import jacobi
    from nodemap.bench import mpi_common as mc

    single = jacobi.Launch(None, [0], [0], 1, None, ["GPU0"], [])
    assert jacobi.usable(single, "peer", None) == ""
    assert "mpiexec" in jacobi.usable(single, "mpi-staged", None)
    two_on_one = jacobi.Launch(None, [0, 0], [0, 1], 2, None, ["GPU0", "GPU0"], [])
    assert "Duplicate GPU" in jacobi.usable(two_on_one, "nccl", None)
    assert "graph" in jacobi.usable(two_on_one, "nccl-graph", None)
    mpi = jacobi.Launch(None, [0], [0], 2, object(), ["h:GPU0", "h:GPU1"], [])
    assert "CUDA IPC" in jacobi.usable(mpi, "peer", None)
    assert jacobi.usable(mpi, "single", None) == ""
    not_aware = mc.Awareness(gpu=True, aware=False, how="MPIX_Query_cuda_support() = 0")
    assert "not CUDA-aware" in jacobi.usable(mpi, "mpi-aware", not_aware)
    assert jacobi.usable(mpi, "mpi-staged-overlap", not_aware) == ""
