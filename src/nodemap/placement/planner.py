"""Access-analysis placement of data larger than one GPU (pure, numpy).

The method of Jaros, Riha, Strakos and Spetko (ACM TOG 2021): cut every
allocation into chunks, sort chunks by their total access count, replicate
the hottest on every GPU while it fits, give every other accessed chunk to
the GPU that reads it most (the next one when full), and deal the
never-accessed chunks round-robin over GPUs with room.

The greedy is sequential by definition (each decision uses the room left by
the ones before). It runs here in vectorized blocks: every chunk takes its
first choice, and only where a GPU would overflow does the loop stop, retire
that GPU (or place one odd-sized chunk by hand) and go on. A GPU retires at
most once, so 1M chunks x 8 GPUs take well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import NodemapError
from ..outfile import json_text
from ..units import MiB, gib, parse_size
from .planfile import SCHEMA, PlanMeta, Summary

PLAN_SCHEMA = SCHEMA  # (its old name)

REPLICATED = -1
HOST = -2


@dataclass(frozen=True)
class Layout:
    """Allocations cut into chunks; the last chunk of each may be partial."""

    alloc_sizes: tuple[int, ...]
    chunk_size: int = 2 * MiB

    def __post_init__(self) -> None:
        if self.chunk_size <= 0:
            raise NodemapError(f"chunk size must be positive, got {self.chunk_size}")
        if any(s <= 0 for s in self.alloc_sizes):
            raise NodemapError("every allocation must have a positive size")

    @property
    def chunks_per_alloc(self) -> np.ndarray:
        s = np.asarray(self.alloc_sizes, dtype=np.int64)
        return (s + self.chunk_size - 1) // self.chunk_size

    @property
    def n_chunks(self) -> int:
        return int(self.chunks_per_alloc.sum())

    def chunk_sizes(self) -> np.ndarray:
        n = self.chunks_per_alloc
        sizes = np.full(int(n.sum()), self.chunk_size, dtype=np.int64)
        last = np.cumsum(n) - 1
        sizes[last] = np.asarray(self.alloc_sizes, dtype=np.int64) - (n - 1) * self.chunk_size
        return sizes

    def chunk_alloc(self) -> np.ndarray:
        """Allocation index of every chunk."""
        return np.repeat(np.arange(len(self.alloc_sizes)), self.chunks_per_alloc)

    def chunk_offsets(self) -> np.ndarray:
        """Byte offset of every chunk inside its allocation."""
        n = self.chunks_per_alloc
        starts = np.cumsum(n) - n
        return (np.arange(int(n.sum())) - np.repeat(starts, n)) * self.chunk_size


@dataclass(frozen=True)
class Replication:
    """How much to replicate: 'auto' (the most that fits), a fraction of the
    whole data, or a byte count (never more than fits)."""

    mode: str = "auto"  # "auto" | "fraction" | "bytes"
    value: float = 0.0

    @classmethod
    def parse(cls, text: str, option: str = "--replicate") -> "Replication":
        t = text.strip().lower()
        if t == "auto":
            return cls("auto")
        if t.endswith("%"):
            try:
                f = float(t[:-1]) / 100
            except ValueError:
                f = -1.0
            if not 0 <= f <= 1:  # also refuses nan
                raise NodemapError(f"{option} {text!r}: a percentage must be within 0-100%")
            return cls("fraction", f)
        try:
            return cls("bytes", float(parse_size(t, option)))
        except NodemapError:
            raise NodemapError(f"{option} {text!r}: use auto, a percentage (5%) or a size (4GiB)") from None


@dataclass
class PlacementPlan:
    layout: Layout
    budgets: np.ndarray  # bytes per GPU
    decision: np.ndarray  # per chunk: GPU index, REPLICATED or HOST
    counts_total: np.ndarray  # per chunk total accesses (for reports)
    local_fraction: float  # predicted share of accesses served from the reading GPU
    local_fraction_per_gpu: np.ndarray
    notes: list[str] = field(default_factory=list)

    @property
    def n_gpus(self) -> int:
        return len(self.budgets)

    def replicated_bytes(self) -> int:
        return int(self.layout.chunk_sizes()[self.decision == REPLICATED].sum())

    def host_bytes(self) -> int:
        return int(self.layout.chunk_sizes()[self.decision == HOST].sum())

    def bytes_per_gpu(self) -> np.ndarray:
        sizes = self.layout.chunk_sizes()
        owned = np.bincount(self.decision[self.decision >= 0], weights=sizes[self.decision >= 0], minlength=self.n_gpus)
        return owned.astype(np.int64) + self.replicated_bytes()

    def ranges(self) -> list[tuple[int, int, int, int]]:
        """(allocation, byte offset, byte length, decision) with adjacent chunks
        of the same decision merged: what the applier advises and prefetches."""
        alloc = self.layout.chunk_alloc()
        sizes = self.layout.chunk_sizes()
        offs = self.layout.chunk_offsets()
        d = self.decision
        brk = np.flatnonzero((np.diff(d) != 0) | (np.diff(alloc) != 0)) + 1
        starts = np.concatenate(([0], brk)) if len(d) else np.array([], dtype=np.int64)
        ends = np.concatenate((brk, [len(d)])) if len(d) else starts
        csum = np.concatenate(([0], np.cumsum(sizes)))
        return [
            (int(alloc[s]), int(offs[s]), int(csum[e] - csum[s]), int(d[s]))
            for s, e in zip(starts, ends)
        ]

    def summary(self) -> Summary:
        return Summary(**self._summary())

    def _summary(self) -> dict:
        return dict(
            chunks=int(len(self.decision)),
            chunk_size=self.layout.chunk_size,
            total_bytes=int(sum(self.layout.alloc_sizes)),
            gpus=self.n_gpus,
            budgets=[int(b) for b in self.budgets],
            bytes_per_gpu=[int(b) for b in self.bytes_per_gpu()],
            replicated_bytes=self.replicated_bytes(),
            replicated_chunks=int((self.decision == REPLICATED).sum()),
            host_bytes=self.host_bytes(),
            owned_chunks_per_gpu=[int((self.decision == g).sum()) for g in range(self.n_gpus)],
            predicted_local_fraction=self.local_fraction,
            predicted_local_fraction_per_gpu=[float(x) for x in self.local_fraction_per_gpu],
            notes=list(self.notes),
        )

    # --- files ----------------------------------------------------------------
    def save(self, path: str | Path, option: str = "--output") -> None:
        meta = PlanMeta(**self._summary(), schema=PLAN_SCHEMA, alloc_sizes=list(self.layout.alloc_sizes))
        _atomic_npz(
            path,
            option,
            decision=self.decision.astype(np.int32),
            budgets=self.budgets.astype(np.int64),
            counts_total=self.counts_total.astype(np.int64),
            local_per_gpu=np.asarray(self.local_fraction_per_gpu, dtype=np.float64),
            meta=np.frombuffer(json_text(meta, indent=None).encode(), dtype=np.uint8),
        )

    @classmethod
    def load(cls, path: str | Path) -> "PlacementPlan":
        with _open_npz(path, ("decision", "budgets", "meta")) as z:
            meta = _meta(path, z.array("meta", "u", 1))
            try:
                layout = Layout(tuple(meta.alloc_sizes), meta.chunk_size)
            except (TypeError, ValueError, OverflowError) as e:
                raise NodemapError(f"{path}: the plan's description is damaged ({type(e).__name__}: "
                                   f"{str(e)[:100]}): plan again with nodemap place plan -o") from None
            dec = z.array("decision", "iu", 1).astype(np.int64)
            if len(dec) != layout.n_chunks:
                raise NodemapError(f"{path}: {len(dec)} decisions for {layout.n_chunks} chunks")
            return cls(
                layout=layout,
                budgets=z.array("budgets", "iu", 1),
                decision=dec,
                counts_total=z.array("counts_total", "iu", 1),
                local_fraction=meta.predicted_local_fraction,
                local_fraction_per_gpu=z.array("local_per_gpu", "f", 1),
                notes=list(meta.notes),
            )


def _meta(path, raw: np.ndarray):
    """The plan's description (placement/planfile.py: typed, each field checked)."""
    from .planfile import decode

    return decode(str(path), bytes(raw))


def plan_placement(
    layout: Layout,
    counts: np.ndarray,
    budgets,
    replication: Replication = Replication("auto"),
    spill_to_host: bool = False,
) -> PlacementPlan:
    """Decide, for every chunk, replicated / owner GPU / host."""
    counts = np.asarray(counts)
    budgets = np.asarray(budgets, dtype=np.int64)
    n, g = layout.n_chunks, len(budgets)
    if counts.shape != (n, g):
        raise NodemapError(f"access counts have shape {counts.shape}, the layout needs ({n}, {g}): chunks x GPUs")
    if g == 0:
        raise NodemapError("no GPU budgets given")
    if (counts < 0).any():
        raise NodemapError("access counts must be non-negative")
    sizes = layout.chunk_sizes()
    total = counts.sum(axis=1, dtype=np.int64)
    order = np.argsort(-total, kind="stable")  # ties: allocation then chunk order
    accessed = order[total[order] > 0]
    never = order[total[order] == 0]

    decision = np.full(n, HOST, dtype=np.int64)
    k = _replicated_count(sizes, accessed, budgets, replication, spill_to_host, sizes.sum())
    rep = accessed[:k]
    decision[rep] = REPLICATED
    room = budgets - sizes[rep].sum()
    notes: list[str] = []

    # owned: the most-accessing GPU with room (counts ties -> lower GPU index)
    owned = accessed[k:]
    c_owned = counts[owned]  # gathered once: the blocks below slice it

    def most_accessing(lo: int, alive: np.ndarray) -> np.ndarray:
        block = c_owned[lo:]
        return block.argmax(axis=1) if alive.all() else np.where(alive, block, -1).argmax(axis=1)

    _assign(owned, sizes, room, decision, most_accessing, lambda i, alive: _pref_order(c_owned[i], alive))
    # never accessed: round-robin over GPUs with room
    rr = _RoundRobin(g, len(never))
    _assign(never, sizes, room, decision, rr.choices, rr.order)

    left = decision == HOST
    if left.any() and not spill_to_host:
        missing = int(sizes[left].sum())
        raise NodemapError(
            f"the data does not fit: {gib(missing)} GiB more than the GPU budgets hold "
            f"({gib(int(budgets.sum()))} GiB over {g} GPUs, {gib(int(sizes[decision == REPLICATED].sum()))} GiB replicated); "
            "lower the replication, add GPUs or raise the budgets, or allow --spill to host memory"
        )
    if left.any():
        notes.append(f"{gib(int(sizes[left].sum()))} GiB spilled to host memory")
    frac, per_gpu = _local_fraction(counts, decision)
    return PlacementPlan(layout, budgets, decision, total, frac, per_gpu, notes)


# --- internals --------------------------------------------------------------------


def _replicated_count(sizes, accessed, budgets, rep: Replication, spill: bool, total_bytes: int) -> int:
    """How many of the hottest accessed chunks to replicate.

    Fits means: every GPU holds the replicated set, and (unless spilling) the
    rest of the data fits in what the GPUs have left together.
    """
    if len(accessed) == 0 or rep.mode != "auto" and rep.value <= 0:
        return 0
    cum = np.cumsum(sizes[accessed])  # replicated bytes after taking k+1 chunks
    ok = cum <= budgets.min()
    if not spill:
        # room left per GPU counts in whole chunks: a GPU's last partial
        # chunk of room holds nothing
        cs = int(sizes.max())
        left = np.zeros(len(cum), dtype=np.int64)
        for b in budgets:
            left += np.maximum(b - cum, 0) // cs * cs
        ok &= left >= (total_bytes - cum)
    # both conditions only get harder as k grows: the fitting prefix is contiguous
    fit = int(np.argmin(ok)) if not ok.all() else len(ok)
    if rep.mode == "auto":
        return fit
    # a fraction is of the whole data, as the paper states replication (1-5%)
    target = rep.value * (total_bytes if rep.mode == "fraction" else 1.0)
    want = int(np.searchsorted(cum, target, side="right"))
    return min(want, fit)


def _pref_order(row_counts: np.ndarray, alive: np.ndarray) -> list[int]:
    order = np.argsort(-row_counts, kind="stable")
    return [int(x) for x in order if alive[x]]


class _RoundRobin:
    """Deals chunks over GPUs in turn, skipping GPUs that are full."""

    def __init__(self, g: int, n: int) -> None:
        self.g = g
        self.n = n
        self.next = 0

    def choices(self, lo: int, alive: np.ndarray) -> np.ndarray:
        live = np.flatnonzero(alive)
        start = int(np.searchsorted(live, self.next % self.g)) % len(live)
        return live[(start + np.arange(self.n - lo)) % len(live)]

    def order(self, i: int, alive: np.ndarray) -> list[int]:
        return [(self.next + i) % self.g for i in range(self.g) if alive[(self.next + i) % self.g]]

    def advance(self, gpu: int) -> None:
        self.next = gpu + 1


def _assign(chunks, sizes, room, decision, choose, fallback_order) -> None:
    """Sequential greedy placement of `chunks` (in order), run in blocks.

    choose(lo, alive) -> GPU for each of chunks[lo:] assuming none overflows;
    fallback_order(i, alive) -> GPUs to try, in order, for chunks[i] alone.
    """
    alive = room > 0
    pos = 0
    min_size = sizes[chunks].min() if len(chunks) else 0
    rr = getattr(choose, "__self__", None)
    while pos < len(chunks) and alive.any():
        sub = chunks[pos:]
        ch = choose(pos, alive)
        sz = sizes[sub]
        cum = np.empty(len(sub), dtype=np.int64)  # running bytes on each chunk's GPU
        for k in np.flatnonzero(alive):
            m = ch == k
            cum[m] = np.cumsum(sz[m])
        over = np.flatnonzero(cum > room[ch])
        stop = int(over[0]) if len(over) else len(sub)
        decision[sub[:stop]] = ch[:stop]
        room -= np.bincount(ch[:stop], weights=sz[:stop], minlength=len(room)).astype(np.int64)
        if rr is not None and stop:
            rr.advance(int(ch[stop - 1]))
        pos += stop
        if stop == len(sub):
            return
        c, gpu = sub[stop], int(ch[stop])
        if room[gpu] < min_size:
            alive[gpu] = False  # full for good: re-choose the rest without it
            continue
        for alt in fallback_order(pos, alive):  # an odd-sized chunk: place it alone
            if sizes[c] <= room[alt]:
                decision[c] = alt
                room[alt] -= sizes[c]
                if rr is not None:
                    rr.advance(alt)
                break
        pos += 1
        alive &= room >= min_size


def _local_fraction(counts: np.ndarray, decision: np.ndarray) -> tuple[float, np.ndarray]:
    g = counts.shape[1]
    per_gpu_total = counts.sum(axis=0, dtype=np.float64)
    own = np.flatnonzero(decision >= 0)
    local = np.bincount(decision[own], weights=counts[own, decision[own]], minlength=g).astype(np.float64)
    local += counts[decision == REPLICATED].sum(axis=0, dtype=np.float64)
    per = np.divide(local, per_gpu_total, out=np.ones(g), where=per_gpu_total > 0)
    tot = per_gpu_total.sum()
    return (float(local.sum() / tot) if tot else 1.0), per


def _atomic_npz(path, option: str = "--output", **arrays) -> None:
    from ..outfile import write

    write(str(path), lambda f: np.savez_compressed(f, **arrays), option)


_KINDS = {"iu": "integers", "u": "bytes", "f": "floats"}


class _open_npz:
    """An .npz of named arrays, read with every array checked: hostile or
    damaged files (pickled object arrays, wrong shapes, a zip in name only)
    end in one line naming the file, not a traceback."""

    def __init__(self, path, required) -> None:
        self.path, self.required = path, required

    def __enter__(self) -> "_open_npz":
        import zipfile

        try:
            self.z = np.load(self.path, allow_pickle=False)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise NodemapError(f"{self.path}: cannot read ({e})") from None
        if not hasattr(self.z, "files"):
            raise NodemapError(f"{self.path}: a single .npy array, not an .npz archive of named arrays")
        try:
            _check_declared_sizes(self.path, self.z)
        except BaseException:
            self.z.close()
            raise
        missing = [k for k in self.required if k not in self.z.files]
        if missing:
            self.z.close()
            raise NodemapError(f"{self.path}: missing arrays {missing}")
        return self

    def __exit__(self, *exc) -> None:
        self.z.close()

    @property
    def files(self) -> list[str]:
        return self.z.files

    def array(self, name: str, kinds: str, ndim: int) -> np.ndarray:
        """Array `name`, refused unless its dtype kind is in `kinds` and it
        has `ndim` dimensions (checked before any conversion)."""
        import zipfile

        try:
            a = self.z[name]
        except KeyError:
            raise NodemapError(f"{self.path}: missing array {name!r}") from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # pickled objects, a damaged member
            raise NodemapError(f"{self.path}: cannot read array {name!r} ({str(e)[:200]}): "
                               "write the file again with nodemap") from None
        if a.dtype.kind not in kinds or a.ndim != ndim:
            raise NodemapError(f"{self.path}: array {name!r} holds {a.dtype} of shape {a.shape}; nodemap writes "
                               f"{_KINDS[kinds]} of {ndim} dimension{'s' if ndim != 1 else ''} there: "
                               "write the file again with nodemap")
        return a


# Arrays of one .npz: 1 GiB of int64 counts is 16M chunks on 8 GPUs, 32 TB
# of data in 2 MiB chunks; the planner needs a few times the counts.
MAX_NPZ_BYTES = 1 << 30


def _check_declared_sizes(path, z) -> None:
    """Refuse an .npz whose arrays would not fit before loading them: a
    2 MB file of zeros can declare 2 GiB. The sizes come from each .npy
    header (shape x item size); the limit is MAX_NPZ_BYTES, half of the
    memory available now, and half of this process's address-space limit."""
    import zipfile

    declared = 0
    for info in z.zip.infolist():
        if not info.filename.endswith(".npy"):
            continue
        try:
            with z.zip.open(info) as f:
                version = np.lib.format.read_magic(f)
                shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0(f))
        except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
            raise NodemapError(f"{path}: cannot read array {info.filename[:60]!r} ({str(e)[:200]})") from None
        declared += int(np.prod(shape, dtype=object)) * dtype.itemsize
    limit = _memory_limit()
    if declared > limit:
        raise NodemapError(f"{path}: its arrays declare {gib(declared, 1)} GiB, more than nodemap loads "
                           f"here ({gib(limit, 1)} GiB: the least of 1 GiB, half the free memory, half the "
                           "address-space limit): "
                           "profile with a larger chunk size, or check the file")


def _memory_limit() -> int:
    import os
    import resource

    limit = MAX_NPZ_BYTES
    try:
        limit = min(limit, os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2)
    except (ValueError, OSError):
        pass
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft // 2)
    return limit
