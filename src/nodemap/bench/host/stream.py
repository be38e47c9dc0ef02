"""The STREAM case both host kinds run (`bench memory`'s thread orders,
`bench numa`'s bandwidth cells): arrays sized to the caches and free
memory, the kernels asked, the DRAM peak the node's share is judged on.
native/stream.c measures (kernels.py)."""

from __future__ import annotations

import os
from typing import Any, Sequence

from ...errors import NodemapError
from ...topology.cpuset import CpuSet
from ...topology.model import Topology
from ...units import format_size, gbps, parse_size
from .. import driver
from . import kernels as hostkernels
from ..driver import Case, Repeats
from ..peaks import PEAK_UNKNOWN, Peak, dram_peak
from ..results import Result, make_result
from .machine import free_memory

ELEMENT = 8  # bytes of a double
MIN_ARRAY = 4096


def llc_bytes(topo: Topology, cpus: CpuSet) -> int:
    return sum(c.size for c in topo.last_level_caches() if not c.cpuset.isdisjoint(cpus))


def array_size(topo: Topology, cpus: CpuSet, mem_nodes: CpuSet, size: str | None, arrays: int = 3,
               root: str = "/", option: str = "--size") -> tuple[int, list[str]]:
    """Bytes per array and notes: 4x the LLCs involved, capped by free memory."""
    nodes = mem_nodes or topo.numa_of(cpus)
    free = free_memory(nodes, root)
    where = f"NUMA {nodes.format()}" if nodes else "this machine"
    if size is not None:
        n = parse_size(size, option, minimum=MIN_ARRAY)
        if free and arrays * n > free:
            raise NodemapError(f"{option} {size}: {arrays} arrays need {format_size(arrays * n)} but {where} has "
                               f"{format_size(free)} free; give a smaller {option}")
        return n, []
    llc = llc_bytes(topo, cpus)
    want = 4 * llc if llc else 256 << 20
    notes = [] if llc else ["last-level cache size unknown: arrays of 256 MiB"]
    cap = int(0.6 * free / arrays) if free else want
    if cap < want:
        notes.append(f"arrays capped at {format_size(cap)} by free memory (4x LLC would be {format_size(want)})")
        want = cap
    return max(want, MIN_ARRAY), notes


def parse_kernels(text: str) -> list[str]:
    ks = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in ks if k not in hostkernels.KERNELS]
    if bad or not ks:
        raise NodemapError(f"--kernels: unknown kernel {', '.join(bad) or '(none)'}; "
                           f"choose from {','.join(hostkernels.KERNELS)}")
    return [k for k in hostkernels.KERNELS if k in ks]  # the STREAM order the gold values assume


def path_of(topo: Topology, cpus: Sequence[int], mem_nodes: CpuSet) -> tuple[str, str]:
    cs = CpuSet(cpus)
    home = topo.numa_of(cs)
    mem = mem_nodes or home
    src = f"NUMA{home.format()} cores({cs.format()})"
    how = "" if mem_nodes else " (first touch)"
    return f"{src} -> NUMA{mem.format()} memory{how}", "local" if mem.issubset(home) else "remote"


class Stream(Case):
    """STREAM on one set of pinned CPUs, every kernel asked: native/stream.c
    loops the repetitions (one untimed first, threads pinned and arrays
    first-touched once), each sample `batch` repetitions back to back."""

    def __init__(self, topo: Topology, cpus: Sequence[int], n: int, kernels: Sequence[str], *, benchmark: str,
                 nt_stores: bool = False, mem_nodes: CpuSet = CpuSet(), thread_order: str = "", batch: int = 1,
                 skip: int = -1, peak: Peak | None = None,
                 label: str = "", params: dict | None = None, messages: Sequence[str] = ()) -> None:
        self.topo, self.cpus, self.n, self.kernels = topo, list(cpus), n, list(kernels)
        self.nt_stores, self.mem_nodes, self.benchmark, self.thread_order = nt_stores, mem_nodes, benchmark, thread_order
        self.batch, self.skip, self.peak = batch, skip, peak
        self.label = label or thread_order
        self.params = params or {}  # added to every Result's (numa's cell)
        self.messages = messages
        self.last: hostkernels.StreamRun | None = None

    def runs(self, reps: int) -> list[dict[str, float]]:
        """Per repetition: each kernel's seconds."""
        self.last = run = hostkernels.stream(self.cpus, self.n, self.kernels, reps, nt_stores=self.nt_stores,
                                             mem_nodes=list(self.mem_nodes), batch=self.batch, skip=self.skip)
        done = len(run.seconds[self.kernels[0]])
        return [{k: run.seconds[k][i] for k in self.kernels} for i in range(done)]

    def figure(self, sample: dict[str, float]) -> float:
        return sum(sample.values())

    def verify(self) -> None:
        run = self.last
        if run is not None and not run.verified:
            raise NodemapError(f"STREAM check failed on CPUs {CpuSet(self.cpus).format()}: {run.failure()}; the "
                               "numbers are not reported (memory errors? rerun, then check the machine)")

    def results(self, samples: list[dict[str, float]]) -> list[Result]:
        assert self.last is not None
        isa, n, batch, cpus = self.last.isa, self.n, self.batch, self.cpus
        path, cls = path_of(self.topo, cpus, self.mem_nodes)
        share = node_share(self.topo, CpuSet(cpus), self.mem_nodes, self.peak)
        llc = llc_bytes(self.topo, CpuSet(cpus))
        out = []
        for k in self.kernels:
            seconds = [s[k] for s in samples]
            words = hostkernels.STREAM_WORDS[k]
            wa_words = words + (0 if self.nt_stores else hostkernels.WRITES[k])
            nbytes = words * ELEMENT * n * batch
            wa_bytes = wa_words * ELEMENT * n * batch
            out.append(make_result(
                self.benchmark, k, "GB/s", gbps(nbytes, seconds), verified=True,
                params={"threads": len(cpus), "cpus": CpuSet(cpus).format(), "cpu_order": list(cpus),
                        "thread_order": self.thread_order, "elements": n, "array_bytes": n * ELEMENT,
                        "nt_stores": self.nt_stores, "mem_nodes": self.mem_nodes.format(), "isa": isa,
                        "batch": batch, "write_allocate_bytes": wa_bytes,
                        "write_allocate_best_gbps": wa_bytes / min(seconds) / 1e9} | self.params,
                bytes=nbytes,
                counting=f"STREAM: {words} x 8 B per element ({wa_words} x 8 B with write-allocate)"
                         + (f", {batch} repetitions per sample" if batch > 1 else ""),
                path=path, path_class=cls,
                verification=f"every element of the arrays used within {hostkernels.EPSILON:g} (relative) of the "
                             "replayed gold values, arrays poisoned with NaN first"
                             + ("; sum within the same bound of n*a" if k == "sum" else ""),
                peak=share.gbs if share else None, peak_source=share.source if share else "",
                notes=(isa_note(isa),) + cache_caution(words * ELEMENT * n, llc),
            ))
        return out

def measure(topo: Topology, cpus: Sequence[int], n: int, kernels: Sequence[str], reps: int,
            **kw: Any) -> list[Result]:
    """One Stream case of `reps` samples through the driver (tests, scripts; `benchmark=` the kind it is of)."""
    return driver.measure_case(Stream(topo, cpus, n, kernels, **kw), Repeats(count=reps))


def node_share(topo: Topology, cpus: CpuSet, mem_nodes: CpuSet, peak: Peak | None) -> Peak | None:
    """The share of the machine's DRAM peak the memory nodes used can give:
    their part of the nodes with memory (DIMMs spread evenly over them)."""
    if peak is None:
        return None
    with_memory = [n.os_index for n in topo.numa_nodes if n.memory > 0]
    used = [i for i in (mem_nodes or topo.numa_of(cpus)) if i in with_memory]
    if not with_memory or not used or len(used) == len(with_memory):
        return peak
    frac = len(used) / len(with_memory)
    return Peak(peak.gbs * frac, f"{peak.source}; NUMA {CpuSet(used).format()}: {len(used)} of "
                                 f"{len(with_memory)} memory nodes' share")


def cache_caution(footprint: int, llc: int) -> tuple[str, ...]:
    """Arrays that fit in the last-level caches measure cache, not DRAM."""
    if not llc or footprint > llc:
        return ()
    return (f"caution: the kernel's arrays ({format_size(footprint)}) fit in the last-level caches of these CPUs "
            f"({format_size(llc)}): this is cache bandwidth, not DRAM; give a larger --size",)


def host_peak(given: float | None) -> tuple[Peak | None, str]:
    """--peak, else SMBIOS; with the note to print when unknown."""
    if given is not None:
        if not 0 < given < 1e6:
            raise NodemapError(f"--peak {given:g}: give the DRAM peak in GB/s, e.g. 204.8")
        return Peak(given, f"--peak {given:g} GB/s"), ""
    peak = dram_peak()
    return peak, "" if peak else PEAK_UNKNOWN


def isa_note(isa: str) -> str:
    how = f"forced by {hostkernels.ISA_ENV}" if os.environ.get(hostkernels.ISA_ENV) else "the best this CPU runs"
    return f"{isa} kernels ({how})"
