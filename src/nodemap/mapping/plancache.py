"""The node's plan, made once per node and shared by its ranks.

Ranks of a job start together. The first rank to take the node's lock
plans and publishes the plan (write to a temporary name, then rename: a
reader sees the whole file or none); the others wait on the lock (woken by
the kernel when it is released), then read what it published. A plan is keyed by everything it depends on for this
process (`fingerprint`) and trusted for TTL seconds, so later job steps
read it too.

Trust: the folder is $NODEMAP_CACHE_DIR, else $TMPDIR/nodemap-UID. It must
be a real directory (not a symbolic link: in a shared /tmp another user can
plant one and choose where we write), owned by this user, mode 0700. It is
opened once with O_NOFOLLOW and every file inside it is reached through
that descriptor, so a rename of the folder or a link inside it changes
nothing. An entry whose recorded creation time lies in the future is stale.

Stdlib only and no import of the planner: every rank's launch runs this.
"""

from __future__ import annotations

import marshal
import os
import time

from ..env import GPU_ORDER_VARS, GPU_VISIBILITY_VARS
from ..errors import NodemapError

SCHEMA = "nodemap.runcache/2"
TTL = 600.0  # s: long enough for every rank and step of a job, short enough to see hardware change
ERROR_TTL = 30.0  # s: a published planning error (the other ranks print it without planning again)
LOCK_WAIT = 60.0  # s: the most a rank waits for the planning rank before it plans itself
LOCK_NOTICE = 5.0  # s: a wait this long is said (a stuck holder once cost every rank 60 s of silence)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
_FILE_FLAGS = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Refused(NodemapError):
    """The cache folder is not safe to use; the message says why and how to fix it."""


def folder() -> str:
    return os.environ.get("NODEMAP_CACHE_DIR") or os.path.join(os.environ.get("TMPDIR") or "/tmp",
                                                               f"nodemap-{os.getuid()}")


def open_folder(path: str | None = None) -> int:
    """A descriptor of the cache folder, created when missing. Raises Refused
    when it is a link, not a directory, someone else's, or cannot be made 0700."""
    path = path or folder()
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise Refused(f"plan cache {path}: cannot create it ({e.strerror}); set NODEMAP_CACHE_DIR to a "
                      "private folder or pass --no-cache") from None
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as e:
        from ..outfile import folder_problem

        raise Refused(f"plan cache {path} is {folder_problem(path, e)}: not used; remove it, or set "
                      "NODEMAP_CACHE_DIR to a private folder") from None
    st = os.fstat(fd)
    if st.st_uid != os.getuid():
        os.close(fd)
        raise Refused(f"plan cache {path} belongs to uid {st.st_uid}, not to you ({os.getuid()}): not used; "
                      "remove it, or set NODEMAP_CACHE_DIR to a private folder")
    if st.st_mode & 0o777 != 0o700:
        try:
            os.fchmod(fd, 0o700)  # ours: make it private rather than give up the cache
        except OSError as e:
            os.close(fd)
            raise Refused(f"plan cache {path} has mode {st.st_mode & 0o777:o} and cannot be made 0700 "
                          f"({e.strerror}); set NODEMAP_CACHE_DIR to a private folder") from None
    return fd


# --- what a plan depends on ------------------------------------------------------------


def fingerprint(request_key, input_path: str | None, env) -> str:
    """Everything a node's plan depends on for this process, as one text.

    The request, nodemap's version, the boot, the online CPUs, this
    process's allowed CPUs and memory nodes (cgroup and affinity), the
    device-visibility variables, RDMA port states, network interfaces' link
    states (as sysfs.py counts NICs: devices' interfaces, else every virtual
    one, with its flags: a network namespace's rails) and, with --input, every
    file read from it (path, size, modification and change times: an edit
    that keeps the mtime still changes the ctime). Any change gives another key.
    """
    from .. import __version__

    parts = [SCHEMA, __version__, repr(request_key), _read("/proc/sys/kernel/random/boot_id"),
             _read("/sys/devices/system/cpu/online"), repr(sorted(os.sched_getaffinity(0))),
             _mems_allowed()]
    parts += [f"{k}={env.get(k)}" for k in GPU_VISIBILITY_VARS + tuple(GPU_ORDER_VARS)]
    parts += _port_states() + _net_links()
    if input_path:
        parts += input_identity(input_path)
    return "\n".join(parts)


MAX_IDENTITY = 50_000  # files and folders of an --input folder (a snapshot tarball holds at most as many members)


def input_identity(path: str) -> list[str]:
    """One line per file under `path` (the file itself, or every file of a
    snapshot folder): what the topology was read from."""
    root = os.path.abspath(path)
    try:
        st = os.stat(root)
    except OSError as e:  # the reader will say what is wrong; keep it out of the cache
        return [f"{root}:unreadable:{e.strerror}:{time.time_ns()}"]
    if not os.path.isdir(root):
        return [_identity(root, st)]
    out = []
    seen = 0
    for base, dirs, files in os.walk(root):
        seen += len(dirs) + len(files)
        if seen > MAX_IDENTITY:  # `--input /` walked the whole file tree (22 s): this input is not cached
            return [f"{root}:over {MAX_IDENTITY} entries:{time.time_ns()}"]
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(base, name)
            try:
                out.append(_identity(p, os.lstat(p)))
            except OSError:
                out.append(f"{p}:gone")
    return out


def _identity(path: str, st) -> str:
    return f"{path}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


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


def _net_links() -> list[str]:
    """Link states (operstate and carrier: the planner's, topology/sysfs.py link_state) of the
    network interfaces of devices; where there is none (a network namespace, a container), of every
    virtual one with its flags (up or not): the NICs the planner counts (sysfs.py, _virtual_nics),
    as slurm/cache.c keys the plugin's plans."""
    base = "/sys/class/net"
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    virtual = {n: "/virtual/" in _link(f"{base}/{n}") for n in names}
    real = [n for n in names if not virtual[n]]
    state = {n: f"{n}:{_read(f'{base}/{n}/operstate')}:{_read(f'{base}/{n}/carrier')}" for n in names}
    return [state[n] for n in real] or [f"{state[n]}:{_read(f'{base}/{n}/flags')}" for n in names]


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


# --- entries ----------------------------------------------------------------------------


def entry_name(key: str | bytes, prefix: str = "plan-") -> str:
    # zlib, not hashlib: the name only spreads keys (the file holds the full
    # key and is checked), and hashlib's OpenSSL load costs ~5 ms per rank.
    # The SPANK plugin's C reader names its entries alike (slurm/cache.c).
    import zlib

    b = key.encode() if isinstance(key, str) else key
    return f"{prefix}{zlib.crc32(b):08x}{zlib.adler32(b):08x}"


def load(dfd: int, key: str, now: float) -> dict | None:
    """The entry for `key` when it is whole, for this key and fresh; else None.
    A published error is raised as the NodemapError it was."""
    try:
        fd = os.open(entry_name(key) + ".bin", os.O_RDONLY | _FILE_FLAGS, dir_fd=dfd)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            data = marshal.load(f)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if not (isinstance(data, dict) and data.get("cache") == SCHEMA and data.get("key") == key):
        return None
    made = data.get("made")
    ttl = ERROR_TTL if "error" in data else TTL
    # made in the future (a clock set back, a planted time): stale, not forever fresh
    if not isinstance(made, float) or not 0.0 <= now - made <= ttl:
        return None
    if "error" in data:
        err = NodemapError(str(data["error"]))
        err.exit_code = int(data.get("exit_code", 2))
        raise err
    return data


def save(dfd: int, key: str, data: dict, now: float) -> None:
    """Publish atomically; failures are ignored.

    marshal, not json: it needs no import (~3 ms per rank); the file is only
    ever read back from a directory no one else can write.
    """
    publish(dfd, entry_name(key) + ".bin", marshal.dumps({**data, "cache": SCHEMA, "key": key, "made": now}))
    prune(dfd, now)


def publish(dfd: int, name: str, data: bytes) -> bool:
    """Write `name` in the folder `dfd` atomically (a temporary name, then
    rename: a reader sees the whole file or none), mode 0600; False when it
    could not be written."""
    tmp = f"{name}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_FLAGS, 0o600, dir_fd=dfd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        return True
    except OSError:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        return False


ENTRY_PREFIXES = ("plan-", "spank-")  # this module's entries, the SPANK plugin's (spankcache.py)


def prune(dfd: int, now: float, age: float = 6 * TTL) -> None:
    """Remove entries, locks and leftovers not touched for `age` s (an hour):
    long expired, and no rank waits on a lock that long (LOCK_WAIT)."""
    try:
        with os.scandir(dfd) as it:
            old = [e.name for e in it if e.name.startswith(ENTRY_PREFIXES) and e.is_file(follow_symlinks=False)
                   and now - e.stat(follow_symlinks=False).st_mtime > age]
    except OSError:
        return
    for n in old:
        try:
            os.unlink(n, dir_fd=dfd)
        except OSError:
            pass


class NodeLock:
    """The node's planning lock for one key (flock on a file in the cache
    folder; the kernel drops it if the holder dies). The planning rank holds
    it exclusively; the others wait for a shared hold, which the kernel
    grants to all of them the moment the planner unlocks (no polling, no
    sleep past the publish), and then read the plan side by side."""

    def __init__(self, dfd: int, key: str, folder_path: str = "") -> None:
        self.path = os.path.join(folder_path, entry_name(key) + ".lock")
        self.fd = os.open(entry_name(key) + ".lock", os.O_RDWR | os.O_CREAT | _FILE_FLAGS, 0o600, dir_fd=dfd)

    def take(self) -> bool:
        """The exclusive lock if no one holds it now."""
        import fcntl

        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def wait(self, exclusive: bool, wait: float | None = None, say=lambda text: None) -> bool:
        """Block in the kernel until the lock is ours (shared or exclusive);
        False after `wait` s (the holder is stuck). flock has no timeout, so
        it blocks in a thread and this one waits on it with the deadline; a
        thread left behind exits with the process (or its exec). A wait past
        LOCK_NOTICE is said through `say`, and so is giving up."""
        import fcntl
        import threading

        got = threading.Event()

        def block() -> None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                got.set()
            except OSError:  # the descriptor was closed after the deadline
                pass

        wait = LOCK_WAIT if wait is None else wait
        threading.Thread(target=block, daemon=True).start()
        if got.wait(min(wait, LOCK_NOTICE)):
            return True
        say(f"waiting for the node's plan: another process holds the planning lock {self.path} (up to "
            f"{wait:g} s, then this rank plans itself)")
        if got.wait(max(wait - LOCK_NOTICE, 0)):
            return True
        say(f"the process holding {self.path} did not publish a plan in {wait:g} s: planning here (a stuck "
            "nodemap run holds it: end it, or pass --no-cache)")
        return False

    def close(self) -> None:
        os.close(self.fd)  # releases the lock


def shared_plan(key: str, make, now=time.time, say=lambda text: None) -> tuple[dict, bool]:
    """The node's plan for `key` and whether another rank (or an earlier
    step) made it. `make()` plans; it runs in at most one rank of the node
    at a time; `say` tells of a long wait for the rank planning. Raises
    Refused when the cache folder cannot be trusted."""
    dfd = open_folder()
    try:
        hit = load(dfd, key, now())
        if hit is not None:
            return hit, True
        lock = NodeLock(dfd, key, folder())
        try:
            # another rank is planning: read what it publishes. Not in time: plan anyway (the holder is stuck)
            if not lock.take() and lock.wait(exclusive=False, say=say):
                hit = load(dfd, key, now())
                if hit is not None:
                    return hit, True
                lock.wait(exclusive=True, say=say)  # it died or could not publish: plan, one rank at a time
            hit = load(dfd, key, now())  # published while we waited
            if hit is not None:
                return hit, True
            try:
                data = make()
            except NodemapError as e:
                save(dfd, key, {"error": str(e), "exit_code": e.exit_code}, now())
                raise
            save(dfd, key, data, now())
            return data, False
        finally:
            lock.close()
    finally:
        os.close(dfd)
