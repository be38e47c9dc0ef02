"""Apply one task's binding to this process, then exec the application.

The only code in nodemap that changes a process: CPU affinity
(sched_setaffinity), memory policy (set_mempolicy through the native
library; kept across exec by the kernel), environment, then execvpe, so
the application keeps this PID and its exit code and signals are its own.

Every rank of every job runs this path, so it imports little. Planning a
node costs more than Python's start-up (reading sysfs, building the
Topology), so a plan is cached per node in a private directory, keyed by
everything it depends on (see `fingerprint`) and trusted for CACHE_TTL s.
"""

from __future__ import annotations

import marshal
import os
import sys

from ..errors import NodemapError

CACHE_SCHEMA = "nodemap.runcache/1"
CACHE_TTL = 600.0  # s: long enough for every rank and step of a job, short enough to see hardware change
MEM_POLICIES = ("bind", "preferred", "none")


class Binding:
    """What launch applies: PUs, NUMA memory nodes and the memory policy.

    node_mems: all NUMA nodes of the node, to recognise a binding that
    restricts nothing (then a refused set_mempolicy does no harm).
    """

    __slots__ = ("cpus", "mems", "mem_policy", "node_mems")

    def __init__(self, cpus, mems, mem_policy: str = "bind", node_mems=()) -> None:
        self.cpus = sorted(cpus)
        self.mems = sorted(mems)
        self.mem_policy = mem_policy
        self.node_mems = sorted(node_mems)


def apply(binding: Binding) -> list[str]:
    """Bind this process; returns notes on what could not matter."""
    if binding.cpus:
        try:
            os.sched_setaffinity(0, binding.cpus)
        except OSError as e:
            raise NodemapError(f"cannot bind to PUs {_list(binding.cpus)} ({e.strerror}): they are outside "
                               "this process's allowed set; plan within it (drop --cpus/--input)") from None
    return _mempolicy(binding)


def _mempolicy(b: Binding) -> list[str]:
    if b.mem_policy == "none" or not b.mems:
        return []
    if b.mem_policy not in MEM_POLICIES:
        raise NodemapError(f"unknown --mem-policy {b.mem_policy!r}: choose one of {', '.join(MEM_POLICIES)}")
    from .. import native

    if b.mem_policy == "preferred":
        if len(b.mems) != 1:
            raise NodemapError(f"--mem-policy preferred needs one NUMA node but this task has {_list(b.mems)}: "
                               "use --mem-policy bind")
        mode = native.MPOL_PREFERRED
    else:
        mode = native.MPOL_BIND
    try:
        native.set_mempolicy(mode, b.mems)
    except OSError as e:
        if b.node_mems and b.mems == b.node_mems:
            return [f"memory policy not set ({e.strerror}); harmless: the task may use every NUMA node"]
        raise NodemapError(f"cannot bind memory to NUMA node(s) {_list(b.mems)} (set_mempolicy: {e.strerror}); "
                           "containers may forbid it: pass --mem-policy none") from None
    return []


def apply_and_exec(binding: Binding, env: dict[str, str], argv: list[str], before_exec=None) -> None:
    """Bind, set `env` over the current environment and exec argv. Never returns.

    before_exec: called last before the exec (nodemap run --watch forks its monitor there)."""
    if not argv:
        raise NodemapError("no application given: put it after --, e.g. nodemap run -- ./app args")
    apply(binding)
    full = dict(os.environ)
    full.update(env)
    sys.stdout.flush()
    sys.stderr.flush()
    if before_exec is not None:
        before_exec()
    try:
        os.execvpe(argv[0], argv, full)
    except OSError as e:
        err = NodemapError(f"cannot run {argv[0]!r}: {e.strerror} (check the path and that it is executable)")
        err.exit_code = 127 if isinstance(e, FileNotFoundError) else 126  # the shell's codes
        raise err from None


def _list(items) -> str:
    from ..topology.cpuset import CpuSet

    return CpuSet(items).format()


# --- plan cache ------------------------------------------------------------------------


def fingerprint(request_key, input_path: str | None, env) -> str:
    """Everything a node's plan depends on for this process, as one text.

    The request, nodemap's version, the boot, the online CPUs, this
    process's allowed CPUs and memory nodes (cgroup and affinity), the
    device-visibility variables, RDMA port states and, with --input, the
    file's identity. Any change gives another key.
    """
    from .. import __version__

    parts = [CACHE_SCHEMA, __version__, repr(request_key), _read("/proc/sys/kernel/random/boot_id"),
             _read("/sys/devices/system/cpu/online"), repr(sorted(os.sched_getaffinity(0))),
             _mems_allowed()]
    parts += [f"{k}={env.get(k)}" for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "ROCR_VISIBLE_DEVICES",
                                              "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")]
    parts += _port_states()
    if input_path:
        st = os.stat(input_path)
        parts.append(f"{os.path.abspath(input_path)}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(parts)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _mems_allowed() -> str:
    for line in _read("/proc/self/status").splitlines():
        if line.startswith("Mems_allowed_list:"):
            return line
    return ""


def _port_states() -> list[str]:
    base = "/sys/class/infiniband"
    out = []
    try:
        devs = sorted(os.listdir(base))
    except OSError:
        return out
    for d in devs:
        try:
            ports = sorted(os.listdir(f"{base}/{d}/ports"))
        except OSError:
            continue
        out += [f"{d}:{p}:{_read(f'{base}/{d}/ports/{p}/state')}" for p in ports]
    return out


def cache_dir() -> str | None:
    """A directory only this user can write, or None (no caching)."""
    d = os.environ.get("NODEMAP_CACHE_DIR") or os.path.join(os.environ.get("TMPDIR") or "/tmp",
                                                           f"nodemap-{os.getuid()}")
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.stat(d)
    except OSError:
        return None
    # someone else's directory in a shared /tmp could feed us a plan
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        return None
    return d


def _cache_file(d: str, key: str) -> str:
    # zlib, not hashlib: the name only spreads keys (the file holds the full
    # key and is checked), and hashlib's OpenSSL load costs ~5 ms per rank
    import zlib

    b = key.encode()
    return os.path.join(d, f"plan-{zlib.crc32(b):08x}{zlib.adler32(b):08x}.bin")


def load_cached(key: str, now: float) -> dict | None:
    d = cache_dir()
    if d is None:
        return None
    path = _cache_file(d, key)
    try:
        if now - os.stat(path).st_mtime > CACHE_TTL:
            return None
        with open(path, "rb") as f:
            data = marshal.load(f)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    ok = isinstance(data, dict) and data.get("cache") == CACHE_SCHEMA and data.get("key") == key
    return data if ok else None


def save_cached(key: str, data: dict) -> None:
    """Atomic write (ranks of a node race to save the same plan); failures are ignored.

    marshal, not json: it needs no import (~3 ms per rank); the file is only
    ever read back from a directory no one else can write.
    """
    d = cache_dir()
    if d is None:
        return
    path = _cache_file(d, key)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            marshal.dump({**data, "cache": CACHE_SCHEMA, "key": key}, f)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
