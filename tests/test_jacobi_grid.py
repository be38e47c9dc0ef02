"""`nodemap bench jacobi` without a GPU: the slab and tile decompositions
and halo arithmetic (hypothesis), a NumPy simulation of the tiles and their
halo copies against the whole-grid solve, the derived figures, and bad input."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodemap.bench.app import jacobi_grid as jg
from nodemap.bench.app import jacobi_host as jh


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
    from nodemap.bench.app import jacobi

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
    from nodemap.bench.app import jacobi
    from nodemap.bench.comm import mpi_common as mc
    from nodemap.bench.comm.world import World

    single = World(gpu_keys=["GPU0"])
    assert jacobi.usable(single, "peer", None) == ""
    assert "mpiexec" in jacobi.usable(single, "mpi-staged", None)
    two_on_one = World(gpu_keys=["GPU0", "GPU0"])
    assert "Duplicate GPU" in jacobi.usable(two_on_one, "nccl", None)
    assert "graph" in jacobi.usable(two_on_one, "nccl-graph", None)
    mpi = World(object(), 0, 2, gpu_keys=["h:GPU0", "h:GPU1"])
    assert "CUDA IPC" in jacobi.usable(mpi, "peer", None)
    assert jacobi.usable(mpi, "single", None) == ""
    not_aware = mc.Awareness(gpu=True, aware=False, how="MPIX_Query_cuda_support() = 0")
    assert "not CUDA-aware" in jacobi.usable(mpi, "mpi-aware", not_aware)
    assert jacobi.usable(mpi, "mpi-staged-overlap", not_aware) == ""


# --- tiles (--decomp 2d) ------------------------------------------------------------


@given(n=st.integers(1, 512))
def test_dims_create_balances_like_mpi(n):
    px, py = jg.dims_create(n)
    assert px * py == n and px <= py
    # no factor pair is closer together (MPI_Dims_create's balance)
    assert all(not (n % f == 0 and abs(n // f - f) < py - px) for f in range(1, n + 1))


def test_parse_decomp():
    assert jg.parse_decomp("1d", 6) == (1, 6)
    assert jg.parse_decomp("2d", 6) == (2, 3)
    assert jg.parse_decomp("2d", 4) == (2, 2)
    assert jg.parse_decomp("3x2", 6) == (3, 2)
    for bad in ("3x3", "axb", "0x6", "3d"):
        with pytest.raises(ValueError, match="--decomp"):
            jg.parse_decomp(bad, 6)


@given(nx=st.integers(3, 40), ny=st.integers(3, 40), px=st.integers(1, 8), py=st.integers(1, 8))
def test_overlapped_tiles_have_two_rows_and_two_columns(nx, ny, px, py):
    """The overlapped step updates a tile's first and last row and column
    apart: both must be two (row slabs, px = 1: rows only, as before)."""
    why = jg.check_tiles(nx, ny, px, py, overlap=True)
    if why:
        assert "NX=" in why or "NY=" in why
        return
    for t in jg.tiles(nx, ny, px, py):
        assert t.count >= 2 and (px == 1 or t.xcount >= 2)
    assert jg.check_tiles(5, 20, 2, 1) == "" and "at least 2 columns" in jg.check_tiles(5, 20, 2, 1, overlap=True)


@given(nx=st.integers(3, 300), ny=st.integers(3, 300), px=st.integers(1, 8), py=st.integers(1, 8))
def test_tiles_cover_the_interior_once(nx, ny, px, py):
    if jg.check_tiles(nx, ny, px, py):
        with pytest.raises(ValueError):
            jg.tiles(nx, ny, px, py)
        return
    parts = jg.tiles(nx, ny, px, py)
    assert [t.rank for t in parts] == list(range(px * py))
    owned = np.zeros((ny, nx), dtype=int)
    for t in parts:
        owned[t.start:t.stop, t.xstart:t.xstart + t.xcount] += 1
        assert t.global_cols[1] - t.global_cols[0] == t.local_cols
    assert (owned[1:-1, 1:-1] == 1).all() and owned.sum() == (nx - 2) * (ny - 2)
    # the own columns (row sums, row halos) of one row band cover 0..NX-1 once
    for iy in range(py):
        band = [t for t in parts if t.iy == iy]
        cols = sorted(c for t in band for c in range(t.global_cols[0] + t.cols[0], t.global_cols[0] + t.cols[1]))
        assert cols == list(range(nx))


def global_cell(t: jg.Tile, ny: int, row: int, col: int) -> tuple[int, int]:
    """The global cell a tile's local (row, col) holds or mirrors (periodic rows)."""
    g_row = t.start + row - 1
    g_row = ny - 2 if g_row == 0 else 1 if g_row == ny - 1 else g_row
    return g_row, t.global_cols[0] + col


@given(nx=st.integers(3, 200), ny=st.integers(3, 200), px=st.integers(1, 6), py=st.integers(1, 6))
def test_tile_copies_fill_every_halo_with_the_neighbouring_cells(nx, ny, px, py):
    if jg.check_tiles(nx, ny, px, py):
        return
    parts = jg.tiles(nx, ny, px, py)
    filled: dict[tuple[int, int, int], int] = {}
    for c in jg.tile_copies(parts):
        src, dst, sb, db = parts[c.src], parts[c.dst], c.src_block, c.dst_block
        assert (sb.rows, sb.cols) == (db.rows, db.cols)
        for i in range(sb.rows):
            for j in range(sb.cols):
                # the sender's own cell is the global cell the receiver's halo mirrors
                assert 1 <= sb.row + i <= src.count and src.cols[0] <= sb.col + j < src.cols[1]
                assert global_cell(src, ny, sb.row + i, sb.col + j) == global_cell(dst, ny, db.row + i, db.col + j)
                key = (c.dst, db.row + i, db.col + j)
                filled[key] = filled.get(key, 0) + 1
    assert set(filled.values()) == {1}  # no halo cell written twice
    for t in parts:  # every halo cell a step reads is written
        lo, hi = t.cols
        need = {(t.rank, r, c) for r in (0, t.count + 1) for c in range(max(lo, 1), min(hi, t.local_cols - 1))}
        need |= {(t.rank, r, c) for r in range(1, t.count + 1) for c in (0, t.local_cols - 1)
                 if not lo <= c < hi}
        assert need <= set(filled)


def simulate_tiles(nx: int, ny: int, px: int, py: int, iters: int, dtype, drop: int | None = None):
    """The tiles in NumPy, exchanging halos by tile_copies (halos NaN at first)."""
    parts = jg.tiles(nx, ny, px, py)
    a = []
    for t in parts:
        s = np.full((t.local_rows, t.local_cols), np.nan, dtype=dtype)
        s[1:-1] = jh.initial(nx, range(t.start, t.stop), dtype, range(*t.global_cols))
        lo, hi = t.cols
        for col in {0, t.local_cols - 1} - set(range(lo, hi)):
            s[:, col] = np.nan
        a.append(s)
    b = [s.copy() for s in a]
    copies = jg.tile_copies(parts)

    def exchange(bufs):
        for i, c in enumerate(copies):
            if i != drop:
                sb, db = c.src_block, c.dst_block
                bufs[c.dst][db.row:db.row + db.rows, db.col:db.col + db.cols] = \
                    bufs[c.src][sb.row:sb.row + sb.rows, sb.col:sb.col + sb.cols]

    exchange(a)
    sq = 0.0
    for _ in range(iters):
        sq = sum(jh.step(s, t) for s, t in zip(a, b))
        exchange(b)
        a, b = b, a
    sums: dict[int, np.ndarray] = {}
    for t, s in zip(parts, a):
        part = jh.row_sums(s[1:-1, t.cols[0]:t.cols[1]])
        sums[t.start] = sums[t.start] + part if t.start in sums else part
    return float(np.sqrt(sq)), np.concatenate([sums[k] for k in sorted(sums)])


@settings(max_examples=25, deadline=None)
@given(nx=st.integers(3, 24), ny=st.integers(3, 24), px=st.integers(1, 4), py=st.integers(1, 4),
       iters=st.integers(1, 5), dtype=st.sampled_from([np.float32, np.float64]))
def test_tiles_with_halo_copies_equal_the_whole_grid(nx, ny, px, py, iters, dtype):
    if jg.check_tiles(nx, ny, px, py):
        return
    assert jh.disagree(*simulate_tiles(nx, ny, px, py, iters, dtype), *jh.solve(nx, ny, iters, dtype)) == ""


def test_a_lost_tile_halo_fails_the_check():
    gold = jh.solve(16, 14, 4, np.float64)
    for drop in range(len(jg.tile_copies(jg.tiles(16, 14, 2, 3)))):
        assert jh.disagree(*simulate_tiles(16, 14, 2, 3, 4, np.float64, drop=drop), *gold), drop


def test_a_stale_halo_fails_the_check():
    """A halo written once and then never again (no NaN left) is still caught."""
    gold = jh.solve(16, 20, 6, np.float64)
    parts = jg.tiles(16, 20, 1, 2)
    a = [np.empty((t.local_rows, t.local_cols)) for t in parts]
    for s, t in zip(a, parts):
        s[1:-1] = jh.initial(16, range(t.start, t.stop), np.float64)
    copies = jg.tile_copies(parts)

    def move(bufs, c):
        sb, db = c.src_block, c.dst_block
        bufs[c.dst][db.row:db.row + db.rows, db.col:db.col + db.cols] = \
            bufs[c.src][sb.row:sb.row + sb.rows, sb.col:sb.col + sb.cols]

    for c in copies:
        move(a, c)
    b = [s.copy() for s in a]
    for _ in range(6):
        sq = sum(jh.step(s, t) for s, t in zip(a, b))
        for c in copies[1:]:  # the first copy stays as it was at the start
            move(b, c)
        a, b = b, a
    rows = np.concatenate([jh.row_sums(s[1:-1]) for s in a])
    assert jh.disagree(float(np.sqrt(sq)), rows, *gold)


def test_a_tile_of_the_host_field_is_the_field_s_columns():
    whole = jh.initial(40, range(3, 9), np.float64)
    assert np.array_equal(jh.initial(40, range(3, 9), np.float64, range(0, 11)), whole[:, 0:11])
    assert np.array_equal(jh.initial(40, range(3, 9), np.float64, range(17, 40)), whole[:, 17:40])


@given(nx=st.integers(3, 50), ny=st.integers(3, 50), px=st.integers(1, 5), py=st.integers(1, 5))
def test_weak_grid_keeps_every_tile_at_the_given_size(nx, ny, px, py):
    gx, gy = jg.weak_grid(nx, ny, px, py)
    assert {(t.count, t.xcount) for t in jg.tiles(gx, gy, px, py)} == {(ny - 2, nx - 2)}


def test_weak_efficiency_and_noise():
    assert jg.weak_efficiency(1.0, 1.0, 4, 4) == pytest.approx(1.0)
    assert jg.weak_efficiency(1.0, 2.0, 4, 4) == pytest.approx(0.5)
    assert jg.weak_efficiency(1.0, 2.0, 2, 1) == pytest.approx(1.0)  # two slabs on one GPU: twice the work
    # almost no communication: the ratio of two noises is not reported
    assert jg.overlap_hidden(10.0, 10.3, 9.9, noise=0.05) is None
    assert jg.overlap_hidden(10.0, 8.0, 8.0, noise=0.05) == pytest.approx(1.0)
    assert jg.overlap_hidden(10.0, 7.0, 8.0) == 1.0  # clamped: it cannot hide more than there is
