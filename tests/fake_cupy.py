"""A NumPy stand-in for the part of CuPy `nodemap bench jacobi` uses, so its
orchestration (slabs, exchanges, step order, verification, results) runs
on a machine without a GPU. "Device" memory is host memory: pointers are
real addresses and copies are memmove; streams run work at once, in order;
the stencil "kernel" is jacobi_host's NumPy update of the same rows. What
it cannot show: races between streams, and the CUDA kernel itself (the GPU
tests cover both)."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np

nan = np.nan
int32, int64 = np.int32, np.int64
uint8 = np.uint8
float32, float64 = np.float32, np.float64
__version__ = "fake"


class ndarray(np.ndarray):
    @property
    def data(self):  # CuPy's MemoryPointer: .ptr is the address
        return SimpleNamespace(ptr=self.ctypes.data)

    def get(self):
        return np.asarray(self)

    def sum(self, axis=None, dtype=None, **kw):
        return np.asarray(self).sum(axis=axis, dtype=dtype, **kw).view(ndarray)


def _wrap(a):
    return np.ascontiguousarray(a).view(ndarray)


def empty(shape, dtype):
    return _wrap(np.empty(shape, dtype=dtype))


def zeros(shape, dtype):
    return _wrap(np.zeros(shape, dtype=dtype))


def asarray(a):
    return _wrap(np.asarray(a))


def asnumpy(a):
    return np.asarray(a)


def isnan(a):
    return np.isnan(np.asarray(a))


class _Pool:
    def free_all_blocks(self):
        pass


def get_default_memory_pool():
    return _Pool()


def get_default_pinned_memory_pool():
    return _Pool()


class Device:
    current = 0

    def __init__(self, dev=None):
        self.id = Device.current if dev is None else dev

    def __enter__(self):
        self.prev, Device.current = Device.current, self.id
        return self

    def __exit__(self, *exc):
        Device.current = self.prev

    def use(self):
        Device.current = self.id

    def synchronize(self):
        pass


class Stream:
    null = None

    def __init__(self, non_blocking=False, priority=None):
        self.ptr = id(self)
        self.waited = 0

    def synchronize(self):
        pass

    def wait_event(self, e):
        assert isinstance(e, Event)
        self.waited += 1


class Event:
    def __init__(self, disable_timing=False):
        self.recorded = 0

    def record(self, stream=None):
        self.recorded += 1


def alloc_pinned_memory(nbytes):
    return bytearray(nbytes)


class _Runtime:
    memcpyDeviceToHost, memcpyHostToDevice = 2, 1
    devices = 1

    def getDeviceCount(self):
        return self.devices

    def memGetInfo(self):
        return 8 << 30, 16 << 30

    def memcpyPeerAsync(self, dst, dst_dev, src, src_dev, n, stream):
        ctypes.memmove(dst, src, n)

    def memcpyAsync(self, dst, src, n, kind, stream):
        ctypes.memmove(dst, src, n)

    def memcpy2DAsync(self, dst, dpitch, src, spitch, width, height, kind, stream):
        assert width <= min(dpitch, spitch), "a pitch narrower than the rows"
        for r in range(height):
            ctypes.memmove(dst + r * dpitch, src + r * spitch, width)

    def memsetAsync(self, ptr, value, n, stream):
        ctypes.memset(ptr, value, n)

    def getDeviceProperties(self, d):
        return {"name": b"Fake GPU", "totalGlobalMem": 16 << 30, "pciBusID": d + 1}

    def runtimeGetVersion(self):
        return 0

    def driverGetVersion(self):
        return 0


cuda = SimpleNamespace(Device=Device, Stream=Stream, Event=Event, runtime=_Runtime(),
                       alloc_pinned_memory=alloc_pinned_memory)


def kernels(launches: list):
    """The jacobi.cu functions as NumPy code; each launch is logged."""
    from nodemap.bench.app import jacobi_host as jh

    def jacobi(grid, block, args, stream=None):
        new, a, norm, nx, lo, hi, _, with_norm = args
        launches.append(("jacobi", int(lo), int(hi)))
        lo, hi = int(lo), int(hi)
        window = np.asarray(a)[lo - 1:hi + 1]
        out = np.array(np.asarray(new)[lo - 1:hi + 1])
        sq = jh.step(window, out)
        np.asarray(new)[lo:hi, 1:-1] = out[1:-1, 1:-1]
        if int(with_norm):
            np.asarray(norm)[0] += sq

    def init(grid, block, args, stream=None):
        a, nx, rows, g0 = args
        np.asarray(a)[1:int(rows) - 1] = jh.initial(int(nx), range(int(g0), int(g0) + int(rows) - 2), a.dtype)

    # the vector kernels compute the same update (jacobi.cu)
    return {"jacobi_f32": jacobi, "jacobi_f64": jacobi, "jacobi_f32_v2": jacobi, "jacobi_f32_v4": jacobi,
            "jacobi_f64_v2": jacobi, "init_f32": init, "init_f64": init}


def install(devices: int = 1) -> list:
    """Make nodemap's GPU helpers use this module; returns the launch log."""
    import sys

    from nodemap.bench.gpu import common as gpu_common
    from nodemap.bench.app import jacobi_gpu

    me = sys.modules[__name__]
    cuda.runtime.devices = devices
    launches: list = []
    ks = kernels(launches)
    gpu_common.import_cupy = lambda: me
    gpu_common.load_topology = lambda path=None: (None, "")
    jacobi_gpu._function = lambda cp, device, name: ks[name]
    return launches
