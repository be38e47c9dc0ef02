"""The Jacobi solver of `nodemap bench jacobi` on the host, in NumPy: the
gold values a GPU run is checked against at small sizes, and the twin of
kernels/jacobi.cu's initial field.

The field is never zeros (zeros hide a halo that was never written): every
interior cell starts at an exact binary fraction from a hash of its global
coordinates, column 0 and NX-1 hold other exact fractions. The update adds
the four neighbours in the kernel's order ((right + left) + below) + above
and scales by 0.25, so a slab decomposition, the GPU and NumPy compute the
same bits; only the residual norm's summation order differs.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def initial(nx: int, rows: range, dtype: Any, cols: range | None = None) -> np.ndarray:
    """Rows `rows` (global indexes, 1..NY-2) of the initial field; columns
    `cols` of the NX (default all: a tile of --decomp 2d takes its own)."""
    cols = cols if cols is not None else range(nx)
    g = np.arange(rows.start, rows.stop, dtype=np.int64)[:, None]
    x = np.arange(cols.start, cols.stop, dtype=np.int64)[None, :]
    a = (((g * 7919 + x * 6007) % 4093) / 4096.0).astype(dtype)
    if cols.start == 0:
        a[:, 0] = (1.0 - (g[:, 0] % 256) / 256.0).astype(dtype)
    if cols.stop == nx:
        a[:, -1] = ((g[:, 0] % 128) / 128.0).astype(dtype)
    return a


def step(a: np.ndarray, out: np.ndarray) -> float:
    """One update of rows 1..-2, columns 1..-2 of `a` into `out`; returns the
    squared residual sum (float64)."""
    new = (a[1:-1, 2:] + a[1:-1, :-2]) + a[2:, 1:-1]
    new += a[:-2, 1:-1]
    new *= a.dtype.type(0.25)
    out[1:-1, 1:-1] = new
    r = new.astype(np.float64) - a[1:-1, 1:-1]
    return float(np.dot(r.ravel(), r.ravel()))


def wrap(a: np.ndarray) -> None:
    """The periodic halos of a whole grid: row 0 <- row NY-2, row NY-1 <- row 1."""
    a[0] = a[-2]
    a[-1] = a[1]


def solve(nx: int, ny: int, iters: int, dtype: Any) -> tuple[float, np.ndarray]:
    """(residual norm of the last step, float64 sum of every interior row)
    after `iters` steps from the initial field."""
    a = np.empty((ny, nx), dtype=dtype)
    a[1:-1] = initial(nx, range(1, ny - 1), dtype)
    wrap(a)
    b = a.copy()
    sq = 0.0
    for _ in range(iters):
        sq = step(a, b)
        wrap(b)
        a, b = b, a
    return float(np.sqrt(sq)), row_sums(a[1:-1])


def row_sums(rows: np.ndarray) -> np.ndarray:
    return rows.astype(np.float64).sum(axis=1)


NORM_RTOL = 1e-9  # the residuals are the same bits; only their summation order differs
ROWS_RTOL = 1e-12


def disagree(norm: float, rows: np.ndarray, gold_norm: float, gold_rows: np.ndarray) -> str:
    """'' when a run matches the gold run, else what differs (one line)."""
    rows, gold_rows = np.asarray(rows), np.asarray(gold_rows)
    if rows.shape != gold_rows.shape:
        return f"{rows.size} rows instead of {gold_rows.size}"
    if not (np.isfinite(norm) and np.all(np.isfinite(rows))):
        return "NaN or infinity in the result (a halo never written)"
    if abs(norm - gold_norm) > NORM_RTOL * max(abs(gold_norm), 1e-300):
        return f"residual norm {norm!r} instead of {gold_norm!r}"
    scale = max(float(np.max(np.abs(gold_rows))), 1.0) if gold_rows.size else 1.0
    bad = np.flatnonzero(np.abs(rows - gold_rows) > ROWS_RTOL * scale)
    if bad.size:
        i = int(bad[0])
        return (f"{bad.size} row sums differ, first global row {i + 1}: {rows[i]!r} instead of "
                f"{gold_rows[i]!r}")
    return ""
