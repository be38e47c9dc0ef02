"""`nodemap bench placement`: when does access-analysis placement pay?

What it does, as its --help says, and its Options: placement_options.py.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ...errors import NodemapError
from ...units import MiB, format_size, parse_size, parse_sizes
from .. import options
from ..driver import Case, Plan, Skipped, VerificationFailed
from ..results import Failure, Result, ResultSet, make_result
from .placement_options import STRATEGIES, Options
from ..story import GPU_FIX, ResultParams, Story

DATASET_SEED = 1000  # fixes which rows are hot, for every pass and strategy


class ChecksumMismatch(VerificationFailed):
    """The gathered rows' checksum differs from the row formula's: the kind
    fails (not a crash, not a skipped strategy)."""

    def __init__(self, reason: str, case: str = "", failure: Failure | None = None) -> None:
        super().__init__(reason, case, failure or Failure("placement", "checksum", "GPU data placement checksums",
                                                          "the row formula's", "differ"))


# placement hints the CUDA driver did not take (placement/apply.py's verification)
HINTS_NOT_IN_EFFECT = Failure("placement", "hints", "GPU data placement hints", "as the plan set them", "not in effect")


def plan(opts: Options) -> Plan:
    from ...placement.planner import Replication

    table = parse_size(opts.table, "--table", minimum=1)  # options first: their errors need no GPU
    if opts.row_bytes % 16 or opts.row_bytes <= 0:
        raise NodemapError("--row-bytes must be a positive multiple of 16")
    strategies = options.choices(opts.strategies, STRATEGIES, "--strategies")
    obj = parse_size(opts.object_bytes, "--object-bytes") if opts.object_bytes else opts.row_bytes
    if obj % opts.row_bytes or obj <= 0 or obj > table:
        raise NodemapError(f"--object-bytes must be a multiple of --row-bytes ({opts.row_bytes}) and at most the table")
    if not 0.0 <= opts.hot_mix <= 1.0:
        raise NodemapError("--hot-mix is a share of lookups: give a number from 0 to 1")
    chunks = parse_sizes(opts.chunks, "--chunks")
    replications = [Replication.parse(r, "--replication") for r in opts.replication.split(",")]
    zipfs = _zipfs(opts.zipf)
    from ..gpu.devices import import_cupy

    cp = import_cupy()  # after the options: their errors need no GPU; worded as every GPU kind's
    devices = options.gpus(opts.gpus, cp.cuda.runtime.getDeviceCount())
    if len(devices) < 2:
        raise NodemapError(f"placement across GPUs needs at least 2 GPUs, {len(devices)} visible")
    cfg = Config(
        table=table // obj * obj,
        row_bytes=opts.row_bytes,
        lookups=opts.lookups,
        hot_mix=opts.hot_mix,
        object_bytes=obj,
        budget=int(opts.budget_fraction * table),
        chunks=chunks,
        replications=replications,
        iterations=opts.repeats,
        devices=devices,
    )
    environment = _environment(cp, devices, opts.topology)
    bench = Bench(cp, cfg)
    cases: list[Case] = []
    for s in zipfs:
        for strat in strategies:
            if strat != "analysis":
                cases.append(Lookups(bench, s, strat))
                continue
            cases += [Lookups(bench, s, f"analysis chunk={chunk // MiB}MiB rep={_rep_label(rep)}", (chunk, rep))
                      for chunk in cfg.chunks for rep in cfg.replications]
    return Plan("bench placement", cases, text, environment=environment, hold=bench)


@dataclass
class Config:
    table: int
    row_bytes: int
    lookups: int
    hot_mix: float
    object_bytes: int
    budget: int
    chunks: list
    replications: list
    iterations: int
    devices: list


class Bench:
    """GPU state for one run: module, ballast, keys; one strategy at a time."""

    def __init__(self, cp, cfg: Config) -> None:
        self.cp, self.cfg = cp, cfg
        self.rows = cfg.table // cfg.row_bytes
        self.words = cfg.row_bytes // 8
        self.ballast = []
        self.mods = {}
        self._s: float | None = None  # the exponent whose keys are held
        self._data = self._counts = None

    # --- set-up --------------------------------------------------------------
    def __enter__(self):
        cp = self.cp
        margin = 2 << 30
        for dev in self.cfg.devices:
            with cp.cuda.Device(dev):
                self.mods[dev] = _module(cp)
                free, _ = cp.cuda.runtime.memGetInfo()
                need = self.cfg.table + margin + 4 * self.cfg.lookups * 8
                if free < need:
                    raise NodemapError(
                        f"GPU {dev} has {format_size(free)} free, the run needs {format_size(need)}: use a smaller --table"
                    )
                extra = free - need
                if extra > 0:  # plain cudaMalloc, outside CuPy's pool
                    self.ballast.append(cp.cuda.memory.Memory(extra))
        return self

    def __exit__(self, *exc) -> None:
        self._data = self._counts = None
        self.ballast.clear()
        for dev in self.cfg.devices:
            with self.cp.cuda.Device(dev):
                self.cp.get_default_memory_pool().free_all_blocks()

    def keys(self, s: float, seed: int) -> list:
        """Row index arrays, one per GPU (on that GPU). Which rows are hot
        (the permutations) is a property of the data set and the same for
        every seed; `seed` only draws the lookups, so a profile pass and a
        timed pass see the same hot rows through different samples."""
        cp, cfg = self.cp, self.cfg
        with cp.cuda.Device(cfg.devices[0]):
            rng = cp.random.default_rng(seed)
            ranks_cdf = None
            if s > 0:
                w = (cp.arange(1, self.rows + 1, dtype=cp.float64)) ** (-s)
                ranks_cdf = cp.cumsum(w)
                ranks_cdf /= ranks_cdf[-1]
                del w
            # rank r is row r % k of object r // k; objects land where the permutation says
            k = cfg.object_bytes // cfg.row_bytes
            shared = _permutation(cp.random.default_rng(DATASET_SEED), self.rows // k)
            out = []
            for g, dev in enumerate(cfg.devices):
                own = _permutation(cp.random.default_rng(DATASET_SEED + g + 1), self.rows // k)
                u = rng.random(cfg.lookups)
                ranks = cp.searchsorted(ranks_cdf, u) if ranks_cdf is not None else (u * self.rows).astype(cp.int64)
                ranks = cp.minimum(ranks, self.rows - 1)
                mine = rng.random(cfg.lookups) < cfg.hot_mix
                obj = ranks // k
                rows = (cp.where(mine, own[obj], shared[obj]).astype(cp.int64) * k + ranks % k)
                del obj
                with cp.cuda.Device(dev):
                    out.append(cp.asarray(rows))
                del own, u, ranks, mine, rows
            del shared, ranks_cdf
        for dev in cfg.devices:  # the pool would hold the temporaries the tables need
            with cp.cuda.Device(dev):
                cp.get_default_memory_pool().free_all_blocks()
        return out

    # --- one Zipf exponent: its keys, shared by its cases --------------------------------
    def data(self, s: float) -> tuple[list, list, list[int]]:
        """(profile keys, run keys, their expected checksums) of exponent `s`,
        drawn when its first case starts (the previous exponent's freed first)."""
        if self._s != s:
            self._data = self._counts = None
            prof_keys = self.keys(s, seed=11)
            run_keys = self.keys(s, seed=23)
            self._data = (prof_keys, run_keys, [self._expected(k, dev) for k, dev in zip(run_keys, self.cfg.devices)])
            self._s = s
        return self._data

    def counts(self, s: float):
        """The profile of exponent `s` (one pass, for every analysis case): (counts, seconds)."""
        from ...placement.planner import Layout

        prof_keys = self.data(s)[0]
        if self._counts is None:
            self._counts = self._profile(Layout((self.cfg.table,), min(self.cfg.chunks)), prof_keys)
        return self._counts

    # --- one strategy ----------------------------------------------------------------
    def prepare(self, strat, keys, expected, analysis, costs) -> "Tables":
        """The table placed by `strat` (copies: a copy per GPU), then one
        untimed gather checked against the expected checksums."""
        cp, cfg = self.cp, self.cfg
        n = len(cfg.devices)
        arrays: list = []
        mem = None
        try:
            if strat == "copies":
                for dev in cfg.devices:  # the upper bound: a plain copy per GPU
                    with cp.cuda.Device(dev):
                        arrays.append(cp.empty(self.rows * self.words, dtype=cp.uint64))
                        self._fill(arrays[-1].data.ptr, dev)
                tables = [t.data.ptr for t in arrays]
                decision, plan_bytes, notes = None, [cfg.table] * n, ["explicit cudaMalloc copy on every GPU (ignores the budget)"]
            else:
                mem = cp.cuda.malloc_managed(cfg.table)
                self._fill(mem.ptr, cfg.devices[0], managed=True)
                tables = [mem.ptr] * n
                decision, plan_bytes, notes = self._hint(strat, mem.ptr, analysis, costs)
            t0 = time.perf_counter()
            sums = self._gather_all(tables, keys)
            costs["first_iteration_s"] = time.perf_counter() - t0
            if sums != expected:
                raise ChecksumMismatch(f"the gathered rows' checksums {sums} differ from the row "
                                       f"formula's {expected}; no number is reported (GPU memory errors? rerun, "
                                       "then check the GPUs)")
        except BaseException:
            Tables(tables=[], arrays=arrays, mem=mem).free(cp)
            raise
        return Tables(tables, arrays, mem, decision, plan_bytes, notes, costs)

    def result(self, s, strat, keys, t: "Tables", samples: list[tuple[float, list[float]]]):
        cfg = self.cfg
        n = len(cfg.devices)
        total = [n * cfg.lookups / secs for secs, _ in samples]
        measured = (self._local_fraction(t.decision, keys) if t.decision is not None
                    else (1.0 if strat == "copies" else None))
        params = {
            "zipf_s": s, "strategy": strat, "table_bytes": cfg.table, "row_bytes": cfg.row_bytes,
            "lookups_per_gpu": cfg.lookups, "gpus": cfg.devices, "budget_per_gpu": cfg.budget,
            "hot_mix": cfg.hot_mix, "object_bytes": cfg.object_bytes,
            "bytes_per_gpu": [int(b) for b in t.plan_bytes], "measured_local_fraction": measured, **t.costs,
            "lookups_per_s_per_gpu": per_gpu_rates(cfg.lookups, [per for _, per in samples]),
        }
        return make_result(
            "placement", f"{strat} s={s}", "lookups/s", total, verified=True,
            params=params, bytes=n * cfg.lookups * cfg.row_bytes,
            counting=f"{cfg.row_bytes} B read per lookup, all GPUs together",
            path=f"GPUs {','.join(map(str, cfg.devices))}: local HBM or peer memory over NVLink/PCIe",
            path_class="placement",
            verification="per-GPU checksum of every gathered row equals the checksum from the row formula",
            notes=tuple(t.notes),
        )

    def _hint(self, strat, ptr, analysis, costs):
        import numpy as np

        from ...placement.apply import apply_plan
        from ...placement.planner import REPLICATED, Layout, PlacementPlan, plan_placement

        cfg = self.cfg
        n = len(cfg.devices)
        lay = Layout((cfg.table,), min(cfg.chunks) if analysis is None else analysis[0].layout.chunk_size)
        nch = lay.n_chunks
        if strat == "no-hints":
            return None, [0] * n, ["no advice: pages migrate on fault"]
        if analysis is not None:
            counts, rep = analysis
            lay = counts.layout
            t0 = time.perf_counter()
            budgets = [cfg.budget] * n
            plan = plan_placement(counts.layout, counts.counts, budgets, rep)
            costs["plan_s"] = time.perf_counter() - t0
            costs["predicted_local_fraction"] = plan.local_fraction
            costs["replicated_bytes"] = plan.replicated_bytes()
        else:
            dec = {
                "gpu0": np.zeros(nch, dtype=np.int64),
                "round-robin": np.arange(nch) % n,
                "split": np.arange(nch) * n // nch,
                "replicate-all": np.full(nch, REPLICATED),
            }[strat]
            plan = PlacementPlan(lay, np.array([cfg.budget] * n), dec.astype(np.int64), np.zeros(nch), 0.0, np.zeros(n))
            if strat == "replicate-all" and cfg.table > cfg.budget:
                raise NodemapError("full replication does not fit the per-GPU budget")
        # the ballast left every GPU room for the whole table plus a margin,
        # so no plan can oversubscribe; memGetInfo cannot tell (see apply_plan)
        rep = apply_plan(plan, [(ptr, cfg.table)], cfg.devices, check_memory=False)
        if not rep.verified:
            raise VerificationFailed("placement hints not in effect after applying the plan "
                                     f"({'; '.join(rep.problems[:3])}); no number is reported (another process "
                                     "moving the pages, or a driver that ignores the advice? rerun with the GPUs "
                                     "to itself, then check the driver)", failure=HINTS_NOT_IN_EFFECT)
        costs["apply_s"] = rep.seconds
        costs["applied_ranges"] = rep.ranges
        return (plan.decision, lay.chunk_size), plan.bytes_per_gpu(), []

    def _profile(self, layout, keys):
        from ...placement.profiler import Profiler

        cp = self.cp
        prof = Profiler(layout, self.cfg.devices)
        # The pass reads per-GPU device copies: counts depend on the keys
        # alone, and a pass over one managed table read by every GPU at once
        # (no placement yet) stalled for minutes in page migration on H200.
        tables, t = [], None
        try:
            for dev in self.cfg.devices:
                with cp.cuda.Device(dev):
                    t = cp.empty(self.rows * self.words, dtype=cp.uint64)
                    self._fill(t.data.ptr, dev)
                    tables.append(t)
            t0 = time.perf_counter()
            self._gather_all([t.data.ptr for t in tables], keys,
                             counts=[prof.counts_ptr(g) for g in range(len(self.cfg.devices))], shift=prof.chunk_shift)
            secs = time.perf_counter() - t0
        finally:
            tables.clear()
            t = None  # the last copy too, so the pool can give its memory back
            for dev in self.cfg.devices:
                with cp.cuda.Device(dev):
                    cp.get_default_memory_pool().free_all_blocks()
        counts = prof.collect()
        if counts.counts.sum() != self.cfg.lookups * len(self.cfg.devices):
            raise VerificationFailed(f"the profiler lost accesses: it counted {int(counts.counts.sum())} for "
                                     f"{self.cfg.lookups * len(self.cfg.devices)} lookups; no plan is made from "
                                     "it (GPU memory errors? rerun, then check the GPUs)")
        return counts, secs

    # --- kernels ---------------------------------------------------------------------
    def _fill(self, ptr, dev, managed=False) -> None:
        """Write every row on GPU `dev`; a managed table then goes to host
        memory, so every strategy starts from the same place and the free
        memory the applier checks is not already taken by the table."""
        cp = self.cp
        with cp.cuda.Device(dev):
            f = self.mods[dev].get_function("nm_fill_rows")
            f((1024,), (256,), (cp.uint64(ptr), cp.uint64(self.rows), cp.uint32(self.words)))
            if managed:
                from ...placement import cudadrv as drv

                drv.prefetch(ptr, self.cfg.table, None, 0)
            cp.cuda.Device(dev).synchronize()

    def _launch(self, dev, table_ptr, rows, out, counts=0, shift=0):
        cp = self.cp
        f = self.mods[dev].get_function("nm_gather_rows")
        sms = cp.cuda.Device(dev).attributes["MultiProcessorCount"]
        f((sms * 8,), (256,), (cp.uint64(table_ptr), rows, cp.uint64(rows.size), cp.uint32(self.words), out,
                               cp.uint64(counts), cp.uint32(shift), cp.uint32(1)))

    def _gather_all(self, tables, keys, counts=None, shift=0) -> list[int]:
        cp = self.cp
        outs = []
        for g, dev in enumerate(self.cfg.devices):
            with cp.cuda.Device(dev):
                o = cp.zeros(1, dtype=cp.uint64)
                self._launch(dev, tables[g], keys[g], o, counts[g] if counts else 0, shift)
                outs.append(o)
        res = []
        for dev, o in zip(self.cfg.devices, outs):
            with cp.cuda.Device(dev):
                res.append(int(o.get()[0]))
        return res

    def _timed(self, tables, keys, expected, per_gpu: list) -> float:
        cp = self.cp
        ev, outs = [], []
        for g, dev in enumerate(self.cfg.devices):
            with cp.cuda.Device(dev):
                o = cp.zeros(1, dtype=cp.uint64)
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record()
                self._launch(dev, tables[g], keys[g], o)
                b.record()
                ev.append((a, b))
                outs.append(o)
        secs = []
        for (a, b), dev, o, want in zip(ev, self.cfg.devices, outs, expected):
            with cp.cuda.Device(dev):
                b.synchronize()
                secs.append(cp.cuda.get_elapsed_time(a, b) * 1e-3)
                got = int(o.get()[0])
                if got != want:
                    raise ChecksumMismatch(f"GPU {dev}: the gathered rows' checksum changed between repetitions "
                                           f"({got} != {want}); no number is reported (GPU memory "
                                           "errors? rerun, then check the GPUs)")
        per_gpu.append(secs)
        return max(secs)  # the node is done when the slowest GPU is

    def _expected(self, rows, dev) -> int:
        """Checksum from the row formula alone, no table read."""
        cp = self.cp
        with cp.cuda.Device(dev):
            k = cp.ElementwiseKernel(
                "int64 r, uint32 words", "uint64 s",
                """
                unsigned long long acc = 0;
                for (unsigned int w = 0; w < words; ++w) {
                    unsigned long long x = (unsigned long long)r * 0x9E3779B97F4A7C15ull + w * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
                    x ^= x >> 31; x *= 0xBF58476D1CE4E5B9ull; x ^= x >> 29;
                    acc += x;
                }
                s = acc;
                """, "nm_row_sum")
            sums = k(rows, cp.uint32(self.words))
            return int(sums.sum(dtype=cp.uint64).get())

    def _local_fraction(self, placed, keys) -> float:
        """Share of this run's lookups whose row lies on the reading GPU."""
        from ...placement.planner import REPLICATED

        cp = self.cp
        decision, chunk_size = placed
        local = total = 0
        for g, (dev, rows) in enumerate(zip(self.cfg.devices, keys)):
            with cp.cuda.Device(dev):
                d = cp.asarray(decision)
                c = d[(rows * self.cfg.row_bytes) // chunk_size]
                local += int(((c == g) | (c == REPLICATED)).sum())
                total += rows.size
        return local / total


@dataclass
class Tables:
    """One strategy's table(s) as placed, and what its Result says about them."""

    tables: list  # the table each GPU reads (device pointers)
    arrays: list  # copies: each GPU's own copy (held until the strategy ends)
    mem: Any = None  # the managed table
    decision: Any = None
    plan_bytes: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    costs: dict = field(default_factory=dict)

    def free(self, cp) -> None:
        self.arrays.clear()
        self.tables.clear()
        self.mem = None
        cp.get_default_memory_pool().free_all_blocks()


class Lookups(Case):
    """One strategy at one Zipf exponent: the table placed (setup, with one
    checked untimed gather), then every GPU gathers its keys at once; a
    repetition is the slowest GPU's seconds (each GPU's kept for its rate)."""

    shows_best = False

    def __init__(self, bench: Bench, s: float, strat: str, analysis: tuple | None = None) -> None:
        self.bench, self.s, self.strat, self.analysis = bench, s, strat, analysis
        self.label = f"s={s} {strat}"
        self.t: Tables | None = None

    def setup(self) -> None:
        b = self.bench
        _, self.keys, self.expected = b.data(self.s)
        analysis, costs = None, {}
        if self.analysis is not None:
            counts, prof_s = b.counts(self.s)
            chunk, rep = self.analysis
            analysis, costs = (counts.rechunk(chunk), rep), {"profile_s": prof_s}
        try:
            self.t = b.prepare(self.strat, self.keys, self.expected, analysis, costs)
        except VerificationFailed:
            raise  # a failed verification fails the kind: it is not a strategy that does not fit
        except NodemapError as e:
            raise Skipped(f"{self.label}: skipped: {e}") from None

    def run(self) -> tuple[float, list[float]]:
        per_gpu: list[list[float]] = []
        secs = self.bench._timed(self.t.tables, self.keys, self.expected, per_gpu)  # checks every checksum
        return secs, per_gpu[0]

    def figure(self, sample: tuple[float, list[float]]) -> float:
        return sample[0]

    def results(self, samples: list[tuple[float, list[float]]]) -> list[Result]:
        return [self.bench.result(self.s, self.strat, self.keys, self.t, samples)]

    def teardown(self) -> None:
        if self.t is not None:
            self.t.free(self.bench.cp)
            self.t = None


def _permutation(rng, n: int):
    """A random permutation of range(n) on the GPU (CuPy's Generator has no permutation())."""
    return rng.random(n).argsort()


def _module(cp):
    from importlib import resources

    from ...placement.profiler import include_dir

    src = (resources.files("nodemap") / "kernels" / "placement.cu").read_text()
    return cp.RawModule(code=src, options=("-std=c++17", f"-I{include_dir()}"))


def _zipfs(text: str) -> list[float]:
    try:
        out = [float(z) for z in text.split(",")]
    except ValueError:
        out = []
    if not out or any(not z >= 0 for z in out):
        raise NodemapError(f"--zipf {text!r}: give Zipf exponents >= 0, comma separated, like 0,0.8,1.0")
    return out


def per_gpu_rates(lookups: int, per_gpu: list[list[float]]) -> list[float]:
    """Each GPU alone: the median over repetitions of its lookups / its own seconds."""
    return [statistics.median(lookups / rep[g] for rep in per_gpu) for g in range(len(per_gpu[0]))]


def _environment(cp, devices, topology: str | None = None):
    """Versions and each CUDA device's name and Topology key ("GPU3", from
    this node or the --topology file)."""
    from ..comm.world import gpu_keys

    env = {"cupy": cp.__version__, "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
           "driver": cp.cuda.runtime.driverGetVersion()}
    for d, key in zip(devices, gpu_keys(cp, devices, topology)):
        env[f"gpu{d}"] = cp.cuda.runtime.getDeviceProperties(d)["name"].decode()
        env[f"gpu{d}_key"] = key
    return env


def _rep_label(rep) -> str:
    return "auto" if rep.mode == "auto" else (f"{rep.value * 100:g}%" if rep.mode == "fraction" else format_size(rep.value))


def text(rs: ResultSet) -> str:
    from ...text import table

    # the two references every strategy is judged against, per exponent
    ref = {(r.params["zipf_s"], r.params["strategy"]): r.stats.median for r in rs.results}
    pct = lambda f: "" if f is None else f"{100 * f:.1f}%"  # noqa: E731
    rows = []
    for r in rs.results:
        p = r.params
        ratios = [ref.get((p["zipf_s"], name)) for name in ("copies", "round-robin")]
        rows.append([p["strategy"], p["zipf_s"], f"{r.stats.median / 1e6:.1f}", f"{100 * r.stats.spread:.1f}%",
                     *[f"{r.stats.median / v:.2f}" if v else "" for v in ratios],
                     pct(p.get("predicted_local_fraction")), pct(p.get("measured_local_fraction")),
                     f"{p['first_iteration_s']:.3f}"])
    return table(["strategy", "s", "Mlookups/s", "spread", "x copies", "x r-r", "pred.local", "meas.local",
                  "1st it s"], rows, right=[False] + [True] * 8)


class Params(ResultParams):
    zipf_s: float
    strategy: str


# its verifications, each its own cause: rows gathered wrong are the GPUs' memory; hints the CUDA driver did
# not take are another process moving the pages or a driver ignoring the advice (the job's)
CAUSES = {
    "checksum": ("hardware", "test the GPUs' memory (nvidia-smi -q -d ECC,ROW_REMAPPER, dcgmi diag -r 3), then run "
                 "nodemap bench placement again"),
    "hints": ("configuration", "give the benchmark the GPUs to itself (no other process moving their pages) and "
              "check that the CUDA driver honours cudaMemAdvise; then run nodemap bench placement again"),
}


def cause(f: Failure, forced: Sequence[str]) -> tuple[str, str]:
    return CAUSES.get(f.part, ("hardware", GPU_FIX.format(kind=f.kind)))  # no transport carries its data


STORY = Story(params=Params, areas=("GPU memory",), cause=cause)
