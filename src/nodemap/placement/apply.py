"""Apply a PlacementPlan to CUDA managed allocations, then verify it.

Order matters (the paper's): AccessedBy for every GPU on every allocation so
remote reads map over NVLink instead of migrating pages; owned ranges get a
preferred location and are prefetched to their owner; replicated ranges are
marked ReadMostly and prefetched to every GPU last, so the read-only copies
are made from pages already in place.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..errors import NodemapError
from ..units import gib
from . import cudadrv as drv
from .planner import HOST, REPLICATED, PlacementPlan


@dataclass
class ApplyReport:
    seconds: float
    ranges: int
    verified: bool
    used_bytes_per_gpu: list[int] = field(default_factory=list)  # device memory that grew while applying
    problems: list[str] = field(default_factory=list)


def check_fits(plan: PlacementPlan, devices: list[int], reserve: int = 512 << 20) -> None:
    """Refuse a plan a GPU cannot hold: oversubscribed managed memory makes
    the driver evict and thrash, and can hang a shared GPU."""
    import cupy

    need = plan.bytes_per_gpu()
    for g, dev in enumerate(devices):
        with cupy.cuda.Device(dev):
            free, _ = cupy.cuda.runtime.memGetInfo()
        if need[g] + reserve > free:
            raise NodemapError(
                f"GPU {dev} has {gib(free)} GiB free but the plan puts {gib(need[g])} GiB "
                f"(+{gib(reserve, 1)} GiB reserve) on it: lower its budget or the replication"
            )


def apply_plan(plan: PlacementPlan, allocations: list[tuple[int, int]], devices: list[int],
               check_memory: bool = True) -> ApplyReport:
    """allocations: (device pointer, size) of each managed allocation, in the
    plan's order; devices: CUDA ordinals, plan GPU k -> devices[k].

    check_memory=False is for callers that have proven room themselves: the
    free-memory test undercounts once the allocation has been resident on a
    GPU, because the driver keeps those pages' memory for managed use after
    they migrate away (seen on H200, CUDA 13, driver 580)."""
    import cupy

    if [s for _, s in allocations] != list(plan.layout.alloc_sizes):
        raise NodemapError("the allocations do not match the plan's sizes: plan and data come from different runs")
    if len(devices) != plan.n_gpus:
        raise NodemapError(f"the plan is for {plan.n_gpus} GPUs, {len(devices)} given")
    if check_memory:
        check_fits(plan, devices)
    before = _used(devices)
    t0 = time.perf_counter()
    ranges = plan.ranges()
    for ptr, size in allocations:
        for dev in devices:
            drv.advise(ptr, size, drv.SET_ACCESSED_BY, dev)
    streams = {}
    for dev in devices:
        with cupy.cuda.Device(dev):
            streams[dev] = cupy.cuda.Stream(non_blocking=True)
    for a, off, n, d in ranges:
        ptr = allocations[a][0] + off
        if d >= 0:
            dev = devices[d]
            drv.advise(ptr, n, drv.SET_PREFERRED_LOCATION, dev)
            with cupy.cuda.Device(dev):
                drv.prefetch(ptr, n, dev, streams[dev].ptr)
        elif d == HOST:
            drv.advise(ptr, n, drv.SET_PREFERRED_LOCATION, None)
            drv.prefetch(ptr, n, None, streams[devices[0]].ptr)
    _sync(streams)
    for a, off, n, d in ranges:
        if d == REPLICATED:
            ptr = allocations[a][0] + off
            drv.advise(ptr, n, drv.SET_READ_MOSTLY, devices[0])
            for dev in devices:
                with cupy.cuda.Device(dev):
                    drv.prefetch(ptr, n, dev, streams[dev].ptr)
    _sync(streams)
    seconds = time.perf_counter() - t0
    after = _used(devices)
    problems = verify(plan, allocations, devices)
    return ApplyReport(seconds, len(ranges), not problems, [b - a for a, b in zip(before, after)], problems)


def verify(plan: PlacementPlan, allocations: list[tuple[int, int]], devices: list[int]) -> list[str]:
    """Read the hints back from the driver; one line per range that is off."""
    out = []
    want_all = sorted(devices)
    for a, (ptr, size) in enumerate(allocations):
        got = sorted(drv.accessed_by(ptr, size))
        if got != want_all:
            out.append(f"allocation {a}: accessed-by {got}, expected {want_all}")
    for a, off, n, d in plan.ranges():
        ptr = allocations[a][0] + off
        rm = drv.range_int(ptr, n, drv.RANGE_READ_MOSTLY)
        if d == REPLICATED:
            if rm != 1:
                out.append(f"allocation {a} +{off}: replicated range not read-mostly")
            continue
        want = devices[d] if d >= 0 else drv.CPU_DEVICE_ID
        pref = drv.range_int(ptr, n, drv.RANGE_PREFERRED_LOCATION)
        last = drv.range_int(ptr, n, drv.RANGE_LAST_PREFETCH_LOCATION)
        if pref != want or last != want or rm:
            out.append(f"allocation {a} +{off} ({n} B): preferred {pref}, last prefetch {last}, read-mostly {rm}; expected {want}")
    return out


def _used(devices: list[int]) -> list[int]:
    import cupy

    out = []
    for dev in devices:
        with cupy.cuda.Device(dev):
            free, total = cupy.cuda.runtime.memGetInfo()
        out.append(total - free)
    return out


def _sync(streams) -> None:
    import cupy

    for dev, s in streams.items():
        with cupy.cuda.Device(dev):
            s.synchronize()
