"""`nodemap bench gpu`: GPU memory bandwidth with BabelStream's kernels.

What it runs, counts and checks is its --help (memory_options.py, with its
Options and the kernels, dtypes and blocks it offers).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...errors import NodemapError
from ...units import format_size, parse_size
from . import common as gc
from .. import interrupt, options
from ..driver import Case, Plan
from ..results import Result, ResultSet, make_result
from .memory_options import AUTO_BLOCKS, BLOCK, CLASSIC, DTYPES, KERNELS, UNROLL, Options
from ..figures import Figure, Given, figure, gpu_index, said
from ..story import Cost, Named, Node, Probe, ResultParams, Seen, Step, Story
from ...finding import Finding

ARRAYS_READ_WRITTEN = {"copy": 2, "mul": 2, "add": 3, "triad": 3, "dot": 2, "nstream": 4}
INIT = (0.1, 0.2, 0.0)
SCALAR = 0.4
CALIBRATION_LAUNCHES = 3  # per candidate block, every kernel, candidates interleaved
# Relative tolerance of the checks: BabelStream's 100 epsilon for arrays;
# the dot adds ~N/threads terms per thread, so float32 gets more room.
ARRAY_TOL = {"float64": 100 * 2.22e-16, "float32": 100 * 1.19e-7}
DOT_TOL = {"float64": 1e-8, "float32": 1e-3}


@dataclass(frozen=True)
class Settings:
    """What every case of one run shares, validated from the Options."""

    kernels: tuple[str, ...]
    size: int | None
    repeats: int
    block: int
    unroll: int = UNROLL
    grid_per_sm: int = 0


def plan(opts: Options) -> Plan:
    dtypes = tuple(options.dtypes(opts.dtype, DTYPES))
    kernels = tuple(options.choices(opts.kernels, KERNELS, "--kernels"))
    if opts.block not in (0, 32, 64, 128, 256, 512, 1024):
        raise NodemapError(f"--block {opts.block}: give 0 (auto) or a power of two from 32 to 1024")
    s = Settings(kernels, parse_size(opts.size, "--size", minimum=1) if opts.size else None, opts.repeats,
                 opts.block, opts.unroll, opts.grid_per_sm)
    cp, _, devs, rs = gc.open_bench(opts, "bench gpu")
    # held until the last case: CuPy's pools emptied, the spin kernels' gate freed (here if planning fails)
    with ExitStack() as hold:
        hold.enter_context(gc.device_memory(cp))
        gate = hold.enter_context(gc.gate(cp))
        groups = [[d] for d in devs] + ([devs] if len(devs) > 1 and not opts.no_aggregate else [])
        return Plan("bench gpu", [Stream(cp, gate, g, dtype, s) for dtype in dtypes for g in groups], text,
                    environment=rs.environment, messages=rs.messages, hold=hold.pop_all())


def elements(dev: gc.Gpu, itemsize: int, size: int | None) -> int:
    """Elements per array: >= 4x L2 and >= 1 GiB unless --size says, whole
    16-byte vectors (the kernels move nothing smaller)."""
    nbytes = size if size is not None else max(2**30, 4 * dev.l2_bytes)
    return max(16, nbytes // 16 * 16) // itemsize


def gold(dtype: str, history: Sequence[Sequence[str]], n: int) -> tuple[float, float, float, float]:
    """(a, b, c, dot) after the rounds of `history` (each the kernels of one
    round, in the order they ran, calibration rounds included), replayed in
    `dtype` so the GPU's rounding matches closely."""
    import numpy as np

    t = np.dtype(dtype).type
    a, b, c = (t(x) for x in INIT)
    s = t(SCALAR)
    dot = t(0)
    for kernels in history:
        for k in kernels:
            if k == "copy":
                c = a
            elif k == "mul":
                b = s * c
            elif k == "add":
                c = a + b
            elif k == "triad":
                a = b + s * c
            elif k == "dot":
                dot = a * b * n
            else:  # nstream
                a = a + b + s * c
    return float(a), float(b), float(c), float(dot)


class Arrays:
    """a, b, c and the dot's partial sums on one GPU."""

    def __init__(self, cp: Any, dev: gc.Gpu, dtype: str, n: int) -> None:
        self.cp, self.dev, self.dtype, self.n = cp, dev, dtype, n
        self.itemsize = cp.dtype(dtype).itemsize
        self.nvec = n * self.itemsize // 16
        self.dot_blocks = 4 * dev.sm_count
        with cp.cuda.Device(dev.ordinal):
            # 3 arrays and the check's temporary
            gc.ensure_free(cp, 4 * n * self.itemsize, f"bench gpu ({dtype}, 3 arrays of {format_size(n * self.itemsize)})")
            self.a, self.b, self.c = (cp.empty(n, dtype=dtype) for _ in range(3))
            self.sums = cp.empty(self.dot_blocks, dtype=dtype)
            self.stream = cp.cuda.Stream(non_blocking=True)

    def fn(self, name: str, unroll: int) -> Any:
        suffix = "f64" if self.dtype == "float64" else "f32"
        if name not in ("init", "dot"):
            suffix += f"_u{unroll}"
        # Loaded here, on this GPU: a module load inside the timed region
        # would wait for the spin kernel that holds the stream.
        with self.cp.cuda.Device(self.dev.ordinal):
            return gc.kernel(self.cp, "stream.cu", f"{name}_{suffix}")

    def enqueue(self, name: str, block: int, unroll: int = 1, grid_per_sm: int = 0) -> Any:
        """A callable queuing kernel `name` on this GPU's stream."""
        import numpy as np

        t = np.dtype(self.dtype).type
        s, nv = t(SCALAR), np.int64(self.nvec)
        a, b, c = self.a, self.b, self.c
        args = {"copy": (a, c, nv), "mul": (b, c, s, nv), "add": (a, b, c, nv),
                "triad": (a, b, c, s, nv), "nstream": (a, b, c, s, nv), "dot": (a, b, self.sums, nv),
                "init": (a, b, c, *(t(x) for x in INIT), nv)}[name]
        fn = self.fn(name, unroll)
        if name == "dot":
            return lambda st: fn((self.dot_blocks,), (1024,), args, stream=st)
        if block > fn.max_threads_per_block:
            raise NodemapError(f"{name} ({self.dtype}, {unroll} vectors per thread) runs at most "
                               f"{fn.max_threads_per_block} threads per block on {self.dev.key} (registers): "
                               f"use a smaller --block, or leave it out to have it chosen")
        per_thread = 1 if name == "init" else unroll
        max_grid = grid_per_sm * self.dev.sm_count
        return lambda st: gc.launch(self.cp, fn, -(-self.nvec // per_thread), args, st, block, max_grid)

    def check(self, expect: tuple[float, float, float, float], kernels: Sequence[str]) -> str:
        """Raise unless every element and the dot match the gold values."""
        cp = self.cp
        with cp.cuda.Device(self.dev.ordinal):
            self.stream.synchronize()
            tol = ARRAY_TOL[self.dtype]
            for name, arr, g in zip("abc", (self.a, self.b, self.c), expect):
                err = float(cp.abs(arr - arr.dtype.type(g)).max()) / abs(g or 1.0)
                if not err <= tol:
                    raise NodemapError(f"{self.dev.key}: array {name} differs from the gold value {g:.6g} by "
                                       f"{err:.3g} (relative, tolerance {tol:.3g}): the GPU or its memory "
                                       "computed wrong results")
            if "dot" in kernels:
                got = float(self.sums.sum(dtype="float64"))
                err = abs(got - expect[3]) / abs(expect[3])
                if not err <= DOT_TOL[self.dtype]:
                    raise NodemapError(f"{self.dev.key}: dot gave {got:.10g}, gold {expect[3]:.10g} "
                                       f"(relative error {err:.3g})")
        return (f"every element of a, b, c within {tol:.2g} and the dot within {DOT_TOL[self.dtype]:.2g} "
                "(relative) of host-replayed gold values")

    def free(self) -> None:
        del self.a, self.b, self.c, self.sums


class Stream(Case):
    """BabelStream in one dtype on the GPUs of `group` at once: one Result
    per kernel. A sample is one round, {kernel: the slowest GPU's seconds}:
    the classic kernels, then nstream, each part calibrated (unless --block)
    before its first timed round. With n rounds asked, n of the classic part
    then n of nstream (ranks that repeat together ask one at a time, so the
    parts alternate); the gold replay follows the rounds as they ran."""

    shows_best = False

    def __init__(self, cp: Any, gate: gc.Gate, group: Sequence[gc.Gpu], dtype: str, s: Settings) -> None:
        self.cp, self.gate, self.group, self.dtype, self.s = cp, gate, list(group), dtype, s
        self.label = f"{dtype} on {'+'.join(d.key for d in group)}"
        self.parts = [p for p in (tuple(k for k in CLASSIC if k in s.kernels),
                                  ("nstream",) * ("nstream" in s.kernels)) if p]
        self.arrs: list[Arrays] = []
        self.history: list[tuple[str, ...]] = []  # every round since init, for the gold replay
        self.blocks: dict[str, int] = {}
        self.how = ""

    def setup(self) -> None:
        try:
            for d in self.group:
                self.arrs.append(Arrays(self.cp, d, self.dtype, elements(d, self.cp.dtype(self.dtype).itemsize,
                                                                         self.s.size)))
            self.n = min(x.n for x in self.arrs)
            if any(x.n != self.n for x in self.arrs):
                raise NodemapError("GPUs of different L2 sizes in one aggregate run: give --size")
            _run_all(self.cp, self.gate, self.arrs, ("init",), {"init": BLOCK})
        except BaseException:
            self.teardown()
            raise

    def round(self, kernels: tuple[str, ...], blocks: dict[str, int]) -> dict[str, list[float]]:
        self.history.append(kernels)
        return _run_all(self.cp, self.gate, self.arrs, kernels, blocks, self.s.unroll, self.s.grid_per_sm)

    def runs(self, n: int) -> list[dict[str, float]]:
        out: list[dict[str, float]] = [{} for _ in range(n)]
        for part in self.parts:
            if part[0] not in self.blocks:  # the part's first rounds: its blocks first (the calibration warms up)
                if self.s.block:
                    self.blocks.update((k, self.s.block) for k in part)
                else:
                    _calibrate(self.arrs, part, self.s.unroll, self.round, self.blocks)
            for i in range(n):
                out[i].update((k, t[0]) for k, t in self.round(part, self.blocks).items())
                if interrupt.requested():  # what was measured is kept; the gold follows the rounds run
                    return out[:i + 1]
        return out

    def figure(self, sample: dict[str, float]) -> float:
        return sum(sample.values())

    def verify(self) -> None:
        expect = gold(self.dtype, self.history, self.n)
        self.how = [x.check(expect, self.s.kernels) for x in self.arrs][0]

    def results(self, samples: list[dict[str, float]]) -> list[Result]:
        return [_result(self.group, self.dtype, self.n, k, [x[k] for x in samples if k in x], self.how, self.s,
                        self.blocks[k]) for k in self.s.kernels if any(k in x for x in samples)]

    def teardown(self) -> None:
        for x in self.arrs:
            x.free()
        self.arrs = []


def _calibrate(arrs: Sequence[Arrays], kernels: Sequence[str], unroll: int,
               round: Callable[[tuple[str, ...], dict[str, int]], dict[str, list[float]]],
               blocks: dict[str, int]) -> None:
    """Fill `blocks` with each kernel's fastest block of AUTO_BLOCKS (best of
    CALIBRATION_LAUNCHES each), running rounds of `kernels` through `round`."""
    # a kernel heavy in registers may not run 1024 threads per block: cap it
    limit = {k: min(x.fn(k, unroll).max_threads_per_block for x in arrs) for k in kernels}
    size = {b: {k: max(c for c in AUTO_BLOCKS if c <= max(limit[k], AUTO_BLOCKS[0]) and c <= b) for k in kernels}
            for b in AUTO_BLOCKS}
    # one untimed round first (clocks and caches settle), then the candidates
    # in turn, so that a ramp or drift favours none of them
    part = tuple(kernels)
    round(part, size[AUTO_BLOCKS[0]])
    best: dict[str, tuple[float, int]] = {}
    for _ in range(CALIBRATION_LAUNCHES):
        for b in AUTO_BLOCKS:
            for k, t in round(part, size[b]).items():
                if t[0] < best.get(k, (float("inf"), 0))[0]:
                    best[k] = (t[0], size[b][k])
    blocks.update((k, b) for k, (_, b) in best.items())


def _run_all(cp: Any, gate: gc.Gate, arrs: Sequence[Arrays], kernels: Sequence[str], blocks: dict[str, int],
             unroll: int = 1, grid_per_sm: int = 0) -> dict[str, list[float]]:
    """Each kernel once on every GPU at once: {kernel: [slowest GPU's seconds]}."""
    out: dict[str, list[float]] = {}
    for k in kernels:
        jobs = [gc.Job(x.dev.ordinal, x.stream, x.enqueue(k, blocks[k], unroll, grid_per_sm)) for x in arrs]
        out[k] = [max(gc.time_streams(cp, gate, jobs))]
    return out


def _result(group: Sequence[gc.Gpu], dtype: str, n: int, kernel: str, seconds: list[float], how: str, plan: Settings,
            block: int) -> Result:
    itemsize = 8 if dtype == "float64" else 4
    per_gpu = ARRAYS_READ_WRITTEN[kernel] * n * itemsize
    nbytes = per_gpu * len(group)
    peaks = [d.hbm for d in group]
    peak = sum(p.gbs for p in peaks) if all(peaks) else None
    one = len(group) == 1
    return make_result(
        "gpu", kernel, "GB/s", [nbytes / s / 1e9 for s in seconds], verified=True,
        params={"dtype": dtype, "elements": n, "array_bytes": n * itemsize, "gpus": [d.key for d in group],
                "cuda_ordinals": [d.ordinal for d in group], "block": 1024 if kernel == "dot" else block,
                "block_choice": "fixed" if plan.block else f"auto (fastest of {AUTO_BLOCKS})", "unroll": plan.unroll,
                "grid_per_sm": plan.grid_per_sm, "repeats": plan.repeats,
                "mode": "single" if one else "aggregate"},
        bytes=nbytes,
        counting=(f"BabelStream: {ARRAYS_READ_WRITTEN[kernel]} arrays x {n} x {itemsize} B per GPU"
                  + ("" if one else f", {len(group)} GPUs, over the slowest GPU's time")),
        path=f"{group[0].key} HBM" if one else f"{'+'.join(d.key for d in group)} HBM (aggregate)",
        path_class="HBM",
        peak=peak,
        peak_source=(peaks[0].source if one else f"{len(group)} x {peaks[0].source}") if peak else "",
        verification=how,
        notes=l2_caution(per_gpu, group),
    )


def l2_caution(footprint: int, group: Sequence[gc.Gpu]) -> tuple[str, ...]:
    """A kernel whose arrays are within 4x a GPU's L2 (the default size's
    rule) is partly served from L2: as host arrays that fit in the LLC, the
    number is not HBM bandwidth."""
    l2 = max((d.l2_bytes for d in group), default=0)
    if not l2 or footprint >= 4 * l2:
        return ()
    return (f"caution: the kernel's arrays ({format_size(footprint)} per GPU) are within 4x the L2 cache "
            f"({format_size(l2)}): part of the traffic is served from L2, not HBM; give a larger --size "
            f"(at least {format_size(4 * l2)}) or leave it out",)


def text(rs: ResultSet) -> str:
    return gc.results_text(rs.results)


def figures(results: list[Result], given: Given) -> list[Figure]:
    """Each GPU's triad alone (float64 where measured), against its model's HBM peak and its peers."""
    out = []
    singles = [r for r in results if r.metric == "triad" and r.params.get("mode") == "single"]
    dtype = "float64" if any(r.params.get("dtype") == "float64" for r in singles) else None
    for r in singles:
        if dtype and r.params.get("dtype") != dtype:
            continue
        g = r.params["gpus"][0]
        out.append(figure(r, f"gpu/{gpu_index(g)}/hbm_triad", "GPU memory",
                          f"{said(g)} HBM triad ({r.params.get('dtype')})", kind="hbm", part=r.peak_source,
                          group=f"gpu/hbm_triad/{r.peak_source}"))
    return out


def steps(node: Node) -> list[Step]:
    quick = node.level == "quick"
    return [Step(what="GPU memory bandwidth (BabelStream)", options=Options(
        dtype="float64", kernels="triad", no_aggregate=True, repeats=10) if quick else Options())]


class Params(ResultParams):
    gpus: Named
    dtype: str = ""
    mode: str = ""


def finding(seen: Seen) -> Finding | None:
    """A slow HBM triad: the GPU's clocks, throttling or memory rows."""
    f = seen.figure
    if f.kind != "hbm":
        return None
    return seen.say("hardware", f"{f.label}: {seen.value}{seen.relative}", "check clocks, throttle reasons and "
                    "remapped rows (nvidia-smi -q -d PERFORMANCE,ROW_REMAPPER); rerun on an idle GPU; RMA if it persists")


STORY = Story(params=Params, figures=figures, finding=finding,
              areas=("GPU memory",), steps=steps, gpu=True, priority=10,  # HBM: what a GPU node is bought for
              # quick 1.5-3.2 s on one H100 (check_h100_20261125), full 3.1 s on two H200s, 10.9 s on two H100s
              cost={"quick": Cost(gpu=3.0), "full": Cost(gpu=5.5)},
              # compare: the float64 triad on the rank's GPU; ranks sharing a GPU run by turns
              probes=(Probe("gpu", "GB/s", lambda threads, size: Options(gpus="0", kernels="triad", dtype="float64",
                                                                         no_aggregate=True, repeats=5),
                            lambda rs, node: next((r for r in rs.results if r.metric == "triad"
                                                   and r.params.get("dtype") in ("float64", None)), None),
                            gpu=True, time_sliced=True),))
