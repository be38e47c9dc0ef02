"""What a process may use: its CPU affinity, its cgroup cpuset, its memory nodes.

Sources, all intersected:
- the cgroup cpuset, found as hwloc finds it: the mount point in
  proc/mounts (cgroup v1 with the cpuset controller, old `cpuset` file
  systems, or cgroup2) and the process's cgroup in proc/self/cgroup (else
  proc/self/cpuset); files cpuset.cpus.effective/cpuset.mems.effective (v2,
  nearest ancestor that has them), cpuset.cpus/cpuset.mems or, with the
  `noprefix` option or an old cpuset mount, cpus/mems (v1);
- proc/self/status Cpus_allowed_list / Mems_allowed_list;
- for this process only, os.sched_getaffinity(0).

Under a snapshot root, proc/ and the cgroup files are the snapshot's own;
the live process's affinity is never applied unless asked for.
"""

from __future__ import annotations

import os

from .cpuset import CpuSet, CpuSetError
from .model import Topology, replace
from .record import Record
from .root import Root

__all__ = ["apply", "Allowed", "read_allowed"]


class Allowed(Record):
    cpus: CpuSet | None = None  # None: nothing restricts
    mems: CpuSet | None = None
    why: tuple[str, ...] = ()  # which sources restricted


def apply(topo: Topology, root: str | os.PathLike | Root = "/", *, this_process: bool | None = None) -> Topology:
    """`topo` with PU.allowed and allowed_mems narrowed to what may be used.

    Idempotent: applying it twice gives the same Topology.
    """
    fs = root if isinstance(root, Root) else Root(root)
    use_process = fs.live if this_process is None else this_process
    found = read_allowed(fs, this_process=use_process)
    notes = list(topo.notes)
    pus, mems = topo.pus, topo.allowed_mems
    if found.cpus is not None:
        usable = found.cpus & topo.cpuset
        if usable:
            pus = tuple(replace(p, allowed=p.allowed and p.os_index in usable) for p in topo.pus)
        else:
            notes.append(f"allowed CPUs {found.cpus} ({', '.join(found.why)}) hold no online CPU: ignored")
    if found.mems is not None:
        if found.mems & topo.nodeset:
            mems = mems & found.mems
        else:
            notes.append(f"allowed memory nodes {found.mems} hold no NUMA node of the topology: ignored")
    if (pus, mems) == (topo.pus, topo.allowed_mems):
        return replace(topo, notes=tuple(notes)) if notes != list(topo.notes) else topo
    allowed_cpus = CpuSet(p.os_index for p in pus if p.online and p.allowed)
    note = f"restricted to CPUs {allowed_cpus} and memory nodes {mems} by {', '.join(found.why)}"
    if note not in notes:
        notes.append(note)
    return replace(topo, pus=pus, allowed_mems=mems, notes=tuple(notes))


def read_allowed(fs: Root, *, this_process: bool = False) -> Allowed:
    cpus: CpuSet | None = None
    mems: CpuSet | None = None
    why: list[str] = []

    def narrow(c: CpuSet | None, m: CpuSet | None, source: str) -> None:
        nonlocal cpus, mems
        if c is None and m is None:
            return
        if c is not None:
            cpus = c if cpus is None else cpus & c
        if m is not None:
            mems = m if mems is None else mems & m
        why.append(source)

    if fs.live and not this_process:
        return Allowed()  # the whole node, as the kernel sees it
    c, m, where = _cgroup(fs)
    narrow(c, m, f"cgroup cpuset {where}")
    narrow(*_status(fs), "proc/self/status")
    if this_process and hasattr(os, "sched_getaffinity"):
        narrow(CpuSet(os.sched_getaffinity(0)), None, "sched_getaffinity")
    return Allowed(cpus, mems, tuple(why))


def _status(fs: Root) -> tuple[CpuSet | None, CpuSet | None]:
    text = fs.read("proc/self/status") or ""
    return _field_set(fs, text, "Cpus_allowed_list"), _field_set(fs, text, "Mems_allowed_list")


def _field_set(fs: Root, text: str, name: str) -> CpuSet | None:
    value = _field(text, name)
    if value is None:
        return None
    try:
        return CpuSet.parse(value)
    except CpuSetError as e:
        from ..errors import InputError

        raise InputError(fs.where("proc/self/status"), f"{name}: {e}") from None


def _field(text: str, name: str) -> str | None:
    r"""re.search(rf"^{name}:\s*(\S*)\s*$", text, re.M).group(1), None when
    it does not match; without `re` (~4 ms to import) in the usual case, a
    first "Name:<blanks>value<blanks>" line."""
    prefix = name + ":"
    for line in text.split("\n"):  # the lines ^ (re.M) starts
        if line.startswith(prefix):
            words = line[len(prefix):].split()
            if len(words) == 1:
                return words[0]
            break
    else:
        return None  # no line starts with the name: no match
    import re

    m = re.search(rf"^{name}:\s*(\S*)\s*$", text, re.M)
    return m.group(1) if m else None


# --- cgroup cpuset ---------------------------------------------------------------------------


def _mounts(fs: Root) -> list[tuple[str, str, str]]:
    """(kind, mount point, file prefix) of cpuset-capable mounts, v1 first
    (a hybrid host mounts cgroup2 too, but without the cpuset controller)."""
    found = []
    for line in (fs.read("proc/mounts") or "").splitlines():
        f = line.split()
        if len(f) < 4:
            continue
        mnt, fstype, opts = f[1].replace("\\040", " "), f[2], f[3].split(",")
        if fstype == "cpuset":
            found.append(("v1", mnt, ""))
        elif fstype == "cgroup" and "cpuset" in opts:
            found.append(("v1", mnt, "" if "noprefix" in opts else "cpuset."))
        elif fstype == "cgroup2":
            found.append(("v2", mnt, "cpuset."))
    return sorted(found, key=lambda m: m[0])


def _cgroup_name(fs: Root, kind: str) -> str | None:
    for line in (fs.read("proc/self/cgroup") or "").splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if kind == "v2" and hier == "0" and controllers == "":
            return path
        if kind == "v1" and "cpuset" in controllers.split(","):
            return path
    name = fs.read("proc/self/cpuset")
    return name or None


def _cgroup(fs: Root) -> tuple[CpuSet | None, CpuSet | None, str]:
    for kind, mnt, prefix in _mounts(fs):
        name = _cgroup_name(fs, kind)
        if name is None:
            continue
        base = f"{mnt.strip('/')}/{name.strip('/')}".strip("/")
        if kind == "v2":
            cpus, mems, base = _v2_effective(fs, base, mnt.strip("/"))
        else:
            cpus = fs.read_set(f"{base}/{prefix}cpus")
            mems = fs.read_set(f"{base}/{prefix}mems")
        if cpus is not None or mems is not None:
            return cpus or None, mems or None, "/" + base
    return None, None, ""


def _v2_effective(fs: Root, base: str, top: str) -> tuple[CpuSet | None, CpuSet | None, str]:
    """The nearest cgroup (itself or an ancestor) with the cpuset controller's files."""
    while True:
        cpus = fs.read_set(f"{base}/cpuset.cpus.effective")
        mems = fs.read_set(f"{base}/cpuset.mems.effective")
        if cpus is not None or mems is not None or base == top or "/" not in base:
            return cpus, mems, base
        base = base.rsplit("/", 1)[0]
