"""Where this process's OpenMP threads really run (`nodemap show --threads`).

Like xthi: start one OpenMP parallel region through the OpenMP runtime
itself (libgomp, loaded with ctypes), so the threads are created and bound
by the runtime from OMP_NUM_THREADS / OMP_PLACES / OMP_PROC_BIND exactly as
they would be for an application built with GCC; each thread reads its own
kernel thread id, the CPU it runs on (/proc/self/task/TID/stat, field 39)
and its affinity (sched_getaffinity). The runtime binds the calling thread
too (it becomes thread 0): read the process's own binding before this.

Other runtimes (LLVM libomp, Intel) read the same variables; their result
can differ only where the OpenMP standard leaves room (e.g. more threads
than places). Without an OpenMP runtime the process's existing threads are
listed instead, with a note.
"""

from __future__ import annotations

import os
import threading

RUNTIMES = ("libgomp.so.1", "libomp.so", "libiomp5.so")


def _cpu_of(tid: int) -> int:
    """The CPU the thread last ran on (field 39 of its stat), -1 unknown."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            stat = f.read()
        return int(stat[stat.rindex(")") + 2:].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


def _row(thread: int, tid: int) -> dict:
    try:
        cpus = sorted(os.sched_getaffinity(tid))
    except OSError:
        cpus = []
    return {"thread": thread, "tid": tid, "cpu": _cpu_of(tid), "cpus": cpus}


def _runtime():
    import ctypes

    for name in RUNTIMES:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        if hasattr(lib, "GOMP_parallel"):  # libgomp's entry point; libomp and libiomp5 export it too
            return name, lib
    return None, None


def openmp_rows() -> tuple[list[dict], str]:
    """One row per OpenMP thread (thread number, tid, CPU now, affinity) and
    a note ("" when an OpenMP runtime ran the region)."""
    import ctypes

    name, lib = _runtime()
    if lib is None:
        rows = [_row(i, int(t)) for i, t in enumerate(sorted(os.listdir("/proc/self/task"), key=int))]
        return rows, "no OpenMP runtime (libgomp) found: the process's own threads are shown"
    lib.omp_get_thread_num.restype = ctypes.c_int
    rows: list[dict] = []
    lock = threading.Lock()

    def body(_data) -> None:
        # runs in every thread of the team, which the runtime has bound already
        row = _row(lib.omp_get_thread_num(), threading.get_native_id())
        with lock:
            rows.append(row)

    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(body)
    lib.GOMP_parallel(callback, None, ctypes.c_uint(0), ctypes.c_uint(0))  # 0 threads: the runtime's default
    return sorted(rows, key=lambda r: r["thread"]), ""


def verdicts(rows: list[dict], rank_cpus: set[int]) -> list[str]:
    """Threads outside the rank's PUs, and threads sharing PUs when there
    are enough PUs for each to have its own."""
    out = []
    outside = [r["thread"] for r in rows if rank_cpus and not set(r["cpus"]) <= rank_cpus]
    if outside:
        out.append(f"thread(s) {','.join(map(str, outside))} may run outside the rank's PUs")
    if len(rows) <= len(rank_cpus):
        bound = [frozenset(r["cpus"]) for r in rows]
        if all(len(b) < len(rank_cpus) for b in bound):  # bound threads: each should have its own place
            shared = sorted({r["thread"] for r, b in zip(rows, bound)
                             for o, c in zip(rows, bound) if o is not r and b & c})
            if shared:
                out.append(f"threads {','.join(map(str, shared))} share PUs")
    return out
