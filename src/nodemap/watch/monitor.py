"""`nodemap run --watch`: the rank's launcher records its application's memory over time.

The launcher starts the application as its child (fork, bind, exec) and
stays beside it as its monitor: why, and what happens to signals and exit
statuses, docs/watch.md. Each sample is one line appended to the rank's
timeline file with one write(2) (a killed monitor leaves only complete
lines). The format and the analysis are in nodemap.watch.timeline and
nodemap.watch.analysis; this module only samples. Nothing here is imported
unless --watch is given.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import sys
import time
from typing import Any, Callable, Mapping

from .. import env as launcher_env
from ..errors import NodemapError
from ..outfile import json_text
from ..text import decoded
from .timeline import SCHEMA, End, Event, Gpu, Header

DEFAULT_INTERVAL = 0.2  # s
JOB_VARS = ("SLURM_JOB_ID", "FLUX_JOB_ID", "PBS_JOBID", "LSB_JOBID", "COBALT_JOBID", "PMIX_NAMESPACE")
# what the findings' fixes depend on: memory pools and the UCX transports
ENV_KEYS = ("UCX_TLS", "UCX_CUDA_IPC_CACHE", "UCX_RNDV_THRESH", "NV_ACC_MEM_MANAGE",
            "PGI_ACC_MEM_MANAGE", "NV_ACC_POOL_SIZE", "CUPY_GPU_MEMORY_LIMIT", "PYTORCH_CUDA_ALLOC_CONF",
            "PYTORCH_NO_CUDA_MEMORY_CACHING", "TF_FORCE_GPU_ALLOW_GROWTH", "XLA_PYTHON_CLIENT_PREALLOCATE",
            "OMPI_MCA_pml", "MPICH_GPU_SUPPORT_ENABLED") + launcher_env.GPU_VISIBILITY_VARS
# where a mapped file's path says which runtime allocates: (text in the path, name recorded)
LIB_MARKS = (("libucp", "libucp"), ("libuct_cuda", "libuct_cuda"), ("libacc", "libacc"), ("libnvhpcatm", "libnvhpcatm"),
             ("libcudafor", "libcudafor"), ("/cupy_backends/", "cupy"), ("/cupy/", "cupy"),
             ("libtorch_cuda", "libtorch_cuda"), ("libc10_cuda", "libc10_cuda"), ("libnccl", "libnccl"),
             ("libcudart", "libcudart"), ("libmpi", "libmpi"), ("/jaxlib/", "jax"), ("libtensorflow", "libtensorflow"))
LIB_SCANS = (1.0, 5.0, 30.0, 120.0)  # s after start: runtimes load late (dlopen)
# forwarded to the application (SIGTSTP/SIGCONT act on the whole group by themselves)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
             signal.SIGALRM, signal.SIGWINCH)
SI_KERNEL = 0x80  # si_code of a signal the kernel sent (the terminal's Ctrl-C, hang-up)
ENV_WATCH_DIR = "NODEMAP_WATCH_DIR"
ENV_SUMMARY_WAIT = "NODEMAP_WATCH_SUMMARY_WAIT"
SUMMARY_WAIT = 60.0  # s local rank 0 waits at most for its peers' ends before it prints what it has
PEER_GRACE = 3.0  # s a peer's application may be gone before its monitor writes the end
NEVER_STARTED = 15.0  # s after rank 0's end, a peer with no timeline at all started no monitor (it failed first)


class WriteFailed(OSError):
    """The timeline file took no more lines (a full disk, a quota, a file size limit)."""


def parse_interval(text: str | None) -> float:
    """'200ms', '0.5s', '2' (seconds) -> seconds; at least 10 ms; None: the default."""
    from ..errors import InputError

    if text is None:
        return DEFAULT_INTERVAL
    s = str(text).strip().lower()
    scale = 1.0
    for suffix, f in (("ms", 1e-3), ("us", 1e-6), ("s", 1.0), ("m", 60.0)):
        if s.endswith(suffix):
            s, scale = s[: -len(suffix)], f
            break
    try:
        v = float(s) * scale
    except ValueError:
        raise InputError("--watch-interval", f"{text!r} is not a duration (write 200ms, 0.5s or 1)") from None
    if not v >= 0.01 or v > 3600:
        raise InputError("--watch-interval", f"{text!r} is out of range (10ms to 1h)")
    return v


def job_id(env) -> str:
    """What ranks of one job share: the batch system's job id, else the launcher process (per node)."""
    for k in JOB_VARS:
        if env.get(k):
            step = env.get("SLURM_STEP_ID", "") if k == "SLURM_JOB_ID" else ""
            return env[k] + (f".{step}" if step else "")
    return f"ppid{os.getppid()}"


def default_dir(env) -> str:
    if env.get(ENV_WATCH_DIR):
        return env[ENV_WATCH_DIR]
    job = next((env[k] for k in JOB_VARS[:5] if env.get(k)), "")
    return f"nodemap-watch-{job}" if job else "nodemap-watch"


class Watch:
    """A prepared monitor: the timeline file is open and its header written; `run` starts the application."""

    def __init__(self, fd: int, path: str, header: Header, interval: float) -> None:
        self.fd, self.path, self.header, self.interval = fd, path, header, interval

    def run(self, exec_app: Callable[[], None]) -> int:
        """Fork; the child calls `exec_app` (bind and exec, never returns); this process records the child
        until it ends, prints the summary (local rank 0) and returns the application's exit status (or ends
        by the signal that ended it). An exec that fails raises its NodemapError here, leaving no timeline."""
        waited = set(FORWARDED) | {signal.SIGCHLD}
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)  # delivered to sigtimedwait, not to handlers
        sys.stdout.flush()
        sys.stderr.flush()
        r, w = os.pipe2(os.O_CLOEXEC)  # closed by a successful exec; a failed one writes its error there
        app = os.fork()
        if app == 0:
            _exec_child(self.fd, r, w, mask, exec_app)
        os.close(w)
        failed = _read_pipe(r)
        if failed:
            os.waitpid(app, 0)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            self._abandon()
            err = NodemapError(failed["error"])
            err.exit_code = failed["code"]
            raise err
        status = _monitor(self, app)
        return _end_as(status, mask)

    def _abandon(self) -> None:
        """The exec failed: no application ran, so no timeline stays."""
        try:
            os.close(self.fd)
            os.unlink(self.path)
        except OSError:
            pass


def _exec_child(fd: int, r: int, w: int, mask, exec_app: Callable[[], None]) -> None:
    """In the child: the launcher's signal mask back, then bind and exec; an error goes up the pipe."""
    code, text = 127, "the application could not be started"
    try:
        os.close(fd)
        os.close(r)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        exec_app()
    except BaseException as e:  # NodemapError from the exec: its one-line message and the shell's code
        code, text = getattr(e, "exit_code", None) or 127, str(e) or type(e).__name__
    try:
        os.write(w, json.dumps({"error": text, "code": code}).encode())
    finally:
        os._exit(code)  # a forked copy of the launcher: it must never return into its code


def _read_pipe(r: int) -> dict | None:
    chunks = []
    while True:
        try:
            b = os.read(r, 65536)
        except InterruptedError:
            continue
        if not b:
            break
        chunks.append(b)
    os.close(r)
    try:
        return json.loads(b"".join(chunks)) if chunks else None
    except ValueError:
        return {"error": "the application could not be started", "code": 127}


def _end_as(status: int, mask) -> int:
    """The application's exit status as the launcher's: its code, or death by the same signal."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return code
    sig = -code
    try:
        if sig != signal.SIGKILL:  # SIGKILL's disposition cannot be set (and needs no unblocking)
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, set(mask) - {sig})
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), sig)
    except (OSError, ValueError):
        pass
    return 128 + sig  # a signal whose default is not to end a process (or one we cannot raise)


def _stopped(w: Watch, e: BaseException) -> None:
    """Say once, in the timeline if it still takes a line and on stderr, that the timeline stops here."""
    t = time.time() - w.header.start
    why = f"cannot write {w.path} ({e.strerror})" if isinstance(e, WriteFailed) else \
        f"the monitor failed ({type(e).__name__}: {e})"
    note = f"the memory timeline of rank {w.header.rank} stops at {t:.1f} s: {why}"
    for say in (lambda: _write(w.fd, Event(note=note)), lambda: os.write(2, f"nodemap run --watch: note: {note}; "
                                                                          "the application runs on\n".encode())):
        try:
            say()
        except BaseException:
            pass


def prepare(directory: str | None, interval: float, *, local_rank: int, local_size: int, task, argv: list[str],
            env) -> Watch:
    """Check the folder is writable and open this rank's timeline, before anything starts. `task`: this
    rank's part of the node's plan (mapping.nodeplan.PlannedTask), None when none is known."""
    d = directory or default_dir(env)
    host = socket.gethostname()
    rank = launcher_env.global_rank_or(env, local_rank)  # it names the timeline: never stops the application
    path = os.path.join(d, f"{host}.r{rank}.{os.getpid()}.watch")
    from ..outfile import make_folder, open_append

    try:  # a shared watch folder: never through a link another user planted (a pid is easy to guess)
        make_folder(d, "--watch-dir")
        fd = open_append(d, os.path.basename(path), "--watch-dir")
    except NodemapError as e:
        raise NodemapError(f"cannot write the watch timeline: {e} (e.g. --watch-dir $HOME/watch)") from None
    header = Header(SCHEMA, host, job_id(env), rank, local_rank, local_size, os.getpid(), list(argv), time.time(),
                    interval, list(task.gpus) if task else [], list(task.gpu_pci) if task else [],
                    task.cpus if task else "", _meminfo().get("MemTotal", 0),
                    {k: env[k] for k in ENV_KEYS if k in env})
    try:
        _write(fd, header)
    except OSError as e:
        os.close(fd)
        raise NodemapError(f"cannot write the watch timeline {path!r} ({e.strerror}): pass --watch-dir to a "
                           "folder with space you can write") from None
    return Watch(fd, path, header, interval)


# --- the monitor process ---------------------------------------------------------------


def _monitor(w: Watch, app: int) -> int:
    """Sample the application until it ends; its wait status. A monitor that fails (a full disk) says so once
    and waits on: the application runs on undisturbed."""
    _detach(w)
    ended: list[int] = []
    try:
        _record(w, app, ended)
    except BaseException as e:
        _stopped(w, e)
    status = ended[0] if ended else _wait(app, None)
    if w.header.local_rank == 0:
        try:
            _summary(w)
        except Exception as e:  # the application's status matters more than its summary
            os.write(2, f"nodemap run --watch: note: no summary ({type(e).__name__}: {e})\n".encode())
    return status


def _record(w: Watch, app: int, ended: list[int]) -> None:
    """Samples until the application ends; its wait status goes into `ended` as soon as it is reaped."""
    gpus = _Gpus(w.header.planned_gpus, w.header.planned_pci)
    _write(w.fd, Event(gpus=gpus.info, note=gpus.note))
    t0 = w.header.start
    n, scans, seen_others = 0, list(LIB_SCANS), {}
    libs: set[str] = set()
    while True:
        now = time.time()
        tree = _tree(app)
        own, used, others, who = gpus.sample(tree)
        mem = _meminfo()
        _write(w.fd, [round(now - t0, 3), _rss(tree), mem.get("MemAvailable", 0), own, used, others])
        n += 1
        if who != seen_others:
            seen_others = who
            _write(w.fd, Event(others=who))
        if scans and now - t0 >= scans[0]:
            scans.pop(0)
            new = _libs(tree) - libs
            if new:
                libs |= new
                _write(w.fd, Event(libs=sorted(new)))
        status = _wait(app, w.interval)
        if status is not None:
            ended.append(status)
            break
    code = os.waitstatus_to_exitcode(status)
    _write(w.fd, Event(end=End(round(time.time() - t0, 3), n, *((None, -code) if code < 0 else (code, None)))))
    gpus.close()


def _wait(app: int, timeout: float | None) -> int | None:
    """Wait up to `timeout` s (None: until it ends) for the application's end, forwarding the signals this
    process gets; its wait status, or None while it runs."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        pid, status = os.waitpid(app, os.WNOHANG)
        if pid:
            return status
        left = 3600.0 if deadline is None else deadline - time.monotonic()
        if left <= 0:
            return None
        info = signal.sigtimedwait(set(FORWARDED) | {signal.SIGCHLD}, left)
        if info is not None and info.si_signo != signal.SIGCHLD and info.si_code != SI_KERNEL:
            # sent to this process (kill, a launcher forwarding): the application's. The terminal's Ctrl-C
            # (SI_KERNEL) went to the whole foreground group, the application too: not twice.
            try:
                os.kill(app, info.si_signo)
            except OSError:
                pass


def _detach(w: Watch) -> None:
    """Beside the application without touching it: inherited sockets (PMI, the launcher's) stay the
    application's alone, and the monitor yields the CPU to it."""
    keep = sorted({2, w.fd})
    os.closerange(3, keep[-1]) if keep[-1] > 3 else None
    os.closerange(keep[-1] + 1, 65536)
    # SIGXFSZ: a file size limit is a failed write (the timeline stops with a note), not a silent death
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        os.nice(5)
    except OSError:
        pass


def _write(fd: int, record: Header | Event | list) -> None:
    """One complete line per write(2): a kill never leaves half a record, and a full file system
    that takes only part of the line gets it taken back (the file ends with a complete line)."""
    data = (json_text(record, None, (",", ":")) + "\n").encode()
    try:
        n = os.write(fd, data)
        if n < len(data):
            os.ftruncate(fd, os.fstat(fd).st_size - n)
            raise OSError(errno.ENOSPC, "the file system took only part of a line: full, or a file size limit")
    except OSError as e:
        raise WriteFailed(e.errno, e.strerror) from None


# --- samplers ------------------------------------------------------------------------------


def _tree(app: int) -> list[int]:
    """The application and its descendants (through /proc/PID/task/TID/children), not this monitor."""
    out, todo, me = [], [app], os.getpid()
    while todo and len(out) < 4096:
        pid = todo.pop()
        if pid == me:
            continue
        out.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                pass
    return out


def _rss(tree: list[int]) -> int:
    total = 0
    for pid in tree:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


PAGE = os.sysconf("SC_PAGE_SIZE")


def _meminfo() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("MemTotal", "MemAvailable"):
                    out[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def node_gpus(root: str = "/") -> dict[str, int]:
    """Normalised PCI bus id -> the topology's index of this node's GPUs ({} where sysfs cannot say): read once,
    before the application's first sample (~0.1 s)."""
    from ..topology import sysfs

    try:
        return {g.pci_bus_id: g.index for g in sysfs.read(root).gpus if g.pci_bus_id}
    except Exception:  # no sysfs (not Linux, a masked /sys): GPUs are named by their bus ids
        return {}


def _libs(tree: list[int]) -> set[str]:
    """Which runtimes the application loaded (read a few times: /proc/PID/maps takes the mm lock)."""
    found = set()
    for pid in tree[:16]:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    if "/" in line:
                        path = line[line.index("/"):]
                        found.update(name for mark, name in LIB_MARKS if mark in path)
        except OSError:
            pass
    return found


def _ancestors(pid: int, depth: int = 8) -> list[int]:
    out = []
    for _ in range(depth):
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
        if pid <= 1:
            break
        out.append(pid)
    return out


class _Gpus:
    """NVML on the rank's GPUs (all of them when the plan gave it none); empty without NVML. Each is named as
    the topology names it, found by PCI bus id: NVML's index counts only the GPUs a device cgroup lets it see."""

    def __init__(self, planned: list[int], planned_pci: list[str] = (), node: Mapping[str, int] | None = None
                 ) -> None:
        """`node`: normalised PCI bus id -> the topology's GPU index (None: read this node's, `node_gpus`)."""
        self.nvml, self.handles, self.note = None, [], ""
        self.info: list[Gpu] = []
        self._seen: dict[int, tuple[str, list[int]]] = {}
        from ..topology.nvml import start

        nvml, why = start()
        if nvml is None:  # no package, no driver, no GPU: host memory only
            self.note = f"no NVML ({why}): host memory only"
            return
        self.nvml = nvml
        try:
            for index, bus, h in self._mine(planned, planned_pci, node):
                mem = nvml.nvmlDeviceGetMemoryInfo(h)
                self.handles.append(h)
                self.info.append(Gpu(index, bus, decoded(nvml.nvmlDeviceGetUUID(h)),
                                     decoded(nvml.nvmlDeviceGetName(h)), int(mem.total)))
        except Exception as e:
            self.note = f"NVML cannot read the GPUs ({type(e).__name__}: {e}): host memory only"
            self.handles, self.info = [], []
        if not self.handles and not self.note:
            self.note = "no GPU: host memory only"

    def _mine(self, planned: list[int], planned_pci: list[str], node: Mapping[str, int] | None
              ) -> list[tuple[int, str, Any]]:
        """(the topology's index, bus id, NVML handle) of the rank's GPUs, found by PCI bus id: the plan's, else
        the topology's for a planned index; all GPUs NVML sees without a plan (a negative index: not in the
        topology, named by its bus id)."""
        from ..topology.model import norm_bus_id
        from ..topology.nvml import handles

        by_bus = {bus: h for _, h, bus in handles(self.nvml)}
        if node is None:  # sysfs is read only where the plan's bus ids do not say it all (8 ranks read it at once)
            node = {} if planned and len(planned_pci) == len(planned) and all(planned_pci) else node_gpus()
        if not planned:
            unknown = [bus for bus in by_bus if bus not in node]
            if unknown:
                self.note = f"no topology names the GPU(s) at {', '.join(unknown)}: recorded by PCI bus id"
            # one no topology names: a negative index of its own (the others record is keyed by index)
            return [(node.get(bus, -1 - k), bus, h) for k, (bus, h) in enumerate(by_bus.items())]
        at = {i: norm_bus_id(b) for i, b in zip(planned, planned_pci) if b}
        at.update({i: bus for bus, i in node.items() if i in planned and i not in at})
        missing = [f"{i} ({at[i]})" if i in at else f"{i} (no PCI bus id: the plan has none, nor a topology here)"
                   for i in planned if at.get(i) not in by_bus]
        if missing:
            self.note = f"NVML does not see planned GPU(s) {', '.join(missing)} (a device cgroup?): not recorded"
        return [(i, at[i], by_bus[at[i]]) for i in planned if at.get(i) in by_bus]

    def sample(self, tree: list[int]) -> tuple[list[int], list[int], list[int], dict]:
        from ..topology.nvml import processes

        own, used, others, who = [], [], [], {}
        mine = set(tree)
        for info, h in zip(self.info, self.handles):
            o = u = x = 0
            try:
                u = int(self.nvml.nvmlDeviceGetMemoryInfo(h).used)
                for p in processes(self.nvml, h):
                    b = int(p.usedGpuMemory or 0)
                    if p.pid in mine:
                        o += b
                    else:
                        x += b
                        who.setdefault(info.index, []).append([p.pid, b, *self._describe(p.pid)])
            except Exception:
                pass
            own.append(o)
            used.append(u)
            others.append(x)
        # the set of other processes, not their sizes, is what a finding names: keep records rare
        return own, used, others, {g: sorted([p, c, a] for p, _, c, a in v) for g, v in who.items()}

    def _describe(self, pid: int) -> tuple[str, list[int]]:
        """Name and ancestors of another process, read once per pid (ranks sharing a GPU see each other every
        sample)."""
        from ..topology.nvml import process_name

        if pid not in self._seen:
            self._seen[pid] = (process_name(pid), _ancestors(pid))
        return self._seen[pid]

    def close(self) -> None:
        from ..topology.nvml import stop

        if self.nvml is not None:
            stop(self.nvml)


def _summary(w: Watch) -> None:
    """Local rank 0 prints the node's summary once the other ranks' monitors have ended."""
    from ..check.expectations import WatchRules, shipped
    from .analysis import analyse
    from .summary import render
    from .timeline import Skipped, read_dir, say_unreadable

    d = os.path.dirname(w.path) or "."
    _await_peers(d, w.header)
    unreadable: list[Skipped] = []
    tls = [t for t in read_dir(d, unreadable) if t.job == w.header.job and t.host == w.header.host]
    a = analyse(tls, shipped().table(WatchRules))  # run has no --expect: `report --expect SITE DIR` takes a site's
    try:
        say_unreadable(unreadable, sys.stderr)
        sys.stderr.write(render(a, d))
        sys.stderr.flush()
    except OSError:
        pass


def summary_wait(env) -> float:
    """How long local rank 0 waits for its peers' timelines: a loaded node starts and ends ranks seconds
    apart."""
    try:
        v = float(env.get(ENV_SUMMARY_WAIT, ""))
    except ValueError:
        return SUMMARY_WAIT
    return v if 0 <= v <= 24 * 3600 else SUMMARY_WAIT


def _await_peers(d: str, header: Header) -> None:
    """Until every local rank's timeline has its end, a peer's application has been gone for a while
    without one (its monitor was killed), or the bound ($NODEMAP_WATCH_SUMMARY_WAIT) is reached."""
    from .timeline import peek_dir

    t0 = time.time()
    deadline = t0 + summary_wait(os.environ)
    gone_since: dict[int, float] = {}
    while time.time() < deadline:
        peers = peek_dir(d, header.job, header.host)
        open_ = [h for h, ended in peers if not ended]
        everyone = len(peers) >= header.local_size or time.time() - t0 > NEVER_STARTED
        if everyone and all(_lost(h, gone_since) for h in open_):
            return
        time.sleep(0.1)


def _lost(header: Any, gone_since: dict[int, float]) -> bool:
    """A rank whose application ended PEER_GRACE s ago and whose timeline has no end: its monitor died."""
    pid = header.pid
    if pid and _alive(pid):
        return False
    first = gone_since.setdefault(pid, time.time())
    return time.time() - first > PEER_GRACE


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False
