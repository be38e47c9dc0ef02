"""Figures: the numbers `check` judges, drawn from Results and a Topology.

A Figure is one number with a stable, node-independent key
("gpu/0/hbm_triad", "h2d/numa1->gpu0", "numa/bw/numa0->numa1"), the kind
of practical limit that applies to it (a row kind of expectations.toml),
the part that limit is looked up by (GPU model, "PCIe Gen5 x16", "NV18"),
its peak, and the group of peers on the same path it is compared with.
Only Results are read here (metric, params, path, path_class, peak); no
bench kind's internals. Keys are the same on every node of a fleet.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable

from ..bench.endpoints import Endpoint, of_key, renamed
from ..bench.gpu.devices import ordinal_gpus
from ..bench.host.thread_orders import in_words
from ..bench.results import HIGHER_IS_BETTER, Result, ResultSet
from ..topology.model import Topology
from ..bench.intervals import coverage, median_interval
from .mpi import figure_size

ROUNDS = "rounds"  # a Result's params key: measurements pooled into its samples (check/remeasure.py)

AREAS = ("inventory", "host memory", "NUMA", "latency", "GPU memory", "host<->GPU", "GPU<->GPU", "NCCL", "MPI")


@dataclass(frozen=True)
class Figure:
    key: str  # stable across nodes: "gpu/0/hbm_triad"
    area: str  # one of AREAS
    label: str  # for people: "GPU0 HBM triad (float64)"
    path: str  # the Result's topology path
    unit: str
    value: float  # the Result's best (STREAM, nvbandwidth and nccl-tests report the best)
    higher_is_better: bool
    kind: str = ""  # expectations.toml row kind, "" when no practical limit applies
    part: str = ""  # what the limit row's `match` is tried on
    peak: float | None = None  # in `unit`
    peak_source: str = ""
    group: str = ""  # peers judged against their median ("" = none)
    path_class: str = ""
    median: float = 0.0  # the Result's median: the statistic the verdict judges
    spread: float = 0.0
    # the median's interval from the repetitions (bench/intervals.py): n = 1 has none (low = high = median),
    # n = 0 a figure saved before intervals existed (judged as the point `value`)
    low: float = 0.0
    high: float = 0.0
    n: int = 0
    coverage: float = 0.0
    rounds: int = 1  # measurements pooled into it (check re-measures a figure its interval left undecided)
    setting: str = ""  # what reaches the peak, for the fix (STREAM: OMP_NUM_THREADS/OMP_PLACES)
    peak_spread: float = 0.0  # the peak's own spread when it is another measurement (STREAM's best placement)
    # the median interval of the measurement the peak comes from (STREAM's best placement); 0: an exact peak
    peak_median: float = 0.0
    peak_low: float = 0.0
    peak_high: float = 0.0
    # what was measured between (bench/endpoints.py keys, "gpu0", "numa1"): "" where no pair applies
    src: str = ""
    dst: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def endpoints(self) -> tuple[Endpoint | None, Endpoint | None]:
        """(source, destination): as the figure carries them, else (saved
        before figures carried them) from the end of its key."""
        if self.src or self.dst:
            return Endpoint.parse(self.src), Endpoint.parse(self.dst)
        return of_key(self.key)


def figure(r: Result, key: str, area: str, label: str, **kw: Any) -> Figure:
    kw.setdefault("peak", r.peak)
    kw.setdefault("peak_source", r.peak_source)
    src, dst = r.endpoints
    kw.setdefault("src", src.key if src else "")
    kw.setdefault("dst", dst.key if dst else "")
    return Figure(key=key, area=area, label=label, path=r.path, unit=r.unit, value=r.stats.best,
                  higher_is_better=HIGHER_IS_BETTER.get(r.unit, True), path_class=r.path_class,
                  median=r.stats.median, spread=r.stats.spread, **_interval(r), **kw)


def _interval(r: Result) -> dict[str, Any]:
    """The median's interval from the Result's samples (its min..max when
    a file holds statistics only), and how many measurements were pooled."""
    iv = median_interval(r.samples) if r.samples else None
    rounds = int(r.params.get(ROUNDS, 1))
    if iv is not None:
        return {"low": iv.low, "high": iv.high, "n": iv.n, "coverage": iv.coverage, "rounds": rounds}
    if r.stats.n > 1 and not r.samples:
        return {"low": r.stats.min, "high": r.stats.max, "n": r.stats.n, "coverage": coverage(r.stats.n, 1),
                "rounds": rounds}
    return {"low": r.stats.median, "high": r.stats.median, "n": 1, "rounds": rounds}


def extract(sets: Iterable[ResultSet], topo: Topology | None = None, dram_peak: float | None = None) -> list[Figure]:
    """Every judged figure of the ResultSets, in a stable order (`dram_peak`:
    the site's, for STREAM where the node does not say its own)."""
    out: list[Figure] = []
    for rs in sets:
        results = _physical(rs, topo)
        bench = results[0].benchmark if results else ""
        figs = (stream(results, topo, dram_peak) if bench == "memory" else
                _EXTRACT.get(bench, lambda rs_, t: [])(results, topo))
        out += [_unjudged_if_contradicted(f, rs.messages) for f in figs]
    _add_remote_peaks(out)
    return _with_mpi_device_peak(with_nccl_peak(_one_numa_stream(out, topo)))


def _physical(rs: ResultSet, topo: Topology | None) -> list[Result]:
    """The set's results with each CUDA ordinal its GPU kind could not name ("cuda0") renamed to the
    Topology's GPU by the bus id the set records (bench/gpu/devices.py); the rest stay ordinals."""
    names = ordinal_gpus(rs.environment, topo)
    return [replace(r, params=renamed(r.params, names)) for r in rs.results] if names else list(rs.results)


# --- host ---------------------------------------------------------------------------


def stream(results: list[Result], topo: Topology | None, dram_peak: float | None = None) -> list[Figure]:
    """The all-cores (one thread per core) triad against the best placement
    the sweep found, and, when the DRAM peak is known (SMBIOS, --peak, or a
    site file's `stream` row: `dram_peak`), that best placement against it."""
    triads = [r for r in results if r.metric == "triad"]
    if not triads:
        return []
    core = next((r for r in triads if "1/core" in r.params.get("thread_order", "").split(" = ")), None)
    core = core or max(triads, key=lambda r: r.params.get("threads", 0))
    best = max(triads, key=lambda r: r.stats.best)
    out = [figure(core, "host/stream/triad", "host memory",
                  f"STREAM triad, {core.params.get('threads')} threads (1/core)", kind="placement", part="DRAM",
                  peak=best.stats.best, peak_source="best placement of the sweep: "
                  + in_words(best.params.get("thread_order", ""), best.params.get("threads")), setting=omp_setting(triads),
                  peak_spread=best.stats.spread, **_peak_interval(best))]
    if best.peak or dram_peak:
        site = {} if best.peak else {"peak": dram_peak, "peak_source": "the site expectations' stream peak"}
        out.append(figure(best, "host/stream/best", "host memory",
                          f"STREAM triad, best placement {best.params.get('thread_order')}", kind="stream", part="DRAM",
                          **site))
    return out


def _peak_interval(r: Result) -> dict[str, float]:
    iv = _interval(r)
    return {"peak_median": r.stats.median, "peak_low": iv["low"], "peak_high": iv["high"]}


def omp_setting(triads: list[Result]) -> str:
    """The OpenMP environment of the placement `bench memory --sweep`
    recommends (the fewest threads within 2% of the best), '' without CPUs."""
    from ..bench.host.memory import recommend  # here: its import (~0.1 s) would slow every `report`
    from ..bench.host.thread_orders import omp_env

    rec = recommend(triads)
    cpus = tuple(rec[1].params.get("cpu_order") or ()) if rec else ()
    if not cpus:
        return ""
    env = omp_env(cpus)
    return " ".join(f'{k}="{env[k]}"' if k == "OMP_PLACES" else f"{k}={env[k]}"
                    for k in ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND"))


def numa(results: list[Result], topo: Topology | None) -> list[Figure]:
    out = []
    for r in results:
        i, j = r.params.get("cpu_node"), r.params.get("mem_node")
        if i is None or j is None:
            continue
        dist = topo.distance(i, j) if topo is not None else None
        klass = "local" if i == j else (f"distance {dist}" if dist else "remote")
        if r.unit == "GB/s":
            out.append(figure(r, f"numa/bw/numa{i}->numa{j}", "NUMA", f"NUMA{i} cores -> NUMA{j} memory, {r.metric}",
                              group=f"numa/bw/{klass}", peak=None, peak_source=""))
        else:
            out.append(figure(r, f"numa/latency/numa{i}->numa{j}", "NUMA", f"NUMA{i} CPU -> NUMA{j} memory, latency",
                              kind="latency_DRAM" if i == j else "", part="DRAM", group=f"numa/latency/{klass}"))
    return out


def latency(results: list[Result], topo: Topology | None) -> list[Figure]:
    """One figure per predicted level: the middle working set of the level
    (the largest for DRAM, where the plateau is)."""
    levels: dict[str, list[Result]] = {}
    for r in sorted(results, key=lambda r: r.params.get("working_set", 0)):
        levels.setdefault(r.params.get("level") or "", []).append(r)
    out = []
    for level, rows in levels.items():
        if not level:
            continue
        r = rows[-1] if level == "DRAM" else rows[len(rows) // 2]
        ws = r.params.get("working_set", 0)
        out.append(figure(r, f"host/latency/{level}", "latency", f"load latency, {level} ({ws >> 10} KiB working set)",
                          kind=f"latency_{level}", part=level))
    return out


# --- GPUs ---------------------------------------------------------------------------


def _gpu_index(name: str) -> str:
    """A GPU's index as figure keys write it ("GPU3" -> "3"); a CUDA
    ordinal ("cuda3": not GPU3) and an unknown spelling as they are, lower case."""
    e = Endpoint.parse(name)
    return str(e.index) if e and e.kind == "gpu" else name.lower()


def _part(name: str, kind: str) -> str:
    """An endpoint as a key writes it ("GPU3" -> "gpu3", "cuda3" -> "cuda3",
    "NUMA1" -> "numa1"); an unknown spelling as keys always wrote it."""
    e = Endpoint.parse(name)
    if e and (e.kind == kind or (kind == "gpu" and e.is_gpu)):
        return e.key
    return f"gpu{name.lower()}" if kind == "gpu" else name.lower()


def _said(name: str) -> str:
    """An endpoint as a figure's label says it: a CUDA ordinal says that it is one."""
    e = Endpoint.parse(name)
    return e.label if e and e.kind == "cuda" else name


def gpu_memory(results: list[Result], topo: Topology | None) -> list[Figure]:
    out = []
    singles = [r for r in results if r.metric == "triad" and r.params.get("mode") == "single"]
    dtype = "float64" if any(r.params.get("dtype") == "float64" for r in singles) else None
    for r in singles:
        if dtype and r.params.get("dtype") != dtype:
            continue
        g = r.params["gpus"][0]
        out.append(figure(r, f"gpu/{_gpu_index(g)}/hbm_triad", "GPU memory",
                          f"{_said(g)} HBM triad ({r.params.get('dtype')})", kind="hbm", part=r.peak_source,
                          group=f"gpu/hbm_triad/{r.peak_source}"))
    return out


def copies(results: list[Result], topo: Topology | None) -> list[Figure]:
    out = []
    for r in results:
        src, dst = r.params.get("src", ""), r.params.get("dst", "")
        pair = f"{_said(src)} -> {_said(dst)}"
        if r.metric in ("h2d_ce", "d2h_ce"):
            host, gpu = (src, dst) if r.metric == "h2d_ce" else (dst, src)
            local = r.path_class == "NODE"
            a, b = _part(host, "numa"), _part(gpu, "gpu")
            d = r.metric[:3]
            key = f"{d}/{a}->{b}" if d == "h2d" else f"{d}/{b}->{a}"
            out.append(figure(r, key, "host<->GPU", f"{d.upper()} {pair} (copy engine)",
                              kind="h2d" if local else "h2d_remote", part=r.peak_source,
                              group=f"{d}/{'local' if local else 'remote'}"))
        elif r.metric == "d2d_write_ce":
            out.append(figure(r, f"d2d/{_part(src, 'gpu')}->{_part(dst, 'gpu')}", "GPU<->GPU",
                              f"{pair} {r.path_class} (copy engine write)", kind="d2d", part=r.path_class,
                              group=f"d2d/{r.path_class}"))
    return out + gpu_latency(results)


def gpu_latency(results: list[Result]) -> list[Figure]:
    """The GPU<->GPU latency matrix of `copies --latency`: a GPU's loads
    from a peer's memory (against the pairs of the same path class) and
    8-byte copies (against every pair), each above the node's minimum."""
    out = []
    for r in results:
        src, dst = _said(r.params.get("src", "")), _said(r.params.get("dst", ""))
        a, b = r.endpoints
        if not (a and b and a.is_gpu and b.is_gpu) or a == b:  # a GPU and a peer
            continue
        if r.metric == "load_latency":
            out.append(figure(r, f"d2d_latency/{a.key}->{b.key}", "GPU<->GPU",
                              f"{src} loads from {dst} memory, {r.path_class} (latency)", part=r.path_class,
                              group=f"d2d_latency/{r.path_class}"))
        elif r.metric == "d2d_copy_latency":
            out.append(figure(r, f"d2d_copy_latency/{a.key}->{b.key}", "GPU<->GPU",
                              f"{src} -> {dst} 8-byte copy (latency)", group="d2d_copy_latency"))
    return out


def nccl(results: list[Result], topo: Topology | None) -> list[Figure]:
    """all_reduce bus bandwidth at the largest size (out-of-place), judged
    against the slowest GPU<->GPU link of the node (filled in by check)."""
    ar = [r for r in results if r.metric == "all_reduce" and r.unit == "GB/s busbw" and not r.params.get("inplace")]
    if not ar:
        return []
    r = max(ar, key=lambda r: (r.params.get("size", 0), r.stats.best))
    return [figure(r, "nccl/all_reduce", "NCCL", f"NCCL all_reduce busbw, {r.params.get('ranks')} GPUs, "
                   f"{r.params.get('size', 0) >> 20} MiB", kind="nccl", part=f"{r.params.get('ranks')} GPUs",
                   peak=None, peak_source="")]


def mpi(results: list[Result], topo: Topology | None) -> list[Figure]:
    """Per buffer kind: latency at the smallest message (host buffers) and
    bandwidth at 16 MiB (the size quick and full both measure). Device
    buffers are judged against the GPUs' copy engines (filled in below)."""
    size = figure_size(results)
    out = []
    for buf in ("HH", "DD"):
        rows = [r for r in results if r.params.get("buffers") == buf and r.path_class != "multirail"]
        lat = [r for r in rows if r.metric == "latency"]
        bw = [r for r in rows if r.metric == "bw" and r.params.get("size") == size]
        if lat and buf == "HH":
            r = min(lat, key=lambda r: r.params.get("size", 0))
            out.append(figure(r, "mpi/HH/latency", "MPI", f"MPI latency, host buffers, {r.params.get('size')} B "
                              f"({r.path_class})", kind="mpi_latency", part="host"))
        for r in bw[:1]:
            how = r.params.get("transport", "")
            out.append(figure(r, f"mpi/{buf}/bw", "MPI", f"MPI bandwidth, {'host' if buf == 'HH' else 'device'} "
                              f"buffers ({how}), {size >> 20} MiB, {r.path_class}",
                              kind="mpi_host" if buf == "HH" else "mpi_device", part=how))
    return out


_EXTRACT = {"memory": stream, "numa": numa, "latency": latency, "gpu": gpu_memory, "copies": copies, "nccl": nccl,
            "mpi": mpi}


# --- figures judged against other figures --------------------------------------------


def _add_remote_peaks(figs: list[Figure]) -> None:
    """Host memory on another NUMA node is judged against the same GPU's
    copy from its own node, a remote NUMA pair against the same CPUs' local
    bandwidth: the local figure becomes the remote one's peak."""
    local = {(f.key.split("/")[0], _gpu_of(f)): f for f in figs if f.kind == "h2d"}
    numa_local = {_numa_pair(f)[0]: f for f in figs if f.key.startswith("numa/bw/")
                  and _numa_pair(f)[0] == _numa_pair(f)[1]}
    for i, f in enumerate(figs):
        ref = None
        if f.kind == "h2d_remote":
            ref = local.get((f.key.split("/")[0], _gpu_of(f)))
        elif f.key.startswith("numa/bw/") and _numa_pair(f)[0] != _numa_pair(f)[1]:
            ref = numa_local.get(_numa_pair(f)[0])
            f = replace(f, kind="numa_remote", part="remote NUMA")
        if f.kind in ("h2d_remote", "numa_remote"):
            figs[i] = replace(f, peak=ref.value if ref else None, peak_source=f"{ref.label} (local)" if ref else "")


def _numa_pair(f: Figure) -> tuple[int | None, int | None]:
    a, b = f.endpoints()
    return (a.index if a and a.kind == "numa" else None), (b.index if b and b.kind == "numa" else None)


def _unjudged_if_contradicted(f: Figure, messages: list[str]) -> Figure:
    """A cache level the latency curve contradicts (a VM shown the host's
    L3) is no measure of that cache: recorded, not judged."""
    if f.area == "latency" and f.part != "DRAM" and any(m.startswith(f"{f.part}: ") for m in messages):
        return replace(f, kind="", label=f.label + " (the curve contradicts the predicted level: not judged)")
    return f


def _gpu_of(f: Figure) -> str:
    return next((e.key for e in f.endpoints() if e and e.is_gpu), "")


def _one_numa_stream(figs: list[Figure], topo: Topology | None) -> list[Figure]:
    """On one NUMA node the NUMA matrix's cell and STREAM's all-cores triad
    are the same path (every core of node 0 on its memory): peers."""
    if topo is None or len(topo.numa_nodes) != 1:
        return figs
    return [replace(f, group="numa/bw/local") if f.key == "host/stream/triad" else f for f in figs]


def nccl_link(figs: list[Figure]) -> tuple[str, float | None, str]:
    """(class, peak, source) of the slowest GPU<->GPU path measured."""
    d2d = [f for f in figs if f.kind == "d2d" and f.peak]
    if not d2d:
        return "", None, ""
    slow = min(d2d, key=lambda f: f.peak)
    return slow.path_class, slow.peak, f"slowest GPU<->GPU path {slow.path_class}: {slow.peak_source}"


def with_nccl_peak(figs: list[Figure]) -> list[Figure]:
    klass, peak, source = nccl_link(figs)
    # "NV18, 2 GPUs": the limit rows tell a link class and, where it matters, the GPU count
    return [replace(f, part=f"{klass}, {f.part}" if klass else f.part, peak=peak, peak_source=source)
            if f.kind == "nccl" else f for f in figs]


def _with_mpi_device_peak(figs: list[Figure]) -> list[Figure]:
    """MPI with device buffers against the GPU pair's copy-engine bandwidth
    on the same path class (what CUDA IPC moves), else the node's median
    GPU<->GPU copy; no GPU pair measured: recorded only."""
    d2d = [f for f in figs if f.kind == "d2d"]
    out = []
    for f in figs:
        if f.kind == "mpi_device" and d2d:
            same = [d for d in d2d if d.path_class == f.path_class]
            over = same[0].path_class if same else "all GPU pairs"  # no pair on the MPI pair's path class
            f = replace(f, peak=median(d.value for d in same or d2d),
                      peak_source=f"median GPU<->GPU copy-engine write over {over} on this node")
        out.append(f)
    return out


def median(values: Iterable[float]) -> float:
    v = list(values)
    return statistics.median(v) if v else 0.0
