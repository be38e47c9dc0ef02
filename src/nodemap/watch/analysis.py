"""What a run's memory timelines show: each series' shape, per rank and per GPU statistics, findings.

Pure: `analyse` turns one job's timelines (nodemap.watch.timeline) into per
rank statistics (peak, growth, shape), per GPU sums against capacity and
findings with evidence and fix, by the [watch] thresholds of the expectations
(`WatchRules`: check/expectations.toml says what each is and why it is there).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ..check.expectations import WatchRules
from ..finding import Finding
from ..units import MiB, gib
from .timeline import Timeline

# /2: findings are nodemap/finding.py's (/1: severity, host and what, now verdict, node and text). Written and
# read as Analysis (a part of report/watch.py's Report)
SCHEMA = "nodemap.watch.analysis/2"

UCX_LIBS = ("libuct_cuda", "libucp", "libucx")
ACC_LIBS = ("libacc", "libnvhpcatm", "libcudafor")

# --- shape of one series ------------------------------------------------------------------


class Shape(msgspec.Struct):
    kind: str  # steady | growing | ramp | spike | short | none
    start: int = 0  # the floor (lowest value) of the first window after start-up
    end: int = 0  # and of the last window before tear-down
    peak: int = 0
    peak_t: float = 0.0
    growth: int = 0  # bytes: how far the floor rose between those windows
    slope: float = 0.0  # bytes/s, least squares over the same part
    span: float = 0.0  # s


def classify(t: list[float], y: list[int], rules: WatchRules) -> Shape:
    """steady, growing (its floor rises through the run), ramp (grew at start-up, then held), spike (a
    transient peak it gave back) or short (too few samples).

    Growth is judged on the floor: the lowest value of each of `rules.windows` windows. A leak under temporaries that
    are freed every iteration, or under noise, raises the floor though the series goes down every other
    sample; a pool that gives memory back lowers it."""
    if not y:
        return Shape("none")
    peak = max(y)
    s = Shape("short", y[0], y[-1], peak, t[y.index(peak)], span=t[-1] - t[0])
    if len(y) < 5 or s.span <= 0:
        return s
    eps = 1e-9 * s.span  # boundaries must not move with rounding (the time unit)
    i0 = next(i for i, ti in enumerate(t) if ti >= t[0] + rules.warmup * s.span - eps)
    i1 = min(len(y), max(i0 + 3, next(i for i, ti in enumerate(t) if ti >= t[-1] - rules.teardown * s.span - eps)))
    if i1 - i0 < 3:  # a gap (a suspended job, a sleeping machine) left too few samples between the two
        return s
    noise = max(MiB, peak // 1000)
    while i1 > i0 + 3 and y[i1 - 1] < y[i1 - 2] - noise:  # the application freeing all as it exits
        i1 -= 1
    ts, ys = t[i0:i1], y[i0:i1]
    floors = _floors(ys, rules.windows)
    s.start, s.end, s.growth, s.slope = floors[0], floors[-1], floors[-1] - floors[0], _slope(ts, ys)
    big = max(rules.min_growth_mib * MiB, rules.growth_fraction * peak)
    given_back = -sum(min(b - a, 0) for a, b in zip(floors, floors[1:]))
    mid = len(floors) // 2
    late = floors[-1] - floors[mid]
    expected_late = s.growth * (len(floors) - 1 - mid) / max(len(floors) - 1, 1)
    med = sorted(ys)[len(ys) // 2]
    kept = given_back <= rules.floor_given_back * s.growth
    if s.growth > big and kept and late > rules.late_rise * expected_late \
            and late > noise:
        s.kind = "growing"
    elif peak - med > big and ys[-1] < peak - (peak - med) / 2:
        s.kind = "spike"
    elif s.growth > big and kept:
        s.kind = "ramp"
    elif y[i0] - y[0] > big and abs(s.growth) <= big:
        s.kind = "ramp"
    else:
        s.kind = "steady"
    return s


def _floors(y: list[int], windows: int) -> list[int]:
    """The lowest value of each of `windows` consecutive windows (of at least 2 samples when there are enough)."""
    k = max(2, min(windows, len(y) // 2))
    return [min(y[len(y) * i // k: len(y) * (i + 1) // k]) for i in range(k)]


def _slope(t: list[float], y: list[int]) -> float:
    n = len(t)
    mt, my = sum(t) / n, sum(y) / n
    var = sum((a - mt) ** 2 for a in t)
    return sum((a - mt) * (b - my) for a, b in zip(t, y)) / var if var else 0.0


# --- findings ---------------------------------------------------------------------------


class RankStats(msgspec.Struct):
    host: str
    job: str
    rank: int
    local_rank: int
    pid: int
    argv: list[str]
    gpus: list[int]
    gpu_what: str  # own | gpu-used | "" (no GPU data)
    gpu: Shape
    host_rss: Shape
    samples: int
    duration: float
    complete: bool
    exit: dict[str, int]  # "exit" and/or "signal", as the timeline's end said


class GpuStats(msgspec.Struct):
    host: str
    index: int
    name: str
    total: int
    peak_used: int
    ranks: list[int]
    ranks_peak_sum: int  # the sum of the ranks' own peaks on it (an upper bound of what they held together)
    used: Shape
    bus_id: str = ""
    margin: int = 0  # total - peak_used, set once the peak is known

    @property
    def label(self) -> str:
        return gpu_label(self)


class Analysis(msgspec.Struct, kw_only=True):
    schema: Literal[SCHEMA] = SCHEMA
    job: str = ""
    start: float = 0.0  # the first rank's start (epoch s)
    ranks: list[RankStats]
    gpus: list[GpuStats]
    findings: list[Finding]
    notes: list[str]


def gpu_label(g: Any) -> str:
    """"GPU 4", or "the GPU at 0000:9b:00.0" for one no topology named (a negative index)."""
    return f"GPU {g.index}" if g.index >= 0 else f"the GPU at {g.bus_id or '?'}"


def _gpu_key(host: str, g: Any) -> tuple[str, int, str]:
    return host, g.index, g.bus_id if g.index < 0 else ""


def by_job(timelines: list[Timeline]) -> list[list[Timeline]]:
    """The timelines of each run (job id) apart, the newest run first: runs that wrote into one folder never
    shared their GPUs or their nodes' memory."""
    jobs: dict[str, list[Timeline]] = {}
    for tl in timelines:
        jobs.setdefault(tl.job, []).append(tl)
    return sorted(jobs.values(), key=lambda tls: -max(t.header.start for t in tls))


def analyse(timelines: list[Timeline], rules: WatchRules) -> Analysis:
    """Statistics and findings of one run (see by_job for a folder of several), by `rules` (the expectations'
    [watch])."""
    if len({tl.job for tl in timelines}) > 1:
        raise ValueError("analyse one job at a time (by_job)")
    ranks = [_rank_stats(tl, rules) for tl in timelines]
    gpus = _gpu_stats(timelines, rules)
    pids = _pids(timelines)
    growing = {id(tl) for tl, r in zip(timelines, ranks) if r.gpu.kind == "growing"}
    findings: list[Finding] = []
    for tl, r in zip(timelines, ranks):
        findings += _growth(tl, r, pids, growing)
    findings += _unattributed_growth(gpus, ranks, rules)
    findings += _imbalance(ranks, rules)
    findings += _near_capacity(gpus, timelines, rules)
    findings += _other_processes(timelines, pids, growing, rules)
    start = min((tl.header.start for tl in timelines), default=0.0)
    return Analysis(job=timelines[0].job if timelines else "", start=start, ranks=ranks, gpus=gpus, findings=findings,
                    notes=_notes(timelines))


def _rank_stats(tl: Timeline, rules: WatchRules) -> RankStats:
    y, what = tl.gpu_series()
    end = {k: getattr(tl.end, k, None) for k in ("exit", "signal")}
    return RankStats(tl.host, tl.job, tl.rank, tl.header.local_rank, tl.header.pid,
                     list(tl.header.argv), [g.index for g in tl.gpus], what,
                     classify(tl.t, y, rules) if y else Shape("none"), classify(tl.t, tl.rss, rules),
                     len(tl.t), tl.t[-1] if tl.t else 0.0, tl.ended,
                     {k: v for k, v in end.items() if v is not None})


def _gpu_stats(timelines: list[Timeline], rules: WatchRules) -> list[GpuStats]:
    out: dict[tuple[str, int, str], GpuStats] = {}
    for tl in timelines:
        for k, g in enumerate(tl.gpus):
            key = _gpu_key(tl.host, g)
            used = [s[k] for s in tl.used if k < len(s)]
            own = [s[k] for s in tl.own if k < len(s)]
            st = out.get(key)
            if st is None:
                st = out[key] = GpuStats(tl.host, g.index, g.name, g.total, 0, [], 0, Shape("none"), g.bus_id)
            st.ranks.append(tl.rank)
            st.ranks_peak_sum += max(own, default=0)
            if max(used, default=0) >= st.peak_used:
                st.peak_used = max(used, default=0)
                st.used = classify(tl.t, used, rules) if used else Shape("none")
    for st in out.values():
        st.margin = st.total - st.peak_used
    return sorted(out.values(), key=lambda g: (g.host, g.index, g.bus_id))


Pids = dict[tuple[str, str], dict[Any, Timeline]]


def _pids(timelines: list[Timeline]) -> Pids:
    """(job, host) -> pid -> its rank's timeline, built once: a dict of the
    peers per rank made 3,000 timelines quadratic (10 s)."""
    out: Pids = {}
    for t in timelines:
        out.setdefault((t.job, t.host), {})[t.header.pid] = t
    return out


def _peers_on_gpu(tl: Timeline, pids: Pids, growing: set[int]) -> list[tuple[str, bool, bool]]:
    """Other ranks of this job whose processes hold this rank's GPUs (as they must to map its memory
    through CUDA IPC): (what, whether the plan gave them that GPU, whether their own GPU memory grows)."""
    peers = {pid: t for pid, t in pids.get((tl.job, tl.host), {}).items() if t is not tl}
    out = []
    for g, procs in sorted(tl.other_procs.items()):
        for pid, comm, anc in procs:
            hit = next((peers[p] for p in [pid, *anc] if p in peers), None)
            if hit is None:
                continue
            planned = hit.header.planned_gpus
            out.append((f"rank {hit.rank} (pid {pid} {comm}) also holds GPU {g}"
                        + ("" if g in planned else
                           f" though its plan gave it GPU(s) {','.join(map(str, planned)) or '-'}"),
                        g in planned, id(hit) in growing))
    return out


def _has(libs: list[str], marks: tuple[str, ...]) -> list[str]:
    return sorted({lib for lib in libs if any(lib.startswith(m) for m in marks)})


def _growth_causes(tl: Timeline, peers: list[str]) -> tuple[str, list[str], list[str]]:
    """The finding's kind, the evidence for its likely causes and their fixes, strongest evidence first.
    IPC is named only on evidence of it: a peer rank the plan did not put on this GPU holds memory there (it
    maps this rank's buffers), a peer that shares it by plan holds steady while this rank grows, or UCX's CUDA
    transports are loaded (and not excluded by UCX_TLS)."""
    env = tl.header.env
    evidence, fixes, kind = [], [], "growth"
    ucx = _has(tl.libs, UCX_LIBS)
    excluded = "cuda_ipc" in env.get("UCX_TLS", "") and env["UCX_TLS"].startswith("^")
    if peers or ("libuct_cuda" in ucx and not excluded):
        kind = "ipc-growth"
        evidence += peers + ([f"loads {', '.join(ucx)} (UCX's CUDA transports)"] if "libuct_cuda" in ucx else [])
        fixes.append("CUDA-aware MPI over UCX keeps every peer buffer it maps (cuIpcOpenMemHandle) open: run with "
                     "UCX_TLS=^cuda_ipc, or bound the mapping cache (UCX_CUDA_IPC_CACHE=n); your own CUDA IPC "
                     "code must cudaIpcCloseMemHandle what it opens")
    acc = _has(tl.libs, ACC_LIBS)
    if acc:
        evidence.append(f"loads {', '.join(acc)} (OpenACC/NVHPC runtime)")
        fixes.append("the OpenACC runtime keeps freed device memory in its pool: NV_ACC_MEM_MANAGE=0 "
                     "(PGI_ACC_MEM_MANAGE=0 before NVHPC 20.x)")
    if _has(tl.libs, ("cupy",)):
        evidence.append("loads CuPy")
        fixes.append("CuPy's memory pool keeps freed blocks: cupy.get_default_memory_pool().free_all_blocks() "
                     "between phases, or a bound with CUPY_GPU_MEMORY_LIMIT / pool.set_limit(); look for arrays "
                     "kept alive each iteration (a cache, a list that grows)")
    if _has(tl.libs, ("libtorch_cuda", "libc10_cuda")):
        evidence.append("loads PyTorch CUDA")
        fixes.append("PyTorch's caching allocator: torch.cuda.memory_summary() shows what is held; "
                     "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.8,expandable_segments:True, "
                     "torch.cuda.empty_cache() between phases; look for tensors kept each iteration")
    if excluded and ucx:
        evidence.append(f"UCX_TLS={env['UCX_TLS']} already excludes cuda_ipc")
    if not fixes:
        fixes.append("a cache or pool that never returns memory: CUDA-aware MPI over UCX: UCX_TLS=^cuda_ipc; "
                     "OpenACC: NV_ACC_MEM_MANAGE=0; CuPy/PyTorch: their pool limits; else an allocation kept "
                     "every iteration")
    return kind, evidence, fixes


def _growth(tl: Timeline, r: RankStats, pids: Pids, growing: set[int]) -> list[Finding]:
    out = []
    if r.gpu.kind == "growing":
        # a peer the plan did not put on this GPU maps its memory; one the plan put there holds it anyway (its own
        # context), which is no evidence of IPC: the ranks' runtimes come first, IPC last
        peers = _peers_on_gpu(tl, pids, growing)
        # IPC's signature: the importer's memory grows while the exporter that owns the buffers holds steady; a
        # peer the plan did not put here maps memory by being here at all. Ranks that grow alike share a leak.
        asymmetric = [f"{p}, as planned, and holds steady while this rank grows" for p, planned, grows in peers
                      if planned and not grows]
        kind, evidence, fixes = _growth_causes(tl, [p for p, planned, _ in peers if not planned] + asymmetric)
        shared = [p for p, planned, grows in peers if planned and grows]
        if shared and kind == "growth":
            evidence += [f"{p}, as planned" for p in shared]
            fixes.append("if the ranks that share this GPU exchange device buffers (CUDA-aware MPI over UCX, CUDA "
                         "IPC), mappings of a peer's memory grow like this: UCX_TLS=^cuda_ipc, or "
                         "cudaIpcCloseMemHandle each handle opened")
        src = "its processes' GPU memory (NVML)" if r.gpu_what == "own" else "its GPUs' used memory"
        out.append(Finding("warn", f"rank {tl.rank}: GPU memory grows steadily and is never given back",
                           f"{src}: {_rise(r.gpu)}" + "".join(f"; {e}" for e in evidence),
                           "; or ".join(fixes), node=tl.host, kind=kind, rank=tl.rank))
    if r.host_rss.kind == "growing":
        out.append(Finding("warn", f"rank {tl.rank}: host memory (RSS) grows steadily and is never given back",
                           f"RSS: {_rise(r.host_rss)}",
                           "look for buffers kept every iteration (pinned host buffers, a cache, a list that grows);"
                           " MPI registration caches: UCX_RCACHE_MAX_SIZE / UCX_MEMTYPE_CACHE=n",
                           node=tl.host, kind="host-growth", rank=tl.rank))
    return out


def _unattributed_growth(gpus: list[GpuStats], ranks: list[RankStats], rules: WatchRules) -> list[Finding]:
    """A GPU whose used memory grows while no watched rank's own memory does: memory held for someone else."""
    out = []
    for g in gpus:
        if g.used.kind != "growing":
            continue
        mine = [r for r in ranks if r.host == g.host and g.index in r.gpus]
        if any(r.gpu.kind == "growing" and r.gpu_what == "own" for r in mine):
            continue  # already a rank's finding
        own_growth = sum(max(r.gpu.growth, 0) for r in mine if r.gpu_what == "own")
        if own_growth > rules.own_share * g.used.growth or all(r.gpu_what == "gpu-used" for r in mine):
            continue
        out.append(Finding("warn", f"{g.label} on {g.host}: used memory grows though the ranks' own allocations "
                           "do not",
                           f"used: {_rise(g.used)}; the ranks'"
                           f" own memory grew {gib(own_growth)} GiB: memory freed by its owner stays held, as when"
                           " another process keeps CUDA IPC mappings of it open",
                           "CUDA-aware MPI over UCX: UCX_TLS=^cuda_ipc or UCX_CUDA_IPC_CACHE=n; your own CUDA IPC "
                           "code: cudaIpcCloseMemHandle each handle it opened", node=g.host, kind="gpu-growth"))
    return out


def _imbalance(ranks: list[RankStats], rules: WatchRules) -> list[Finding]:
    out = []
    hosts: dict[str, list[RankStats]] = {}
    for r in ranks:
        hosts.setdefault(r.host, []).append(r)
    for series, label in (("gpu", "GPU"), ("host_rss", "host")):
        for host in sorted(hosts):
            rs = [r for r in hosts[host] if getattr(r, series).kind != "none"]
            for r in rs if len(rs) >= 2 else []:
                peers = sorted(getattr(p, series).peak for p in rs if p is not r)
                med = peers[len(peers) // 2] if len(peers) % 2 else (peers[len(peers) // 2 - 1] + peers[len(peers) // 2]) / 2
                peak = getattr(r, series).peak
                if peak > rules.imbalance * med and peak - med > rules.imbalance_min_mib * MiB:
                    out.append(Finding("warn", f"rank {r.rank}: {label} memory peak far above its peers'",
                                       f"peak {gib(peak)} GiB against a median of {gib(med)} GiB for the other "
                                       f"{len(peers)} rank(s) of {host} ({peak / max(med, 1):.1f}x)",
                                       "the data decomposition gives this rank more (rebalance the domains), or it "
                                       "does extra work (I/O, reductions, a root that gathers): the node fits "
                                       "only as many ranks as the largest one allows",
                                       node=host, kind="imbalance", rank=r.rank))
    return out


def _near_capacity(gpus: list[GpuStats], timelines: list[Timeline], rules: WatchRules) -> list[Finding]:
    out = []
    for g in gpus:
        if g.total and g.peak_used >= rules.near_capacity * g.total:
            out.append(Finding("warn", f"{g.label} on {g.host}: memory near capacity",
                               f"peak used {gib(g.peak_used)} of {gib(g.total)} GiB: margin {gib(g.margin)} GiB "
                               f"({100 * g.margin / g.total:.1f}%); ranks {','.join(map(str, g.ranks))} held at most "
                               f"{gib(g.ranks_peak_sum)} GiB together",
                               "a larger input or a longer run may fail to allocate: use more GPUs (nodes), fewer "
                               "ranks per GPU, or limit pools (see growth findings)",
                               node=g.host, kind="near-capacity"))
    hosts: dict[str, list[Timeline]] = {}
    for t in timelines:
        hosts.setdefault(t.host, []).append(t)
    for host in sorted(hosts):
        tls = [t for t in hosts[host] if t.avail and t.header.mem_total]
        if not tls:
            continue
        total = tls[0].header.mem_total
        low = min(min(t.avail) for t in tls)
        if low < (1 - rules.host_near_capacity) * total:
            out.append(Finding("warn", f"{host}: host memory near capacity",
                               f"available memory fell to {gib(low)} of {gib(total)} GiB",
                               "fewer ranks per node, smaller host buffers, or more nodes",
                               node=host, kind="host-near-capacity"))
    return out


def _other_processes(timelines: list[Timeline], pids: Pids, growing: set[int], rules: WatchRules) -> list[Finding]:
    """Memory on a rank's GPU held by a process that is not one of this job's ranks on this node."""
    out, said = [], set()
    for tl in timelines:
        ranks = pids.get((tl.job, tl.host), {})
        for k, g in enumerate(tl.gpus):
            held = max((s[k] for s in tl.others if k < len(s)), default=0)
            procs = tl.other_procs.get(g.index, [])
            foreign = [p for p in procs if not any(a in ranks for a in [p[0], *p[2]])]
            key = _gpu_key(tl.host, g)
            if foreign and held >= rules.foreign_min_mib * MiB and key not in said:
                said.add(key)
                names = ", ".join(f"pid {p[0]} {p[1] or '?'}" for p in foreign[:4])
                out.append(Finding("warn", f"{gpu_label(g)} on {tl.host}: another process holds memory there",
                                   f"{names} held up to {gib(held)} GiB beside rank {tl.rank} (not a rank of this "
                                   "job)", "the GPU is not yours alone: ask for exclusive nodes/GPUs, or stop the "
                                   "process (a leftover run, a notebook, a monitoring agent with a context)",
                                   node=tl.host, kind="foreign", rank=tl.rank))
    for tl in timelines:
        for peer in [p for p, planned, _ in _peers_on_gpu(tl, pids, growing) if not planned]:
            out.append(Finding("info", f"rank {tl.rank}: another rank uses its GPU though the plan did not share it",
                               peer, "a rank that opens more GPUs than its own (peer access, CUDA IPC, a library "
                                     "that touches every visible device) costs a context on each: set "
                                     "CUDA_VISIBLE_DEVICES per rank (nodemap run does) and do not override it",
                                     node=tl.host, kind="shared-gpu", rank=tl.rank))
    return out


def _notes(timelines: list[Timeline]) -> list[str]:
    notes = []
    for tl in timelines:
        for n in tl.notes:
            line = f"{n}"
            if line not in notes:
                notes.append(line)
        if tl.torn:
            notes.append(f"rank {tl.rank} on {tl.host}: {tl.torn} line(s) of its timeline could not be read (cut by "
                         "a kill or a full disk): skipped")
        if not tl.ended:
            notes.append(f"rank {tl.rank} on {tl.host}: its timeline has no end (still running, or its monitor "
                         f"was killed) at {tl.t[-1] if tl.t else 0:.1f} s")
        if any(tl.others) and tl.gpus and not any(any(s) for s in tl.own) and any(any(s) for s in tl.used):
            notes.append(f"rank {tl.rank}: NVML attributes no GPU memory to its processes (processes of another "
                         "PID namespace, e.g. a container?): its GPUs' used memory stands in")
    return notes


def _rise(s: Shape) -> str:
    """A growth's evidence: where its floor (the lowest value of a window) went, its peak and its rate."""
    return (f"floor {gib(s.start)} -> {gib(s.end)} GiB (+{gib(s.growth)} GiB after start-up, peak "
            f"{gib(s.peak)}) over {s.span:.1f} s, {_rate(s.slope)}")


def _rate(bps: float) -> str:
    return f"{gib(bps * 60, sign=True)} GiB/min"
