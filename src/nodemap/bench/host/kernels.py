"""ctypes bindings of the host memory kernels (native/stream.c, latency.c).

The C side owns threads, pinning, timing and verification; this module
turns its arrays into Python values and its error codes into NodemapErrors.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Sequence

from ... import native
from ...errors import NodemapError
from ..interrupt import stoppable
from .stream_options import KERNELS  # NM_K_* order: declared where `bench memory --kernels` offers them

# STREAM counting: words of 8 B moved per element (reads + writes)
STREAM_WORDS = {"copy": 2, "scale": 2, "add": 3, "triad": 3, "sum": 1}
# arrays written per element: each costs a write-allocate read unless NT
WRITES = {"copy": 1, "scale": 1, "add": 1, "triad": 1, "sum": 0}
EPSILON = 1e-13  # relative error allowed per element (as in STREAM)
# instruction sets of the STREAM kernels, narrowest first (native/stream_isa.c)
ISAS = ("scalar", "sse2", "avx2", "avx512")
ISA_ENV = "NODEMAP_STREAM_ISA"
_E_ISA, _E_NO_NT = -3, -4  # NM_E_* of nodemap_native.h

_declared = False


def _lib() -> ctypes.CDLL:
    global _declared
    cdll = native.lib()
    if not _declared:
        c = ctypes
        ip, dp, lp = c.POINTER(c.c_int), c.POINTER(c.c_double), c.POINTER(c.c_long)
        native.declare(cdll, "nm_stream_run", c.c_int, ip, c.c_int, c.c_long, ip, c.c_int, c.c_int, c.c_int,
                       c.c_int, ip, c.c_int, c.c_long, dp, lp, dp, ip)
        native.declare(cdll, "nm_stream_isa", c.c_char_p)
        native.declare(cdll, "nm_stream_isa_supported", c.c_int, c.c_char_p)
        native.declare(cdll, "nm_latency_run", c.c_int, c.c_size_t, c.c_size_t, c.c_int, ip, c.c_int, c.c_int,
                       c.c_long, c.c_ulonglong, dp, lp, ip)
        _declared = True
    return cdll


def isa_supported(name: str) -> bool:
    """Whether this CPU (and this build) runs the STREAM kernels of `name`."""
    return _lib().nm_stream_isa_supported(name.encode()) == 1


def stream_isa() -> str:
    """The ISA the STREAM kernels use now: $NODEMAP_STREAM_ISA, else the best
    this CPU runs. An unknown or unsupported forced value is an error."""
    got = _lib().nm_stream_isa()
    if got is not None:
        return got.decode()
    want = os.environ.get(ISA_ENV, "")
    here = ", ".join(i for i in ISAS if isa_supported(i))
    if _lib().nm_stream_isa_supported(want.encode()) < 0:
        raise NodemapError(f"{ISA_ENV}={want}: unknown instruction set; use one of {', '.join(ISAS)} "
                           f"(this CPU runs {here}), or unset it for the best")
    raise NodemapError(f"{ISA_ENV}={want}: this CPU or build cannot run {want} kernels; "
                       f"use one of {here}, or unset it for the best")


def _ints(values: Sequence[int]):
    return (ctypes.c_int * max(1, len(values)))(*values)


@dataclass(frozen=True)
class StreamRun:
    """Seconds per timed sample of each kernel (`batch` repetitions), and
    what the check found."""

    seconds: dict[str, list[float]]
    bad_elements: dict[str, int]  # array name -> elements off their gold value
    sum_rel_error: float  # inf when the sum check failed
    isa: str  # instruction set of the kernels that ran
    batch: int = 1  # repetitions per timed sample
    stopped: bool = False  # Ctrl-C: fewer samples than asked (none when seconds are empty)

    @property
    def verified(self) -> bool:
        return not any(self.bad_elements.values()) and self.sum_rel_error <= EPSILON

    def failure(self) -> str:
        parts = [f"{n} elements of array {a} wrong" for a, n in self.bad_elements.items() if n]
        if self.sum_rel_error > EPSILON:
            parts.append(f"sum off by relative {self.sum_rel_error:.3g}")
        return "; ".join(parts)


def stream(
    cpus: Sequence[int],
    n: int,
    kernels: Sequence[str],
    reps: int,
    *,
    nt_stores: bool = False,
    mem_nodes: Sequence[int] = (),
    batch: int = 1,
    skip: int = -1,
) -> StreamRun:
    """Time each kernel `reps` times (after one untimed warm-up) on `n`
    doubles per array, one thread pinned to each CPU of `cpus`, memory
    first-touched by those threads or bound to `mem_nodes`. Each timed
    sample is `batch` repetitions back to back, with no barrier between
    them. `skip` is a test hook: the element the kernels leave unwritten,
    so the check must fail. Runs in a thread the harness can stop (Ctrl-C):
    then the completed repetitions come back, verified, with `stopped`."""
    ids = [KERNELS.index(k) for k in kernels]
    isa = stream_isa()
    times = (ctypes.c_double * (len(ids) * reps))()
    bad = (ctypes.c_long * 3)()
    sum_err = ctypes.c_double(0.0)
    done = ctypes.c_int(0)
    err = stoppable(_lib().nm_stream_run, _ints(list(cpus)), len(cpus), n, _ints(ids), len(ids), reps, batch,
                    int(nt_stores), _ints(list(mem_nodes)), len(mem_nodes), skip, times, bad, ctypes.byref(sum_err),
                    ctypes.byref(done))
    if err == _E_ISA:
        stream_isa()  # raises with the reason (the environment changed since)
    if err == _E_NO_NT:
        raise NodemapError(f"STREAM: the {isa} kernels have no non-temporal stores on this machine; "
                           f"drop --nt-stores or set {ISA_ENV} to another of {', '.join(ISAS)}")
    _raise(err, "STREAM", cpus, mem_nodes)
    secs = {k: list(times[i * reps:i * reps + done.value]) for i, k in enumerate(kernels)}
    return StreamRun(secs, {"a": bad[0], "b": bad[1], "c": bad[2]}, sum_err.value, isa, batch, done.value < reps)


@dataclass(frozen=True)
class ChaseRun:
    ns_per_load: list[float]
    nodes: int  # cache-line nodes in the cycle
    steps_to_return: int  # must equal nodes: one cycle through every node
    stopped: bool = False  # Ctrl-C: fewer repetitions than asked

    @property
    def verified(self) -> bool:
        return self.steps_to_return == self.nodes


def chase(
    nbytes: int,
    cpu: int,
    *,
    reps: int = 3,
    line: int = 64,
    mem_nodes: Sequence[int] = (),
    min_loads: int = 1 << 20,
    seed: int = 1,
) -> ChaseRun:
    """Pointer chase over `nbytes` in `line`-byte nodes on a thread pinned to
    `cpu`; each repetition walks whole cycles of at least `min_loads` loads."""
    ns = (ctypes.c_double * reps)()
    steps = ctypes.c_long(0)
    done = ctypes.c_int(0)
    err = stoppable(_lib().nm_latency_run, nbytes, line, cpu, _ints(list(mem_nodes)), len(mem_nodes), reps,
                    min_loads, seed, ns, ctypes.byref(steps), ctypes.byref(done))
    if err == -2:
        raise NodemapError("latency: the pointer chase did not end where it started (memory corrupted?); rerun")
    _raise(err, "latency", [cpu], mem_nodes)
    return ChaseRun(list(ns)[:done.value], nbytes // line, steps.value, done.value < reps)


def _raise(err: int, what: str, cpus: Sequence[int], mem_nodes: Sequence[int]) -> None:
    if err == 0:
        return
    if err == -1:
        raise NodemapError(f"{what}: cannot pin a thread to CPUs {list(cpus)}: pick CPUs this process may use "
                           f"(allowed: {sorted(os.sched_getaffinity(0))})")
    if mem_nodes and err in (22, 12, 1, 18):  # EINVAL ENOMEM EPERM EXDEV from mbind
        raise NodemapError(f"{what}: cannot bind memory to NUMA nodes {list(mem_nodes)} ({os.strerror(err)}): "
                           "pick nodes with memory this process may use")
    raise NodemapError(f"{what}: native kernel failed: {os.strerror(err)}")
