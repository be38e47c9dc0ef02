"""What every MPI benchmark needs: mpi4py started with clear errors, waits
that cannot hang, rank placement, and the CUDA-awareness probe.

- `start()` imports mpi4py (the [mpi] extra) under a watchdog: an MPI that
  cannot start is a one-line NodemapError, a launcher that never answers is
  a one-line message and exit 2, never a hang.
- `deadline()` bounds a phase (nodemap.proc: a timer thread, and a forked
  watchdog for when MPI holds the GIL): if the phase is not done in time it
  prints what was waited for and ends the process. The launcher then ends
  the other ranks. Per-call polling would cost every ping-pong
  microseconds; one deadline per phase costs nothing while it runs.
- `cuda_support()` asks the library (MPIX_Query_cuda_support, found with
  ctypes in the libmpi this process loaded) before any device pointer goes
  near MPI: a non-aware MPI can segfault on one. `prove_cuda_aware()` then
  moves a small device buffer and checks it before any timing trusts it.
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass, field
from typing import Any, ContextManager, Sequence

from ...errors import NodemapError
from ..options import MPI_TIMEOUT_S

MPI_MISSING = ("[mpi] extra missing: mpi4py is not installed; pip install 'nodemap[mpi]' "
               "(mpi4py with the mpich wheel, or build mpi4py against your cluster's MPI)")
NOT_AWARE = "MPI is not CUDA-aware: measuring the staged path instead"
FIGURE_SIZE = 16 << 20  # MPI bandwidth is judged at this size at both check levels, so quick and full agree


def figure_size(results: Sequence[Any]) -> int:
    """FIGURE_SIZE where these MPI results measured it, else their largest size."""
    sizes = {r.params.get("size", 0) for r in results}
    return FIGURE_SIZE if FIGURE_SIZE in sizes else max(sizes, default=0)


def start(timeout_s: float = MPI_TIMEOUT_S) -> Any:
    """mpi4py's MPI module, initialized; NodemapError when it cannot be."""
    with deadline(timeout_s, "MPI_Init (a launcher that never answers: start with mpiexec/srun, "
                  "or check that PMI matches the MPI mpi4py was built with)"):
        try:
            from mpi4py import MPI
        except ImportError as e:
            if getattr(e, "name", "") and e.name.startswith("mpi4py"):
                raise NodemapError(MPI_MISSING) from None
            raise NodemapError(f"MPI cannot start: {e}: install the mpich wheel (pip install mpich) or point "
                               "LD_LIBRARY_PATH at the MPI mpi4py was built with") from None
        except RuntimeError as e:
            raise NodemapError(f"MPI cannot start ({e}): check the launcher and the MPI library "
                               "(mpiexec from the same MPI as mpi4py)") from None
    return MPI


def deadline(seconds: float, what: str) -> ContextManager[None]:
    """End the process with one line if the block runs past `seconds` (proc.deadline: also while
    MPI holds the GIL)."""
    from ... import env, proc

    rank = env.global_rank_or(os.environ, "?")
    return proc.deadline(seconds, f"nodemap: error: rank {rank} waited {seconds:g} s "
                                  f"for {what}: a peer rank died or hangs (raise --timeout if the machine is just slow)")


def fail(comm: Any, message: str) -> None:
    """Every rank decides a bad input alike; rank 0 alone says it (one line)."""
    if comm.Get_rank() == 0:
        raise NodemapError(message)
    raise SystemExit(2)


def library() -> str:
    from mpi4py import MPI

    first = MPI.Get_library_version().strip().splitlines()[0]
    return " ".join(first.split(",")[0].split())  # "Open MPI v4.1.6", "MPICH Version: 5.0.2"


# --- placement of ranks ---------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """Where one rank runs: node, CPUs, and the NUMA nodes/package they cover."""

    rank: int
    host: str
    cpus: str  # list syntax
    numa: tuple[int, ...] = ()
    package: tuple[int, ...] = ()
    local_rank: int = 0
    gpu: str = ""  # "GPU1" when the rank drives one

    def label(self) -> str:
        where = f"NUMA{','.join(map(str, self.numa))}" if self.numa else f"cpus {self.cpus}"
        return f"rank{self.rank}@{self.host}:{where}" + (f":{self.gpu}" if self.gpu else "")


def place_of(rank: int, host: str, cpus: Any, local_rank: int, topo: Any, gpu: str = "") -> Place:
    """A rank's Place from its CPUs (any iterable of OS indexes) and the node's Topology (None: CPUs only)."""
    from ...topology.cpuset import CpuSet

    cpus = CpuSet(cpus)
    numa: tuple[int, ...] = ()
    pkg: tuple[int, ...] = ()
    if topo is not None:
        numa = tuple(topo.numa_of(cpus))
        pkg = tuple(p.os_index for p in topo.packages if not p.cpuset.isdisjoint(cpus))
    return Place(rank, host, cpus.format(), numa, pkg, local_rank, gpu)


def pair_class(a: Place, b: Place) -> str:
    """How far apart two ranks run: same-numa, other-numa, other-socket, other-node."""
    if a.host != b.host:
        return "other-node"
    if not a.numa or not b.numa:
        return "same-node"
    if set(a.numa) & set(b.numa):
        return "same-numa"
    if a.package and b.package and not set(a.package) & set(b.package):
        return "other-socket"
    return "other-numa"


CLASS_ORDER = ("same-numa", "same-node", "other-numa", "other-socket", "other-node")


def interesting_pairs(places: list[Place]) -> list[tuple[int, int, str]]:
    """One pair from rank 0 per distance class present, nearest first."""
    seen: dict[str, tuple[int, int, str]] = {}
    for p in places[1:]:
        c = pair_class(places[0], p)
        seen.setdefault(c, (0, p.rank, c))
    return [seen[c] for c in CLASS_ORDER if c in seen]


# --- CUDA awareness -------------------------------------------------------------


@dataclass
class Awareness:
    gpu: bool  # a CUDA GPU is visible to this rank
    aware: bool  # the library says device buffers are fine
    how: str  # what said so
    proven: bool = False  # a verified device transfer went through
    notes: list[str] = field(default_factory=list)

    def message(self) -> str:
        if not self.gpu:
            return "no GPU: device buffers (D) skipped; the CUDA-awareness probe did not run"
        if self.aware and self.proven:
            return f"MPI is CUDA-aware ({self.how}); a verified device-buffer transfer proved it"
        if self.aware:
            return f"MPI says it is CUDA-aware ({self.how}) but the device-buffer transfer failed: {NOT_AWARE}"
        return f"{NOT_AWARE} ({self.how})"


def libmpi_path() -> str:
    """The libmpi this process loaded (from /proc/self/maps), '' if none."""
    try:
        maps = open("/proc/self/maps").read()
    except OSError:
        return ""
    hits = sorted(set(re.findall(r"(/\S*/libmpi(?:_abi)?\.so[.\d]*)\s*$", maps, re.M)))
    return hits[0] if hits else ""


def query_cuda_support(path: str | None = None) -> tuple[bool | None, str]:
    """(aware, how): MPIX_Query_cuda_support (Open MPI, MPICH >= 4.1) from the
    loaded library; None when the library has no such query."""
    path = libmpi_path() if path is None else path
    if path:
        try:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
            fn = getattr(lib, "MPIX_Query_cuda_support")
        except (OSError, AttributeError):
            fn = None
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, []
            v = int(fn())
            return bool(v), f"MPIX_Query_cuda_support() = {v} in {os.path.basename(path)}"
    return _from_version()


def _from_version() -> tuple[bool | None, str]:
    """The library's own report where it has no query function."""
    try:
        from mpi4py import MPI

        text = MPI.Get_library_version()
    except Exception:
        return None, "no MPI library version"
    if re.search(r"MVAPICH2-GDR|MVAPICH-Plus", text):
        return True, "MVAPICH2-GDR build (MV2_USE_CUDA=1 needed)"
    if "CRAY MPICH" in text.upper() and os.environ.get("MPICH_GPU_SUPPORT_ENABLED") == "1":
        return True, "Cray MPICH with MPICH_GPU_SUPPORT_ENABLED=1"
    return None, "the library has no MPIX_Query_cuda_support and its version string names no CUDA support"


def gpu_visible() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def capability() -> Awareness:
    """This rank's side of the decision: a GPU visible, and the library's word
    (asked without a GPU too: the record says what the library is)."""
    aware, how = query_cuda_support()
    return Awareness(gpu=gpu_visible(), aware=bool(aware), how=how)


def agreed(sides: Sequence[Awareness]) -> Awareness:
    """The sides' capabilities met (bench's ranks, the fleet's pair): a GPU
    only where every side sees one, CUDA-aware only where every side's
    library says so; `how` is the first doubting side's word, else the first's."""
    doubt = next((s for s in sides if not s.aware), sides[0])
    return Awareness(gpu=all(s.gpu for s in sides), aware=all(s.aware for s in sides), how=doubt.how)


def probe(comm: Any) -> Awareness:
    """Ask the library on every rank; all must agree, else treat it as not aware."""
    with deadline(MPI_TIMEOUT_S, "the CUDA-awareness probe (allgather)"):
        return agreed(comm.allgather(capability()))


def _min() -> Any:
    from mpi4py import MPI

    return MPI.MIN


def prove_cuda_aware(comm: Any, aw: Awareness, nbytes: int = 1 << 16) -> Awareness:
    """A ring transfer of device buffers, checked (p2p.transfer_checked); only
    when the library says it is aware (a device pointer into a non-aware MPI
    can segfault)."""
    if not (aw.gpu and aw.aware):
        return aw
    from mpi4py import MPI

    from .p2p import DeviceEndpoint, seed_of, transfer_checked

    n, r = comm.Get_size(), comm.Get_rank()
    ep = DeviceEndpoint(MPI, comm, nbytes, seed_of(r))
    with deadline(MPI_TIMEOUT_S, "the CUDA-aware proof transfer"):
        ok = transfer_checked(ep, nbytes, (r + 1) % n, (r - 1) % n)
        aw.proven = bool(comm.allreduce(int(ok), op=_min()))
    return aw
