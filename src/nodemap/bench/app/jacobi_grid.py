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
from functools import lru_cache

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


# --- tiles (--decomp 2d) -----------------------------------------------------------
#
# A px x py process grid: the NY-2 interior rows are cut into py row bands and
# the NX-2 interior columns into px column bands, both as `slabs` cuts rows.
# Tile rank = iy * px + ix (row-major). A tile of count x xcount cells is
# stored as (count + 2) x (xcount + 2): local column 0 and xcount + 1 are its
# column halos, or the fixed global columns 0 and NX-1 at the grid's edges.
# Rows stay periodic (y); columns are not (the fixed columns are the ends).


def dims_create(n: int) -> tuple[int, int]:
    """(px, py) for n ranks as MPI_Dims_create(n, 2) balances them: the two
    closest factors, the larger one for rows (row halos are contiguous)."""
    if n < 1:
        raise ValueError(f"{n} ranks")
    px = max(f for f in range(1, int(n ** 0.5) + 1) if n % f == 0)
    return px, n // px


@dataclass(frozen=True)
class Tile(Slab):
    """A Slab's rows (rank, start, count: its stop, local_rows), cut into columns too."""

    xstart: int  # first global column owned (1-based: column 0 is fixed)
    xcount: int  # columns owned
    ix: int
    iy: int
    px: int
    py: int
    nx: int  # the global grid's columns

    @property
    def local_cols(self) -> int:
        return self.xcount + HALO_ROWS

    @property
    def cols(self) -> tuple[int, int]:
        """Local columns [lo, hi) that are this tile's own: its owned columns
        and, at the grid's edges, the fixed global column. A row halo takes
        exactly these from the neighbour; row sums add them."""
        return (0 if self.ix == 0 else 1, self.local_cols if self.ix == self.px - 1 else self.xcount + 1)

    @property
    def global_cols(self) -> tuple[int, int]:
        """Global columns [lo, hi) held in local columns 0..xcount+1."""
        return self.xstart - 1, self.xstart + self.xcount + 1


def tiles(nx: int, ny: int, px: int, py: int) -> list[Tile]:
    """The px x py tiles, rank order (row-major). ValueError when a band
    would get no row or column."""
    rows, cols = slabs(ny, py), slabs(nx, px)
    return [Tile(iy * px + ix, r.start, r.count, c.start, c.count, ix, iy, px, py, nx)
            for iy, r in enumerate(rows) for ix, c in enumerate(cols)]


def as_tiles(nx: int, parts: list[Slab] | list[Tile]) -> list[Tile]:
    """Row slabs (a whole cut, rank order) as the one-column-band tiles they
    are; tiles unchanged."""
    return [p if isinstance(p, Tile) else Tile(p.rank, p.start, p.count, 1, nx - HALO_ROWS, 0, p.rank, 1, len(parts),
                                               nx) for p in parts]


@lru_cache(maxsize=None)  # asked every step of every exchange; a tile never changes: read-only results
def tile_neighbours(t: Tile) -> dict[str, int | None]:
    """Ranks of the four neighbours; up/down periodic, left/right None at the
    grid's fixed columns."""
    def at(ix: int, iy: int) -> int:
        return (iy % t.py) * t.px + ix

    return {"up": at(t.ix, t.iy - 1), "down": at(t.ix, t.iy + 1),
            "left": at(t.ix - 1, t.iy) if t.ix > 0 else None,
            "right": at(t.ix + 1, t.iy) if t.ix < t.px - 1 else None}


@dataclass(frozen=True)
class Block:
    """A rectangle of a tile's local array: rows [row, row+rows), columns [col, col+cols)."""

    row: int
    col: int
    rows: int
    cols: int


@dataclass(frozen=True)
class TileCopy:
    """One halo moved per step: `src_block` of tile `src` into `dst_block` of `dst`."""

    src: int
    src_block: Block
    dst: int
    dst_block: Block
    direction: str  # "up", "down", "left", "right": where the sender's cells go


OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


@lru_cache(maxsize=None)  # asked every step of every exchange; a tile never changes: read-only results
def halo_blocks(t: Tile) -> dict[str, tuple[Block, Block]]:
    """Per direction of travel: (the block this tile sends that way, the
    halo block where what travels that way lands here, coming from the
    opposite neighbour). Rows carry the tile's own columns (`cols`);
    columns carry its owned rows."""
    lo, hi = t.cols
    return {"up": (Block(1, lo, 1, hi - lo), Block(t.count + 1, lo, 1, hi - lo)),
            "down": (Block(t.count, lo, 1, hi - lo), Block(0, lo, 1, hi - lo)),
            "left": (Block(1, 1, t.count, 1), Block(1, t.xcount + 1, t.count, 1)),
            "right": (Block(1, t.xcount, t.count, 1), Block(1, 0, t.count, 1))}


@lru_cache(maxsize=None)  # asked every step of every exchange; a tile never changes: read-only results
def directions(t: Tile) -> list[str]:
    """The directions in which something travels to or from this tile: up
    and down always (periodic), left and right where a neighbour is on
    either side (none across the fixed columns)."""
    nb = tile_neighbours(t)
    return [d for d in OPPOSITE if nb[d] is not None or nb[OPPOSITE[d]] is not None]


def tile_copies(parts: list[Tile]) -> list[TileCopy]:
    """Every copy of one exchange, in rank order: each tile pushes its first
    and last row up and down (periodic) and its first and last owned column
    left and right where a neighbour is (not across the fixed columns)."""
    out = []
    for t in parts:
        for d, dst in tile_neighbours(t).items():
            if dst is not None:
                out.append(TileCopy(t.rank, halo_blocks(t)[d][0], dst, halo_blocks(parts[dst])[d][1], d))
    return out


def parse_decomp(text: str, n: int) -> tuple[int, int]:
    """'1d' -> (1, n); '2d' -> dims_create(n); 'PXxPY' (tile columns x tile
    rows, as NXxNY) -> (px, py), which must multiply to n. ValueError with
    the reason."""
    t = text.lower().strip()
    if t == "1d":
        return 1, n
    if t == "2d":
        return dims_create(n)
    try:
        px, py = (int(x) for x in t.split("x"))
    except ValueError:
        raise ValueError(f"--decomp {text!r}: give 1d, 2d or PXxPY (tile columns x tile rows, like 2x2)") from None
    if px < 1 or py < 1 or px * py != n:
        raise ValueError(f"--decomp {text!r}: {px} x {py} tiles for {n} slabs; give PX x PY = {n}")
    return px, py


def check_tiles(nx: int, ny: int, px: int, py: int, overlap: bool = False) -> str:
    """'' when the grid can be cut into px x py tiles, else why not (one line)."""
    if nx < MIN_NX:
        return check_grid(nx, ny, py, overlap)
    per = min_rows(overlap) if px > 1 else 1  # the overlapped tile updates its first and last column apart too
    need_x = px * per + HALO_ROWS
    if nx < need_x:
        return (f"NX={nx} is too small for {px} tile columns of at least {per} column{'s' if per > 1 else ''}: "
                f"give NX >= {need_x} or use fewer")
    return check_grid(nx, ny, py, overlap)


def weak_grid(nx: int, ny: int, px: int, py: int) -> tuple[int, int]:
    """The global grid when NX x NY is one tile's (halos included): the
    interior grows with the tile counts, so every tile keeps NX x NY."""
    return (nx - HALO_ROWS) * px + HALO_ROWS, (ny - HALO_ROWS) * py + HALO_ROWS


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


def weak_efficiency(t_one: float, t_n: float, slabs: int, gpus: int) -> float:
    """Weak-scaling efficiency at a constant per-slab grid: the time one slab
    takes alone over the time of N slabs on G GPUs, scaled by the slabs per
    GPU: (N/G) x t1 / tN (1.0 is perfect; with one slab per GPU, t1 / tN)."""
    return slabs * t_one / (gpus * t_n) if t_n > 0 and gpus > 0 else 0.0


def comm_share(t_step: float, t_compute: float) -> float:
    """Share of a step not spent in the stencil kernels (communication,
    synchronisation, launch gaps); 0 when the step is no slower."""
    return max(0.0, t_step - t_compute) / t_step if t_step > 0 else 0.0


def overlap_hidden(t_plain: float, t_overlap: float, t_compute: float, noise: float = 0.0) -> float | None:
    """How much of the plain variant's communication time the overlapped one
    hid: (t_plain - t_overlap) / (t_plain - t_compute), at most 1. None (not
    meaningful) when the plain step's communication time is within `noise`
    (the measurements' relative spread) of the step: a ratio of two noises
    printed -31% where there was nothing to hide."""
    exposed = t_plain - t_compute
    if exposed <= max(noise, 0.0) * t_plain or exposed <= 0:
        return None
    return min(1.0, (t_plain - t_overlap) / exposed)
