"""The device side of `nodemap bench jacobi`: slabs on GPUs, the stencil
kernels, one halo exchange per transport, and the step orders.

`Slabs` are every slab this process drives (all of them in single-process
mode, its own in MPI mode) on the kind's World (bench/comm/world.py). A
step queues the stencil on each slab's compute
stream and the halo exchange after it; the overlapped step queues the first
and last rows on a high-priority edge stream, exchanges them there while the
interior runs on the compute stream (tiles: the first and last rows and
columns there, the rest of the tile on the compute stream). Between steps every stream waits for
the events of its own and its neighbours' streams (single process) or the
two streams of its slab wait for each other (one slab per process: the
transport orders the rest), so no step reads a halo before it is written or
writes a buffer a neighbour still reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

from ...errors import NodemapError
from ...units import format_size
from . import jacobi_grid as jg
from ..comm.world import World, alone

# Block shape of the stencil: BLOCK threads across, each walking ROWS_PER_BLOCK
# rows (2 extra rows read per ROWS_PER_BLOCK written). NODEMAP_JACOBI_BLOCK=
# "256x32" overrides it (benchmarks/jacobi_kernel_sweep.py measures shapes).
# The shape whose slower precision is fastest at 2 columns per thread on an H100: fp32 2942 GB/s, fp64 2922 GB/s
# (87.8%, 87.2% of the 3.35 TB/s datasheet; 99% and 97% of a device copy), benchmarks/results/device_h100_20261125.
BLOCK, ROWS_PER_BLOCK = 512, 4


def block_shape(text: str | None) -> tuple[int, int]:
    """'256x32' -> (256, 32); the default when unset."""
    if not text:
        return BLOCK, ROWS_PER_BLOCK
    try:
        b, r = (int(x) for x in text.lower().split("x"))
    except ValueError:
        b = r = 0
    if b % 32 or not 32 <= b <= 1024 or r < 1:
        raise NodemapError(f"NODEMAP_JACOBI_BLOCK={text!r}: give THREADSxROWS, threads a multiple of 32 up to "
                           "1024, e.g. 256x32")
    return b, r


DTYPES = {"fp32": ("float32", 4, "f32"), "fp64": ("float64", 8, "f64")}
# Columns per thread of the stencil (vector loads and stores; jacobi.cu), per
# precision: the fastest on an H100 (benchmarks/jacobi_kernel_sweep.py).
# NODEMAP_JACOBI_VECTOR=1|2|4 overrides it; a width that does not divide NX
# falls back to the next smaller one.
VECTOR = {"fp32": 2, "fp64": 2}  # float2/double2: 99% of a device copy at their best shapes (1: 90%, 97%)
VECTOR_WIDTHS = {"fp32": (4, 2, 1), "fp64": (2, 1)}


def vector_width(dtype: str, nx: int, wanted: int | None = None) -> int:
    """Columns per thread for rows of `nx` cells: the widest allowed width up
    to `wanted` (the precision's default when None) that divides nx."""
    cap = VECTOR[dtype] if wanted is None else wanted
    return next(v for v in VECTOR_WIDTHS[dtype] if v <= cap and nx % v == 0)


def vector_env(text: str | None) -> int | None:
    if not text:
        return None
    if text not in ("1", "2", "4"):
        raise NodemapError(f"NODEMAP_JACOBI_VECTOR={text!r}: give 1, 2 or 4 columns per thread")
    return int(text)


@dataclass
class Slab:
    """One slab on one GPU: the two arrays of a step, streams, events, norm."""

    part: jg.Tile
    device: int
    nx: int  # local row width: the tile's columns and its two halo (or fixed) columns
    dtype: str
    bufs: list[Any]  # [A, B], each (count + 2) x nx
    norm: Any  # one float64
    compute: Any
    edge: Any  # high-priority stream of the overlapped step's boundary rows
    done: list[Any] = field(default_factory=list)  # end-of-step events (compute, edge)
    updated: Any = None  # tiles in one process: this step's stencil done (before neighbours push columns)
    host: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # pinned, per direction: (send, receive)
    packed: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # tiles, NCCL: columns (send, receive)
    comm: Any = None  # NCCL communicator

    @property
    def word(self) -> int:
        return DTYPES[self.dtype][1]

    def row(self, buf: int, r: int) -> int:
        """Device address of local row r of buffer `buf`."""
        return self.bufs[buf].data.ptr + r * self.nx * self.word

    def at(self, buf: int, b: jg.Block) -> int:
        """Device address of block b's first cell in buffer `buf`."""
        return self.row(buf, b.row) + b.col * self.word

    @property
    def pitch(self) -> int:
        return self.nx * self.word


@dataclass
class Slabs:
    """The slabs this process drives, among every process's (`world`: their ranks and NCCL)."""

    cp: Any
    slabs: list[Slab]
    n: int  # slabs in all (every process)
    world: World = field(default_factory=alone)
    block: tuple[int, int] = field(default_factory=lambda: block_shape(os.environ.get("NODEMAP_JACOBI_BLOCK")))
    vector: int | None = field(default_factory=lambda: vector_env(os.environ.get("NODEMAP_JACOBI_VECTOR")))
    graphs: list[Any] = field(default_factory=list)  # captured (capture), released by close

    @cached_property
    def copies(self) -> list[jg.TileCopy]:
        """Every halo copy of one peer exchange: fixed for the run, so worked
        out once, not in the timed steps (8 tiles: ~0.3 ms of host time a step)."""
        return jg.tile_copies([s.part for s in self.slabs])

    @cached_property
    def by_rank(self) -> dict[int, Slab]:
        return {s.part.rank: s for s in self.slabs}

    def wait(self) -> None:
        """Every stream of this process done."""
        for s in self.slabs:
            s.compute.synchronize()
            s.edge.synchronize()


# --- allocation ------------------------------------------------------------------


HIGHEST_PRIORITY = -100  # CUDA clamps a priority outside the device's range to its nearest end


def high_priority_stream(cp: Any) -> Any:
    """The device's highest-priority stream, so boundary rows and their
    exchange are scheduled before the interior's waiting blocks. (CuPy has
    no cudaDeviceGetStreamPriorityRange; CUDA clamps the value.)"""
    try:
        return cp.cuda.Stream(non_blocking=True, priority=HIGHEST_PRIORITY)
    except TypeError:  # CuPy < 13 has no priority argument
        return cp.cuda.Stream(non_blocking=True)


def check_memory(cp: Any, nx: int, parts: list[jg.Slab] | list[jg.Tile], devices: list[int], dtype: str) -> None:
    """Before allocating: every GPU holds its slabs, else one line naming the
    largest square grid that fits."""
    word = DTYPES[dtype][1]
    parts = jg.as_tiles(nx, parts)
    for dev in sorted(set(devices)):
        mine = [p for p, d in zip(parts, devices) if d == dev]
        need = sum(jg.slab_bytes(p.local_cols, p.count, word) for p in mine)
        with cp.cuda.Device(dev):
            free, _ = cp.cuda.runtime.memGetInfo()
        usable = int(free * 0.95)
        if need > usable:
            side = jg.largest_square(usable, word, len(mine))
            raise NodemapError(f"the {dtype} grid needs {format_size(need)} on CUDA device {dev} "
                               f"({len(mine)} slab(s)) but {format_size(usable)} are free: the largest "
                               f"square grid that fits is {side}x{side} (--size {side}x{side})")


def allocate(cp: Any, nx: int, parts: list[jg.Slab] | list[jg.Tile], devices: list[int], dtype: str,
             pinned: bool) -> list[Slab]:
    """Both buffers of every slab or tile (row slabs: a whole cut of NX
    columns; tiles carry their own widths), initialized."""
    name = DTYPES[dtype][0]
    out = []
    for p, dev in zip(jg.as_tiles(nx, parts), devices):
        with cp.cuda.Device(dev):
            bufs = [cp.empty((p.local_rows, p.local_cols), dtype=name) for _ in range(2)]
            s = Slab(p, dev, p.local_cols, dtype, bufs, cp.zeros(1, dtype="float64"),
                     cp.cuda.Stream(non_blocking=True), high_priority_stream(cp))
            s.done = [cp.cuda.Event(disable_timing=True), cp.cuda.Event(disable_timing=True)]
            s.updated = cp.cuda.Event(disable_timing=True)
            if pinned:
                s.host = {d: (_pinned(cp, snd.rows * snd.cols, name), _pinned(cp, rcv.rows * rcv.cols, name))
                          for d, (snd, rcv) in jg.halo_blocks(p).items() if d in jg.directions(p)}
            s.packed = {d: (cp.empty(snd.rows, dtype=name), cp.empty(rcv.rows, dtype=name))
                        for d, (snd, rcv) in jg.halo_blocks(p).items() if d in jg.directions(p) and snd.rows > 1}
            out.append(s)
    initialize(cp, out)
    return out


def initialize(cp: Any, slabs: list[Slab]) -> None:
    """The initial field in both buffers; halos poisoned (NaN): only an
    exchange writes them, so a halo never written shows up in the result."""
    for s in slabs:
        with cp.cuda.Device(s.device):
            for b in s.bufs:
                fill_tile(cp, s, b)
            cp.cuda.Device().synchronize()


def fill_tile(cp: Any, s: Slab, b: Any) -> None:
    """One buffer's initial field. Whole rows (one column band): the
    kernel's init. A tile of --decomp 2d: NumPy's field of its columns,
    copied up (the kernel knows no column offset); its column halos
    poisoned too, and the halo rows' corners beyond its own columns zeroed
    (no step reads them and no exchange writes them)."""
    t = s.part
    b[0].fill(cp.nan)
    b[-1].fill(cp.nan)
    if t.px == 1:
        init = _function(cp, s.device, f"init_{DTYPES[s.dtype][2]}")
        init((1024,), (256,), (b, cp.int64(s.nx), cp.int32(t.local_rows), cp.int64(t.start)))
        return
    from . import jacobi_host as jh

    b[1:-1] = cp.asarray(jh.initial(t.nx, range(t.start, t.stop), DTYPES[s.dtype][0], range(*t.global_cols)))
    lo, hi = t.cols
    for col in {0, t.local_cols - 1} - set(range(lo, hi)):
        b[:, col] = cp.nan
        b[0, col] = b[-1, col] = 0


def _pinned(cp: Any, cells: int, name: str) -> Any:
    import numpy as np

    mem = cp.cuda.alloc_pinned_memory(cells * np.dtype(name).itemsize)
    return np.frombuffer(mem, dtype=name, count=cells)


# --- kernels ---------------------------------------------------------------------


def stencil(w: Slabs, s: Slab, buf: int, lo: int, hi: int, stream: Any, with_norm: bool) -> None:
    """Update local rows [lo, hi) of buffer `buf` into the other buffer."""
    if hi <= lo:
        return
    cp = w.cp
    v = vector_width(s.dtype, s.nx, w.vector)
    fn = _function(cp, s.device, f"jacobi_{DTYPES[s.dtype][2]}" + (f"_v{v}" if v > 1 else ""))
    block, rows = w.block
    cols = s.nx - 2 if v == 1 else s.nx  # the scalar kernel skips the fixed columns; vectors hold them
    grid = (-(-cols // (block * v)), -(-(hi - lo) // rows))
    fn(grid, (block,), (s.bufs[1 - buf], s.bufs[buf], s.norm, cp.int64(s.nx), cp.int32(lo), cp.int32(hi),
                        cp.int32(rows), cp.int32(int(with_norm))), stream=stream)


def stencil_box(w: Slabs, s: Slab, buf: int, rows: tuple[int, int], cols: tuple[int, int], stream: Any,
                with_norm: bool) -> None:
    """Update local rows [rows) x columns [cols) of buffer `buf` into the
    other buffer (the scalar box kernel: writes no cell outside the box)."""
    (lo, hi), (clo, chi) = rows, cols
    if hi <= lo or chi <= clo:
        return
    cp = w.cp
    fn = _function(cp, s.device, f"jacobi_box_{DTYPES[s.dtype][2]}")
    block, per = w.block
    threads = min(block, -(-(chi - clo) // 32) * 32)  # a one-column strip: one warp a block, not 16
    grid = (-(-(chi - clo) // threads), -(-(hi - lo) // per))
    fn(grid, (threads,), (s.bufs[1 - buf], s.bufs[buf], s.norm, cp.int64(s.nx), cp.int32(lo), cp.int32(hi),
                          cp.int64(clo), cp.int64(chi), cp.int32(per), cp.int32(int(with_norm))), stream=stream)


_FUNCTIONS: dict[tuple[int, str], Any] = {}


def _function(cp: Any, device: int, name: str) -> Any:
    """A kernel of jacobi.cu, looked up once per device (not per launch)."""
    fn = _FUNCTIONS.get((device, name))
    if fn is None:
        from ..gpu.common import kernel

        fn = _FUNCTIONS[(device, name)] = kernel(cp, "jacobi.cu", name)
    return fn


# --- exchanges: after the update, buffer `buf` (the one just written) ------------


def lost(fault: bool, t: jg.Tile, d: str) -> bool:
    """--inject-halo-fault (tests: the run must fail): the halo that travels
    `d` into tile `t` never arrives when t is tile 0 and d is down (row
    slabs: its top halo row) or left (tiles: its right halo column)."""
    return fault and t.rank == 0 and d == ("left" if t.px > 1 else "down")


def exchange_peer(w: Slabs, buf: int, edge: bool, fault: bool = False) -> None:
    """Push each slab's first and last row (and, for tiles, first and last
    column) into its neighbours' halos on the sender's stream (one process,
    every slab): cudaMemcpyAsync with cudaMemcpyDefault, rows contiguous,
    columns strided (2D); unified addressing names both GPUs, and peer
    access is on (allocate). Not cudaMemcpyPeerAsync: a CUDA graph cannot
    capture it (bench/gpu/graphs.py), and the copy is the same."""
    rt = w.cp.cuda.runtime
    by_rank = w.by_rank
    for c in w.copies:
        if fault and c.src == 0 and c.direction == "down":
            continue  # the injected fault: one halo never arrives
        src, dst = by_rank[c.src], by_rank[c.dst]
        with w.cp.cuda.Device(src.device):
            copy_block(rt, dst.at(buf, c.dst_block), dst.pitch, src.at(buf, c.src_block), src.pitch,
                       c.src_block, src.word, MEMCPY_DEFAULT, src.edge if edge else src.compute)


MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: the direction from the (unified) addresses


def copy_block(rt: Any, dst: int, dst_pitch: int, src: int, src_pitch: int, b: jg.Block, word: int, kind: int,
               stream: Any) -> None:
    """Copy a block of b.rows x b.cols cells between pitched arrays (a packed
    host buffer's pitch is b.cols words): one row contiguously, else 2D."""
    if b.rows == 1:
        rt.memcpyAsync(dst, src, b.cols * word, kind, stream.ptr)
    else:
        rt.memcpy2DAsync(dst, dst_pitch, src, src_pitch, b.cols * word, b.rows, kind, stream.ptr)


def exchange_nccl(w: Slabs, buf: int, edge: bool, fault: bool = False) -> None:
    """Grouped ncclSend/ncclRecv per direction (up, down, left, right; none
    across the fixed columns), the same order on every rank, so that two
    messages to one peer (two slabs, one sending to itself, or the up and
    down neighbour being one tile) match. NCCL moves contiguous buffers:
    rows go as they are, tiles' columns are packed into a device buffer
    before the group and unpacked after it, on the same stream (no host wait)."""
    nc = w.world.nccl
    dt = nc.NCCL_FLOAT32 if w.slabs[0].dtype == "fp32" else nc.NCCL_FLOAT64
    pack_columns(w, buf, edge, back=False)
    nc.groupStart()
    try:
        for s in w.slabs:
            st, nb, blocks = (s.edge if edge else s.compute).ptr, jg.tile_neighbours(s.part), jg.halo_blocks(s.part)
            for d in jg.directions(s.part):
                snd, rcv = blocks[d]
                if nb[d] is not None:
                    s.comm.send(s.packed[d][0].data.ptr if d in s.packed else s.at(buf, snd), snd.rows * snd.cols,
                                dt, nb[d], st)
                src = nb[jg.OPPOSITE[d]]
                if src is not None:
                    into = rcv if not lost(fault, s.part, d) else blocks[jg.OPPOSITE[d]][1]  # fault: a wrong halo
                    s.comm.recv(s.packed[d][1].data.ptr if d in s.packed else s.at(buf, into), rcv.rows * rcv.cols,
                                dt, src, st)
    finally:
        nc.groupEnd()
    pack_columns(w, buf, edge, back=True, fault=fault)


def pack_columns(w: Slabs, buf: int, edge: bool, back: bool, fault: bool = False) -> None:
    """Tiles' halo columns for a transport of contiguous device buffers
    (NCCL, CUDA-aware MPI), on the exchange's stream: the edge columns
    packed into the send buffers (before the NCCL group, which enqueues its
    work at groupEnd) or, `back`, the receive buffers unpacked into the halo
    columns (after it)."""
    rt = w.cp.cuda.runtime
    for s in w.slabs:
        if not s.packed:
            continue  # row slabs: no host work added to their step
        nb, st = jg.tile_neighbours(s.part), s.edge if edge else s.compute
        with w.cp.cuda.Device(s.device):
            for d, (snd, rcv) in ((d, jg.halo_blocks(s.part)[d]) for d in s.packed):
                if not back and nb[d] is not None:
                    copy_block(rt, s.packed[d][0].data.ptr, s.word, s.at(buf, snd), s.pitch, snd, s.word,
                               MEMCPY_DEFAULT, st)
                elif back and nb[jg.OPPOSITE[d]] is not None and not lost(fault, s.part, d):
                    copy_block(rt, s.at(buf, rcv), s.pitch, s.packed[d][1].data.ptr, s.word, rcv, s.word,
                               MEMCPY_DEFAULT, st)


def exchange_mpi_staged(w: Slabs, buf: int, edge: bool, fault: bool = False) -> None:
    """Halo rows (and tiles' columns, strided) to pinned host memory,
    MPI_Sendrecv per direction (up, down, left, right; none across the fixed
    columns), back into the halos."""
    from mpi4py import MPI

    rt, s = w.cp.cuda.runtime, w.slabs[0]
    st = s.edge if edge else s.compute
    nb = jg.tile_neighbours(s.part)
    blocks = jg.halo_blocks(s.part)
    moving = jg.directions(s.part)
    for d in moving:
        if nb[d] is not None:
            copy_block(rt, s.host[d][0].ctypes.data, blocks[d][0].cols * s.word, s.at(buf, blocks[d][0]), s.pitch,
                       blocks[d][0], s.word,
                       rt.memcpyDeviceToHost, st)
    st.synchronize()
    for tag, d in enumerate(moving, 1):
        src = nb[jg.OPPOSITE[d]]
        w.world.comm.Sendrecv(s.host[d][0], dest=MPI.PROC_NULL if nb[d] is None else nb[d], sendtag=tag,
                       recvbuf=s.host[d][1], source=MPI.PROC_NULL if src is None else src, recvtag=tag)
    for d in moving:
        if nb[jg.OPPOSITE[d]] is not None and not lost(fault, s.part, d):
            copy_block(rt, s.at(buf, blocks[d][1]), s.pitch, s.host[d][1].ctypes.data, blocks[d][1].cols * s.word,
                       blocks[d][1], s.word,
                       rt.memcpyHostToDevice, st)


def exchange_mpi_aware(w: Slabs, buf: int, edge: bool, fault: bool = False) -> None:
    """Device rows (tiles: and packed columns) straight to a CUDA-aware MPI
    (only after it was proven), MPI_Sendrecv per direction as mpi-staged."""
    from mpi4py import MPI

    s = w.slabs[0]
    pack_columns(w, buf, edge, back=False)
    (s.edge if edge else s.compute).synchronize()
    nb, blocks = jg.tile_neighbours(s.part), jg.halo_blocks(s.part)
    for tag, d in enumerate(jg.directions(s.part), 1):
        (snd, rcv), src = blocks[d], nb[jg.OPPOSITE[d]]
        into = rcv if not lost(fault, s.part, d) else blocks[jg.OPPOSITE[d]][1]  # fault: a wrong halo
        w.world.comm.Sendrecv(s.packed[d][0] if d in s.packed else _cells(s, buf, snd),
                       dest=MPI.PROC_NULL if nb[d] is None else nb[d], sendtag=tag,
                       recvbuf=s.packed[d][1] if d in s.packed else _cells(s, buf, into),
                       source=MPI.PROC_NULL if src is None else src, recvtag=tag)
    pack_columns(w, buf, edge, back=True, fault=fault)


def _cells(s: Slab, buf: int, b: jg.Block) -> Any:
    """A one-row block of buffer `buf` as an array (contiguous: MPI takes it as it is)."""
    return s.bufs[buf][b.row, b.col:b.col + b.cols]


def exchange_none(w: Slabs, buf: int, edge: bool, fault: bool = False) -> None:
    """The compute-only reference step: no halo moves."""


EXCHANGES: dict[str, Callable[..., None]] = {
    "peer": exchange_peer, "nccl": exchange_nccl, "mpi-staged": exchange_mpi_staged,
    "mpi-aware": exchange_mpi_aware, "none": exchange_none}


# --- steps -----------------------------------------------------------------------


def step(w: Slabs, transport: str, buf: int, with_norm: bool, fault: bool = False) -> None:
    """Read `buf`, write the other buffer, exchange its halos."""
    for s in w.slabs:
        with w.cp.cuda.Device(s.device):
            stencil(w, s, buf, 1, s.part.count + 1, s.compute, with_norm)
    if transport == "peer":
        order_column_pushes(w)
    EXCHANGES[transport](w, 1 - buf, False, fault)
    fence(w, overlap=False, pushed=transport == "peer")


def order_column_pushes(w: Slabs) -> None:
    """Tiles side by side in one process, peer copies: a tile pushes its edge column into
    its neighbour's halo column only after the neighbour's stencil of this
    step, which writes the same buffer and may store its edge columns too
    (a kernel that keeps "fixed" columns by rewriting them). Row slabs need
    nothing: no kernel writes a halo row."""
    if len(w.slabs) < 2 or w.slabs[0].part.px == 1:
        return
    for s in w.slabs:
        with w.cp.cuda.Device(s.device):
            s.updated.record(s.compute)
    by_rank = w.by_rank
    for s in w.slabs:
        nb = jg.tile_neighbours(s.part)
        with w.cp.cuda.Device(s.device):
            for r in (nb["left"], nb["right"]):
                if r in by_rank:
                    s.compute.wait_event(by_rank[r].updated)


def step_overlap(w: Slabs, transport: str, buf: int, with_norm: bool, fault: bool = False) -> None:
    """First and last rows (tiles: and columns) on the edge stream, then
    their exchange there, while the interior runs on the compute stream."""
    for s in w.slabs:
        cnt = s.part.count
        with w.cp.cuda.Device(s.device):
            if s.part.px > 1:
                tile_overlap(w, s, buf, with_norm)
                continue
            stencil(w, s, buf, 1, 2, s.edge, with_norm)
            stencil(w, s, buf, cnt, cnt + 1, s.edge, with_norm)
            stencil(w, s, buf, 2, cnt, s.compute, with_norm)
    EXCHANGES[transport](w, 1 - buf, True, fault)
    fence(w, overlap=True, pushed=transport == "peer")


def tile_overlap(w: Slabs, s: Slab, buf: int, with_norm: bool) -> None:
    """A tile's overlapped update in boxes that write no halo column (the
    row kernel rewrites its edge columns, which a neighbour pushes into
    meanwhile): the first and last rows and the first and last own columns
    between them on the edge stream, the rest on the compute stream. Every
    own cell once (two columns at least: jg.check_tiles with overlap)."""
    cnt, xc = s.part.count, s.part.xcount
    for rows, cols in (((1, 2), (1, xc + 1)), ((cnt, cnt + 1), (1, xc + 1)), ((2, cnt), (1, 2)),
                       ((2, cnt), (xc, xc + 1))):
        stencil_box(w, s, buf, rows, cols, s.edge, with_norm)
    stencil_box(w, s, buf, (2, cnt), (2, xc), s.compute, with_norm)


def fence(w: Slabs, overlap: bool, pushed: bool = True) -> None:
    """The next step starts after this one's work on its own slab and, where
    neighbours push into each other's buffers (peer copies in one process),
    on the neighbouring slabs (whose pushes wrote its halos and which still
    read the buffer it writes next). A transport that receives on the
    receiver's own stream (NCCL, MPI) orders the slabs itself: each slab
    waits only for its own two streams, so each GPU's steps can be captured
    in a graph of their own (capture)."""
    if len(w.slabs) == 1 and not overlap:
        return  # one stream: stream order is enough
    for s in w.slabs:
        with w.cp.cuda.Device(s.device):
            s.done[0].record(s.compute)
            s.done[1].record(s.edge)
    by_rank = w.by_rank
    for s in w.slabs:
        near = ({s.part.rank, *jg.tile_neighbours(s.part).values()} if pushed else {s.part.rank}) & set(by_rank)
        with w.cp.cuda.Device(s.device):
            for r in near:
                for e in by_rank[r].done:
                    s.compute.wait_event(e)
                    s.edge.wait_event(e)


def prime(w: Slabs, transport: str, fault: bool = False) -> None:
    """Fill buffer 0's poisoned halos through the transport itself before
    the first step reads them (the reference's warm-up exchange)."""
    EXCHANGES[transport](w, 0, False, fault)
    fence(w, overlap=True)
    w.wait()


def run_steps(w: Slabs, transport: str, overlap: bool, iters: int, fault: bool = False) -> None:
    """`iters` steps from buffer 0 (an even count ends in buffer 0 again);
    the last one sums the residual."""
    reset_norms(w)
    body = step_overlap if overlap else step
    for i in range(iters):
        body(w, transport, i % 2, i == iters - 1, fault)


# --- CUDA graphs ---------------------------------------------------------------------


def capture(w: Slabs, transport: str, overlap: bool, with_norm: bool, fault: bool = False) -> Any:
    """Two steps (A->B, B->A) captured in CUDA graphs (bench/gpu/graphs.py),
    so a step costs the host one launch per graph, not one per kernel and
    copy (which made one process driving 4 GPUs host-bound). Peer copies in
    one process: one graph over every GPU (a slab's copies write its
    neighbours' halos, so the slabs' streams depend on each other). Other
    transports: one graph per slab (NCCL's rule for one thread and several
    GPUs; under MPI the one slab's)."""
    from ..gpu import graphs

    body = step_overlap if overlap else step
    lanes = [[(s.device, s.compute), (s.device, s.edge)] for s in w.slabs]
    groups = [[lane for group in lanes for lane in group]] if transport == "peer" else lanes
    g = graphs.capture(w.cp, groups, lambda: (body(w, transport, 0, False, fault),
                                              body(w, transport, 1, with_norm, fault)))
    w.graphs.append(g)
    return g


def run_graph(w: Slabs, graphs: tuple[Any, Any], iters: int) -> None:
    """`iters` steps as iters/2 launches of the two-step graphs, the last
    one summing the residual."""
    plain, last = graphs
    reset_norms(w)
    for _ in range(iters // 2 - 1):
        plain.launch()
    last.launch()


def reset_norms(w: Slabs) -> None:
    """Zero the residual sums before a run (outside the timed steps' hot
    path: one memset and wait per run, not per step)."""
    rt = w.cp.cuda.runtime
    for s in w.slabs:
        with w.cp.cuda.Device(s.device):
            rt.memsetAsync(s.norm.data.ptr, 0, 8, s.compute.ptr)
            s.compute.synchronize()


# --- results of a run -------------------------------------------------------------


def norm(w: Slabs) -> float:
    """The global residual norm of the last step (every process gets it)."""
    import math

    w.wait()
    local = 0.0
    for s in w.slabs:
        with w.cp.cuda.Device(s.device):
            local += float(s.norm.get()[0])
    return math.sqrt(w.world.sum_all(local))


def row_sums(w: Slabs, buf: int) -> Any:
    """float64 sums of every interior row, global order, on the root (None elsewhere)."""
    import numpy as np

    w.wait()
    mine = []
    for s in w.slabs:
        lo, hi = s.part.cols
        with w.cp.cuda.Device(s.device):
            a = s.bufs[buf][1:s.part.count + 1, lo:hi]
            mine.append((s.part.start, w.cp.asnumpy(a.sum(axis=1, dtype="float64"))))
    if w.world.comm is not None:
        got = w.world.comm.gather(mine, root=0)
        if not w.world.is_root():
            return None
        mine = [x for part in got for x in part]
    bands: dict[int, Any] = {}
    for start, sums in mine:  # the tiles of one row band, left to right
        bands[start] = bands[start] + sums if start in bands else sums
    return np.concatenate([bands[k] for k in sorted(bands)])


def has_nan(w: Slabs, buf: int) -> bool:
    bad = 0
    for s in w.slabs:
        with w.cp.cuda.Device(s.device):
            bad += int(w.cp.isnan(s.bufs[buf]).any())
    return bool(w.world.max_all(float(bad)))


def close(w: Slabs) -> None:
    """Graphs and buffers freed; the NCCL communicators are the World's, kept for every dtype."""
    for g in w.graphs:
        g.close()
    w.graphs = []
    for s in w.slabs:
        s.comm = None
        s.bufs = []
    w.cp.get_default_memory_pool().free_all_blocks()
    w.cp.get_default_pinned_memory_pool().free_all_blocks()
