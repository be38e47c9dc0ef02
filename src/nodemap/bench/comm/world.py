"""The one world of a multi-process benchmark: who this process is among
the ranks, which GPU it drives, and its MPI and NCCL communicators.

- Ranks: MPI's rank and size; the node-local rank and size from MPI's
  COMM_TYPE_SHARED split (the launcher's variables, env.py's one list,
  only say the global rank before MPI is up); the node's name from the
  scheduler (launcher.node_name).
- The GPU comes from the plan, never from `local_rank % GPUs` alone:
  (a) a rank that nodemap placed (`nodemap run`, the SPANK plugin, `plan
      --emit env`: NODEMAP_GPUS set) or whose launcher gave each rank its
      own visibility (srun --gpu-bind, `plan --emit native`: the node's
      ranks see different CUDA_VISIBLE_DEVICES) drives device 0 of what it sees;
  (b) otherwise the node's plan for its local ranks, made once per node
      through the plan cache that `nodemap run` uses (mapping.nodeplan),
      gives each local rank its GPU, matched to a CUDA ordinal by PCI bus id;
  (c) only when no plan can be made: local rank mod GPUs, and a note says
      so. Ranks that share one GPU are said in a note, not hidden.
  `choose` is that decision as a pure function (tests run it on fixture
  nodes); `pick` applies it to this process's CUDA devices; `World.gpu`
  gathers what `pick` needs over MPI, the fleet's pair test
  (fleet/pairtest.py) from rank 0's grouping of its ranks.
- GPUs this process drives (`locals`): in one process (`open_gpus`
  'single') those --gpus names, under MPI its own; each with its rank
  among every process's GPUs (NCCL's), ordinal and stream.
- NCCL: opened once over every GPU of every rank (`open_nccl`: one
  communicator per rank under MPI, ncclCommInitAll in one process),
  never over GPUs that two ranks or slabs share, which NCCL refuses: it
  says why instead (kinds that go on without NCCL skip it with that
  reason), and `require_nccl` ends the run in one line, never NCCL's traceback.
- `barrier` and `max_all` are what harness.slowest_rank needs; a World of
  one process (`alone()`) has no MPI and makes both no-ops; `plan` is a
  kind's Plan on this world (ranks run together, stop where they agree).
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from . import mpi_common as mc
from .. import interrupt
from ...errors import NodemapError
from ..options import MPI_TIMEOUT_S
from ...mapping.nodeplan import NodePlan

NCCL_SHARED_GPU = ("NCCL refuses two ranks on one GPU (ncclInvalidUsage 'Duplicate GPU detected' since "
                   "NCCL 2.5): give each rank its own GPU")
NCCL_MISSING = ("CuPy has no usable NCCL (cupy.cuda.nccl): install NCCL for your CUDA "
                "(pip install nvidia-nccl-cu12 / nvidia-nccl-cu13) next to CuPy")
PLANNED = "NODEMAP_GPUS"  # set with the plan's GPUs by nodemap run, the SPANK plugin and plan --emit env


HOW = {"visibility": "the device visibility nodemap or the launcher gave it",
       "plan": "the node's plan (as nodemap run places ranks)", "local rank mod GPUs": "local rank mod GPUs"}


@dataclass(frozen=True)
class Devices:
    """The CUDA ordinals a rank drives (the first is its device), how they were chosen, and notes."""

    ordinals: tuple[int, ...] = ()
    how: str = ""  # "visibility", "plan", "local rank mod GPUs", "" (no GPU)
    notes: tuple[str, ...] = ()

    @property
    def device(self) -> int | None:
        return self.ordinals[0] if self.ordinals else None


def visibility(env: Any) -> tuple[tuple[str, str], ...]:
    """The device-visibility variables this process has (env.py's list), and NODEMAP_GPUS."""
    from ...env import GPU_VISIBILITY_VARS

    return tuple((v, env[v]) for v in GPU_VISIBILITY_VARS + (PLANNED,) if v in env)


def placed(mine: Sequence[tuple[str, str]], node_ranks: Sequence[Sequence[tuple[str, str]]]) -> str:
    """Why this rank's visible devices already are its planned ones ('' when they are not):
    nodemap set NODEMAP_GPUS, or the node's ranks were each given their own visibility."""
    names = dict(mine)
    if PLANNED in names:
        return f"placed by nodemap ({PLANNED}={names[PLANNED]}): device 0 of what this rank sees"
    seen = {tuple(v) for v in node_ranks}
    if names and len(seen) > 1:
        shown = ", ".join(f"{k}={v}" for k, v in mine)
        return f"placed by the launcher ({shown}, each rank its own): device 0 of what this rank sees"
    return ""


def choose(local_rank: int, ndev: int, bus_ids: Sequence[str], why_placed: str = "",
           plan: NodePlan | None = None, no_plan: str = "") -> Devices:
    """This rank's GPUs. `bus_ids`: the PCI bus id of each CUDA ordinal it
    sees; `why_placed` from `placed`; `plan`: the node's plan (one task per
    local rank); `no_plan`: why there is none."""
    from ...topology.model import norm_bus_id

    if ndev <= 0:
        return Devices()
    if why_placed:
        return Devices(tuple(range(ndev)), "visibility")
    why = no_plan or "no plan"
    if plan is not None:
        tasks = plan.tasks
        if local_rank < len(tasks):
            ordinal = {norm_bus_id(b): d for d, b in enumerate(bus_ids) if b}
            wanted = tasks[local_rank].gpu_pci
            found = [ordinal.get(norm_bus_id(b)) for b in wanted]
            if found and None not in found:
                return Devices(tuple(found), "plan")
            why = (f"the plan gives it GPU(s) {', '.join(wanted)}, which CUDA does not show" if wanted
                   else "the plan gives it no GPU")
        else:
            why = f"the plan has {len(tasks)} task(s), none for local rank {local_rank}"
    return Devices((local_rank % ndev,), "local rank mod GPUs",
                   (f"GPU by local rank mod {ndev} GPUs, not by the node's plan: {why}",))


def shared(keys: Sequence[str]) -> dict[str, list[int]]:
    """The GPUs that several ranks drive, each with its ranks (keys: each rank's 'node:GPU', rank order)."""
    ranks: dict[str, list[int]] = {}
    for r, k in enumerate(keys):
        if k:
            ranks.setdefault(k, []).append(r)
    return {k: rs for k, rs in ranks.items() if len(rs) > 1}


def sharing(keys: Sequence[str]) -> list[str]:
    """One note per GPU that several ranks drive."""
    return [f"ranks {','.join(map(str, rs))} share {k}: each gets a part of its time and memory"
            for k, rs in shared(keys).items()]


def pick(cp: Any, local_rank: int, local_size: int, mine: Sequence[tuple[str, str]],
         node_ranks: Sequence[Sequence[tuple[str, str]]]) -> Devices:
    """`choose` on this process's CUDA devices: `mine` and `node_ranks` are this
    rank's and every local rank's `visibility` (World.gpu gathers them over the
    node's communicator; the fleet, which uses no collective, from rank 0's
    grouping of its ranks' hellos); the plan is made only where the launcher
    or nodemap did not place the rank already."""
    ndev = cp.cuda.runtime.getDeviceCount()
    why = placed(mine, node_ranks)
    plan, no_plan = (None, "")
    if not why and ndev:
        plan, no_plan = node_plan(local_size, local_rank, _say if local_rank == 0 else lambda text: None)
    return choose(local_rank, ndev, bus_ids(cp, ndev) if plan else [], why, plan, no_plan)


def planned_nics(env: Mapping[str, str]) -> dict[str, str]:
    """The NIC variables of this rank's task in the node's plan, as `nodemap run` sets them, where
    neither it nor the user set one. MPI and NCCL read them once, when they start: a run whose
    ranks measure every rail (the fleet's pair tests: local rank k of each node on rail k) sets
    them before MPI_Init. The plan is made over the whole node, as every rank of it makes it (a
    launcher's binding undone for the planning, then restored). Empty where no launcher says the
    local rank and size, or no plan can be made."""
    from ...env import NIC_STEERING, NIC_VARS
    from ...errors import NodemapError
    from ...launcher import detect
    from ...mapping.launch import Binding, apply, undo_launcher_binding

    if any(env.get(k) for k in ("NODEMAP_NIC", *NIC_STEERING)):
        return {}
    try:
        lr = detect(env)
    except NodemapError:
        return {}
    if lr.size < 1:
        return {}
    mine = os.sched_getaffinity(0)
    undo_launcher_binding(env)
    try:
        plan, _ = node_plan(lr.size, lr.rank, _say if lr.rank == 0 else lambda text: None)
    finally:
        apply(Binding(sorted(mine), [], "none"))  # the launcher's binding back: only the NICs are the plan's
    if plan is None or lr.rank >= len(plan.tasks):
        return {}
    return {k: v for k, v in plan.tasks[lr.rank].env if k in NIC_VARS}


def _say(text: str) -> None:
    """The plan cache's word (a long wait, a cache it cannot use), once per node: from local rank 0."""
    import sys

    print(f"nodemap: {text}", file=sys.stderr, flush=True)


def bus_ids(cp: Any, ndev: int) -> list[str]:
    """The PCI bus id of every CUDA ordinal."""
    from ..gpu.devices import bus_id

    return [bus_id(cp.cuda.runtime.getDeviceProperties(d)) for d in range(ndev)]


def node_plan(local_size: int, local_rank: int, say: Callable[[str], None]) -> tuple[NodePlan | None, str]:
    """The node's plan for its local ranks: the Request of `nodemap run` without options (the one it
    makes, from its cache when a rank already made it), or None and why not."""
    from ...mapping.nodeplan import node_plan as plan_of
    from ...mapping.request import Request
    from ...topology.record import asdict

    try:
        return plan_of(asdict(Request(tasks=local_size)), from_launcher=True, local_rank=local_rank, say=say)[0], ""
    except Exception as e:  # a GPU to drive still: the note says how it was chosen instead
        return None, str(e) or type(e).__name__


@dataclass
class Local:
    """One GPU this process drives: its rank among every process's GPUs (NCCL's), CUDA ordinal, stream,
    NCCL communicator (after open_nccl) and the kind's buffers on it."""

    rank: int
    device: Any
    stream: Any = None
    comm: Any = None
    bufs: dict[str, Any] = field(default_factory=dict)


@dataclass
class World:
    """This process among the benchmark's processes (comm None: the only one) and the GPUs it drives."""

    comm: Any = None
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    node: str = ""
    local: Any = None  # the node's ranks (COMM_TYPE_SHARED)
    devices: Devices | None = None  # after gpu()
    gpu_keys: list[str] = field(default_factory=list)  # every GPU's "node:GPU" (one process: "GPU"), rank order
    notes: list[str] = field(default_factory=list)  # how GPUs were chosen and shared, for the results' messages
    timeout: float = MPI_TIMEOUT_S
    MPI: Any = None  # mpi4py's MPI module (its operations), when comm is
    cp: Any = None  # CuPy, after open_gpus
    locals: list[Local] = field(default_factory=list)  # the GPUs this process drives
    nccl: Any = None  # cupy.cuda.nccl once open_nccl opened it
    nccl_why: str = ""  # why NCCL cannot run here, once open_nccl found it

    @property
    def device(self) -> int | None:
        return self.devices.device if self.devices else None

    @property
    def n(self) -> int:
        """GPUs in all (every process's): NCCL's ranks."""
        return len(self.gpu_keys)

    def is_root(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.comm is not None:
            self.comm.Barrier()

    def max_all(self, v: float) -> float:
        """The largest v over processes (a collective: every process calls it alike)."""
        return v if self.comm is None else self.comm.allreduce(v, op=self.MPI.MAX)

    def sum_all(self, v: float) -> float:
        return v if self.comm is None else self.comm.allreduce(v, op=self.MPI.SUM)

    def allgather(self, v: Any) -> list[Any]:
        return [v] if self.comm is None else self.comm.allgather(v)

    def sync(self) -> None:
        """Every local GPU's stream done, then every rank here."""
        for lo in self.locals:
            lo.stream.synchronize()
        self.barrier()

    def place(self, topo: Any) -> mc.Place:
        """Where this rank runs (node, CPUs, NUMA nodes), for pair classes and binding lines."""
        return mc.place_of(self.rank, self.node, os.sched_getaffinity(0), self.local_rank, topo)

    def gpu(self, cp: Any, label: Callable[[int], str] | None = None) -> Devices:
        """Choose this rank's GPU(s) (a collective), make the first current, and note
        how they were chosen and which ranks share one. `label`: a CUDA ordinal's name
        ("GPU3" from the topology, devices.key) for the notes and gpu_keys; "cuda3" without one."""
        if self.devices is not None:
            return self.devices
        mine = visibility(os.environ)
        with mc.deadline(self.timeout, "the node's ranks' GPU visibility (allgather)"):
            node_ranks = self.local.allgather(mine) if self.local is not None else [mine]
        self.devices = pick(cp, self.local_rank, self.local_size, mine, node_ranks)
        if self.device is not None:
            cp.cuda.Device(self.device).use()
        if label is None:
            from ..gpu.devices import ordinal_key as label
        key = f"{self.node}:{label(self.device)}" if self.device is not None else ""
        with mc.deadline(self.timeout, "the other ranks' GPUs (allgather)"):
            every = self.allgather((key, self.devices.how, self.devices.notes))
        self.gpu_keys = [k for k, _, _ in every]
        self.notes += summary(every) + sharing(self.gpu_keys)
        return self.devices

    def nccl_refusal(self) -> str:
        """Why NCCL cannot run over these GPUs ('' when it can): two ranks (or slabs) on one GPU (every
        rank has the same keys, so every rank decides alike and none waits in ncclCommInitRank)."""
        both = shared(self.gpu_keys)
        return "; ".join(f"ranks {','.join(map(str, rs))} share {k}" for k, rs in both.items()) + \
            f": {NCCL_SHARED_GPU}" if both else ""

    def open_nccl(self) -> str:
        """NCCL over every GPU of every rank, opened on first use: '' when open, else why not (no NCCL,
        a shared GPU). Under MPI the unique id goes to every rank by broadcast."""
        if self.nccl is not None or self.nccl_why:
            return self.nccl_why
        self.nccl_why = self.nccl_refusal()
        if self.nccl_why:
            return self.nccl_why
        try:
            nccl = import_nccl()
        except NodemapError as e:
            self.nccl_why = str(e)
            return self.nccl_why
        if self.comm is None:
            # One thread driving every GPU: all_reduce at 8 B-64 KiB hung on 2 and 4 H200 (NCCL 2.28.9)
            # while p2p ops and >= 1 MiB finished. Suspected cause, not yet confirmed on a GPU: connections
            # made lazily inside the first small collective's group. Connect at init instead, unless the
            # user chose otherwise.
            os.environ.setdefault("NCCL_RUNTIME_CONNECT", "0")
            with mc.deadline(self.timeout, "ncclCommInitAll"):
                comms = nccl.NcclCommunicator.initAll([lo.device for lo in self.locals])
        else:
            with mc.deadline(self.timeout, "the NCCL unique id (MPI broadcast) and ncclCommInitRank"):
                uid = self.comm.bcast(nccl.get_unique_id() if self.rank == 0 else None, root=0)
                try:
                    comms = [nccl.NcclCommunicator(self.size, uid, self.rank)]
                except Exception as e:  # NcclError: one line, as every error; NCCL_DEBUG=WARN tells more
                    raise NodemapError(f"ncclCommInitRank over {self.size} ranks failed ({e}); run with "
                                       "NCCL_DEBUG=WARN for NCCL's reason") from None
        for lo, c in zip(self.locals, comms):
            lo.comm = c
        self.nccl = nccl
        return ""

    def require_nccl(self) -> None:
        """open_nccl, or one line and exit 2 (under MPI rank 0 says it: every rank decides alike)."""
        why = self.open_nccl()
        if why and self.comm is not None:
            mc.fail(self.comm, why)
        if why:
            raise NodemapError(why)

    def refusal(self, transport: str, aware: mc.Awareness | None, each: str = "GPU") -> str:
        """Why `transport` cannot move halos here ('' when it can): peer copies need one process, MPI one
        process per `each`, CUDA-aware MPI a proven one, NCCL no shared GPU (nccl_why once opened)."""
        if transport == "peer" and self.comm is not None:
            return "copies between processes need CUDA IPC; run without mpiexec for peer copies"
        if transport.startswith("mpi") and self.comm is None:
            return f"needs one {'process' if each == 'GPU' else 'rank'} per {each}: run under mpiexec -n <{each}s>"
        if transport == "mpi-aware" and not (aware and aware.aware and aware.proven):
            return aware.message() if aware else mc.NOT_AWARE
        return (self.nccl_why or self.nccl_refusal()) if transport == "nccl" else ""

    def stop_agreed(self) -> bool:
        """Ctrl-C on any rank: every rank leaves at the same point (one process: its own flag)."""
        if self.comm is None:
            return interrupt.requested()
        if self.max_all(int(interrupt.requested())):
            interrupt.request()
            return True
        return False

    def bound(self, seconds: float, what: str) -> AbstractContextManager:
        """A case's own bound under MPI (ranks run together: no watchdog there), else none (the driver's)."""
        return mc.deadline(seconds, what) if self.comm is not None else nullcontext()

    def plan(self, command: str, make: Callable[[], list[Any]], text: Callable[[Any], str],
             environment: dict[str, Any], messages: list[str]) -> Any:
        """A kind's Plan on this world: closed after the last case, or here when planning fails; rank 0
        reports; under MPI the ranks run the cases together (each bounds its own wait) and stop where they
        agree (stop_agreed); one process has the driver's --timeout."""
        from ..driver import Plan

        with ExitStack() as hold:
            hold.callback(self.close)
            cases = make()
            return Plan(command, cases, text, environment=environment, messages=messages, stop=self.stop_agreed,
                        hold=hold.pop_all(), root=self.is_root(), together=self.comm is not None)

    def close(self) -> None:
        """Destroy the NCCL communicators and free CuPy's pool (MPI ends with the process)."""
        for lo in self.locals:
            if lo.comm is not None:
                try:
                    lo.comm.destroy()
                except Exception:
                    pass
                lo.comm = None
        if self.cp is not None:
            self.cp.get_default_memory_pool().free_all_blocks()


def summary(every: Sequence[tuple[str, str, tuple[str, ...]]]) -> list[str]:
    """How the ranks' GPUs were chosen, one line, then each note with the ranks it is about."""
    hows = sorted({HOW[h] for _, h, _ in every if h})
    out = [f"each rank's GPU chosen by {' and '.join(hows)}"] if hows else []
    ranks: dict[str, list[int]] = {}
    for r, (_, _, notes) in enumerate(every):
        for n in notes:
            ranks.setdefault(n, []).append(r)
    return out + [f"rank{'s' if len(rs) > 1 else ''} {','.join(map(str, rs))}: {n}" for n, rs in ranks.items()]


def start(timeout: float = MPI_TIMEOUT_S) -> World:
    """MPI started (mc.start: one deadline), and this rank's place among the ranks."""
    from ...launcher import node_name

    MPI = mc.start(timeout)
    comm = MPI.COMM_WORLD
    with mc.deadline(timeout, "the node's ranks (MPI_Comm_split_type)"):
        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    return World(comm, comm.Get_rank(), comm.Get_size(), local.Get_rank(), local.Get_size(), node_name(os.environ),
                 local, timeout=timeout, MPI=MPI)


def alone() -> World:
    """The world of one process driving its GPUs itself (no MPI)."""
    from ...launcher import node_name

    return World(node=node_name(os.environ))


def launched_by_mpi() -> bool:
    from ... import env

    return env.world_size(os.environ) > 1


def import_nccl() -> Any:
    """cupy.cuda.nccl, NVLS off before NCCL reads its environment; NodemapError(NCCL_MISSING) without it."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    from ..gpu.common import import_cupy

    import_cupy()
    try:
        from cupy.cuda import nccl

        if not getattr(nccl, "available", True):
            raise ImportError
    except Exception:
        raise NodemapError(NCCL_MISSING) from None
    return nccl


def gpu_keys(cp: Any, devs: list[int], topology: str | None = None) -> list[str]:
    """Topology names ("GPU3", as `nodemap topo` or the --topology file) of CUDA ordinals; cudaN where
    unknown."""
    from ..gpu.devices import key, load_topology

    try:
        topo = load_topology(topology)[0]
    except Exception:  # a label, never a reason to stop
        topo = None
    return [key(cp, d, topo) for d in devs]


def open_gpus(mode: str, gpus: str | None, timeout: float, topology: str | None = None,
              repeats: bool = False) -> World:
    """The world of a GPU kind: `mode` 'single' (one process over the GPUs --gpus names; `repeats`: one
    GPU named again is one more local), 'mpi' (each rank on the GPU the node's plan gives it) or 'auto'
    (mpi under a launcher of several ranks). NCCL is opened by the kind (open_nccl, require_nccl)."""
    from ..gpu.common import import_cupy

    if mode == "auto":
        mode = "mpi" if launched_by_mpi() else "single"
    if mode == "single":
        from ..options import gpus as gpu_list

        w, cp = alone(), import_cupy()
        w.timeout = timeout
        devs = gpu_list(gpus, cp.cuda.runtime.getDeviceCount(), repeats=repeats)
        w.gpu_keys, first = gpu_keys(cp, devs, topology), 0
    else:
        w = start(timeout)
        try:
            cp = import_cupy()
        except NodemapError as e:
            mc.fail(w.comm, str(e))
        w.gpu(cp, lambda d: gpu_keys(cp, [d], topology)[0])  # from the node's plan
        devs, first = [w.device], w.rank
    w.cp = cp
    for i, d in enumerate(devs):
        with cp.cuda.Device(d):
            w.locals.append(Local(first + i, d, cp.cuda.Stream(non_blocking=True)))
    return w
