"""A NumPy stand-in for the part of CuPy `nodemap bench jacobi` and `bench
copies` use, so their orchestration (slabs, exchanges, step order; host
placements, copy cases; verification, results) runs on a machine without
a GPU. "Device" memory is host memory: pointers are real addresses and
copies are memmove; streams run work at once, in order; the stencil
"kernel" is jacobi_host's NumPy update of the same rows, copies.cu's fill,
check and copy16 their NumPy twins. What it cannot show: races between
streams, and the CUDA kernels themselves (the GPU tests cover both)."""

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


def arange(start, stop, dtype):
    return _wrap(np.arange(start, stop, dtype=dtype))


def full(shape, value, dtype):
    return _wrap(np.full(shape, value, dtype=dtype))


def ones(shape, dtype):
    return _wrap(np.ones(shape, dtype=dtype))


def concatenate(parts):
    return _wrap(np.concatenate([np.asarray(p) for p in parts]))


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

    attributes = {"MultiProcessorCount": 2}


class _Capture:
    """Stream capture: while captures are open, work queued on any stream is
    kept (not run), in order, and replayed by the graph launched first (the
    stand-in runs work at once and in order, so one replay of everything is
    what the captured graphs do together; streams forked into a capture by
    events are not tracked: the GPU tests cover real dependencies)."""

    open: list = []  # the ptrs of the streams whose capture began and has not ended
    ops: list = []
    graphs: dict = {}


def _queue(stream, fn):
    """Run fn now, or keep it for the graphs being captured."""
    if not _Capture.open:
        return fn()
    _Capture.ops.append(fn)


class Graph:
    def __init__(self, ops):
        self.ops = ops
        self.launches = 0

    def launch(self, stream=None):
        self.launches += 1
        for fn in self.ops:
            fn()


class Stream:
    null = None

    def __init__(self, non_blocking=False, priority=None):
        self.ptr = id(self)
        self.waited = 0

    def begin_capture(self, mode=None):
        cuda.runtime.streamBeginCapture(self.ptr, mode)

    def end_capture(self):
        return _Capture.graphs[cuda.runtime.streamEndCapture(self.ptr)]

    def synchronize(self):
        pass

    def wait_event(self, e):
        assert isinstance(e, Event)
        self.waited += 1


class Event:
    def __init__(self, disable_timing=False):
        self.recorded = 0
        self.at = 0.0

    def record(self, stream=None):
        import time

        self.recorded += 1
        self.at = time.perf_counter()

    def synchronize(self):
        pass


def get_elapsed_time(start, end):
    """Milliseconds between two records (the host's clock: work here runs at once)."""
    return (end.at - start.at) * 1e3 + 1e-6


def alloc_pinned_memory(nbytes):
    return bytearray(nbytes)


class _Runtime:
    memcpyDeviceToHost, memcpyHostToDevice, memcpyDefault = 2, 1, 4
    hostAllocPortable, hostAllocMapped = 1, 2
    devices = 1
    pinned: dict = {}  # hostAlloc'd buffers by address, kept alive until freeHost
    registered: set = set()  # hostRegister'd addresses not yet unregistered

    def hostAlloc(self, n, flags):
        buf = ctypes.create_string_buffer(n)
        self.pinned[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf)

    def freeHost(self, ptr):
        del self.pinned[ptr]

    def hostRegister(self, ptr, n, flags):
        assert ptr not in self.registered, "host memory registered twice"
        self.registered.add(ptr)

    def hostUnregister(self, ptr):
        self.registered.remove(ptr)

    def deviceGetAttribute(self, attr, device):
        return 1

    def getDeviceCount(self):
        return self.devices

    def memGetInfo(self):
        return 8 << 30, 16 << 30

    def memcpyPeerAsync(self, dst, dst_dev, src, src_dev, n, stream):
        _queue(stream, lambda: ctypes.memmove(dst, src, n))

    def memcpyAsync(self, dst, src, n, kind, stream):
        _queue(stream, lambda: ctypes.memmove(dst, src, n))

    def memcpy2DAsync(self, dst, dpitch, src, spitch, width, height, kind, stream):
        assert width <= min(dpitch, spitch), "a pitch narrower than the rows"

        def copy():
            for r in range(height):
                ctypes.memmove(dst + r * dpitch, src + r * spitch, width)
        _queue(stream, copy)

    streamCaptureModeThreadLocal = 1
    launched: list = []  # graph handles, in launch order

    def streamBeginCapture(self, stream, mode=None):
        assert stream not in _Capture.open, "a stream captured twice"
        if not _Capture.open:
            _Capture.ops = []
        _Capture.open.append(stream)

    def streamEndCapture(self, stream):
        """The first capture ended holds every op queued (see _Capture)."""
        assert stream in _Capture.open, "ending a capture never begun"
        _Capture.open.remove(stream)
        h = len(_Capture.graphs) + 1
        _Capture.graphs[h], _Capture.ops = Graph(_Capture.ops), []
        return h

    def graphInstantiate(self, graph):
        return graph

    def graphUpload(self, graph_exec, stream):
        assert graph_exec in _Capture.graphs

    def graphLaunch(self, graph_exec, stream):
        self.launched.append(graph_exec)
        _Capture.graphs[graph_exec].launch(stream)

    def graphDestroy(self, graph):
        pass

    def graphExecDestroy(self, graph_exec):
        pass

    def memsetAsync(self, ptr, value, n, stream):
        _queue(stream, lambda: ctypes.memset(ptr, value, n))

    def deviceCanAccessPeer(self, a, b):
        return 1

    def deviceEnablePeerAccess(self, peer):
        pass

    def getDeviceProperties(self, d):
        return {"name": b"Fake GPU", "totalGlobalMem": 16 << 30, "pciBusID": d + 1}

    def runtimeGetVersion(self):
        return 0

    def driverGetVersion(self):
        return 0


def _u32_at(ptr, n):
    return np.ctypeslib.as_array((ctypes.c_uint32 * int(n)).from_address(int(ptr)))


def copies_kernels():
    """copies.cu's functions as NumPy code (bench copies on the stand-in):
    the data pattern, its word-by-word check, the 16-byte copy; the spin
    kernel returns at once (work here runs when queued, nothing to hold)."""
    from nodemap.bench.gpu.kernels import pattern

    def fill(p, n, seed):
        _u32_at(p, n)[:] = pattern(0, int(n), int(seed))

    def check(p, n, seed, bad):
        np.asarray(bad)[0] += int(np.count_nonzero(_u32_at(p, n) != pattern(0, int(n), int(seed))))

    def copy16(src, dst, n16):
        ctypes.memmove(int(dst), int(src), int(n16) * 16)

    def kernel(fn):
        return lambda grid, block, args, stream=None: _queue(stream, lambda: fn(*args))

    return {"fill": kernel(fill), "check": kernel(check), "copy16": kernel(copy16),
            "spin": kernel(lambda flag, timeout: None)}


class RawModule:
    """A module of copies.cu's stand-in functions (the only .cu bench copies loads through kernels.kernel)."""

    def __init__(self, code="", options=()):
        self.functions = copies_kernels()

    def get_function(self, name):
        return self.functions[name]


cuda = SimpleNamespace(Device=Device, Stream=Stream, Event=Event, runtime=_Runtime(),
                       alloc_pinned_memory=alloc_pinned_memory, get_elapsed_time=get_elapsed_time)


def kernels(launches: list):
    """The jacobi.cu functions as NumPy code; each launch is logged."""
    from nodemap.bench.app import jacobi_host as jh

    def launch(fn):
        return lambda grid, block, args, stream=None: _queue(stream, lambda: fn(grid, block, args))

    def jacobi(grid, block, args):
        new, a, norm, nx, lo, hi, _, with_norm = args
        launches.append(("jacobi", int(lo), int(hi)))
        lo, hi = int(lo), int(hi)
        window = np.asarray(a)[lo - 1:hi + 1]
        out = np.array(np.asarray(new)[lo - 1:hi + 1])
        sq = jh.step(window, out)
        np.asarray(new)[lo:hi, 1:-1] = out[1:-1, 1:-1]
        if int(with_norm):
            np.asarray(norm)[0] += sq

    def box(grid, block, args):
        new, a, norm, nx, lo, hi, clo, chi, _, with_norm = (int(x) if i > 2 else x for i, x in enumerate(args))
        launches.append(("box", lo, hi, clo, chi))
        window = np.asarray(a)[lo - 1:hi + 1, clo - 1:chi + 1]
        out = np.array(window)
        sq = jh.step(window, out)
        np.asarray(new)[lo:hi, clo:chi] = out[1:-1, 1:-1]
        if with_norm:
            np.asarray(norm)[0] += sq

    def init(grid, block, args):
        a, nx, rows, g0 = args
        np.asarray(a)[1:int(rows) - 1] = jh.initial(int(nx), range(int(g0), int(g0) + int(rows) - 2), a.dtype)

    # the vector kernels compute the same update (jacobi.cu)
    jacobi, box, init = launch(jacobi), launch(box), launch(init)
    return {"jacobi_f32": jacobi, "jacobi_f64": jacobi, "jacobi_f32_v2": jacobi, "jacobi_f32_v4": jacobi,
            "jacobi_f64_v2": jacobi, "jacobi_box_f32": box, "jacobi_box_f64": box, "init_f32": init,
            "init_f64": init}


def install(devices: int = 1, nccl: bool = False) -> list:
    """Make nodemap's GPU helpers use this module (and, with `nccl`, the
    NCCL stand-in, tests/fake_nccl.py); returns the launch log."""
    import sys

    from nodemap.bench.gpu import common as gpu_common
    from nodemap.bench.app import jacobi_gpu
    from nodemap.bench.comm import world
    from nodemap.bench.gpu import graphs

    me = sys.modules[__name__]
    graphs._driver_instantiate = lambda: None  # fake graph handles never reach a real libcuda (GPU machines)
    cuda.runtime.devices = devices
    launches: list = []
    ks = kernels(launches)
    gpu_common.import_cupy = lambda: me
    gpu_common.load_topology = lambda path=None: (None, "")
    jacobi_gpu._function = lambda cp, device, name: ks[name]
    if nccl:
        import fake_nccl

        world.import_nccl = lambda: fake_nccl
    return launches
