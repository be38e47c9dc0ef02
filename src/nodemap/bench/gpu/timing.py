"""Timing device work as nvbandwidth does: a spin kernel holds each stream
while the work and its events are queued, then the host releases every
stream at once by writing a flag in mapped pinned memory (`Gate`), and
`time_streams` reads each stream's events."""

from __future__ import annotations

import ctypes
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from ...errors import NodemapError
from .kernels import kernel

SPIN_TIMEOUT_NS = 20_000_000_000  # a stream held longer than this means a lost release


class Gate:
    """A flag in mapped pinned host memory that spin kernels wait on."""

    def __init__(self, cp: Any) -> None:
        self.cp = cp
        rt = cp.cuda.runtime
        self.ptr = rt.hostAlloc(64, rt.hostAllocMapped | rt.hostAllocPortable)
        self.flag = (ctypes.c_int * 2).from_address(self.ptr)
        self.close_ = rt.freeHost

    def hold(self, stream: Any) -> None:
        """Queue a spin kernel on `stream` (on its device, the current one)."""
        import numpy as np

        fn = kernel(self.cp, "copies.cu", "spin")
        fn((1,), (1,), (np.uintp(self.ptr), np.uint64(SPIN_TIMEOUT_NS)), stream=stream)

    def arm(self) -> None:
        self.flag[0] = 0
        self.flag[1] = 0

    def release(self) -> None:
        self.flag[0] = 1

    def timed_out(self) -> bool:
        return bool(self.flag[1])

    def close(self) -> None:
        if self.ptr:
            self.close_(self.ptr)
            self.ptr = 0


@dataclass
class Job:
    """Work for one stream: `enqueue(stream)` queues it (copies, kernels)."""

    device: int
    stream: Any
    enqueue: Callable[[Any], None]


def time_streams(cp: Any, gate: Gate, jobs: Sequence[Job]) -> list[float]:
    """Seconds each job took on its stream, all released together."""
    gate.arm()
    events = []
    try:
        for j in jobs:
            with cp.cuda.Device(j.device):
                gate.hold(j.stream)
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record(j.stream)
                j.enqueue(j.stream)
                e1.record(j.stream)
                events.append((e0, e1))
    finally:
        gate.release()  # never leave a stream held, even when queuing failed
    for _, e1 in events:
        e1.synchronize()
    if gate.timed_out():
        raise NodemapError("a spin kernel gave up waiting for the host's release after 20 s: work queued "
                           "behind it waited for the device (an allocation or module load inside the timed "
                           "region: a bug) or took that long to queue (use a smaller --size or fewer --iters)")
    return [cp.cuda.get_elapsed_time(e0, e1) * 1e-3 for e0, e1 in events]


@contextmanager
def gate(cp: Any) -> Iterator[Gate]:
    g = Gate(cp)
    try:
        yield g
    finally:
        g.close()


