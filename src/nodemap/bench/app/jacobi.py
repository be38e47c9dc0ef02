"""`nodemap bench jacobi`: a 2D Jacobi solver in the multi-GPU programming models.

What it does, as its --help says, and its Options: jacobi_options.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from ...errors import NodemapError
from ...units import gbps
from . import jacobi_grid as jg
from ..comm import mpi_common as mc
from ..comm import world
from ..comm.world import World, alone
from .. import options
from ..harness import Progress, finish, session, slowest_rank
from ..driver import repeat
from ..results import Failure, ResultSet, Stats, make_result
from .jacobi_options import DTYPES, VARIANTS, Options

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


def layout(args: argparse.Namespace, nx: int, ny: int, n: int) -> Grid:
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


def validate(args: argparse.Namespace) -> tuple[int, int, list[str], list[str]]:
    nx, ny = parse_grid(args.size)
    dtypes = options.dtypes(args.dtype, DTYPES)
    variants = options.choices(args.variants, VARIANTS, "--variants")
    if args.iters < 2 or args.iters % 2 or args.repeats < 1:
        raise NodemapError("--iters must be even and >= 2 (a step pair returns to the first buffer; the CUDA "
                           "graph holds one pair) and --repeats positive")
    return nx, ny, dtypes, variants


# --- the processes and their slabs -------------------------------------------------


@dataclass
class Launch:
    """What this process drives: every slab (single mode) or its own (MPI)."""

    cp: Any
    devices: list[int]  # CUDA ordinal of each slab this process drives
    ranks: list[int]  # the slab indexes they hold
    n: int  # slabs in all
    world: World = field(default_factory=alone)  # the ranks (MPI), or this process alone
    keys_all: list[str] | None = None  # every slab's GPU, "host:GPU1", slab order
    binding: list[str] | None = None  # every process's binding, one line each

    @property
    def mpi(self) -> Any:
        """MPI.COMM_WORLD under MPI, else None."""
        return self.world.comm


def open_launch(args: argparse.Namespace) -> Launch:
    from ..comm import collectives as co
    from ..gpu.common import import_cupy

    mode = args.mode
    if mode == "auto":
        mode = "mpi" if co.launched_by_mpi() else "single"
    if mode == "single":
        cp = import_cupy()
        devs = options.gpus(args.gpus, cp.cuda.runtime.getDeviceCount(), repeats=True)
        keys = co.gpu_keys(cp, devs)
        return Launch(cp, devs, list(range(len(devs))), len(devs), alone(), keys, [binding_line(None, keys)])
    w = world.start(args.timeout)
    try:
        cp = import_cupy()
    except NodemapError as e:
        mc.fail(w.comm, str(e))
    from ..gpu.common import load_topology

    topo = load_topology(args.topology)[0]
    w.gpu(cp, lambda d: co.gpu_keys(cp, [d])[0])  # from the node's plan (comm/world.py)
    lines = w.allgather(binding_line(w.place(topo), [w.gpu_keys[w.rank]]))
    return Launch(cp, [w.device], [w.rank], w.size, w, w.gpu_keys, lines)


def binding_line(place: Any, keys: list[str]) -> str:
    """Which CPUs and NUMA nodes a process runs on and which GPUs it drives."""
    from ...topology.cpuset import CpuSet

    if place is None:
        cpus = CpuSet(os.sched_getaffinity(0)).format()
        return f"one process (pid {os.getpid()}) on cpus {cpus} drives {', '.join(keys)}"
    numa = f" (NUMA {','.join(map(str, place.numa))})" if place.numa else ""
    return f"rank {place.rank} on {place.host} cpus {place.cpus}{numa} drives {', '.join(keys)}"


def usable(launch: Launch, name: str, aware: Any, grid: Grid | None = None) -> str:
    """'' when this launch can run the variant on the grid, else why not."""
    v = VARIANTS[name]
    if grid is not None and v.overlap and jg.check_tiles(grid.nx, grid.ny, grid.px, grid.py, overlap=True):
        return f"{name}: {jg.check_tiles(grid.nx, grid.ny, grid.px, grid.py, overlap=True)}"
    if v.transport == "peer" and name != "single" and launch.mpi is not None:
        return f"{name}: copies between processes need CUDA IPC; run without mpiexec for peer copies"
    if v.transport.startswith("mpi") and launch.mpi is None:
        return f"{name}: needs one rank per slab: run under mpiexec -n <slabs>"
    if v.transport == "mpi-aware" and not (aware and aware.aware and aware.proven):
        return f"{name}: {aware.message() if aware else mc.NOT_AWARE}"
    if v.transport == "nccl" and launch.keys_all and len(set(launch.keys_all)) != len(launch.keys_all):
        from .jacobi_gpu import NCCL_SHARED_GPU

        return f"{name}: {NCCL_SHARED_GPU}"
    return ""


# --- timing and verification ----------------------------------------------------------


def timed(w: Any, iters: int, body: Callable[[], None]) -> Callable[[], float]:
    """Seconds per step of `iters` steps (`body` runs them all), the slowest process's."""
    return slowest_rank(w.ranks, iters, lambda: (body(), w.wait()))


def runner(w: Any, name: str, iters: int, fault: bool) -> Callable[[], None]:
    from . import jacobi_gpu as jgpu

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


def measure(w: Any, name: str, args: argparse.Namespace) -> Outcome:
    """Time the variant, then restart from the initial field and run it once
    more for the verification (the same code path as the timing)."""
    from . import jacobi_gpu as jgpu

    transport = VARIANTS[name].transport if name != "compute" else "none"
    fault = bool(args.inject_halo_fault) and name not in ("single", "compute")
    jgpu.prime(w, transport, fault)
    w.wait()  # the ranks start each repetition together, with nothing queued (slowest_rank)
    body = runner(w, name, args.iters, fault) if name != "compute" else (
        lambda: jgpu.run_steps(w, "none", False, args.iters))
    times = repeat(timed(w, args.iters, body), repeats=args.repeats, warmup=1)
    jgpu.initialize(w.cp, w.slabs)
    jgpu.prime(w, transport, fault)
    body()
    return Outcome(times, jgpu.norm(w), jgpu.row_sums(w, 0), jgpu.has_nan(w, 0))


# --- the run ----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    nx, ny, dtypes, variants = validate(args)
    launch = open_launch(args)
    try:
        grid = layout(args, nx, ny, launch.n)
        todo, skipped = choose(launch, grid, variants)
    except NodemapError as e:
        if launch.mpi is not None:
            mc.fail(launch.mpi, str(e))
        raise
    rs = ResultSet(command=f"bench jacobi --size {nx}x{ny} --dtype {','.join(dtypes)} --iters {args.iters}"
                           + (f" --decomp {grid.px}x{grid.py}" if grid.px > 1 else "")
                           + (" --weak" if grid.tile else ""))
    rs.messages += skipped + launch.world.notes
    root = launch.mpi is None or launch.mpi.Get_rank() == 0
    try:
        with session(rs, args, root=root, watchdog=False):  # --timeout bounds each exchange itself
            bench(launch, rs, grid, dtypes, todo, args)
    except (Exception, SystemExit) as e:
        if launch.mpi is None or launch.mpi.Get_size() == 1:
            raise
        abort(launch.mpi, e)
    finally:
        launch.world.close()  # the ranks' NCCL communicator, kept across dtypes
        launch.cp.get_default_memory_pool().free_all_blocks()
    if not root:
        return 0 if rs.complete else 1
    return finish(rs, args, text)


def abort(comm: Any, e: BaseException) -> None:
    """One rank failed while the others wait for it in a collective: say why
    (one line) and end every rank, instead of a hang."""
    import sys

    if not (isinstance(e, SystemExit) and e.code in (0, 1, 2, None) and comm.Get_rank() != 0):
        what = str(e) if isinstance(e, NodemapError) else f"{type(e).__name__}: {e}"
        print(f"nodemap bench jacobi: error: rank {comm.Get_rank()}: {what}", file=sys.stderr, flush=True)
    comm.Abort(2)


def choose(launch: Launch, grid: Grid, variants: list[str]) -> tuple[list[str], list[str]]:
    """The variants this launch runs on this grid (besides the baseline) and
    why the others are skipped. A mpi-aware variant on an MPI not proven
    CUDA-aware is replaced by its staged twin (what the message promises).
    NodemapError when every variant asked for is skipped: the baseline
    alone answers nothing that was asked."""
    aware = None
    if launch.mpi is not None and any(v.startswith("mpi-aware") for v in variants):
        aware = mc.prove_cuda_aware(launch.mpi, mc.probe(launch.mpi))
    why = {v: usable(launch, v, aware, grid) for v in variants}
    todo = [v for v in variants if not why[v] and v != "single"]
    for v in variants:
        staged = v.replace("mpi-aware", "mpi-staged")
        if why[v] and v.startswith("mpi-aware") and launch.mpi is not None and not usable(launch, staged, aware, grid):
            why[v] += f" ({staged} measures it)"
            if staged not in todo:
                todo.append(staged)
    reasons = [w for w in why.values() if w]
    if not todo and any(v != "single" for v in variants):
        raise NodemapError("every variant asked for is skipped: " + "; ".join(reasons))
    return todo, reasons


def bench(launch: Launch, rs: ResultSet, grid: Grid, dtypes: list[str], todo: list[str],
          args: argparse.Namespace) -> None:
    from . import jacobi_gpu as jgpu
    from ..gpu.common import describe, environment, load_topology

    cp = launch.cp
    topo = load_topology(args.topology)[0]
    gpu = describe(cp, launch.devices[0], topo)
    rs.environment = environment(cp, [gpu]) | {
        "slabs": launch.n, "tiles": f"{grid.px}x{grid.py}", "mode": "mpi" if launch.mpi is not None else "single",
        "gpus": launch.keys_all,
        "binding": launch.binding, "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE"),
        "stencil_block": "x".join(map(str, jgpu.block_shape(os.environ.get("NODEMAP_JACOBI_BLOCK"))))}
    if launch.mpi is not None:
        rs.environment["mpi"] = mc.library()
    root = launch.mpi is None or launch.mpi.Get_rank() == 0
    prog = Progress(len(dtypes) * (len(todo) + 3 + bool(grid.tile)), "jacobi", quiet=args.quiet or not root,
                    stops=launch.mpi is None)  # under MPI a Ctrl-C on one rank must not end its loop alone
    for dtype in dtypes:
        gold = baseline(launch, rs, grid, dtype, gpu, args, prog)
        decomposed(launch, rs, grid, dtype, todo, gold, args, prog)


def baseline(launch: Launch, rs: ResultSet, grid: Grid, dtype: str, gpu: Any, args: argparse.Namespace,
             prog: Progress) -> dict[str, Any]:
    """The whole grid on one GPU (the first process's first): the reference
    every variant is verified and scaled against; under --weak also one
    slab's grid alone (the weak-scaling t1). Every process gets it."""
    gold: dict[str, Any] = {}
    root = launch.mpi is None or launch.mpi.Get_rank() == 0
    if root:
        prog.step(f"single GPU {dtype} {grid.nx}x{grid.ny}")
        try:
            gold = single_gpu(launch, rs, grid.nx, grid.ny, dtype, gpu, args)
            gold["t1_weak"] = gold["t1"] if grid.tile == (grid.nx, grid.ny) else None
            if grid.tile and gold["t1_weak"] is None:
                prog.step(f"single GPU {dtype} {grid.tile[0]}x{grid.tile[1]} (one slab's grid)")
                gold["t1_weak"] = single_gpu(launch, rs, *grid.tile, dtype, gpu, args)["t1"]
        except NodemapError as e:
            why = str(e)
            if grid.tile:
                why = (f"--weak verifies every variant against the whole {grid.nx}x{grid.ny} grid on one GPU, "
                       f"which does not fit: give a smaller --size per slab ({why})")
            gold = {"error": why}
    if launch.mpi is not None:
        gold = launch.mpi.bcast(gold, root=0)
    if gold.get("error"):
        if root:
            raise NodemapError(gold["error"])
        raise SystemExit(2)
    return gold


def single_gpu(launch: Launch, rs: ResultSet, nx: int, ny: int, dtype: str, gpu: Any,
               args: argparse.Namespace) -> dict[str, Any]:
    from . import jacobi_gpu as jgpu
    from . import jacobi_host as jh

    cp, dev = launch.cp, launch.devices[0]
    parts = jg.tiles(nx, ny, 1, 1)
    jgpu.check_memory(cp, nx, parts, [dev], dtype)
    w = jgpu.World(cp, jgpu.allocate(cp, nx, parts, [dev], dtype, pinned=False), 1)
    try:
        with mc.deadline(args.timeout, f"the single-GPU {dtype} run"):
            comp = measure(w, "compute", args)
            out = measure(w, "single", args)
    finally:
        jgpu.close(w)
    if out.nan:
        raise NodemapError(f"single GPU {dtype}: NaN in the field: the kernel or the periodic halo copy is broken")
    checked = "residual norm and row sums are the slab runs' gold values"
    if nx * ny <= HOST_CHECK_CELLS:
        why = jh.disagree(out.norm, out.rows, *jh.solve(nx, ny, args.iters, jgpu.DTYPES[dtype][0]))
        if why:
            raise NodemapError(f"single GPU {dtype} differs from NumPy on the host: {why}: the kernel computes "
                               "wrong values")
        checked = f"residual norm and every row's sum equal NumPy's on the host after {args.iters} steps"
    word = jgpu.DTYPES[dtype][1]
    nbytes = jg.stencil_bytes(nx, ny, word)
    peak = gpu.hbm
    rs.add(make_result(
        "jacobi", "stencil kernel", "GB/s", gbps(nbytes, comp.times), verified=True,
        params={"nx": nx, "ny": ny, "dtype": dtype, "iters": args.iters, "gpu": gpu.key,
                "us_per_step": statistics.median(comp.times) * 1e6},
        bytes=nbytes, counting=f"2 x {word} B per updated cell (read once, written once)",
        path=f"{gpu.key} HBM", path_class="HBM", peak=peak.gbs if peak else None,
        peak_source=peak.source if peak else "", notes=("the single-GPU run's stencil without halo copies",),
        verification=f"the same kernel's single-GPU run: {checked}"))
    t1 = statistics.median(out.times)
    rs.add(variant_result("single", dtype, Grid(nx, ny, 1, 1), args, out, 1, 1, {"t1": t1},
                          statistics.median(comp.times), None, [gpu.key],
                          "whole grid on one GPU, periodic rows copied on the device", checked))
    return {"norm": out.norm, "rows": out.rows, "t1": t1}


def decomposed(launch: Launch, rs: ResultSet, grid: Grid, dtype: str, todo: list[str], gold: dict[str, Any],
               args: argparse.Namespace, prog: Progress) -> None:
    from . import jacobi_gpu as jgpu
    from . import jacobi_host as jh

    if not todo:
        return
    cp = launch.cp
    parts_all = grid.tiles
    parts = [parts_all[r] for r in launch.ranks]
    jgpu.check_memory(cp, grid.nx, parts, launch.devices, dtype)
    pinned = launch.mpi is not None
    w = jgpu.World(cp, jgpu.allocate(cp, grid.nx, parts, launch.devices, dtype, pinned), launch.n, launch.world)
    gpus = len(set(launch.keys_all or []))
    root = w.is_root()
    try:
        if any(VARIANTS[v].transport == "nccl" for v in todo):
            why = jgpu.open_nccl(w, launch.keys_all or [], args.timeout)
            if why:
                rs.messages.append(f"nccl variants: {why}")
                todo = [v for v in todo if VARIANTS[v].transport != "nccl"]
        prog.step(f"{launch.n} slabs {dtype}: stencil alone")
        with mc.deadline(args.timeout, f"the {dtype} stencil alone"):
            comp_times = measure(w, "compute", args).times
        comp = statistics.median(comp_times)
        plain: dict[str, list[float]] = {}
        for name in todo:
            prog.step(f"{name} {dtype} on {launch.n} slabs")
            with mc.deadline(args.timeout, f"{name} {dtype} (a hung exchange)"):
                out = measure(w, name, args)
            why = "NaN in the field (a halo never written)" if out.nan else ""
            if root and not why:
                why = jh.disagree(out.norm, out.rows, gold["norm"], gold["rows"])
            why = w.mpi.bcast(why, root=0) if w.mpi is not None else why
            if why:
                rs.fail(Failure("jacobi", name, f"Jacobi {name} halos", "the single-GPU run's field", f"{dtype}: {why}",
                                transport=VARIANTS[name].transport, message=f"{name} {dtype}: differs from the "
                                f"single-GPU run: {why}: the halo exchange is wrong; no time reported"))
                continue
            plain[name] = out.times
            rs.add(variant_result(name, dtype, grid, args, out, launch.n, gpus, gold, comp,
                                  hidden(plain, name, comp_times), launch.keys_all or [], "", ""))
    finally:
        jgpu.close(w)


def hidden(plain: dict[str, list[float]], name: str, comp_times: list[float]) -> float | None:
    """overlap hid for an -overlap variant measured after its plain twin;
    None (not meaningful) where the plain step's communication is within
    the repetitions' spread."""
    base = name.replace("-overlap", "")  # peer-overlap-graph's twin is peer-graph
    if "-overlap" not in name or base not in plain:
        return None
    runs = [Stats.of(t) for t in (plain[base], plain[name], comp_times)]
    return jg.overlap_hidden(*(r.median for r in runs), noise=max(r.spread for r in runs))


def variant_result(name: str, dtype: str, grid: Grid, args: argparse.Namespace, out: Outcome, slabs: int,
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
        params={"variant": name, "dtype": dtype, "nx": nx, "ny": ny, "iters": args.iters, "slabs": slabs,
                "gpus": gpus, "tiles": f"{grid.px}x{grid.py}", "cells_per_s": cells / t, "efficiency": eff,
                "weak_efficiency": weak, "slab_grid": "x".join(map(str, grid.tile)) if grid.tile else None,
                "t_compute_us": t_comp * 1e6,
                "comm_share": jg.comm_share(t, t_comp), "overlap_hidden": hidden, "norm": out.norm,
                "transport": VARIANTS[name].transport},
        path=" | ".join(keys), path_class=VARIANTS[name].transport, notes=tuple(notes),
        verification=checked or f"restarted from the initial field (halos NaN), {args.iters} steps: residual norm "
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
