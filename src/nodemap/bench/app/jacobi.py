"""`nodemap bench jacobi`: a 2D Jacobi solver in the multi-GPU programming models.

What it does, as its --help says, and its Options: jacobi_options.py.
`plan` opens the processes and plans, per dtype, the single-GPU baseline
(the gold), the stencil alone on the slabs and one case per variant
(bench/driver.py runs them); device side: jacobi_gpu.py.
"""

from __future__ import annotations

import os
import statistics
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from ...errors import NodemapError
from ...units import gbps
from . import jacobi_gpu as jgpu
from . import jacobi_grid as jg
from ..comm import mpi_common as mc
from ..comm.world import World, open_gpus
from .. import interrupt, options
from ..driver import Case, PartFailed, Plan
from ..harness import Stopped, slowest_rank
from ..results import Failure, Result, ResultSet, Stats, make_result
from .jacobi_options import DTYPES, VARIANTS, Options
from ..story import Probe, ResultParams, Story

HOST_CHECK_CELLS = 1 << 20  # grids up to this size are also solved in NumPy


# --- input -----------------------------------------------------------------------


def parse_grid(text: str) -> tuple[int, int]:
    """'16384x8192' -> (16384, 8192); '4096' -> (4096, 4096)."""
    parts = text.lower().replace(" ", "").split("x")
    try:
        nums = [int(p) for p in parts]
    except ValueError:
        nums = []
    if len(nums) not in (1, 2) or min(nums, default=0) <= 0:
        raise NodemapError(f"--size {text!r}: give NXxNY in cells, like 16384x16384 (or one N for NxN)")
    return (nums[0], nums[-1])


@dataclass(frozen=True)
class Grid:
    """The global grid, its cut and, under --weak, the one slab's grid."""

    nx: int
    ny: int
    px: int
    py: int
    tile: tuple[int, int] | None = None  # --weak: the per-slab grid the efficiency holds

    @property
    def tiles(self) -> list[jg.Tile]:
        return jg.tiles(self.nx, self.ny, self.px, self.py)


def layout(args: Options, nx: int, ny: int, n: int) -> Grid:
    """The global grid of n slabs; one line, exit 2, when it cannot be cut."""
    try:
        px, py = jg.parse_decomp(args.decomp, n)
    except ValueError as e:
        raise NodemapError(str(e)) from None
    gx, gy = jg.weak_grid(nx, ny, px, py) if args.weak else (nx, ny)
    why = jg.check_tiles(gx, gy, px, py)
    if why:
        raise NodemapError(why)
    return Grid(gx, gy, px, py, (nx, ny) if args.weak else None)


def validate(args: Options) -> tuple[int, int, list[str], list[str]]:
    nx, ny = parse_grid(args.size)
    dtypes = options.dtypes(args.dtype, DTYPES)
    variants = options.choices(args.variants, VARIANTS, "--variants")
    if args.iters < 2 or args.iters % 2 or args.repeats < 1:
        raise NodemapError("--iters must be even and >= 2 (a step pair returns to the first buffer; the CUDA "
                           "graph holds one pair) and --repeats positive")
    return nx, ny, dtypes, variants


# --- the processes and their slabs -------------------------------------------------


def bindings(w: World, topology: str | None) -> list[str]:
    """Every process's binding line (a collective under MPI)."""
    if w.comm is None:
        return [binding_line(None, w.gpu_keys)]
    from ..gpu.common import load_topology

    return w.allgather(binding_line(w.place(load_topology(topology)[0]), [w.gpu_keys[w.rank]]))


def binding_line(place: Any, keys: list[str]) -> str:
    """Which CPUs and NUMA nodes a process runs on and which GPUs it drives."""
    from ...topology.cpuset import CpuSet

    if place is None:
        cpus = CpuSet(os.sched_getaffinity(0)).format()
        return f"one process (pid {os.getpid()}) on cpus {cpus} drives {', '.join(keys)}"
    numa = f" (NUMA {','.join(map(str, place.numa))})" if place.numa else ""
    return f"rank {place.rank} on {place.host} cpus {place.cpus}{numa} drives {', '.join(keys)}"


def usable(w: World, name: str, aware: Any, grid: Grid | None = None) -> str:
    """'' when this world can run the variant on the grid, else why not."""
    v = VARIANTS[name]
    if grid is not None and v.overlap and jg.check_tiles(grid.nx, grid.ny, grid.px, grid.py, overlap=True):
        return f"{name}: {jg.check_tiles(grid.nx, grid.ny, grid.px, grid.py, overlap=True)}"
    why = w.refusal(v.transport, aware, "slab") if name != "single" else ""
    return f"{name}: {why}" if why else ""


# --- the cases ----------------------------------------------------------------------------


def runner(w: Any, name: str, iters: int, fault: bool) -> Callable[[], None]:
    """What one repetition of a variant runs: `iters` steps (a variant is this callable)."""
    v = VARIANTS[name]
    if v.graph:
        graphs = (jgpu.capture(w, v.transport, v.overlap, False, fault),
                  jgpu.capture(w, v.transport, v.overlap, True, fault))
        return lambda: jgpu.run_graph(w, graphs, iters)
    return lambda: jgpu.run_steps(w, v.transport, v.overlap, iters, fault)


@dataclass
class Outcome:
    times: list[float]  # seconds per step, per repetition
    norm: float
    rows: Any  # per-row sums (root only)
    nan: bool


class Stage:
    """The slabs of one stage of a dtype: the whole grid on the first GPU of
    the first process (the baseline) or the decomposition (`decomposed`).
    Allocated by the stage's first case, freed after its last (or at the
    plan's end, after an error); the stage's parts leave their figures here
    for the next ones."""

    def __init__(self, world: World, grid: Grid, dtype: str, decomposed: bool = False, nccl: bool = False) -> None:
        self.world, self.grid, self.dtype, self.decomposed, self.nccl = world, grid, dtype, decomposed, nccl
        self.w: Any = None  # jgpu.Slabs, once open
        self.nccl_why = ""  # why the nccl variants cannot run here ('' when they can)
        self.comp: list[float] = []  # the stencil alone's seconds per step
        self.plain: dict[str, list[float]] = {}  # each verified variant's (overlap_hidden compares them)
        self.peer_notes: list[str] = []  # GPU pairs without peer access (their copies are staged by the driver)

    def open(self) -> Any:
        if self.w is not None:
            return self.w
        world, g = self.world, self.grid
        cp, devs = world.cp, [lo.device for lo in world.locals]
        parts = [g.tiles[lo.rank] for lo in world.locals] if self.decomposed else jg.tiles(g.nx, g.ny, 1, 1)
        devs = devs if self.decomposed else devs[:1]
        try:
            jgpu.check_memory(cp, g.nx, parts, devs, self.dtype)
            slabs = jgpu.allocate(cp, g.nx, parts, devs, self.dtype, pinned=self.decomposed and world.comm is not None)
        except NodemapError as e:
            if self.decomposed or not g.tile:
                raise
            raise NodemapError(f"--weak verifies every variant against the whole {g.nx}x{g.ny} grid on one GPU, "
                               f"which does not fit: give a smaller --size per slab ({e})") from None
        self.w = jgpu.Slabs(cp, slabs, world.n, world) if self.decomposed else jgpu.Slabs(cp, slabs, 1)
        if self.decomposed and world.comm is None:  # one process, every slab: peer copies straight over the link
            from ..gpu.devices import enable_peer_access

            self.peer_notes = enable_peer_access(cp, devs)
        if self.nccl:
            self.nccl_why = world.open_nccl()  # once, kept for every dtype
            for s, lo in zip(slabs, world.locals):
                s.comm = lo.comm
        return self.w

    def close(self) -> None:
        if self.w is not None:
            w, self.w = self.w, None
            jgpu.close(w)


class Part(Case):
    """One timed part on a stage's slabs ("compute": the stencil alone, else
    a variant). Setup fills the halos through the transport (untimed); a
    repetition runs `iters` steps (`runner`), its figure the slowest
    process's seconds per step (harness.slowest_rank); verify restarts from
    the initial field and runs once more, the same code path as the timing."""

    def __init__(self, stage: Stage, name: str, opts: Options, label: str, what: str, last: bool = False) -> None:
        self.stage, self.name, self.label, self.what, self.last = stage, name, label, what, last
        self.iters, self.timeout = opts.iters, opts.timeout
        self.transport = VARIANTS[name].transport if name != "compute" else "none"
        self.fault = bool(opts.inject_halo_fault) and name not in ("single", "compute")
        self.out = Outcome([], 0.0, None, False)
        self._deadline = ExitStack()

    @property  # type: ignore[override]
    def mine(self) -> bool:
        """The baseline is the first process's alone; every process runs the slabs' parts."""
        return self.stage.decomposed or self.stage.world.is_root()

    @property  # type: ignore[override]
    def messages(self) -> list[str]:
        return self.stage.peer_notes + ([f"nccl variants: {self.stage.nccl_why}"] if self.stage.nccl_why else [])

    def setup(self) -> None:
        w = self.stage.open()
        self._deadline.enter_context(mc.deadline(self.timeout, self.what))
        jgpu.prime(w, self.transport, self.fault)
        w.wait()  # the ranks start each repetition together, with nothing queued (slowest_rank)
        self.body = runner(w, self.name, self.iters, self.fault) if self.name != "compute" else (
            lambda: jgpu.run_steps(w, "none", False, self.iters))
        self.once = slowest_rank(w.world, self.iters, lambda: (self.body(), w.wait()))

    def run(self) -> float:
        return self.once()

    def verify(self) -> None:
        w = self.stage.w
        jgpu.initialize(w.cp, w.slabs)
        jgpu.prime(w, self.transport, self.fault)
        self.body()
        self.out = Outcome([], jgpu.norm(w), jgpu.row_sums(w, 0), jgpu.has_nan(w, 0))
        self.check()

    def check(self) -> None:
        """The stencil alone's field is not checked: its halos are never exchanged."""

    def results(self, samples: list[float]) -> list[Result]:
        self.stage.comp = samples
        return []

    def teardown(self) -> None:
        self._deadline.close()

    def gather(self, results: list[Result]) -> list[Result]:
        if self.last:  # every process: a part another rank ran alone, or one not run here, ends the stage too
            self.stage.close()
        return results

    def progress(self, results: list[Result]) -> str:
        r = results[-1] if results else None
        return f"{self.label}: {r.stats.median:.1f} {r.unit}" if r else self.label


class Baseline(Part):
    """The whole grid on one GPU, after its stencil alone: the gold every
    variant is verified and scaled against (its field also NumPy's on the
    host at small sizes); under --weak also one slab's grid (`tile`: the
    weak-scaling t1). The first process measures it, every process gets it."""

    def __init__(self, stage: Stage, opts: Options, gold: dict[str, Any], gpu: Any, tile: bool) -> None:
        g = stage.grid
        super().__init__(stage, "single", opts, f"single GPU {stage.dtype} {g.nx}x{g.ny}"
                         + (" (one slab's grid)" if tile else ""), f"the single-GPU {stage.dtype} run", last=True)
        self.gold, self.gpu, self.tile = gold, gpu, tile
        self.checked = ""

    def check(self) -> None:
        from . import jacobi_host as jh

        nx, ny, dtype, out = self.stage.grid.nx, self.stage.grid.ny, self.stage.dtype, self.out
        if out.nan:
            raise NodemapError(f"single GPU {dtype}: NaN in the field: the kernel or the periodic halo copy is "
                               "broken")
        self.checked = "residual norm and row sums are the slab runs' gold values"
        if nx * ny <= HOST_CHECK_CELLS:
            why = jh.disagree(out.norm, out.rows, *jh.solve(nx, ny, self.iters, jgpu.DTYPES[dtype][0]))
            if why:
                raise NodemapError(f"single GPU {dtype} differs from NumPy on the host: {why}: the kernel computes "
                                   "wrong values")
            self.checked = f"residual norm and every row's sum equal NumPy's on the host after {self.iters} steps"

    def results(self, samples: list[float]) -> list[Result]:
        g, dtype, gpu, comp = self.stage.grid, self.stage.dtype, self.gpu, self.stage.comp
        word = jgpu.DTYPES[dtype][1]
        nbytes = jg.stencil_bytes(g.nx, g.ny, word)
        peak = gpu.hbm
        t1 = statistics.median(samples)
        self.gold.update({"t1_weak": t1} if self.tile else {"norm": self.out.norm, "rows": self.out.rows, "t1": t1,
                                                             "t1_weak": t1 if g.tile == (g.nx, g.ny) else None})
        self.out.times = samples
        return [make_result(
            "jacobi", "stencil kernel", "GB/s", gbps(nbytes, comp), verified=True,
            params={"nx": g.nx, "ny": g.ny, "dtype": dtype, "iters": self.iters, "gpu": gpu.key,
                    "us_per_step": statistics.median(comp) * 1e6},
            bytes=nbytes, counting=f"2 x {word} B per updated cell (read once, written once)",
            path=f"{gpu.key} HBM", path_class="HBM", peak=peak.gbs if peak else None,
            peak_source=peak.source if peak else "", notes=("the single-GPU run's stencil without halo copies",),
            verification=f"the same kernel's single-GPU run: {self.checked}"),
            variant_result("single", dtype, Grid(g.nx, g.ny, 1, 1), self.iters, self.out, 1, 1, {"t1": t1},
                           statistics.median(comp), None, [gpu.key],
                           "whole grid on one GPU, periodic rows copied on the device", self.checked)]

    def gather(self, results: list[Result]) -> list[Result]:
        comm = self.stage.world.comm
        if comm is not None:  # every process gets the gold (a rank whose root failed is ended by its abort)
            self.gold.update(comm.bcast(self.gold, root=0))
        return super().gather(results)


class Variant(Part):
    """One variant on the slabs, verified against the single-GPU run: a
    halo that differs fails the variant alone (no time, the run incomplete)."""

    def __init__(self, stage: Stage, name: str, opts: Options, gold: dict[str, Any], last: bool) -> None:
        super().__init__(stage, name, opts, f"{name} {stage.dtype} on {stage.world.n} slabs",
                         f"{name} {stage.dtype} (a hung exchange)", last)
        self.gold = gold

    @property  # type: ignore[override]
    def mine(self) -> bool:
        return self.transport != "nccl" or not self.stage.nccl_why  # NCCL opened by the stencil alone before it

    def check(self) -> None:
        from . import jacobi_host as jh

        w, out = self.stage.w, self.out
        why = "NaN in the field (a halo never written)" if out.nan else ""
        if w.world.is_root() and not why:
            why = jh.disagree(out.norm, out.rows, self.gold["norm"], self.gold["rows"])
        why = w.world.comm.bcast(why, root=0) if w.world.comm is not None else why
        if why:
            name, dtype = self.name, self.stage.dtype
            raise PartFailed(Failure("jacobi", name, f"Jacobi {name} halos", "the single-GPU run's field",
                                     f"{dtype}: {why}", transport=self.transport, message=f"{name} {dtype}: differs "
                                     f"from the single-GPU run: {why}: the halo exchange is wrong; no time reported"))

    def results(self, samples: list[float]) -> list[Result]:
        s, keys = self.stage, self.stage.world.gpu_keys
        s.plain[self.name] = self.out.times = samples
        return [variant_result(self.name, s.dtype, s.grid, self.iters, self.out, len(keys), len(set(keys)), self.gold,
                               statistics.median(s.comp), hidden(s.plain, self.name, s.comp), keys, "", "")]


# --- the plan ---------------------------------------------------------------------------


def plan(opts: Options) -> Plan:
    """Open the processes (one rank per slab under MPI, else one process for
    every slab) and plan per dtype: the single-GPU baseline (its stencil
    alone, then `single`; under --weak also one slab's grid), then on the
    slabs the stencil alone and one case per variant. Every rank builds the
    same plan; the first reports (Plan.together)."""
    nx, ny, dtypes, variants = validate(opts)
    w = open_gpus(opts.mode, opts.gpus, opts.timeout, opts.topology, repeats=True)
    try:
        grid = layout(opts, nx, ny, w.n)
        todo, skipped = choose(w, grid, variants)
    except NodemapError as e:
        if w.comm is not None:
            mc.fail(w.comm, str(e))
        raise
    stages: list[Stage] = []
    cases: list[Case] = []
    gpu, environment = environment_of(w, grid, opts)
    weak = [(*grid.tile, True)] if grid.tile and grid.tile != (grid.nx, grid.ny) else []  # one slab's t1
    for dtype in dtypes:
        gold: dict[str, Any] = {}
        for nx1, ny1, tile in [(grid.nx, grid.ny, False)] + weak:
            one = Stage(w, Grid(nx1, ny1, 1, 1, grid.tile), dtype)
            cases += [Part(one, "compute", opts, f"single GPU {dtype} {nx1}x{ny1}: stencil alone",
                           f"the single-GPU {dtype} run"), Baseline(one, opts, gold, gpu, tile)]
            stages.append(one)
        if not todo:
            continue
        slabs = Stage(w, grid, dtype, decomposed=True, nccl=any(VARIANTS[v].transport == "nccl" for v in todo))
        stages.append(slabs)
        cases.append(Part(slabs, "compute", opts, f"{w.n} slabs {dtype}: stencil alone",
                          f"the {dtype} stencil alone"))
        cases += [Variant(slabs, name, opts, gold, last=name == todo[-1]) for name in todo]
    command = (f"bench jacobi --size {nx}x{ny} --dtype {','.join(dtypes)} --iters {opts.iters}"
               + (f" --decomp {grid.px}x{grid.py}" if grid.px > 1 else "") + (" --weak" if grid.tile else ""))
    mpi = w.comm is not None
    return Plan(command, cases, text, environment=environment, messages=skipped + w.notes,
                hold=held(w, stages), root=w.is_root(), together=mpi,
                stop=(lambda: False) if mpi else interrupt.requested,  # under MPI a rank's Ctrl-C never ends it alone
                bounded=True)  # --timeout bounds each case and exchange itself (mc.deadline)


def environment_of(w: World, grid: Grid, opts: Options) -> tuple[Any, dict[str, Any]]:
    """The first GPU (the baseline's) and the run's environment."""
    from ..gpu.common import describe as describe_gpu, environment, load_topology

    cp = w.cp
    gpu = describe_gpu(cp, w.locals[0].device, load_topology(opts.topology)[0])
    env = environment(cp, [gpu]) | {
        "slabs": w.n, "tiles": f"{grid.px}x{grid.py}", "mode": "mpi" if w.comm is not None else "single",
        "gpus": w.gpu_keys, "binding": bindings(w, opts.topology), "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE"),
        "stencil_block": "x".join(map(str, jgpu.block_shape(os.environ.get("NODEMAP_JACOBI_BLOCK"))))}
    if w.comm is not None:
        env["mpi"] = mc.library()
    return gpu, env


@contextmanager
def held(w: World, stages: list[Stage]) -> Iterator[None]:
    """Around the cases: a rank's error ends every rank (abort) instead of a
    hang; at the end every stage's slabs, the ranks' NCCL communicator (kept
    across dtypes) and CuPy's pool are freed."""
    try:
        yield
    except Stopped:
        raise
    except (Exception, SystemExit) as e:
        if w.size > 1:
            abort(w.comm, e)
        raise
    finally:
        for s in stages:
            s.close()
        w.close()


def abort(comm: Any, e: BaseException) -> None:
    """One rank failed while the others wait for it in a collective: say why
    (one line) and end every rank, instead of a hang."""
    import sys

    if not (isinstance(e, SystemExit) and e.code in (0, 1, 2, None) and comm.Get_rank() != 0):
        what = str(e) if isinstance(e, NodemapError) else f"{type(e).__name__}: {e}"
        print(f"nodemap bench jacobi: error: rank {comm.Get_rank()}: {what}", file=sys.stderr, flush=True)
    comm.Abort(2)


def choose(w: World, grid: Grid, variants: list[str]) -> tuple[list[str], list[str]]:
    """The variants this world runs on this grid (besides the baseline) and
    why the others are skipped. A mpi-aware variant on an MPI not proven
    CUDA-aware is replaced by its staged twin (what the message promises).
    NodemapError when every variant asked for is skipped: the baseline
    alone answers nothing that was asked."""
    aware = None
    if w.comm is not None and any(v.startswith("mpi-aware") for v in variants):
        aware = mc.prove_cuda_aware(w.comm, mc.probe(w.comm))
    why = {v: usable(w, v, aware, grid) for v in variants}
    todo = [v for v in variants if not why[v] and v != "single"]
    for v in variants:
        staged = v.replace("mpi-aware", "mpi-staged")
        if why[v] and v.startswith("mpi-aware") and w.comm is not None and not usable(w, staged, aware, grid):
            why[v] += f" ({staged} measures it)"
            if staged not in todo:
                todo.append(staged)
    reasons = [w for w in why.values() if w]
    if not todo and any(v != "single" for v in variants):
        raise NodemapError("every variant asked for is skipped: " + "; ".join(reasons))
    return todo, reasons


def hidden(plain: dict[str, list[float]], name: str, comp_times: list[float]) -> float | None:
    """overlap hid for an -overlap variant measured after its plain twin;
    None (not meaningful) where the plain step's communication is within
    the repetitions' spread."""
    base = name.replace("-overlap", "")  # peer-overlap-graph's twin is peer-graph
    if "-overlap" not in name or base not in plain:
        return None
    runs = [Stats.of(t) for t in (plain[base], plain[name], comp_times)]
    return jg.overlap_hidden(*(r.median for r in runs), noise=max(r.spread for r in runs))


def variant_result(name: str, dtype: str, grid: Grid, iters: int, out: Outcome, slabs: int,
                   gpus: int, gold: dict[str, Any], t_comp: float, hidden: float | None, keys: list[str], note: str,
                   checked: str) -> Any:
    t = statistics.median(out.times)
    nx, ny = grid.nx, grid.ny
    cells = jg.cells(nx, ny)
    eff = jg.efficiency(gold["t1"], t, gpus)
    weak = jg.weak_efficiency(gold["t1_weak"], t, slabs, gpus) if gold.get("t1_weak") else None
    notes = [note] if note else []
    if slabs > gpus:
        notes.append(f"{slabs} slabs share {gpus} GPU(s): the efficiency measures the decomposition's overhead, "
                     "not scaling")
    return make_result(
        "jacobi", name, "us", [x * 1e6 for x in out.times], verified=True,
        params={"variant": name, "dtype": dtype, "nx": nx, "ny": ny, "iters": iters, "slabs": slabs,
                "gpus": gpus, "tiles": f"{grid.px}x{grid.py}", "cells_per_s": cells / t, "efficiency": eff,
                "weak_efficiency": weak, "slab_grid": "x".join(map(str, grid.tile)) if grid.tile else None,
                "t_compute_us": t_comp * 1e6,
                "comm_share": jg.comm_share(t, t_comp), "overlap_hidden": hidden, "norm": out.norm,
                "transport": VARIANTS[name].transport},
        path=" | ".join(keys), path_class=VARIANTS[name].transport, notes=tuple(notes),
        verification=checked or f"restarted from the initial field (halos NaN), {iters} steps: residual norm "
                                "and every row's sum equal the single-GPU run's",
    )


def text(rs: ResultSet) -> str:
    from ...text import number, percent, table

    rows = []
    for r in rs.results:
        p = r.params
        if r.unit != "us":
            continue
        rows.append([p["variant"], p["dtype"], f"{p['nx']}x{p['ny']}", str(p["slabs"]), p.get("tiles", "1x1"),
                     str(p["gpus"]), number(r.stats.median), f"{100 * r.stats.spread:.1f}%",
                     number(p["cells_per_s"] / 1e9), percent(p["efficiency"]), percent(p.get("weak_efficiency")),
                     percent(p["comm_share"]), percent(p["overlap_hidden"])])
    out = table(["variant", "dtype", "grid", "slabs", "tiles", "GPUs", "us/step", "spread", "Gcells/s", "strong eff",
                 "weak eff", "comm", "overlap hid"], rows, right=[False, False, False] + [True] * 10)
    for r in rs.results:
        if r.unit == "GB/s":
            pct = f", {100 * r.stats.median / r.peak:.1f}% of {r.peak_source}" if r.peak else ""
            out += f"\nstencil kernel {r.params['dtype']} on {r.params['gpu']}: {r.stats.median:,.0f} GB/s median{pct}"
    if any("-overlap" in r.params.get("variant", "") and r.params.get("overlap_hidden") is None
           for r in rs.results if r.unit == "us"):
        out += ("\noverlap hid '-' for an -overlap variant: its plain step's communication is within the "
                "repetitions' spread, nothing measurable to hide")
    for line in rs.environment.get("binding") or []:
        out += f"\nbinding: {line}"
    return out


class Params(ResultParams):
    dtype: str
    variant: str = ""
    gpu: str = ""


STORY = Story(params=Params, areas=("GPU<->GPU",),
              # compare: the single-GPU step on the rank's GPU
              probes=(Probe("jacobi", "us", lambda threads, size: Options(mode="single", gpus="0", variants="single",
                                                                          size="8192x8192", iters=100, repeats=3),
                            lambda rs, node: next((r for r in rs.results if r.metric == "single"), None), gpu=True),))
