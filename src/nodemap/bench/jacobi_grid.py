"""Pure arithmetic of `nodemap bench jacobi`: how an NX x NY grid is cut into
row slabs, which rows each slab sends where every step, what a slab costs in
device memory, and the figures derived from measured times.

The grid follows NVIDIA's multi-gpu-programming-models Jacobi solver: rows 0
and NY-1 are periodic halos (row 0 mirrors row NY-2, row NY-1 mirrors row 1),
columns 0 and NX-1 hold fixed (Dirichlet) values, and the NY-2 interior rows
are shared out so that slab sizes differ by at most one row (the reference's
chunk_size_low / chunk_size_high split, low slabs first).

A slab of `count` rows is stored as count + 2 local rows: local row 0 is its
top halo, rows 1..count its own rows (global rows start..start+count-1),
local row count+1 its bottom halo. Each step a slab sends its first row to
the top neighbour's bottom halo and its last row to the bottom neighbour's
top halo; neighbours wrap around (periodic in y). No I/O, no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

HALO_ROWS = 2  # one above, one below each slab
MIN_NX = 3  # one interior column between the two fixed ones


@dataclass(frozen=True)
class Slab:
    rank: int
    start: int  # first global row owned (1-based: row 0 is the global halo)
    count: int  # rows owned

    @property
    def stop(self) -> int:
        return self.start + self.count

    @property
    def local_rows(self) -> int:
        return self.count + HALO_ROWS


@dataclass(frozen=True)
class Copy:
    """One halo row moved per step: local row `src_row` of slab `src` into
    local row `dst_row` of slab `dst`."""

    src: int
    src_row: int
    dst: int
    dst_row: int
    direction: str  # "up" (to the top neighbour) or "down"


def slabs(ny: int, n: int) -> list[Slab]:
    """The NY-2 interior rows over n slabs, sizes differing by at most one."""
    interior = ny - HALO_ROWS
    if n < 1 or interior < n:
        raise ValueError(f"{interior} interior rows cannot be shared by {n} slabs")
    low = interior // n
    n_low = n * (low + 1) - interior  # slabs that get `low` rows; the rest get low + 1
    out, start = [], 1
    for r in range(n):
        count = low if r < n_low else low + 1
        out.append(Slab(r, start, count))
        start += count
    return out


def neighbours(rank: int, n: int) -> tuple[int, int]:
    """(top, bottom) neighbour ranks, periodic."""
    return (rank - 1) % n, (rank + 1) % n


def halo_copies(parts: list[Slab]) -> list[Copy]:
    """Every row copy of one exchange, two per slab, in rank order."""
    n = len(parts)
    out = []
    for s in parts:
        top, bottom = neighbours(s.rank, n)
        out.append(Copy(s.rank, 1, top, parts[top].count + 1, "up"))
        out.append(Copy(s.rank, s.count, bottom, 0, "down"))
    return out


def owner(parts: list[Slab], global_row: int) -> tuple[int, int]:
    """(rank, local row) holding an interior global row."""
    for s in parts:
        if s.start <= global_row < s.stop:
            return s.rank, global_row - s.start + 1
    raise ValueError(f"row {global_row} is not an interior row")


def min_rows(overlap: bool) -> int:
    """Rows a slab needs: the overlapped step updates its first and last row
    apart from the rest, so they must be two different rows."""
    return 2 if overlap else 1


def check_grid(nx: int, ny: int, n: int, overlap: bool = False) -> str:
    """'' when the grid can be cut into n slabs, else why not (one line)."""
    if nx < MIN_NX:
        return f"NX={nx}: the grid needs at least {MIN_NX} columns (two fixed boundary columns and one to update)"
    need = n * min_rows(overlap) + HALO_ROWS
    if ny < need:
        what = f"{n} slabs of at least {min_rows(overlap)} row{'s' if overlap else ''}"
        return f"NY={ny} is too small for {what}: give NY >= {need} or use fewer ranks/GPUs"
    return ""


# --- memory -------------------------------------------------------------------

NORM_BYTES = 64  # the residual accumulator and its padding


def slab_bytes(nx: int, rows: int, word: int) -> int:
    """Device bytes one slab of `rows` owned rows needs: the two arrays of a
    Jacobi step (read one, write the other), halos included."""
    return 2 * nx * (rows + HALO_ROWS) * word + NORM_BYTES


def largest_square(free_bytes: int, word: int, slabs_on_gpu: int = 1) -> int:
    """The largest N such that an N x N grid cut into `slabs_on_gpu` slabs
    (all on this GPU) fits in free_bytes; 0 when none does."""
    def fits(side: int) -> bool:
        return grid_bytes_on_gpu(side, side, slabs_on_gpu, slabs_on_gpu, word) <= free_bytes

    lo, hi = max(MIN_NX, slabs_on_gpu + HALO_ROWS), 1 << 20  # the smallest grid the slabs can share
    if not fits(lo):
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def grid_bytes_on_gpu(nx: int, ny: int, n: int, here: int, word: int) -> int:
    """Bytes the largest `here` slabs of an n-way cut take on one GPU."""
    parts = sorted(slabs(ny, n), key=lambda s: -s.count)[:here]
    return sum(slab_bytes(nx, s.count, word) for s in parts)


# --- derived figures -------------------------------------------------------------


def cells(nx: int, ny: int) -> int:
    """Cells updated per step: the interior, fixed columns and halos excluded."""
    return (nx - 2) * (ny - HALO_ROWS)


def stencil_bytes(nx: int, ny: int, word: int) -> int:
    """The fewest device bytes one step moves: every updated cell read once
    and written once (neighbour reads hit the caches)."""
    return 2 * cells(nx, ny) * word


def efficiency(t_one: float, t_n: float, gpus: int) -> float:
    """Strong-scaling parallel efficiency against one GPU: t1 / (G x tG)."""
    return t_one / (gpus * t_n) if t_n > 0 and gpus > 0 else 0.0


def comm_share(t_step: float, t_compute: float) -> float:
    """Share of a step not spent in the stencil kernels (communication,
    synchronisation, launch gaps); 0 when the step is no slower."""
    return max(0.0, t_step - t_compute) / t_step if t_step > 0 else 0.0


def overlap_hidden(t_plain: float, t_overlap: float, t_compute: float) -> float | None:
    """How much of the plain variant's communication time the overlapped one
    hid: (t_plain - t_overlap) / (t_plain - t_compute). None when the plain
    step has no communication time to hide."""
    exposed = t_plain - t_compute
    if exposed <= 0:
        return None
    return (t_plain - t_overlap) / exposed
