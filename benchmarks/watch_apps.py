"""Small CuPy programs with known GPU memory behaviour, for `nodemap run --watch` (benchmarks/watch_gpu_cases.py).

  leak   ITERS MIB          each iteration keeps a new MIB buffer (a cache that never frees)
  steady ITERS MIB          a fixed working set, and a MIB temporary per iteration that the pool reuses
  ipc-export ITERS MIB DIR  each iteration cudaMalloc's MIB, sends its CUDA IPC handle to the importer,
                            waits until the importer has read it, then cudaFree's it
  ipc-import ITERS MIB DIR  opens each handle (cudaIpcOpenMemHandle), checks the bytes, never closes it

Every buffer is filled with the iteration's byte and checked where it is read.
At the end each prints one JSON line: its pid, iterations and NVML's view of
the GPU's processes (raw evidence of who holds what).
"""

from __future__ import annotations

import json
import os
import sys
import time

import cupy as cp

PAUSE = 0.1  # s per iteration: a few samples per step at 200 ms


def _nvml_view() -> list:
    try:
        import pynvml as n

        n.nvmlInit()
        h = n.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]))
        used = n.nvmlDeviceGetMemoryInfo(h).used
        return [{"gpu_used": used}] + [{"pid": p.pid, "used": p.usedGpuMemory}
                                       for p in n.nvmlDeviceGetComputeRunningProcesses(h)]
    except Exception as e:
        return [f"no NVML: {e}"]


def _check(buf, value: int) -> None:
    if int(buf[0]) != value or int(buf[-1]) != value:
        raise SystemExit(f"buffer check failed: {int(buf[0])}, {int(buf[-1])} != {value}")


def leak(iters: int, mib: int) -> None:
    cache = []
    for i in range(iters):
        a = cp.empty(mib << 20, dtype=cp.uint8)
        a.fill(i % 251)
        _check(a, i % 251)
        cache.append(a)  # never dropped
        time.sleep(PAUSE)


def steady(iters: int, mib: int) -> None:
    work = cp.full(8 * (mib << 20), 7, dtype=cp.uint8)  # the working set, allocated once
    for i in range(iters):
        a = cp.empty(mib << 20, dtype=cp.uint8)
        a.fill(i % 251)
        _check(a, i % 251)
        del a  # back to CuPy's pool, reused next iteration
        time.sleep(PAUSE)
    _check(work, 7)


def ipc_export(iters: int, mib: int, d: str) -> None:
    rt = cp.cuda.runtime
    with open(os.path.join(d, "handles"), "wb", buffering=0) as out, open(os.path.join(d, "acks"), "rb") as acks:
        for i in range(iters):
            ptr = rt.malloc(mib << 20)  # no pool: freed memory goes back to the driver at once
            rt.memset(ptr, i % 251, mib << 20)
            rt.deviceSynchronize()
            h = rt.ipcGetMemHandle(ptr)
            out.write(len(h).to_bytes(2, "little") + h)
            if acks.read(1) != b"k":
                raise SystemExit("importer did not acknowledge")
            rt.free(ptr)  # the importer still maps it: the memory stays held
            time.sleep(PAUSE)


def ipc_import(iters: int, mib: int, d: str) -> None:
    rt = cp.cuda.runtime
    opened = []
    with open(os.path.join(d, "handles"), "rb") as inp, open(os.path.join(d, "acks"), "wb", buffering=0) as acks:
        for i in range(iters):
            n = int.from_bytes(inp.read(2), "little")
            ptr = rt.ipcOpenMemHandle(inp.read(n))
            mem = cp.cuda.UnownedMemory(ptr, mib << 20, owner=None)
            buf = cp.ndarray((mib << 20,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(mem, 0))
            _check(buf, i % 251)
            opened.append(ptr)  # never cudaIpcCloseMemHandle'd
            acks.write(b"k")


def main() -> None:
    mode, iters, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if mode == "leak":
        leak(iters, mib)
    elif mode == "steady":
        steady(iters, mib)
    elif mode == "ipc-export":
        ipc_export(iters, mib, sys.argv[4])
    elif mode == "ipc-import":
        ipc_import(iters, mib, sys.argv[4])
    else:
        raise SystemExit(f"unknown mode {mode}")
    cp.cuda.runtime.deviceSynchronize()
    print(json.dumps({"mode": mode, "pid": os.getpid(), "iters": iters, "mib": mib, "nvml": _nvml_view()}), flush=True)


if __name__ == "__main__":
    main()
