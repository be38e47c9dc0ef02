"""`nodemap bench ring`: a periodic 1D ring halo exchange over every GPU transport.

What it does, as its --help says, and its Options: ring_options.py.
"""

from __future__ import annotations

import functools
import statistics
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable

from . import mpi_common as mc
from .world import Local, World, open_gpus
from ...units import format_size
from ..harness import slowest_rank
from ..driver import Case, PartFailed, Plan
from ..results import Failure, Result, ResultSet, make_result
from .ring_options import TRANSPORTS, Options
from ..story import Positive, ResultParams, Story

WORD = 4
WORK_ELEMS = 32 << 20  # the compute kernel's array: 128 MiB per GPU
CAL_REPS = 16
TAG_LEFT, TAG_RIGHT = 11, 12  # direction a halo travels


def overlap_efficiency(t_comp: float, t_comm: float, t_both: float) -> float:
    """Share of the shorter activity hidden behind the longer one."""
    shorter = min(t_comp, t_comm)
    return (t_comp + t_comm - t_both) / shorter if shorter > 0 else 0.0


def neighbours(rank: int, n: int) -> tuple[int, int]:
    return (rank - 1) % n, (rank + 1) % n


# --- fields ---------------------------------------------------------------------


@dataclass
class Field:
    """One GPU's field and scratch: halos at both ends of the interior."""

    lo: Local
    h: int  # halo elements
    interior: int
    data: Any
    work: Any
    comp: Any  # the compute stream
    host: Any = None  # pinned staging: [send L, send R, recv L, recv R]

    @property
    def ptr(self) -> int:
        return self.data.data.ptr

    def addr(self, part: str) -> int:
        """Device address of 'halo_l', 'halo_r', 'edge_l' (first interior cells), 'edge_r' (last)."""
        h, i = self.h, self.interior
        off = {"halo_l": 0, "edge_l": h, "edge_r": i, "halo_r": h + i}[part]
        return self.ptr + off * WORD


def boundary(cp: Any, rank: int, start: int, count: int) -> Any:
    i = cp.arange(start, start + count, dtype=cp.int64)
    return ((rank + 1) * 1000 + i % 997).astype(cp.float32)


def make_fields(w: World, halo_bytes: int) -> list[Field]:
    from ..gpu.common import ensure_free

    cp = w.cp
    h = max(1, halo_bytes // WORD)
    interior = max(2 * h, 1 << 16)
    out = []
    for lo in w.locals:
        with cp.cuda.Device(lo.device):
            ensure_free(cp, (interior + 2 * h + WORK_ELEMS) * WORD + 4 * h * WORD, "the ring's field")
            data = cp.full(interior + 2 * h, cp.nan, dtype=cp.float32)
            data[h:h + interior] = boundary(cp, lo.rank, 0, interior)
            f = Field(lo, h, interior, data, cp.ones(WORK_ELEMS, dtype=cp.float32),
                      cp.cuda.Stream(non_blocking=True))
            cp.cuda.Device().synchronize()
            out.append(f)
    return out


def check(w: World, fields: list[Field]) -> int:
    """Wrong halo elements: my left halo must hold the left neighbour's last
    interior cells, my right halo the right neighbour's first ones."""
    cp, n = w.cp, w.n
    bad = 0
    for f in fields:
        left, right = neighbours(f.lo.rank, n)
        h, i = f.h, f.interior
        with cp.cuda.Device(f.lo.device):
            bad += int((f.data[:h] != boundary(cp, left, i - h, h)).sum())
            bad += int((f.data[h + i:] != boundary(cp, right, 0, h)).sum())
    return bad


def poison(w: World, fields: list[Field]) -> None:
    for f in fields:
        with w.cp.cuda.Device(f.lo.device):
            f.data[:f.h].fill(w.cp.nan)
            f.data[f.h + f.interior:].fill(w.cp.nan)
            w.cp.cuda.Device().synchronize()


# --- transports: each does one exchange step and waits for it -------------------


def peer_step(w: World, fields: list[Field]) -> None:
    rt, n = w.cp.cuda.runtime, w.n
    nbytes = fields[0].h * WORD
    for f in fields:
        left, right = neighbours(f.lo.rank, n)
        fl, fr = fields[left], fields[right]
        with w.cp.cuda.Device(f.lo.device):
            rt.memcpyPeerAsync(fl.addr("halo_r"), fl.lo.device, f.addr("edge_l"), f.lo.device, nbytes,
                               f.lo.stream.ptr)
            rt.memcpyPeerAsync(fr.addr("halo_l"), fr.lo.device, f.addr("edge_r"), f.lo.device, nbytes,
                               f.lo.stream.ptr)
    _wait(w, fields)


def nccl_step(w: World, fields: list[Field]) -> None:
    nc, n = w.nccl, w.n
    f32 = nc.NCCL_FLOAT32
    nc.groupStart()
    try:
        for f in fields:
            left, right = neighbours(f.lo.rank, n)
            c, st, h = f.lo.comm, f.lo.stream.ptr, f.h
            # the same order on every rank, so two messages to one peer (a ring of 2) match
            c.send(f.addr("edge_l"), h, f32, left, st)
            c.recv(f.addr("halo_r"), h, f32, right, st)
            c.send(f.addr("edge_r"), h, f32, right, st)
            c.recv(f.addr("halo_l"), h, f32, left, st)
    finally:
        nc.groupEnd()
    _wait(w, fields)


def mpi_aware_step(w: World, fields: list[Field]) -> None:
    from mpi4py import MPI

    f, comm = fields[0], w.comm
    left, right = neighbours(f.lo.rank, w.n)
    h = f.h
    d = f.data
    reqs = [comm.Irecv(d[:h], source=left, tag=TAG_RIGHT), comm.Irecv(d[h + f.interior:], source=right, tag=TAG_LEFT),
            comm.Isend(d[h:2 * h], dest=left, tag=TAG_LEFT),
            comm.Isend(d[f.interior:f.interior + h], dest=right, tag=TAG_RIGHT)]
    MPI.Request.Waitall(reqs)


def mpi_staged_step(w: World, fields: list[Field]) -> None:
    from mpi4py import MPI

    cp, f, comm = w.cp, fields[0], w.comm
    rt, st = cp.cuda.runtime, f.lo.stream
    left, right = neighbours(f.lo.rank, w.n)
    nbytes = f.h * WORD
    sl, sr, rl, rr = f.host
    rl_req = comm.Irecv(rl, source=left, tag=TAG_RIGHT)
    rr_req = comm.Irecv(rr, source=right, tag=TAG_LEFT)
    rt.memcpyAsync(sl.ctypes.data, f.addr("edge_l"), nbytes, rt.memcpyDeviceToHost, st.ptr)
    rt.memcpyAsync(sr.ctypes.data, f.addr("edge_r"), nbytes, rt.memcpyDeviceToHost, st.ptr)
    st.synchronize()
    sends = [comm.Isend(sl, dest=left, tag=TAG_LEFT), comm.Isend(sr, dest=right, tag=TAG_RIGHT)]
    rl_req.Wait()
    rt.memcpyAsync(f.addr("halo_l"), rl.ctypes.data, nbytes, rt.memcpyHostToDevice, st.ptr)
    rr_req.Wait()
    rt.memcpyAsync(f.addr("halo_r"), rr.ctypes.data, nbytes, rt.memcpyHostToDevice, st.ptr)
    MPI.Request.Waitall(sends)
    st.synchronize()


def _wait(w: World, fields: list[Field]) -> None:
    for f in fields:
        f.lo.stream.synchronize()


STEPS: dict[str, Callable[[World, list[Field]], None]] = {
    "peer": peer_step, "nccl": nccl_step, "mpi-aware": mpi_aware_step, "mpi-staged": mpi_staged_step}


def usable(w: World, wanted: list[str], aw: mc.Awareness | None) -> tuple[list[str], list[str]]:
    """(transports to run, why the others are skipped)."""
    why = {t: w.refusal(t, aw) for t in wanted}
    return [t for t in wanted if not why[t]], [f"{t}: {why[t]}" for t in wanted if why[t]]


# --- timing ---------------------------------------------------------------------


def launch_compute(w: World, fields: list[Field], reps: int) -> None:
    from ..gpu.common import kernel

    cp = w.cp
    for f in fields:
        with cp.cuda.Device(f.lo.device):
            fn = kernel(cp, "ring.cu", "compute")
            sms = cp.cuda.Device().attributes["MultiProcessorCount"]
            fn((sms,), (256,), (f.work, cp.int64(f.work.size), cp.int32(reps)), stream=f.comp)


def wait_compute(fields: list[Field]) -> None:
    for f in fields:
        f.comp.synchronize()


def timed(w: World, steps: int, body: Callable[[], None]) -> Callable[[], float]:
    """Seconds per step of `body` run `steps` times, the slowest process's."""
    return slowest_rank(w, steps, lambda: [body() for _ in range(steps)])


def calibrate(w: World, fields: list[Field], target_s: float) -> int:
    """Kernel repetitions that make the compute last about as long as the
    exchange. Two passes: the kernel's time is a fixed memory part plus a
    part linear in the repetitions, so one proportional guess undershoots."""

    def run_for(reps: int) -> float:
        def once() -> None:
            launch_compute(w, fields, reps)
            wait_compute(fields)

        once()  # compile and warm
        return timed(w, 3, once)()

    reps = CAL_REPS
    for _ in range(2):
        t = run_for(reps)
        reps = int(w.max_all(float(max(1, min(1 << 20, round(reps * target_s / max(t, 1e-7)))))))
    return reps


# --- the plan -------------------------------------------------------------------


def plan(opts: Options) -> Plan:
    """Per halo size, per transport: the exchange timed, then (unless
    --no-overlap) the compute alone and both at once; rank 0 reports."""
    from ...units import parse_sizes
    from ..options import choices

    wanted = choices(opts.transports, TRANSPORTS, "--transports")
    sizes = parse_sizes(opts.sizes, "--sizes")
    w = open_gpus(opts.mode, opts.gpus, opts.timeout, topology=opts.topology)
    if "nccl" in wanted:
        w.open_nccl()  # else said in usable: kinds with other transports go on without it
    aw = None
    if w.comm is not None:
        aw = mc.prove_cuda_aware(w.comm, mc.probe(w.comm))
    transports, why = usable(w, wanted, aw)
    messages = list(why) + w.notes
    env: dict[str, Any] = {"ranks": w.n, "gpus": w.gpu_keys, "mode": "mpi" if w.comm is not None else "single",
                           "NCCL_NVLS_ENABLE": "0"}
    if aw is not None:
        env["cuda_aware"] = {"aware": aw.aware, "proven": aw.proven, "how": aw.how}
        if not (aw.aware and aw.proven):
            messages.append(mc.NOT_AWARE)
    path = "periodic ring " + " <-> ".join(w.gpu_keys)
    phases = ("comm",) if opts.no_overlap else ("comm", "comp", "both")

    def cases() -> list[Case]:
        if "peer" in transports:
            from ..gpu.devices import enable_peer_access

            messages.extend(enable_peer_access(w.cp, [lo.device for lo in w.locals]))
        out: list[Case] = []
        for size in sizes:
            halo = Halo(w, size)
            for part in (Part(halo, t, opts, path) for t in transports):
                out += [Phase(part, ph) for ph in phases]
            if out:
                out[-1].frees = True
        return out

    return w.plan(f"bench ring --transports {','.join(wanted)} --sizes {opts.sizes}", cases, text, env, messages)


class Halo:
    """One halo size's fields on every GPU: made by its first case, freed after its last."""

    def __init__(self, w: World, size: int) -> None:
        self.w, self.size = w, size
        self._fields: list[Field] | None = None

    def fields(self) -> list[Field]:
        if self._fields is None:
            self._fields = make_fields(self.w, self.size)
            if self.w.comm is not None:
                self._fields[0].host = [_pinned(self.w.cp, self._fields[0].h) for _ in range(4)]
        return self._fields

    def free(self) -> None:
        self._fields = None
        self.w.cp.get_default_memory_pool().free_all_blocks()


@dataclass
class Part:
    """One transport at one halo size: its phases' samples, its one Result."""

    halo: Halo
    transport: str
    opts: Options
    path: str
    m: dict[str, Any] = field(default_factory=dict)  # comm, comp, both: seconds per step; reps


class Phase(Case):
    """One timed phase of a Part: the exchange alone ("comm"), the compute
    kernel alone ("comp", calibrated first to last as long as the exchange)
    or both at once ("both"). The Part's last phase verifies the halos and
    makes its Result from every phase's samples."""

    frees = False  # the halo size's last case: its fields freed after it

    def __init__(self, part: Part, phase: str) -> None:
        self.part, self.phase = part, phase
        t, size = part.transport, part.halo.size
        self.last = phase == "comm" and part.opts.no_overlap or phase == "both"
        self.label = f"{t} halo {format_size(size)}" + ("" if phase == "comm" else f" {phase}")
        self._bound = ExitStack()
        self._run: Callable[[], float] | None = None

    def setup(self) -> None:
        p = self.part
        w, step = p.halo.w, STEPS[p.transport]
        self._bound.enter_context(w.bound(p.opts.timeout * 3, f"the ring exchange over {p.transport} at {p.halo.size} B"))
        fields = p.halo.fields()
        if self.phase == "comp":
            p.m["reps"] = calibrate(w, fields, statistics.median(p.m["comm"]))
        reps = p.m.get("reps", 0)

        def comp() -> None:
            launch_compute(w, fields, reps)
            wait_compute(fields)

        def both() -> None:
            launch_compute(w, fields, reps)
            step(w, fields)
            wait_compute(fields)

        body = {"comm": functools.partial(step, w, fields), "comp": comp, "both": both}[self.phase]
        self._run = timed(w, p.opts.steps, body)

    def run(self) -> float:
        assert self._run is not None
        return self._run()

    def verify(self) -> None:
        """After the last phase: halos poisoned, one more exchange, every halo element compared."""
        if not self.last:
            return
        p = self.part
        w, fields = p.halo.w, p.halo.fields()
        poison(w, fields)
        STEPS[p.transport](w, fields)
        bad, t, size = int(w.max_all(float(check(w, fields)))), p.transport, p.halo.size
        if bad:
            raise PartFailed(Failure("ring", t, f"ring halos over {t}", "0 wrong elements",
                                     f"{bad} wrong halo elements ({format_size(size)})", transport=t, count=bad,
                                     size=size, message=f"{t} at {size} B: {bad} wrong halo elements: the transport "
                                     "corrupts data"))

    def results(self, times: list[float]) -> list[Result]:
        p = self.part
        p.m[self.phase] = times
        return [result(p.halo.w, p.transport, p.halo.fields()[0].h * WORD, p.m, p.path)] if self.last else []

    def teardown(self) -> None:
        self._bound.close()
        if self.frees:
            self.part.halo.free()


def _pinned(cp: Any, elems: int) -> Any:
    import numpy as np

    mem = cp.cuda.alloc_pinned_memory(elems * WORD)
    return np.frombuffer(mem, dtype=np.float32, count=elems)


def result(w: World, transport: str, halo: int, m: dict[str, Any], path: str) -> Any:
    sent = 2 * halo  # per GPU per step
    params: dict[str, Any] = {"halo_bytes": halo, "gpus": w.n, "transport": transport,
                              "t_comm_us": statistics.median(m["comm"]) * 1e6}
    notes = []
    if "both" in m:
        tc, tp, tb = (statistics.median(m[k]) for k in ("comm", "comp", "both"))
        eff = overlap_efficiency(tp, tc, tb)
        params |= {"t_comp_us": tp * 1e6, "t_both_us": tb * 1e6, "overlap": eff, "compute_reps": m["reps"]}
        notes.append(f"overlap efficiency {100 * eff:.0f}% (comm {tc * 1e6:.1f} us, compute {tp * 1e6:.1f} us, "
                     f"both {tb * 1e6:.1f} us per step)")
    return make_result(
        "ring", f"halo {transport}", "GB/s", [sent / t / 1e9 for t in m["comm"]], verified=True,
        params=params, bytes=sent, counting="bytes each GPU sends per step (both halos) / step time",
        path=path, path_class=transport, notes=tuple(notes),
        verification="halos poisoned (NaN), one more exchange, every halo element compared with the "
                     "neighbour's boundary cells (0 wrong)",
    )


def text(rs: ResultSet) -> str:
    from ...text import number, percent, table

    rows = []
    for r in rs.results:
        p = r.params
        rows.append([p["transport"], format_size(p["halo_bytes"]), number(p["t_comm_us"]), number(r.stats.best),
                     number(r.stats.median), number(p.get("t_comp_us")), number(p.get("t_both_us")),
                     percent(p.get("overlap"))])
    return table(["transport", "halo", "step us", "GB/s/GPU", "median", "comp us", "both us", "overlap"], rows,
                 right=[False, False] + [True] * 6)


class Params(ResultParams):
    gpus: Positive
    transport: str


STORY = Story(params=Params, areas=("GPU<->GPU",))
