"""The gate as a centre runs it (issue 35): every recipe of docs/slurm.md on at
once in a real Slurm test cluster, a stream of jobs under bursts of background
load, and faults injected at random moments; counted: healthy nodes drained,
jobs nodemap failed, the seconds nodemap adds per job, the longest hang.

  python3 benchmarks/soak.py [--jobs 500] [--faults all] [--seed 1] [--out PREFIX]

Three clusters of scripts/slurm-test-cluster run side by side: A with the
recipes (HealthCheckProgram every --health-interval s, Prolog, Epilog, the
plugstack line of `srun --nodemap`), B bare, C with A's slurm.conf lines but
scripts that exit 0 (Slurm's own prolog and epilog machinery). Every job of
the stream runs on all three, one after the other (the order turns), so the
seconds nodemap adds (A - C) and the recipes add (A - B) are paired
differences measured under the same load. The recipes are the fenced blocks
marked `<!-- recipe: NAME -->` in docs/slurm.md, read and run verbatim as
tests/test_docs_recipes.py does, with the machine's paths replaced by the
soak's folder (node-local paths get a folder per node: `${SLURMD_NODENAME}`,
expanded where the script runs); HealthCheckInterval is the soak's.

The stream: `srun -N3 -n3 printenv SLURMD_NODENAME` and the docs'
`srun --nodemap ...` lines (./app: a task printing its node and CPUs), -N
lowered while a node is out; every --fleet-every jobs the docs' fleet line
(`srun --mpi=pmi2 -N3 nodemap check --fleet -o DIR`, tiny arrays) on A.
Faults (soak_faults.py), one at a time, each at a random job of the stream:
a node-class mismatch, rank 0 and a leader killed in a fleet job, slurmd
killed mid-job, slurmctld restarted, a node's output folder full (a tmpfs
mounted and filled), a busy node under a measuring check, a stale lock left
by a SIGKILLed check, planted symlinks in a shared output folder. Each is
judged: found and drained with nodemap's reason, or rightly left undrained,
and back in service after the fix.

A drain is false when no fault that drains (the class mismatch) was on its
node. A failed job is explained when a fault that may fail jobs overlapped it
(on its node where known); else it counts, "by nodemap" when its stderr names
nodemap, a prolog or an epilog. The longest hang: the longest-lived nodemap
process of the gate (health, prolog, epilog checks, the plugin's plan),
sampled from /proc every second, and the slowest job beyond its run on C.

Every daemon is stopped by its pid (slurm-test-cluster stop), every mount
this soak made is unmounted, every process it started is ended by its pid:
at the end, on Ctrl-C, SIGTERM or a failure. Needs root and Debian's Slurm
packages (scripts/install-test-packages), mount(8) for the tmpfs.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import platform
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "slurm-test-cluster")
SBIN = "/usr/bin:/bin:/usr/sbin:/sbin"
HEALTHY_STATES = ("idle", "mixed", "allocated", "completing")


def end_group(p: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Ends a process proc.start_group started, with what it started: `sig` first (srun cancels its job
    step on SIGTERM; SIGKILLed, it leaves the job running), SIGKILL 10 s later."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(10)


def cluster_script():
    """scripts/slurm-test-cluster as a module: its spawn() restarts a daemon the way start does (pid recorded)."""
    loader = importlib.machinery.SourceFileLoader("slurm_test_cluster", SCRIPT)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(mod)
    return mod


# ---------------------------------------------------------------- the recipes

# The recipes are read and substituted as tests/test_docs_recipes.py does (one reader of the marked blocks,
# one table of substitutions, applied in one pass); the soak adds a folder per node for a node's own files.
sys.path.insert(0, os.path.join(ROOT, "tests"))
import test_docs_recipes as docs  # noqa: E402
from nodemap.proc import start_group  # noqa: E402

# Left after the substitutions, one of these would touch the machine's own setup: refused.
SYSTEM = re.compile(r"(?<![\w/.${}-])/(etc|opt|var|run|usr/local|shared)/")


@dataclass(frozen=True)
class Paths(docs.Paths):
    """docs.Paths, with what is a node's own (its class, its metrics and logs) in a folder per node: three
    slurmd on one host are three machines, each with its own /etc and /var. `${SLURMD_NODENAME}` is expanded
    by the shell that runs the script: slurmd's for the health program, prolog and epilog, the soak's (one
    run per node, as a centre installs every node) for the recipes that make them."""
    interval: int = 5
    app: str = ""

    def table(self) -> dict[str, str]:
        node = f"{self.top}/node/${{SLURMD_NODENAME}}"
        return dict(super().table(), **{
            "/etc/nodemap/class.json": f"{node}/etc/class.json",
            "/var/lib/node_exporter/textfile": f"{node}/out/textfile",
            "/var/lib/nodemap": f"{node}/out/nodemap",
            "/var/log/nodemap": f"{node}/out/log",
            "HealthCheckInterval=300": f"HealthCheckInterval={self.interval}",
            "./app": self.app,
        })


def substituted(name: str, paths: Paths) -> str:
    text = docs.verbatim(docs.recipes()[name], paths)
    left = SYSTEM.search(text)
    if left:
        raise SystemExit(f"soak: recipe {name} still names {left.group(0)}... after the substitutions: "
                         "add its path to tests/test_docs_recipes.py's Paths.table")
    return text


# ---------------------------------------------------------------- the clusters

class Cluster:
    """One scripts/slurm-test-cluster: started with conf lines and a plugstack, stopped by its pids."""

    def __init__(self, top: str, name: str, venv: str, track: Callable[[subprocess.Popen], None]) -> None:
        self.top, self.name, self.track = top, name, track
        self.conf = os.path.join(top, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf, PATH=f"{venv}/bin:{SBIN}", 
                        NODEMAP_CACHE_DIR=os.path.join(os.path.dirname(top), "cache"),
                        MPIR_CVAR_CH4_NETMOD="ofi", FI_PROVIDER="tcp", CUDA_VISIBLE_DEVICES="")
        for k in [k for k in self.env if k.startswith(("SLURM_", "SLURMD_")) and k != "SLURM_CONF"]:
            del self.env[k]
        self.nodes: list[str] = []
        self.started = False

    def start(self, nodes: int, conf_lines: list[str], plugstack: str = "") -> float:
        os.makedirs(self.top, exist_ok=True)
        cmd = [sys.executable, SCRIPT, "start", self.top, "--json", "--nodes", str(nodes), "--timeout", "120"]
        for line in conf_lines:
            cmd += ["--conf-line", line]
        if plugstack:
            with open(os.path.join(self.top, "plugstack.in"), "w") as f:
                f.write(plugstack)
            cmd += ["--plugstack", os.path.join(self.top, "plugstack.in")]
        self.started = True  # before: a start that fails half-way is stopped too
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if p.returncode:
            raise RuntimeError(f"cluster {self.name} did not start (exit {p.returncode}): {p.stderr.strip()}")
        info = json.loads(p.stdout)
        self.nodes = info["nodes"]
        return info["start_s"]

    def stop(self) -> str:
        if not self.started:
            return ""
        self.started = False
        p = subprocess.run([sys.executable, SCRIPT, "stop", self.top], capture_output=True, text=True, timeout=120)
        return p.stdout.strip()

    def run(self, argv: list[str], timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
        """A client command (srun, sinfo...) of this cluster; past `timeout` it is ended and TimeoutExpired
        raised. Tracked: an interrupted soak ends it too (an srun outlives its controller)."""
        p = self.popen(argv, env)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            end_group(p)
            out, err = p.communicate()
            raise subprocess.TimeoutExpired(argv, timeout, out, err) from e
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def popen(self, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        """Started in its own session (ended with what it started), stdout and stderr piped."""
        p = start_group(argv, dict(self.env, **(env or {})))
        self.track(p)
        return p

    def states(self) -> dict[str, tuple[str, str]]:
        """node -> (state, reason) from sinfo; {} when slurmctld does not answer."""
        try:
            p = self.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], timeout=15)
        except subprocess.TimeoutExpired:
            return {}
        rows = [line.split("|", 2) for line in p.stdout.splitlines() if line.count("|") == 2]
        return {n: (s.rstrip("*~#").lower(), "" if r == "none" else r) for n, s, r in rows}

    def pids(self) -> dict[str, int]:
        try:
            with open(os.path.join(self.top, "pids.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}


# ---------------------------------------------------------------- watching

@dataclass
class Drain:
    node: str
    state: str
    reason: str
    start: float
    end: float | None = None
    verdict: str = ""  # expected (a fault that drains) | false


@dataclass
class Proc:
    pid: int
    kind: str
    start: float
    last: float
    cmd: str


class Watch(threading.Thread):
    """Once a second: cluster A's node states (drain and down spans with
    their reasons), the nodemap processes alive (their lifetimes), and every
    5 s the load average."""

    def __init__(self, soak: "Soak") -> None:
        super().__init__(daemon=True, name="watch")
        self.soak = soak
        self.stop_event = threading.Event()
        self.now: dict[str, tuple[str, str]] = {}
        self.open: dict[str, Drain] = {}
        self.spans: list[Drain] = []
        self.procs: dict[tuple[int, int], Proc] = {}
        self.load: list[tuple[float, float]] = []
        self.lock = threading.Lock()
        self.hz = os.sysconf("SC_CLK_TCK")

    def run(self) -> None:
        last_load = 0.0
        while not self.stop_event.is_set():
            t = self.soak.clock()
            states = self.soak.a.states()
            if states:
                self.seen(t, states)
            self.scan(t)
            if t - last_load >= 5:
                self.load.append((round(t, 1), os.getloadavg()[0]))
                last_load = t
            self.stop_event.wait(1.0)
        self.close(self.soak.clock())

    def seen(self, t: float, states: dict[str, tuple[str, str]]) -> None:
        with self.lock:
            self.now = states
            for node, (state, reason) in states.items():
                bad = state.startswith(("drain", "down", "fail"))
                span = self.open.get(node)
                if bad and (span is None or (span.state, span.reason) != (state, reason)):
                    if span:
                        span.end = t
                    self.open[node] = Drain(node, state, reason, t)
                    self.spans.append(self.open[node])
                elif not bad and span:
                    span.end = t
                    del self.open[node]

    def close(self, t: float) -> None:
        with self.lock:
            for span in self.open.values():
                span.end = t
            self.open.clear()

    def up(self) -> list[str]:
        with self.lock:
            return sorted(n for n, (s, _) in self.now.items() if s in HEALTHY_STATES)

    def state(self, node: str) -> tuple[str, str]:
        with self.lock:
            return self.now.get(node, ("", ""))

    def scan(self, t: float) -> None:
        """nodemap processes of this soak (their command line names its folder or its venv)."""
        marks = (self.soak.top, self.soak.venv)
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
                if "nodemap" not in cmd or not any(m in cmd for m in marks) or " check " not in cmd + " " \
                        and " plan " not in cmd:
                    continue
                with open(f"/proc/{entry}/stat") as f:
                    # clock ticks after boot; time.monotonic() counts from boot too (CLOCK_MONOTONIC)
                    started = int(f.read().rsplit(")", 1)[1].split()[19]) / self.hz - self.soak.t0
            except (OSError, ValueError, IndexError):
                continue
            key = (int(entry), int(started * 100))
            proc = self.procs.get(key)
            if proc:
                proc.last = t
            else:
                self.procs[key] = Proc(int(entry), self.kind(int(entry), cmd), started, t, cmd[:300])

    @staticmethod
    def kind(pid: int, cmd: str) -> str:
        if "--fleet" in cmd:
            return "fleet rank"
        if " plan " in cmd:
            return "srun --nodemap plan"
        if "--level health" not in cmd:
            return "measuring check"
        if "--slurm-context health" in cmd:
            return "HealthCheckProgram"
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
        except OSError:
            return "health check"
        return {b"prolog_slurmd": "prolog", b"epilog_slurmd": "epilog"}.get(
            next((v.split(b"=", 1)[1] for v in env.split(b"\0") if v.startswith(b"SLURM_SCRIPT_CONTEXT=")), b""),
            "health check")


# ---------------------------------------------------------------- load

class Load(threading.Thread):
    """Bursts of background load: every 15-60 s, for 10-40 s, 1-3 CPU
    spinners and a process holding 0.5-2 GiB it has touched."""

    def __init__(self, soak: "Soak") -> None:
        super().__init__(daemon=True, name="load")
        self.soak = soak
        self.rng = random.Random(soak.seed + 1)
        self.stop_event = threading.Event()
        self.bursts: list[dict[str, Any]] = []

    def run(self) -> None:
        while not self.stop_event.wait(self.rng.uniform(15, 60)):
            spin, gib, secs = self.rng.randint(1, 3), self.rng.choice((0.5, 1, 2)), self.rng.uniform(10, 40)
            t = self.soak.clock()
            procs = [self.soak.spawn([sys.executable, "-c", "while True: pass"]) for _ in range(spin)]
            procs.append(self.soak.spawn([sys.executable, "-c", MEMORY_HOG, str(int(gib * 2**30))]))
            self.stop_event.wait(secs)
            for p in procs:
                self.soak.end(p)
            self.bursts.append({"at": round(t, 1), "seconds": round(secs, 1), "spinners": spin, "memory_gib": gib})


MEMORY_HOG = "import sys, time\nb = bytearray(int(sys.argv[1]))\nfor i in range(0, len(b), 4096): b[i] = 1\ntime.sleep(3600)"


# ---------------------------------------------------------------- jobs

@dataclass
class Job:
    index: int
    shape: str
    cluster: str
    argv: list[str]
    start: float
    wall: float
    rc: int
    nodes: list[str]
    stderr: str
    verdict: str = ""  # ok | explained (a fault) | failed | failed by nodemap | plugin fell back


RECIPES = ("class", "health-program", "prolog-epilog", "slurm.conf", "spank-build", "plugstack.conf",
           "srun-nodemap", "check-by-hand", "test-cluster")


def shapes(recipe: str) -> dict[str, list[str]]:
    """The stream's job shapes: the docs' `srun --nodemap` lines (./app substituted: it says its node, its
    NODEMAP_ variables and CPUs) and a plain -N3 job."""
    out = {"srun -N3 -n3": ["srun", "-N3", "-n3", "printenv", "SLURMD_NODENAME"]}
    for line in recipe.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("srun"):
            argv = shlex.split(line)
            out[" ".join(w for w in argv[:-1])] = argv
    return out


def bare(argv: list[str]) -> list[str]:
    """The same job for cluster B, which has no plugin: its --nodemap options left out."""
    return [w for w in argv if not w.startswith("--nodemap")]


def fewer_nodes(argv: list[str], up: int) -> list[str]:
    """-N lowered to the nodes in service (a -N3 job would wait for a drained node)."""
    out = []
    for w in argv:
        m = re.fullmatch(r"-N(\d+)", w)
        out.append(f"-N{min(int(m.group(1)), max(up, 1))}" if m else w)
    if any(re.fullmatch(r"-n(\d+)", w) for w in out) and up < 3:
        out = [f"-n{max(up, 1)}" if re.fullmatch(r"-n\d+", w) else w for w in out]
    return out


NODE = re.compile(r"^(?:task \d+ on )?(n\d+)\b", re.M)  # docs.APP's line, or printenv SLURMD_NODENAME's
FLEET_LINE = re.compile(r"^srun --mpi=pmi2 .*nodemap check --fleet.*$", re.M)


# ---------------------------------------------------------------- the soak

@dataclass
class Fault:
    name: str
    nodes: list[str]
    expect: str  # what nodemap should do
    fails_jobs: bool  # jobs on its nodes may fail meanwhile (Slurm's doing, or the drain's)
    drains: bool  # a drain with nodemap's reason is expected on its nodes
    at_job: int = 0
    start: float = 0.0
    end: float = 0.0
    ok: bool = False
    found: str = ""
    fixed: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.seed = args.seed
        self.rng = random.Random(args.seed)
        self.venv = os.path.dirname(os.path.dirname(args.nodemap))
        self.top = tempfile.mkdtemp(prefix="nmsoak-")  # short: munge's socket path must fit in 108 bytes
        os.chmod(self.top, 0o755)
        self.children: list[subprocess.Popen] = []
        self.jobs_lock = threading.Lock()
        self.a = Cluster(os.path.join(self.top, "a"), "A", self.venv, self.track)
        self.b = Cluster(os.path.join(self.top, "b"), "B", self.venv, self.track)
        self.c = Cluster(os.path.join(self.top, "c-ctl"), "C", self.venv, self.track)
        self.t0 = time.monotonic()
        self.mounts: list[str] = []
        self.jobs: list[Job] = []
        self.faults: list[Fault] = []
        self.recipes: dict[str, str] = {}
        self.node_names: list[str] = [f"n{i}" for i in range(1, args.nodes + 1)]
        self.watch = Watch(self)
        self.load = Load(self)
        self.stopping = threading.Event()
        self.script = cluster_script()
        self.setup_s = None
        self.check_cost: dict[str, Any] = {}
        self.started: dict[str, float] = {}
        self.conf_lines: list[str] = []

    def clock(self) -> float:
        return time.monotonic() - self.t0

    # processes and mounts this soak owns: ended and removed by their pid and path

    def spawn(self, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        """A process of the soak's own (load, a check by hand), in its own session, ended at the end."""
        p = start_group(argv, env)
        self.track(p)
        return p

    def end(self, p: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
        end_group(p, sig)

    def track(self, p: subprocess.Popen) -> None:
        """Kept to be ended at the end; one started once cleanup has taken its list (a thread of the stream or
        of a fault still running) is ended here: an srun so started outlived an interrupted soak."""
        with self.jobs_lock:
            if not self.stopping.is_set():
                self.children = [c for c in self.children if c.poll() is None] + [p]
                return
        end_group(p, signal.SIGKILL)
        raise RuntimeError("the soak is stopping")

    def mount_tmpfs(self, path: str, size: str) -> None:
        if self.stopping.is_set():  # cleanup has begun: nothing new to undo
            raise RuntimeError("the soak is stopping")
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "nmsoak", path], check=True,
                       timeout=30)
        self.mounts.append(path)

    def unmount(self, path: str) -> None:
        if path in self.mounts:
            p = subprocess.run(["umount", path], capture_output=True, text=True, timeout=60)
            if p.returncode:  # something still has a file open there: lazily, it goes once they close
                subprocess.run(["umount", "-l", path], capture_output=True, timeout=60)
            self.mounts.remove(path)

    def cleanup(self) -> list[str]:
        """Everything this soak started, by pid and path; what it did, for the report."""
        done = []
        with self.jobs_lock:  # the flag and the list together: what is tracked later, track() ends
            self.stopping.set()
            children = list(self.children)
        self.load.stop_event.set()
        self.watch.stop_event.set()
        for p in children:
            self.end(p)
        done.append(f"{sum(p.returncode is not None for p in children)} processes of the soak ended")
        for c in (self.a, self.b, self.c):
            said = c.stop()
            if said:
                done.append(f"cluster {c.name}: {said}")
        for path in list(self.mounts):
            self.unmount(path)
            done.append(f"unmounted {path}")
        if not self.args.keep:
            shutil.rmtree(self.top, ignore_errors=True)
        return done

    # setup

    def setup(self) -> None:
        self.paths = Paths(Path(self.top), venv=Path(self.venv), slurm_conf=self.a.conf,
                           interval=self.args.health_interval, app=os.path.join(self.top, "app"))
        self.recipes = {name: substituted(name, self.paths) for name in RECIPES}
        fleet = FLEET_LINE.search(self.recipes["test-cluster"])
        if not fleet:
            raise SystemExit("soak: docs/slurm.md's test-cluster recipe has no `srun --mpi=pmi2 ... nodemap check "
                             "--fleet` line")
        self.fleet_argv = shlex.split(fleet.group(0))
        os.makedirs(os.path.join(self.top, "run"), mode=0o700)
        os.makedirs(os.path.join(self.top, "cache"), mode=0o700)  # the plugin's plan cache: not the machine's
        os.makedirs(os.path.join(self.top, "opt"))  # /opt/nodemap, which the install recipe made
        os.makedirs(os.path.join(self.top, "fleet"))
        for node in self.node_names:
            for sub in ("etc", "out"):
                os.makedirs(self.node_path(node, sub))
        for node in self.node_names:  # installed as a centre does, node by node
            for name in ("class", "prolog-epilog", "health-program"):
                self.sh(name, node)
        self.sh("spank-build", self.node_names[0])
        with open(self.paths.app, "w") as f:
            f.write(docs.APP)
        os.chmod(self.paths.app, 0o755)
        self.conf_lines = [line for line in self.recipes["slurm.conf"].splitlines() if "=" in line]
        plugstack = [line for line in self.recipes["plugstack.conf"].splitlines() if line.strip()]
        noop = os.path.join(self.top, "noop")
        with open(noop, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(noop, 0o755)
        control = [re.sub(r"^(HealthCheckProgram|Prolog|Epilog)=.*", rf"\1={noop}", line) for line in self.conf_lines]
        n = len(self.node_names)
        self.started = {"A": self.a.start(n, self.conf_lines, "\n".join(plugstack) + "\n"), "B": self.b.start(n, []),
                        "C": self.c.start(n, control)}
        self.shapes = shapes(self.recipes["srun-nodemap"])
        self.check_cost = self.cost_of_a_check()

    def cost_of_a_check(self, times: int = 5) -> dict[str, Any]:
        """Wall and CPU seconds of the health program run by hand on n1, one at a time: what each health
        check, prolog and epilog costs a node (the CPU time is the load-independent figure)."""
        walls, cpus = [], []
        script = os.path.join(self.top, "etc", "health")
        for _ in range(times):
            before, t = os.times(), time.monotonic()
            subprocess.run([script], env={"SLURMD_NODENAME": self.node_names[0]}, capture_output=True, timeout=120)
            after = os.times()
            walls.append(time.monotonic() - t)
            cpus.append(after.children_user + after.children_system - before.children_user - before.children_system)
        return {"runs": times, "wall_median_s": med(walls), "cpu_median_s": med(cpus), "load": rnd(os.getloadavg()[0])}

    def sh(self, recipe: str, node: str, env: dict | None = None, timeout: float = 300) -> None:
        p = subprocess.run(["sh", "-ec", self.recipes[recipe]], capture_output=True, text=True, timeout=timeout,
                           cwd=self.top, env=dict(os.environ, SLURMD_NODENAME=node, PATH=f"{self.venv}/bin:{SBIN}",
                                                  **(env or {})))
        if p.returncode:
            raise RuntimeError(f"recipe {recipe} on {node}: exit {p.returncode}: {p.stderr.strip()[-500:]}")

    def node_path(self, node: str, *parts: str) -> str:
        return os.path.join(self.top, "node", node, *parts)

    # the stream

    def run_job(self, index: int, shape: str, cluster: Cluster, argv: list[str], env: dict | None = None,
                timeout: float | None = None) -> Job:
        t = self.clock()
        try:
            p = cluster.run(argv, timeout=timeout or self.args.job_timeout, env=env)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out = -9, e.output or ""
            err = f"{e.stderr or ''}\nsoak: no end within {timeout or self.args.job_timeout:g} s (ended)"
        nodes = sorted({m.group(1) for m in NODE.finditer(out)})
        unbound = [line for line in out.splitlines() if ": 0 NODEMAP_ variables" in line]
        if "--nodemap" in " ".join(argv) and "--nodemap=off" not in argv and unbound:
            err += f"\nsoak: a task of --nodemap without the plan: {unbound[0]}"
        if shape == "fleet":  # its whole output, beside its folder
            with open(os.path.join(self.top, "fleet", f"job{index}-{cluster.name}-{round(t)}.out"), "w") as f:
                f.write(f"$ {shlex.join(argv)}\nexit {rc}\n--- stdout\n{out}\n--- stderr\n{err}\n")
        job = Job(index, shape, cluster.name, argv, round(t, 2), round(self.clock() - t, 3), rc, nodes,
                  err.strip()[-600:])
        with self.jobs_lock:
            self.jobs.append(job)
        if job.rc or self.args.verbose:
            self.say(f"job {index} {cluster.name} `{shape}` exit {job.rc} in {job.wall:.1f} s"
                     + (f": {job.stderr.splitlines()[-1][:200]}" if job.rc and job.stderr else ""))
        return job

    def say(self, text: str) -> None:
        print(f"[{self.clock():7.1f} s] {text}", file=sys.stderr, flush=True)

    def fleet_line(self, out: str) -> list[str]:
        """The docs' fleet line, writing to `out`, on the nodes in service."""
        argv = fewer_nodes(self.fleet_argv, len(self.watch.up()) or len(self.node_names))
        argv[argv.index("-o") + 1] = out
        return argv

    def fleet(self, index: int, out: str, env: dict | None = None, timeout: float | None = None) -> Job:
        argv = self.fleet_line(out)
        return self.run_job(index, "fleet", self.a, argv, env=dict(FLEET_ENV, **(env or {})),
                            timeout=timeout or self.args.fleet_timeout)

    def stream(self, worker: int, indexes: list[int], on_job: Callable[[int], None]) -> None:
        rng = random.Random(self.seed * 1000 + worker)
        names = sorted(self.shapes)
        for i in indexes:
            if self.stopping.is_set():
                return
            on_job(i)
            if self.args.fleet_every and i % self.args.fleet_every == self.args.fleet_every - 1:
                if len(self.watch.up()) >= 2:  # a fleet of one is no fleet; its -N waits for a drained node
                    self.fleet(i, os.path.join(self.top, "fleet", f"job{i}"))
                continue
            shape = names[rng.randrange(len(names))]
            argv = fewer_nodes(self.shapes[shape], len(self.watch.up()) or len(self.node_names))
            runs = [(self.a, argv), (self.b, bare(argv)), (self.c, bare(argv))]
            for cluster, cmd in runs[i % 3:] + runs[:i % 3]:  # the order turns: no cluster always first
                self.run_job(i, shape, cluster, cmd)

    def run(self) -> dict[str, Any]:
        import soak_faults

        t_setup = self.clock()
        self.setup()
        self.setup_s = round(self.clock() - t_setup, 1)
        self.watch.start()
        self.load.start()
        wanted = soak_faults.chosen(self.args.faults)
        n = self.args.jobs
        at = sorted(self.rng.sample(range(max(1, n // 10), max(2, n * 17 // 20)), len(wanted)))
        self.rng.shuffle(wanted)
        queue = dict(zip(at, wanted))
        runner = soak_faults.Runner(self)
        self.faults = runner.done  # the faults so far, also when the soak is interrupted
        runner.start()

        def on_job(i: int) -> None:
            if i in queue:
                runner.queue.put((i, queue.pop(i)))

        workers = [threading.Thread(target=self.stream, args=(w, list(range(w, n, self.args.workers)), on_job),
                                    name=f"stream{w}", daemon=True) for w in range(self.args.workers)]
        for w in workers:
            w.start()
        for w in workers:
            while w.is_alive():  # polled: a join without a timeout would hold off Ctrl-C
                w.join(1)
        runner.queue.put(None)
        while runner.is_alive():
            runner.join(1)
        time.sleep(self.args.settle)  # the last epilogs and health checks after the stream
        self.watch.stop_event.set()
        self.watch.join(30)
        return self.results()

    # judging

    def results(self) -> dict[str, Any]:
        judge(self.watch.spans, self.jobs, self.faults, self.clock())
        a = [j for j in self.jobs if j.cluster == "A"]
        same = {(j.cluster, j.index, j.shape): j for j in self.jobs if j.index >= 0}
        # the stream's jobs that ran right on all three clusters: A - B what the recipes add (Slurm's prolog
        # and epilog machinery too), A - C what nodemap adds (C: the same slurm.conf, scripts that exit 0)
        runs = [(j, same.get(("B", j.index, j.shape)), same.get(("C", j.index, j.shape))) for j in a
                if j.index >= 0 and j.shape != "fleet" and j.verdict == "ok"]
        runs = [(ja, jb, jc) for ja, jb, jc in runs if jb and jc and jb.rc == 0 and jc.rc == 0]
        per_shape = {shape: added([r for r in runs if r[0].shape == shape]) for shape in sorted({r[0].shape
                                                                                                 for r in runs})}
        slowest = max(runs, key=lambda r: r[0].wall - r[2].wall, default=None)
        gate = [p for p in self.watch.procs.values() if p.kind in ("HealthCheckProgram", "prolog", "epilog",
                                                                     "health check", "srun --nodemap plan")]
        longest = max(gate, key=lambda p: p.last - p.start, default=None)
        by_kind = {}
        for kind in sorted({p.kind for p in self.watch.procs.values()}):
            ds = sorted(p.last - p.start for p in self.watch.procs.values() if p.kind == kind)
            by_kind[kind] = {"seen": len(ds), "median_s": med(ds), "max_s": round(ds[-1], 1)}
        loads = [v for _, v in self.watch.load]
        verdicts = {}
        for j in a:
            verdicts[j.verdict] = verdicts.get(j.verdict, 0) + 1
        return {
            "machine": self.args.machine, "date": time.strftime("%Y-%m-%d"), "commit": commit(),
            "command": shlex.join(["python3", "benchmarks/soak.py", *self.args.argv]),
            "seed": self.seed, "nodes": len(self.node_names), "health_interval_s": self.args.health_interval,
            "setup_s": self.setup_s, "cluster_start_s": self.started,
            "wall_s": round(self.clock(), 1),
            "recipes": sorted(self.recipes), "slurm_conf_lines": self.conf_lines,
            "load": {"min": rnd(min(loads, default=0)), "median": med(loads), "max": rnd(max(loads, default=0)),
                     "bursts": len(self.load.bursts)},
            "jobs": {"A": len(a), "B": sum(j.cluster == "B" for j in self.jobs),
                     "C": sum(j.cluster == "C" for j in self.jobs), "fleet": sum(j.shape == "fleet" for j in a), "verdicts": verdicts,
                     "fleet_wall_s": {"median": med([j.wall for j in a if j.shape == "fleet"]),
                                      "max": max((j.wall for j in a if j.shape == "fleet"), default=None)}},
            "false_drains": [asdict(s) for s in self.watch.spans if s.verdict == "false"],
            "drains": [asdict(s) for s in self.watch.spans],
            "failed_by_nodemap": [asdict(j) for j in a if j.verdict in ("failed by nodemap", "plugin fell back")],
            "failed_other": [asdict(j) for j in self.jobs if j.verdict == "failed"
                             or (j.cluster != "A" and j.rc and j.index >= 0)],
            "added_s": dict(added(runs), by_shape=per_shape),
            "longest_hang": {
                "gate_process_s": round(longest.last - longest.start, 1) if longest else None,
                "gate_process": asdict(longest) if longest else None,
                "job_beyond_its_pair_s": round(slowest[0].wall - slowest[2].wall, 1) if slowest else None,
                "job": asdict(slowest[0]) if slowest else None,
                "longest_job_a_s": max((j.wall for j in a if j.index >= 0), default=None),
                "fleet_after_a_death_s": max((f.detail.get("ended_after_death_s") or 0 for f in self.faults),
                                             default=None),
            },
            "processes": by_kind,
            "health_check_cost": self.check_cost,
            "faults": [asdict(f) for f in self.faults],
            "bursts": self.load.bursts,
        }


FLEET_ENV = {"NODEMAP_CHECK_TINY": "1"}  # the fleet's node checks at tiny arrays: seconds, not minutes, on this VM


def judge(spans: list[Drain], jobs: list[Job], faults: list[Fault], now: float) -> None:
    """Sets each drain's and each job's verdict. A drain is expected only on the node of a fault that drains
    (the class mismatch), with nodemap's reason, while the fault is on (or just after: Slurm's state lags);
    a node down while its slurmd is is Slurm's. A failed job is explained by a fault that may fail jobs and
    overlapped it, on its node where the job said where it ran; a fleet that ends other than 0 or 1 is
    nodemap's failure; another failed job is nodemap's when its stderr names nodemap, a prolog or an epilog
    (or "Something is wrong with the boot of the nodes": srun's words for a failed prolog under
    PrologFlags=Alloc)."""
    for span in spans:
        drains = [f for f in faults if f.drains and span.node in f.nodes
                  and f.start - 1 <= span.start <= (f.end or now) + 5]
        slurm = [f for f in faults if f.fails_jobs and (span.node in f.nodes or not f.nodes)
                 and f.start - 1 <= span.start <= (f.end or now) + 30]
        if drains and span.reason.startswith("nodemap:"):
            span.verdict = f"expected ({drains[0].name})"
        elif slurm and span.state.startswith("down"):
            span.verdict = f"expected ({slurm[0].name}: Slurm's own state)"
        else:
            span.verdict = "false"
    for job in jobs:
        fell_back = "the task runs with Slurm's binding" in job.stderr or "without the plan" in job.stderr
        ok = job.rc in (0, 1) if job.shape == "fleet" else job.rc == 0
        if ok and not fell_back:
            job.verdict = "ok"
            continue
        around = [f for f in faults if f.fails_jobs and f.start - 2 <= job.start + job.wall
                  and job.start <= (f.end or now) + 2
                  and (not job.nodes or not f.nodes or set(job.nodes) & set(f.nodes))]
        if around or job.index < 0:
            job.verdict = f"explained ({around[0].name if around else 'a fault of its own'})"
        elif fell_back:
            job.verdict = "plugin fell back"
        elif job.shape == "fleet" or re.search(r"nodemap|[Pp]rolog|[Ee]pilog|boot of the nodes", job.stderr):
            job.verdict = "failed by nodemap"
        else:
            job.verdict = "failed"


def added(runs: list[tuple[Job, Job, Job]]) -> dict[str, Any]:
    """The wall times of (A, B, C) runs of the same jobs, and what A adds to each (paired differences)."""
    by_nodemap = sorted(a.wall - c.wall for a, _, c in runs)
    by_recipes = sorted(a.wall - b.wall for a, b, _ in runs)
    return {"jobs": len(runs), "a_median_s": med([a.wall for a, _, _ in runs]),
            "b_median_s": med([b.wall for _, b, _ in runs]), "c_median_s": med([c.wall for _, _, c in runs]),
            "nodemap_median_s": med(by_nodemap), "nodemap_p99_s": pct(by_nodemap, 99),
            "recipes_median_s": med(by_recipes), "recipes_p99_s": pct(by_recipes, 99)}


def med(v: list[float]) -> float | None:
    return round(statistics.median(v), 3) if v else None


def pct(v: list[float], q: float) -> float | None:
    if not v:
        return None
    s = sorted(v)
    return round(s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))], 3)


def rnd(x: float) -> float:
    return round(x, 2)


def commit() -> str:
    p = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True).stdout.strip()
    return p.stdout.strip() + ("+changes" if dirty else "")


# ---------------------------------------------------------------- the report

def table(r: dict[str, Any]) -> str:
    added = r["added_s"]
    hang = r["longest_hang"]
    faults = r["faults"]
    lines = [
        f"soak: {r['machine']}, {r['date']}, commit {r['commit']}, seed {r['seed']}, {r['wall_s']} s",
        f"load average {r['load']['min']}-{r['load']['max']} (median {r['load']['median']}), "
        f"{r['load']['bursts']} bursts of background load; health every {r['health_interval_s']} s",
        "",
        "| what | measured | target |",
        "|---|---|---|",
        f"| jobs (A: the recipes; B: bare; C: Slurm's prolog, epilog and health program doing nothing) | "
        f"A {r['jobs']['A']} ({r['jobs']['fleet']} fleet), B {r['jobs']['B']}, C {r['jobs']['C']} | >= 500 on A |",
        f"| a fleet job's wall time (3 nodes, tiny arrays) | median {r['jobs']['fleet_wall_s']['median']} s, "
        f"max {r['jobs']['fleet_wall_s']['max']} s | |",
        f"| healthy nodes drained | {len(r['false_drains'])} | 0 |",
        f"| jobs failed by nodemap | {len(r['failed_by_nodemap'])} | 0 |",
        f"| jobs failed otherwise (not by a fault) | {len(r['failed_other'])} | |",
        f"| seconds nodemap adds per job (A - C, paired, {added['jobs']} jobs) | median {added['nodemap_median_s']}, "
        f"p99 {added['nodemap_p99_s']} | |",
        f"| seconds the recipes add per job (A - B: Slurm's prolog machinery too) | median "
        f"{added['recipes_median_s']}, p99 {added['recipes_p99_s']} | |",
        f"| one health check (the health program by hand, {r['health_check_cost'].get('runs')} runs, load "
        f"{r['health_check_cost'].get('load')}) | wall {r['health_check_cost'].get('wall_median_s')} s, CPU "
        f"{r['health_check_cost'].get('cpu_median_s')} s (medians) | |",
        f"| faults injected / judged right | {len(faults)} / {sum(f['ok'] for f in faults)} | all |",
        f"| longest gate process (health, prolog, epilog, plan) | {hang['gate_process_s']} s | < 60 s |",
        f"| longest job beyond its run on C | {hang['job_beyond_its_pair_s']} s | |",
        f"| a fleet's end after a rank's death | {hang['fleet_after_a_death_s']} s | <= 60 s |",
        "",
        "| fault | node | at job | expected | found | after the fix | right |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in faults:
        lines.append(f"| {f['name']} | {','.join(f['nodes']) or 'all'} | {f['at_job']} | {f['expect']} | "
                     f"{f['found']} | {f['fixed']} | {'yes' if f['ok'] else 'NO'} |")
    lines += ["", "| job shape | jobs | A median s | B median s | C median s | A - C median, p99 s | "
                  "A - B median, p99 s |", "|---|---|---|---|---|---|---|"]
    for shape, s in added["by_shape"].items():
        lines.append(f"| `{shape}` | {s['jobs']} | {s['a_median_s']} | {s['b_median_s']} | {s['c_median_s']} | "
                     f"{s['nodemap_median_s']}, {s['nodemap_p99_s']} | {s['recipes_median_s']}, "
                     f"{s['recipes_p99_s']} |")
    lines += ["", "| nodemap process | seen | median s | max s |", "|---|---|---|---|"]
    for kind, s in r["processes"].items():
        lines.append(f"| {kind} | {s['seen']} | {s['median_s']} | {s['max_s']} |")
    for what, rows in (("false drains", r["false_drains"]), ("jobs failed by nodemap", r["failed_by_nodemap"]),
                       ("jobs failed otherwise", r["failed_other"])):
        for x in rows[:10]:
            lines.append(f"- {what}: " + (f"{x['node']} {x['state']} '{x['reason']}' at {x['start']:.0f} s"
                                         if "node" in x else
                                         f"job {x['index']} {x['cluster']} `{x['shape']}` exit {x['rc']} at "
                                         f"{x['start']:.0f} s: {x['stderr'][-200:]!r}"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=500, help="jobs of the stream (each on A and on B; default 500)")
    ap.add_argument("--workers", type=int, default=2, help="job streams at once (default 2)")
    ap.add_argument("--faults", default="all", help="comma-separated fault names, 'all' or 'none' (soak_faults.py)")
    ap.add_argument("--fleet-every", type=int, default=50, help="a fleet job every N jobs of the stream (0: none)")
    ap.add_argument("--health-interval", type=int, default=5, help="HealthCheckInterval, s (default 5)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--job-timeout", type=float, default=300, help="a job not ended by then is a hang (killed)")
    ap.add_argument("--fleet-timeout", type=float, default=600)
    ap.add_argument("--kill-within", type=float, default=30,
                    help="a fleet rank is killed 0.5-S s after its ranks started (default 30)")
    ap.add_argument("--settle", type=float, default=15, help="seconds watched after the stream (default 15)")
    ap.add_argument("--nodemap", default=os.path.join(os.path.dirname(sys.executable), "nodemap"),
                    help="the nodemap of the venv the recipes name (default: beside this Python)")
    ap.add_argument("--machine", default=f"{platform.node()} ({os.cpu_count()} CPUs)")
    ap.add_argument("--out", help="write PREFIX.json and PREFIX.md")
    ap.add_argument("--json", action="store_true", help="print the results as JSON (the table goes to stderr)")
    ap.add_argument("--keep", action="store_true", help="keep the soak's folder (logs) after it ends")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per job (else: failed jobs, faults)")
    args = ap.parse_args(argv)
    args.argv = argv if argv is not None else sys.argv[1:]
    if os.geteuid() != 0:
        print("soak: needs root (slurmd starts tasks as the job's user; mount for the tmpfs)", file=sys.stderr)
        return 2
    os.environ["PATH"] = f"{os.environ.get('PATH', '')}:{SBIN}"  # slurmd, slurmctld started again (faults)
    soak = Soak(args)
    print(f"soak: in {soak.top} (logs; removed at the end unless --keep)", file=sys.stderr, flush=True)

    def terminated(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminated)
    status, results = 0, None
    try:
        results = soak.run()
    except KeyboardInterrupt as e:
        print(f"soak: interrupted ({e or 'Ctrl-C'}): stopping what it started", file=sys.stderr)
        status = 130
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"soak: {e}", file=sys.stderr)
        status = 2
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # cleanup is not interrupted half-way
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        done = soak.cleanup()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    print("; ".join(done), file=sys.stderr)
    if results is None and soak.jobs and status == 130:
        results = soak.results()  # what ran before the interruption
        results["interrupted"] = True
    if results is None:
        return status
    text = table(results)
    print(text, file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(results))
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(results, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(text)
    if status:
        return status
    ok = not results["false_drains"] and not results["failed_by_nodemap"] and all(f["ok"] for f in results["faults"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
