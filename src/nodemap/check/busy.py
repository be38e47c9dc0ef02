"""Is the node busy? Other work on the CPUs and GPUs being measured, and
memory pressure, sampled before the check and around each of its steps.

Everything is read through a root (`/` on a live node, a folder in tests);
GPUs through NVML (topology/nvml.py). The check's own process, its
descendants and, in an MPI job, its sibling ranks are not "others". What
makes a sample busy, and why each threshold is where it is: docs/check.md,
"A busy node".
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import msgspec
from msgspec import UNSET, UnsetType

from ..units import gib
from .expectations import BusyRules, shipped

TOP = 3  # other processes named per sample
# /proc counts CPU time in whole clock ticks (1/HZ s), each counter truncated: a difference of d ticks
# means more than d - 1 ticks of work. Rates are over the real window, from these lower bounds (one tick
# less per process and per CPU counter), so a short idle step is not busy for one tick and a short busy
# step is still busy: one core for w ticks reads (w - 1) / w, which reaches [busy] other_cores from 2 ticks.
TICK = 1
PF_KTHREAD = 0x00200000
HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

GpuProbe = Callable[[set], "list[dict[str, Any]] | None"]  # topology/nvml.py's gpu_activity: read as GpuUse


class Other(msgspec.Struct, frozen=True, omit_defaults=True):
    """Another process's CPU time on the measured CPUs (a sample's `top`)."""

    pid: int
    comm: str
    cores: float
    user: str = ""  # another user's (their job); "" for this process's own user


class Memory(msgspec.Struct, frozen=True, omit_defaults=True):
    """/proc/meminfo's MemTotal and MemAvailable (bytes), the memory PSI "some avg10" (%): each where the
    kernel has it."""

    total: int | None = msgspec.field(default=None, name="MemTotal")
    available: int | None = msgspec.field(default=None, name="MemAvailable")
    psi_some_avg10: float | None = None


class GpuProcess(msgspec.Struct, frozen=True, kw_only=True):
    pid: int
    comm: str = ""  # '' when hidden (another PID namespace)
    memory: int = 0  # bytes


class GpuUse(msgspec.Struct, frozen=True, kw_only=True):
    """A GPU as NVML saw it during a sample: its utilisation (%) and the processes on it not ours."""

    index: int = 0  # NVML's, which counts only the GPUs a device cgroup shows: named by bus_id
    bus_id: str = ""
    utilization: int | None = None
    others: list[GpuProcess] = []


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    """One sample (Detector.end), saved as is: a step's in its results' environment and in Busy.steps
    (with its `step`), the one before the check in Busy.before. Every field is written; `step`, `gpus`
    (without NVML) and `unseen_cores` (not measured before 2026-11-28) only where they are set."""

    step: str | UnsetType = UNSET
    busy: bool = False
    reasons: list[str] = []
    seconds: float = 0.0
    cpus: int = 0
    other_cores: float = 0.0
    unseen_cores: float | UnsetType = UNSET
    top: list[Other] = []
    load: list[float] | None = None
    memory: Memory = msgspec.field(default_factory=Memory)
    gpus: list[GpuUse] | UnsetType = UNSET


class Busy(msgspec.Struct, frozen=True):
    """The check document's `busy` (summary): busy or not, every reason once (with where it was seen), the
    sample before the steps and each step's (the fleet reads the first two: fleet/nodefile.py)."""

    busy: bool = False
    reasons: list[str] = []
    before: Sample | None = None
    steps: list[Sample] = []


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int  # clock ticks after boot: (pid, start) names one process across samples
    ticks: int  # utime + stime
    comm: str
    kthread: bool
    cticks: int = 0  # cutime + cstime: its children that it waited for (the MPI ranks that have ended)


def _read(root: str, path: str) -> str | None:
    try:
        with open(os.path.join(root, path.lstrip("/")), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def processes(root: str = "/") -> dict[int, Proc]:
    """Every process now, by pid (threads are counted in their process's time)."""
    out = {}
    try:
        names = os.listdir(os.path.join(root, "proc"))
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        text = _read(root, f"/proc/{name}/stat")
        if not text or ")" not in text:
            continue
        head, _, rest = text.rpartition(")")
        f = rest.split()
        try:
            out[int(name)] = Proc(int(name), int(f[1]), int(f[19]), int(f[11]) + int(f[12]),
                                  head.partition("(")[2], bool(int(f[6]) & PF_KTHREAD), int(f[13]) + int(f[14]))
        except (IndexError, ValueError):
            continue
    return out


def ours(procs: dict[int, Proc], me: int, siblings: bool = False) -> set[int]:
    """`me` and its descendants; with `siblings`, also the other children of
    its parent (the other ranks of an MPI job on this node)."""
    roots = {me}
    parent = procs[me].ppid if me in procs else 0
    if siblings and parent > 1:
        roots |= {p.pid for p in procs.values() if p.ppid == parent}
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo += children.get(pid, [])
    return out


def status(root: str, pid: int) -> tuple[set[int] | None, int | None]:
    """The CPUs a process may run on (Cpus_allowed_list) and its real user id; None where unreadable."""
    from ..topology.cpuset import CpuSet

    cpus = uid = None
    for line in (_read(root, f"/proc/{pid}/status") or "").splitlines():
        key, _, value = line.partition(":")
        try:
            if key == "Cpus_allowed_list":
                cpus = set(CpuSet.parse(value.strip()))
            elif key == "Uid":
                uid = int(value.split()[0])
        except (ValueError, IndexError):
            pass
    return cpus, uid


def user(uid: int | None) -> str:
    """Another user's name (their job), '' for this process's own user."""
    if uid is None or uid == os.getuid():
        return ""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return f"uid {uid}"


def _other_cpu(before: dict[int, Proc], after: dict[int, Proc], seconds: float, mine: set[int],
               cpus: set[int], root: str = "/") -> tuple[float, list[Other], float]:
    """Cores' worth of CPU time other processes surely used on `cpus`
    between the two snapshots (each process's ticks less one, TICK, in the
    share of its allowed CPUs that are measured ones), the largest of them,
    and, third, the most the same processes can have used (their ticks with
    one more each): what unseen_cores takes as visible. A process started in
    between counts whole; one that ended in between is not seen."""
    if seconds <= 0:
        return 0.0, [], 0.0
    used, most = [], 0.0
    for pid, p in after.items():
        if pid in mine or p.kthread:
            continue
        b = before.get(pid)
        delta = p.ticks - (b.ticks if b is not None and b.start == p.start else 0)
        if delta <= 0:
            continue
        allowed, uid = status(root, pid)
        # its expected share on the measured CPUs: all of it when confined to them, half of it when it
        # may run on twice as many (a check under taskset with half the CPUs)
        share = len(allowed & cpus) / len(allowed) if allowed and cpus else 1.0
        if share == 0:
            continue
        most += share * (delta + TICK) / HZ / seconds
        cores = round(share * max(0, delta - TICK) / HZ / seconds, 2)
        if cores <= 0:
            continue
        used.append(Other(pid, p.comm, cores, user(uid)))
    used.sort(key=lambda u: -u.cores)
    return round(sum(u.cores for u in used), 2), used[:TOP], most


def cpu_ticks(root: str = "/") -> dict[int, int] | None:
    """Busy clock ticks per CPU since boot (/proc/stat: user, nice, system,
    irq, softirq and steal, the time a VM's CPU was taken by the host);
    None where unreadable. /proc/stat is not per PID namespace: it sees the
    work of other containers that /proc/PID cannot show."""
    text = _read(root, "/proc/stat")
    if not text:
        return None
    out = {}
    for line in text.splitlines():
        name, *vals = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            try:
                v = [int(x) for x in vals[:8]] + [0] * (8 - len(vals[:8]))
            except ValueError:
                continue
            user, nice, system, _idle, _iowait, irq, softirq, steal = v
            out[int(name[3:])] = user + nice + system + irq + softirq + steal
    return out or None


def ours_ticks(before: dict[int, Proc], after: dict[int, Proc], mine: set[int]) -> int:
    """The most CPU time we can have used between the snapshots: the live
    processes' own and what they waited for (an MPI rank that ended is in
    its launcher's cutime), one tick more per counter (TICK)."""
    total = 0
    for pid in mine & set(after):
        p, b = after[pid], before.get(pid)
        total += p.ticks + p.cticks - (b.ticks + b.cticks if b is not None and b.start == p.start else 0) + 2 * TICK
    return max(0, total)


def unseen_cores(busy0: dict[int, int] | None, busy1: dict[int, int] | None, cpus: set[int], ours: int,
                 visible: float, seconds: float) -> float:
    """Cores' worth of work on the measured CPUs that neither we nor the
    processes visible here can have done: other containers, the kernel, a
    VM host's steal. A lower bound: each CPU's counter less one tick, `ours`
    and `visible` the most they can have been."""
    if not busy0 or not busy1 or seconds <= 0:
        return 0.0
    total = sum(busy1.get(c, 0) - busy0.get(c, 0) - TICK for c in cpus)
    return round(max(0.0, (total - ours) / HZ / seconds - visible), 2)


def loadavg(root: str = "/") -> list[float] | None:
    text = _read(root, "/proc/loadavg")
    try:
        return [float(x) for x in text.split()[:3]] if text else None
    except ValueError:
        return None


def memory(root: str = "/") -> Memory:
    """MemAvailable/MemTotal (bytes) and the memory PSI "some avg10" (%) when the kernel has it."""
    out: dict[str, Any] = {}
    for line in (_read(root, "/proc/meminfo") or "").splitlines():
        k, _, v = line.partition(":")
        if k in ("MemTotal", "MemAvailable") and v.split():
            out[k] = int(v.split()[0]) * 1024
    for line in (_read(root, "/proc/pressure/memory") or "").splitlines():
        if line.startswith("some "):
            fields = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
            try:
                out["psi_some_avg10"] = float(fields["avg10"])
            except (KeyError, ValueError):
                pass
    return msgspec.convert(out, Memory)


def memory_reasons(mem: Memory, limits: BusyRules) -> list[str]:
    out = []
    if (mem.psi_some_avg10 or 0.0) >= limits.psi_memory:
        out.append(f"memory pressure: tasks stalled on memory {mem.psi_some_avg10:g}% of the last 10 s "
                   f"(at least {limits.psi_memory:g}% is busy)")
    total, avail = mem.total, mem.available
    if total and avail is not None and avail < limits.mem_available * total:
        out.append(f"memory: {gib(avail, 1)} GiB of {gib(total, 1)} GiB available "
                   f"(below {limits.mem_available:.0%})")
    return out


def gpu_reasons(gpus: Sequence[GpuUse] | UnsetType, before: bool, limits: BusyRules,
                keys: Mapping[str, str] | None = None) -> list[str]:
    """Other processes on a GPU, named by `keys` (PCI bus id -> the topology's
    key, "GPU4"), else by its bus id: NVML's index counts only the GPUs a
    device cgroup lets it see, so NVML's GPU 0 may be the node's GPU4. During a step only those this process can
    see count: in a container NVML gives host PIDs, and the check's own
    process would be "another" one. `before` the check nothing of ours is
    on the GPUs, so every process counts, and a GPU working without any
    (a container's job we cannot see) too."""
    out = []
    for g in gpus or ():
        name = (keys or {}).get(g.bus_id) or f"the GPU at {g.bus_id or '?'}"
        procs = [p for p in g.others if before or p.comm]
        if procs:
            names = ", ".join(f"{p.comm or 'a process of another container'} (pid {p.pid})" for p in procs[:TOP])
            out.append(f"{name}: {len(procs)} other process(es) on it: {names}")
        elif before and (g.utilization or 0) >= limits.gpu_util:
            out.append(f"{name}: {g.utilization}% busy with no process of this check "
                       f"(at least {limits.gpu_util:g}% is busy)")
    return out


def _nvml_probe(mine: set) -> list[dict[str, Any]] | None:
    from ..topology.nvml import gpu_activity

    return gpu_activity(mine)


class Detector:
    """Samples the node around a piece of work: `begin()` then `end()` gives one Sample, busy by `limits` (the
    check's [busy])."""

    def __init__(self, root: str = "/", cpus: Iterable[int] | None = None, me: int | None = None,
                 siblings: bool = False, gpus: GpuProbe | None = _nvml_probe, gpu_keys: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 limits: BusyRules | None = None) -> None:
        self.root, self.me, self.siblings, self.gpus, self.gpu_keys = root, me or os.getpid(), siblings, gpus, gpu_keys
        self.limits = limits or shipped().table(BusyRules)
        self.clock, self.sleep = clock, sleep
        self.cpus = set(cpus) if cpus is not None else set(os.sched_getaffinity(0))
        self._t0, self._before, self._busy0 = 0.0, {}, None

    def begin(self) -> None:
        self._before = processes(self.root)
        self._busy0 = cpu_ticks(self.root)
        self._t0 = self.clock()

    def end(self, before: bool = False) -> Sample:
        seconds = self.clock() - self._t0
        after = processes(self.root)
        mine = ours(after, self.me, self.siblings) | ours(self._before, self.me, self.siblings)
        visible, top, most = _other_cpu(self._before, after, seconds, mine, self.cpus, self.root)
        unseen = unseen_cores(self._busy0, cpu_ticks(self.root), self.cpus, ours_ticks(self._before, after, mine),
                              most, seconds)
        cores = round(visible + unseen, 2)
        mem = memory(self.root)
        found = self.gpus(mine) if self.gpus is not None else None
        gpus = msgspec.convert(found, list[GpuUse]) if found is not None else UNSET
        reasons = []
        if cores >= self.limits.other_cores:
            who = [f"{u.comm} (pid {u.pid}{', user ' + u.user if u.user else ''}) {u.cores:g}" for u in top]
            who += [f"{unseen:g} by work not visible here (other containers, the kernel, the VM host)"] if unseen else []
            reasons.append(f"other processes used {cores:g} cores of the {len(self.cpus)} measured "
                           f"(at least {self.limits.other_cores:g} is busy): {', '.join(who)}")
        reasons += memory_reasons(mem, self.limits) + gpu_reasons(gpus, before, self.limits, self.gpu_keys)
        return Sample(busy=bool(reasons), reasons=reasons, seconds=round(seconds, 2), cpus=len(self.cpus),
                      other_cores=cores, unseen_cores=unseen, top=top, load=loadavg(self.root), memory=mem, gpus=gpus)

    def sample(self, seconds: float) -> Sample:
        """A sample of `seconds` before the check, with nothing of ours running."""
        self.begin()
        self.sleep(seconds)
        return self.end(before=True)


def summary(before: Sample | None, steps: Sequence[tuple[str, Sample]]) -> Busy:
    """The check document's `busy` field: every reason once (with where it
    was seen), the sample before and each step's. The check is busy when a
    step was; before the first step has run, when the sample before was;
    and always when a GPU was busy before it (a job whose processes NVML
    cannot show here, which the steps' samples cannot tell from our own).
    Other work before the check that had stopped when the steps ran does
    not make figures measured on an idle node undecided."""
    where = ([("before the check", before)] if before is not None else []) + list(steps)
    reasons = [f"{name}: {r}" for name, s in where for r in s.reasons]
    early = before.reasons if before is not None else []
    busy = any(s.busy for _, s in steps) or any(r.startswith("GPU") for r in early) or (not steps and bool(early))
    return Busy(busy, reasons, before, [msgspec.structs.replace(s, step=name) for name, s in steps])


def under_interference(judged: Sequence[Any], results: Sequence[Any], topo: Any = None,
                       dram_peak: float | None = None) -> list[Any]:
    """Figures a busy step measured are not failed (or warned) for speed: a
    slow figure there says the node was shared, not that it is broken. They
    become "inconclusive" with the reason, except a bandwidth whose whole
    interval stays below its fail limit even credited for the interference
    (`credit`): no sharing explains that, the node fails. The others keep
    their verdicts."""
    from .verdicts import Judged

    busy = busy_figures(results, topo, dram_peak)
    out = []
    for j in judged:
        sample = busy.get(j.figure.key)
        if sample is not None and j.verdict in ("warn", "fail"):
            why = "; ".join(sample.reasons)
            factor = credit(j, sample)
            if factor is not None:
                j = Judged.of(j.figure, "fail", f"measured while the node was busy ({why}), yet below its fail limit "
                           f"even credited x{factor:.2f} for the CPU time others took: {j.rule}", j.expectation,
                           j.relative)
            else:
                j = Judged.of(j.figure, "inconclusive", f"measured while the node was busy ({why}): not judged for "
                           f"speed; alone it would be {j.verdict}: {j.rule}", j.expectation, j.relative)
        out.append(j)
    return out


def busy_figures(results: Sequence[Any], topo: Any = None, dram_peak: float | None = None) -> dict[str, Sample]:
    """Figure key -> the busy sample of the step that measured it, for the
    figures of steps measured while the node was busy (a check's steps: a
    bench result file has no sample; a check document's are read as Samples,
    document.from_file)."""
    from . import figures as figs

    busy: dict[str, Sample] = {}
    for rs in results:
        sample = rs.environment.get("busy")
        if isinstance(sample, Sample) and sample.busy:
            busy.update({f.key: sample for f in figs.extract([rs], topo, dram_peak)})
    return busy


def credit(j: Any, sample: Sample) -> float | None:
    """For a failed bandwidth of a busy step: n / (n - c), others having
    used c of the n measured CPUs (the most their share of the CPUs can
    have cost it), when the figure times that still fails: its upper end
    below the absolute fail limit (a datasheet or site peak, not another
    measurement of the step). None otherwise; never for latency, which
    one process sharing a core can stretch without bound (MPI 3.3 -> 14.6 us)
    and only with CPU time as the interference (memory pressure and GPU
    sharing have no such measure)."""
    f, c, n = j.figure, sample.other_cores, sample.cpus
    bound = j.expectation.fail_below
    only_cpu = all(r.startswith("other processes used") for r in sample.reasons)
    # against another measurement of the same step (STREAM's placement: one thread per core against the
    # sweep's best) the interference falls on both, unevenly within the step: no bound to credit
    measured_peak = bool(f.peak_spread) or f.kind == "placement"
    if (j.verdict != "fail" or not f.higher_is_better or not bound or not n or c >= n or not only_cpu
            or measured_peak):
        return None
    factor = n / (n - c)
    top = max(f.value, f.high)
    return factor if top * factor < bound else None
