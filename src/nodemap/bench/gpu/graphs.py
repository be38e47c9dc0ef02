"""CUDA graphs captured from streams: one capture for every kind that
replays a loop of device work without host work per step (Jacobi's steps,
NCCL's operations), as nccl-tests' -G and the reference's nccl_graphs do.

A capture is made of groups: a group's first stream is where its capture
begins and ends, its other streams fork from it (an event) and join it
again, so work queued on any of them lands in the group's graph, across
GPUs too (CUDA captures cross-device event dependencies). Groups capture at
the same time, one graph each: NCCL needs that for one thread driving
several GPUs (each GPU's stream captured on its own, as nccl-tests -G does;
one graph over every GPU hung in NCCL on 2 H200s, 2026-11-28).

What a capture cannot hold (measured, cudaErrorStreamCaptureUnsupported):
cudaMemcpyPeerAsync (a peer copy is cudaMemcpyAsync with cudaMemcpyDefault
under unified addressing) and allocations (CuPy's elementwise temporaries).

Graphs are instantiated so that each kernel keeps the priority of the stream
it was captured from (CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY): an
overlapped step's boundary rows on a high-priority stream stay ahead of the
interior inside the graph, as they are outside it.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Sequence

from ...errors import NodemapError

USE_NODE_PRIORITY = 8  # CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY (cudaGraphInstantiateFlagUseNodePriority)

Lane = tuple[int, Any]  # (CUDA ordinal, stream)


@dataclass
class Graph:
    """Instantiated graphs, each launched into the stream its capture began on."""

    cp: Any
    execs: list[tuple[int, int, Any]] = field(default_factory=list)  # (ordinal, graph exec, stream)
    priority: bool = True  # kernels keep their streams' priorities (see the module's doc)

    def launch(self) -> None:
        rt = self.cp.cuda.runtime
        for dev, ex, st in self.execs:
            with self.cp.cuda.Device(dev):
                rt.graphLaunch(ex, st.ptr)

    def close(self) -> None:
        rt = self.cp.cuda.runtime
        for dev, ex, _ in self.execs:
            with self.cp.cuda.Device(dev):
                rt.graphExecDestroy(ex)
        self.execs = []


def capture(cp: Any, groups: Sequence[Sequence[Lane]], body: Callable[[], None]) -> Graph:
    """Run `body` (which only queues work on the groups' streams) under
    capture and return its graphs, uploaded. On any error every capture
    begun is ended and dropped and the original error is raised: a capture
    left open would fail every later call on its stream."""
    rt = cp.cuda.runtime
    mode = getattr(rt, "streamCaptureModeThreadLocal", 1)  # other threads' CUDA calls stay legal
    open_: list[Lane] = []
    try:
        for group in groups:
            dev, origin = group[0]
            with cp.cuda.Device(dev):
                rt.streamBeginCapture(origin.ptr, mode)
                open_.append((dev, origin))
                fork = cp.cuda.Event(disable_timing=True)
                fork.record(origin)
            for d, st in group[1:]:
                with cp.cuda.Device(d):
                    st.wait_event(fork)
        body()
        for group in groups:
            _join(cp, group)
        captured = []
        while open_:
            dev, origin = open_[0]
            with cp.cuda.Device(dev):
                captured.append((dev, rt.streamEndCapture(origin.ptr), origin))
            open_.pop(0)
    except BaseException:
        _abandon(cp, open_)
        raise
    return _instantiate(cp, captured)


def _join(cp: Any, group: Sequence[Lane]) -> None:
    dev, origin = group[0]
    for d, st in group[1:]:
        with cp.cuda.Device(d):
            done = cp.cuda.Event(disable_timing=True)
            done.record(st)
        with cp.cuda.Device(dev):
            origin.wait_event(done)


def _abandon(cp: Any, open_: list[Lane]) -> None:
    rt = cp.cuda.runtime
    for dev, origin in open_:
        try:
            with cp.cuda.Device(dev):
                g = rt.streamEndCapture(origin.ptr)
                if g:
                    rt.graphDestroy(g)
        except Exception:  # the capture is already invalid: ending it is all that is needed
            pass


def _instantiate(cp: Any, captured: list[tuple[int, int, Any]]) -> Graph:
    rt = cp.cuda.runtime
    out = Graph(cp)
    try:
        for dev, g, st in captured:
            with cp.cuda.Device(dev):
                ex, out.priority = instantiate(cp, g)
                out.execs.append((dev, ex, st))
                rt.graphUpload(ex, st.ptr)
    except BaseException:
        out.close()
        raise
    finally:
        for dev, g, _ in captured:
            with cp.cuda.Device(dev):
                rt.graphDestroy(g)
    return out


def instantiate(cp: Any, graph: int) -> tuple[int, bool]:
    """(graph exec, whether node priorities are kept). CuPy instantiates
    without flags, so the driver's cuGraphInstantiateWithFlags is called
    directly where libcuda is loadable (the handles are the runtime's)."""
    fn = _driver_instantiate()
    if fn is None:
        return cp.cuda.runtime.graphInstantiate(graph), False
    ex = ctypes.c_void_p()
    rc = fn(ctypes.byref(ex), ctypes.c_void_p(graph), ctypes.c_ulonglong(USE_NODE_PRIORITY))
    if rc:
        raise NodemapError(f"cuGraphInstantiateWithFlags failed (CUDA driver error {rc}): the captured steps "
                           "cannot run as a graph on this driver; run the variants without -graph")
    return int(ex.value or 0), True


@lru_cache(maxsize=1)
def _driver_instantiate() -> Any:
    try:
        fn = ctypes.CDLL("libcuda.so.1").cuGraphInstantiateWithFlags
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_ulonglong]
    fn.restype = ctypes.c_int
    return fn
