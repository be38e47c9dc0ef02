"""The faults benchmarks/soak.py injects, one at a time, each at a random job
of the stream, and how each is judged: found (drained with nodemap's reason,
or rightly left undrained) and back in service after the fix.

A fault is a function `inject(soak, fault, rng)` that injects, watches,
fixes and fills in `fault.found`, `fault.fixed`, `fault.ok` and
`fault.detail`; FAULTS names them with what nodemap should do. Everything a
fault starts goes through soak.spawn (ended by its pid at the end) and every
mount through soak.mount_tmpfs (unmounted at the end).
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from soak import Fault, Soak

SETTLE = 60.0  # seconds a fault's effect (a drain, a resume) may take: HealthCheckInterval 5-10 s, a loaded VM


def wait_until(test: Callable[[], object], seconds: float, step: float = 0.5) -> float | None:
    """Seconds until test() held, or None when it did not within `seconds`."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if test():
            return round(time.monotonic() - t0, 1)
        time.sleep(step)
    return None


def healthy(soak: "Soak", node: str) -> bool:
    from soak import HEALTHY_STATES

    state, reason = soak.watch.state(node)
    return state in HEALTHY_STATES and not reason


def pick(soak: "Soak", rng: random.Random) -> str:
    up = soak.watch.up() or soak.node_names
    return rng.choice(up)


def prom_status(path: str) -> tuple[float, int | None]:
    """(mtime, nodemap_check_status) of a .prom file; (0, None) when unreadable."""
    try:
        st = os.lstat(path)
        if not os.path.isfile(path) or os.path.islink(path):
            return st.st_mtime, None
        with open(path) as f:
            m = re.search(r"^nodemap_check_status\{[^}]*\} (\d+)", f.read(), re.M)
        return st.st_mtime, int(m.group(1)) if m else None
    except OSError:
        return 0.0, None


def fresh_prom(soak: "Soak", node: str, since: float, seconds: float, name: str = "nodemap-health.prom") -> tuple:
    """(seconds until node's .prom was written after `since` (wall clock) with status 0, the status seen)."""
    path = soak.node_path(node, "out", "textfile", name)
    seen: list = [None]

    def written() -> bool:
        mtime, status = prom_status(path)
        if mtime > since:
            seen[0] = status
        return mtime > since and status == 0

    return wait_until(written, seconds), seen[0]


def slurmd_log_since(soak: "Soak", node: str, offset: int) -> str:
    try:
        with open(os.path.join(soak.a.top, "log", f"slurmd-{node}.log"), errors="replace") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return ""


def log_size(soak: "Soak", node: str) -> int:
    try:
        return os.path.getsize(os.path.join(soak.a.top, "log", f"slurmd-{node}.log"))
    except OSError:
        return 0


def job_on(soak: "Soak", node: str, *argv: str, timeout: float = 120) -> tuple[int, str]:
    try:
        p = soak.a.run(["srun", "-w", node, "-N1", "-n1", *argv], timeout=timeout)
        return p.returncode, p.stderr.strip()[-300:]
    except subprocess.TimeoutExpired:
        return -9, f"no end within {timeout:g} s"


# ---------------------------------------------------------------- the faults

def class_mismatch(soak: "Soak", f: "Fault", rng: random.Random) -> None:
    """The node's class says one NIC more than it has: drained with nodemap's reason, resumed after the fix."""
    node = f.nodes[0]
    path = soak.node_path(node, "etc", "class.json")
    with open(path) as fh:
        good = fh.read()
    cls = json.loads(good)
    want = len(cls["nics"]) + 1
    cls["nics"].append({"name": "mlx5_9", "kind": "InfiniBand"})
    replace(path, json.dumps(cls))
    reason = f"nodemap: inventory: NICs {want - 1} (limit {want})"
    took = wait_until(lambda: soak.watch.state(node)[0].startswith("drain") and soak.watch.state(node)[1], SETTLE)
    state, got = soak.watch.state(node)
    f.found = f"{state} in {took} s: '{got}'" if took is not None else f"not drained within {SETTLE:g} s ({state})"
    replace(path, good)
    back = wait_until(lambda: healthy(soak, node), SETTLE)
    f.fixed = f"resumed {back} s after the fix" if back is not None else f"not resumed within {SETTLE:g} s"
    f.detail = {"reason": got, "want": reason, "drained_s": took, "resumed_s": back}
    f.ok = took is not None and got == reason and back is not None


def replace(path: str, text: str) -> None:
    with open(path + ".new", "w") as fh:
        fh.write(text)
    os.replace(path + ".new", path)


def fleet_rank(rank: int, phase: str) -> Callable:
    def kill(soak: "Soak", f: "Fault", rng: random.Random) -> None:
        """A fleet job whose rank `rank` is SIGKILLed at a random moment of `phase` (its node checks, or its
        pair tests): it ends within 60 s of the death and keeps every other node's result; nothing drained."""
        from soak import FLEET_ENV

        out = os.path.join(soak.top, "fleet", f"{f.name}-{f.at_job}")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        argv = soak.fleet_line(out)
        t0 = time.monotonic()
        p = soak.a.popen(argv, env=FLEET_ENV)
        said: list[tuple[float, str]] = []
        reader = threading.Thread(target=lambda: said.extend((time.monotonic() - t0, line) for line in p.stderr),
                                  daemon=True)
        reader.start()
        lines = lambda text: [line for _, line in list(said) if text in line]  # noqa: E731
        mark = "ranks joined" if phase == "checking" else "pair tests among"
        if wait_until(lambda: lines(mark) or p.poll() is not None, soak.args.fleet_timeout, 0.05) is None \
                or p.poll() is not None:
            end_fleet(soak, p, reader, out)
            f.found = f"the fleet ended (exit {p.returncode}) before its {phase}: {said[-1][1].strip() if said else ''}"
            return
        time.sleep(rng.uniform(0.1, 1.0) if phase == "checking" else rng.uniform(1, soak.args.kill_within))
        ranks = fleet_ranks(out)
        if rank not in ranks or p.poll() is not None:
            end_fleet(soak, p, reader, out)
            f.found = f"no rank {rank} to kill: ranks {sorted(ranks)} alive, the job's exit {p.returncode}"
            return
        pid, node = ranks[rank]
        f.nodes = [node]
        os.kill(pid, signal.SIGKILL)
        t_kill = time.monotonic()
        hit = "pair tests" if lines("pair tests among") else \
            f"node checks ({len(lines('node check done'))} of 3 done)"
        end_fleet(soak, p, reader, out)
        after = round(time.monotonic() - t_kill, 1)
        others = sorted({n for r, (_, n) in ranks.items() if r != rank and n != node})
        kept = documents(out)
        f.detail = {"killed": {"rank": rank, "pid": pid, "node": node, "after_s": round(t_kill - t0, 1),
                               "during": hit}, "ended_after_death_s": after, "exit": p.returncode, "kept": kept,
                    "others": others, "stderr": "".join(line for _, line in said)[-600:]}
        f.found = f"rank {rank} ({node}) killed during its {hit}, {t_kill - t0:.1f} s in; the job ended {after} s " \
                  f"later, exit {p.returncode}"
        f.fixed = f"documents kept for {', '.join(kept) or 'no node'}"
        f.ok = after <= 60 and set(others) <= set(kept)
    return kill


def end_fleet(soak: "Soak", p: subprocess.Popen, reader: threading.Thread, out: str) -> None:
    """Waits for a fleet's srun (--fleet-timeout at most, then ends it) and its stderr reader; its stdout
    beside its folder."""
    try:
        p.wait(soak.args.fleet_timeout)
    except subprocess.TimeoutExpired:
        soak.end(p)
    reader.join(30)
    with open(out + ".stdout", "w") as fh:
        fh.write(p.stdout.read())


def fleet_ranks(out: str) -> dict[int, tuple[int, str]]:
    """rank -> (pid, node) of the live fleet ranks writing to `out` (their command line names it): the rank
    itself, not a process it forked (a watchdog has the same command line and environment)."""
    found: dict[int, list[tuple[int, int, str]]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().split(b"\0")
            if b"--fleet" not in cmd or out.encode() not in cmd:
                continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = dict(v.split(b"=", 1) for v in fh.read().split(b"\0") if b"=" in v)
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"SLURM_PROCID" in env:
            found.setdefault(int(env[b"SLURM_PROCID"]), []).append(
                (int(entry), ppid, env.get(b"SLURMD_NODENAME", b"?").decode()))
    ranks = {}
    for rank, procs in found.items():
        pids = {pid for pid, _, _ in procs}
        top = [(pid, node) for pid, ppid, node in procs if ppid not in pids]
        if len(top) == 1:
            ranks[rank] = top[0]
    return ranks


def documents(out: str) -> list[str]:
    """The nodes whose check document a fleet folder holds (nodes/NAME.json, nodes.jsonl, fleet.json)."""
    names = set()
    folder = os.path.join(out, "nodes")
    if os.path.isdir(folder):
        names |= {n.split(".")[0] for n in os.listdir(folder) if n.endswith(".json")}
    try:
        with open(os.path.join(out, "nodes.jsonl")) as fh:
            names |= {json.loads(line).get("host", "?") for line in fh if line.strip()}
    except (OSError, ValueError):
        pass
    return sorted(names)


def slurmd_kill(soak: "Soak", f: "Fault", rng: random.Random) -> None:
    """slurmd SIGKILLed while a job runs on its node, started again: the node comes back, nothing drained."""
    node = f.nodes[0]
    job = soak.a.popen(["srun", "-w", node, "-N1", "-n1", "sleep", "15"])
    wait_until(lambda: soak.watch.state(node)[0] in ("allocated", "mixed"), 60)
    time.sleep(rng.uniform(1, 4))
    name = f"slurmd-{node}"
    pid = soak.a.pids().get(name)
    script = soak.script
    if not pid or not script.ours(pid, soak.a.top):
        f.found = f"no {name} to kill"
        return
    os.kill(pid, signal.SIGKILL)
    down = rng.uniform(3, 8)
    time.sleep(down)
    t, t_wall = time.monotonic(), time.time()
    restart(soak, name, ["slurmd", "-D", "-N", node, "-f", soak.a.conf])
    idle = lambda: healthy(soak, node) and soak.watch.state(node)[0] == "idle"  # noqa: E731
    back = wait_until(idle, SETTLE)
    stranded: list[str] = []
    if back is None:
        # A job whose prolog ran when slurmd died stays allocated, "Prolog", for good: the new slurmd never
        # heard of that prolog, so no one tells slurmctld it ended. Slurm's, whatever the prolog does
        # (tests/test_soak.py shows it with `sleep`); nodemap's prolog, taking a second, only makes the
        # moment likelier than a script that exits at once. The admin's fix: scancel them.
        stranded = in_prolog(lambda argv: soak.a.run(argv, timeout=30).stdout, node, t_wall)
        if stranded:
            soak.a.run(["scancel", *stranded], timeout=30)
        back = wait_until(idle, 120)
    back = None if back is None else round(time.monotonic() - t, 1)
    try:
        _, err = job.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        soak.end(job)
        _, err = job.communicate()
    f.found = f"slurmd down {down:.0f} s; the job on it: exit {job.returncode}" + (
        f"; jobs {', '.join(stranded)} left in their prolog by slurmd's death (Slurm's), cancelled" if stranded else "")
    f.fixed = f"idle {back} s after slurmd started again" if back is not None else "not idle within 180 s"
    f.detail = {"job_exit": job.returncode, "job_stderr": err.strip()[-300:], "back_s": back,
                "stranded_in_prolog": stranded}
    f.ok = back is not None


def in_prolog(run: Callable[[list[str]], str], node: str, before: float) -> list[str]:
    """The jobs on `node` allocated before `before` (epoch seconds) that still wait for their prolog to end
    (squeue's reason "Prolog"); `run` gives a client command's standard output."""
    out = run(["squeue", "-h", "-w", node, "-o", "%i|%r|%S"])
    rows = [line.split("|") for line in out.split() if line.count("|") == 2]
    return [job for job, reason, start in rows if reason == "Prolog" and started(start) <= before]


def started(text: str) -> float:
    """squeue's %S (local time, to the second) as epoch seconds; a job not started yet: infinity."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return float("inf")


def restart(soak: "Soak", name: str, argv: list[str]) -> None:
    """A daemon of cluster A started again as slurm-test-cluster starts it (its pid recorded for stop)."""
    script = soak.script
    p = script.paths(soak.a.top)
    pids = script.load_pids(p)
    script.spawn(p, pids, name, argv, os.path.join(p["log"], f"{name}.out"))


def slurmctld_restart(soak: "Soak", f: "Fault", rng: random.Random) -> None:
    """slurmctld stopped and started again while jobs run: every node back in service, nothing drained."""
    pid = soak.a.pids().get("slurmctld")
    if not pid or not soak.script.ours(pid, soak.a.top):
        f.found = "no slurmctld to stop"
        return
    os.kill(pid, signal.SIGTERM)
    gone = wait_until(lambda: not soak.script.ours(pid, soak.a.top), 30, 0.1)
    if gone is None:
        os.kill(pid, signal.SIGKILL)
    down = rng.uniform(2, 8)
    time.sleep(down)
    restart(soak, "slurmctld", ["slurmctld", "-D", "-i", "-f", soak.a.conf])
    t = time.monotonic()
    back = wait_until(lambda: set(soak.a.states()) == set(soak.node_names), 60, 1)
    idle = wait_until(lambda: all(healthy(soak, n) for n in soak.node_names), 90, 1)
    f.found = f"slurmctld down {down:.0f} s (stopped in {gone} s)"
    f.fixed = (f"answering {back} s after its start, every node in service {round(time.monotonic() - t, 1)} s"
               if idle is not None else "not every node in service within 90 s")
    f.detail = {"down_s": round(down, 1), "answering_s": back, "in_service_s": idle}
    f.ok = back is not None and idle is not None


def output_full(soak: "Soak", f: "Fault", rng: random.Random) -> None:
    """The node's output folder (its .prom files and logs) on a full tmpfs: no drain, its jobs run; once the
    tmpfs is gone, the metrics are written again."""
    node = f.nodes[0]
    out = soak.node_path(node, "out")
    saved = os.path.join(soak.top, f"saved-out-{node}")
    shutil.copytree(out, saved, symlinks=True, dirs_exist_ok=True)
    since = log_size(soak, node)
    soak.mount_tmpfs(out, "1m")
    try:
        shutil.copytree(saved, out, symlinks=True, dirs_exist_ok=True)  # the logs are there, as on a full /var
        fill(os.path.join(out, "fill"))
        t_full = time.time()
        jobs = [job_on(soak, node, "printenv", "SLURMD_NODENAME") for _ in range(3)]
        time.sleep(2 * soak.args.health_interval + 2)
        state = soak.watch.state(node)
        said = [line for line in slurmd_log_since(soak, node, since).splitlines()
                if "health_check" in line or "rolog" in line or "pilog" in line][-3:]
        mtime, status = prom_status(os.path.join(out, "textfile", "nodemap-health.prom"))
    finally:
        soak.unmount(out)
    t_fix = time.time()
    again, seen = fresh_prom(soak, node, t_fix, SETTLE)
    f.found = (f"{state[0]} '{state[1]}'; jobs there exit {[rc for rc, _ in jobs]}; health .prom "
               f"{'written' if mtime > t_full else 'not written'} while full; slurmd: {said[-1][-160:] if said else '-'}")
    f.fixed = f".prom written again {again} s after the unmount" if again is not None else \
        f"no .prom with status 0 within {SETTLE:g} s (last status {seen})"
    f.detail = {"jobs": jobs, "state": state, "slurmd_log": said, "prom_again_s": again}
    f.ok = not state[0].startswith(("drain", "down")) and all(rc == 0 for rc, _ in jobs) and again is not None


def fill(path: str) -> None:
    with open(path, "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass


def by_hand(soak: "Soak", node: str) -> subprocess.Popen:
    """docs' check-by-hand recipe on `node`, as an admin runs it there (scontrol finds the cluster; the node's
    lock in the runtime folder the recipes name, which is root's default). Tiny arrays: seconds, not minutes."""
    env = dict(os.environ, SLURMD_NODENAME=node, SLURM_CONF=soak.a.conf, NODEMAP_RUNTIME_DIR=f"{soak.top}/run",
               NODEMAP_CHECK_TINY="1", PATH=soak.a.env["PATH"])
    return soak.spawn(["sh", "-ec", soak.recipes["check-by-hand"]], env=env)


def busy(soak: "Soak", f: "Fault", rng: random.Random) -> None:
    """A measuring check (check-by-hand) on a node with other work on its CPUs: could not judge (exit 2),
    not drained."""
    import sys

    node = f.nodes[0]
    spin = [soak.spawn([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(1)
        p = by_hand(soak, node)
        try:
            out, err = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            soak.end(p)
            out, err = p.communicate()
        out += err
    finally:
        for s in spin:
            soak.end(s)
    state = soak.watch.state(node)
    said = [line.strip() for line in out.splitlines() if re.search(r"busy|judge|node:", line)][:3]
    f.found = f"exit {p.returncode}: {' / '.join(said)[:200]!r}; {state[0]}"
    f.fixed = "nothing to fix: not drained" if not state[0].startswith("drain") else f"drained '{state[1]}'"
    f.detail = {"exit": p.returncode, "output": out[-1500:], "state": state}
    f.ok = p.returncode == 2 and not state[0].startswith(("drain", "down"))


def stale_lock(soak: "Soak", f: "Fault", rng: random.Random) -> None:
    """A measuring check SIGKILLed while it holds the node's lock: the next health check takes the lock over and
    judges the node."""
    node = f.nodes[0]
    lock = os.path.join(soak.top, "run", f"check-{node}.lock")
    p = by_hand(soak, node)
    holder: list = [None]

    def held() -> bool:
        try:
            with open(lock) as fh:
                words = fh.read().split()
        except OSError:
            return False
        if len(words) >= 2 and words[1] == "quick" and os.path.exists(f"/proc/{words[0]}"):
            holder[0] = int(words[0])
        return holder[0] is not None

    took = wait_until(held, 120, 0.1)
    if took is None:
        soak.end(p)
        f.found = "the measuring check never held the lock"
        return
    time.sleep(rng.uniform(0.2, 2))
    os.kill(holder[0], signal.SIGKILL)
    t_kill = time.time()
    left = holders(lock)
    judged, status = fresh_prom(soak, node, t_kill, SETTLE)
    f.found = f"check pid {holder[0]} SIGKILLed; lock holders left {left or 'none'}"
    f.fixed = (f"the next health check judged the node {judged} s later" if judged is not None else
               f"no health check judged it within {SETTLE:g} s (last status {status})")
    soak.end(p)  # its own session: anything it started
    f.detail = {"killed": holder[0], "holders_after": left, "judged_after_s": judged}
    f.ok = judged is not None and not soak.watch.state(node)[0].startswith("drain")


def holders(lock: str) -> list[str]:
    """Processes that have the lock file open (and so may hold it)."""
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") == lock:
                    with open(f"/proc/{entry}/cmdline", "rb") as fh:
                        cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
                    out.append(f"{entry} {cmd[:80]}")
        except OSError:
            continue
    return out


def symlink(soak: "Soak", f: "Fault", rng: random.Random) -> None:
    """Links planted in output folders others can write: the fleet's shared folder (nodes.jsonl) and a node's
    metrics folder (its health .prom): never followed, the fleet ends, nothing drained; after the links are
    removed the same folders work."""
    from soak import FLEET_ENV

    node = f.nodes[0]
    victim = os.path.join(soak.top, "victim")
    with open(victim, "w") as fh:
        fh.write("not nodemap's\n")
    out = os.path.join(soak.top, "fleet", f"shared-{f.at_job}")
    os.makedirs(out)
    os.symlink(victim, os.path.join(out, "nodes.jsonl"))
    prom = soak.node_path(node, "out", "textfile", "nodemap-health.prom")
    os.replace(prom, prom + ".saved") if os.path.exists(prom) else None
    os.symlink(victim, prom)
    t_plant = time.time()
    job = soak.fleet(-1, out, env=FLEET_ENV)
    time.sleep(2 * soak.args.health_interval + 1)
    with open(victim) as fh:
        untouched = fh.read() == "not nodemap's\n"
    link_kept = os.path.islink(os.path.join(out, "nodes.jsonl"))
    prom_link = os.path.islink(prom)
    state = soak.watch.state(node)
    f.found = (f"fleet exit {job.rc} in {job.wall:.0f} s: {job.stderr.splitlines()[-1][:160] if job.stderr else ''!r}; "
               f"victim {'untouched' if untouched else 'WRITTEN'}; {node} {state[0]}")
    for path in (os.path.join(out, "nodes.jsonl"), prom):
        if os.path.islink(path):
            os.unlink(path)
    again = soak.fleet(-1, out, env=FLEET_ENV)
    prom_again, _ = fresh_prom(soak, node, t_plant, SETTLE)
    f.fixed = f"fleet exit {again.rc} with the link gone ({', '.join(documents(out)) or 'no documents'}); " \
              f".prom {'written' if prom_again is not None else 'NOT written'}"
    f.detail = {"fleet": {"exit": job.rc, "wall_s": job.wall, "stderr": job.stderr[-400:], "link_kept": link_kept},
                "prom_link_still_there": prom_link, "victim_untouched": untouched, "again_exit": again.rc,
                "documents_after_fix": documents(out), "prom_again_s": prom_again}
    f.ok = (untouched and job.rc not in (0, -9) and job.wall < soak.args.fleet_timeout and again.rc in (0, 1)
            and prom_again is not None and not state[0].startswith("drain"))


KEPT = "the fleet ends <= 60 s after the death; the other nodes' documents kept"
FAULTS: dict[str, tuple[Callable, str, bool, bool]] = {
    # name: (inject, what nodemap should do, jobs on its node may fail meanwhile, a nodemap drain expected)
    "class-mismatch": (class_mismatch, "drained with nodemap's reason; resumed after the fix", True, True),
    "fleet-rank0-killed-checking": (fleet_rank(0, "checking"), KEPT, False, False),
    "fleet-leader-killed-checking": (fleet_rank(1, "checking"), KEPT, False, False),
    "fleet-rank0-killed-pairing": (fleet_rank(0, "pairing"), KEPT, False, False),
    "fleet-leader-killed-pairing": (fleet_rank(1, "pairing"), KEPT, False, False),
    "slurmd-killed": (slurmd_kill, "not drained; back in service once slurmd runs again", True, False),
    "slurmctld-restarted": (slurmctld_restart, "nothing drained; every node in service after", True, False),
    "output-full": (output_full, "not drained, jobs run; metrics written again after the fix", False, False),
    "busy-node": (busy, "could not judge (exit 2), not drained", False, False),
    "stale-lock": (stale_lock, "the next health check takes the lock over and judges", False, False),
    "planted-symlink": (symlink, "links never followed, the fleet ends, nothing drained; works after removal",
                        False, False),
}
ALL_NODES = ("slurmctld-restarted",)


def chosen(spec: str) -> list[str]:
    if spec == "all":
        return list(FAULTS)
    if spec == "none":
        return []
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in FAULTS]
    if unknown:
        raise SystemExit(f"soak: no fault {', '.join(unknown)}: one of {', '.join(FAULTS)}")
    return names


class Runner(threading.Thread):
    """Injects the faults it is given, one at a time, in the order their jobs come."""

    def __init__(self, soak: "Soak") -> None:
        super().__init__(daemon=True, name="faults")
        self.soak = soak
        self.queue: queue.Queue = queue.Queue()
        self.done: list = []
        self.rng = random.Random(soak.seed + 2)

    def run(self) -> None:
        from soak import Fault

        while True:
            item = self.queue.get()
            if item is None or self.soak.stopping.is_set():
                return
            at, name = item
            inject, expect, fails_jobs, drains = FAULTS[name]
            # each fault on a whole cluster: the last one's effects (a resume, slurmd's return) are over
            whole = wait_until(lambda: all(healthy(self.soak, n) for n in self.soak.node_names), 120)
            nodes = [] if name in ALL_NODES else [pick(self.soak, self.rng)]
            f = Fault(name, nodes, expect, fails_jobs, drains, at_job=at, start=self.soak.clock())
            if whole is None:
                f.detail["cluster_before"] = {n: self.soak.watch.state(n) for n in self.soak.node_names}
            self.done.append(f)
            self.soak.say(f"fault {name} on {','.join(nodes) or 'all nodes'} (job {at})"
                          + ("" if whole is not None else f": the cluster is not whole {f.detail['cluster_before']}"))
            try:
                inject(self.soak, f, self.rng)
            except Exception as e:  # a fault that cannot be injected is a wrong result, not the soak's end
                f.found = f"{f.found} (soak: {type(e).__name__}: {e})".strip()
                f.ok = False
            if "cluster_before" in f.detail:  # judged on what an earlier fault left: said beside its result
                f.found = f"(on a cluster not whole: {f.detail['cluster_before']}) {f.found}"
            f.end = self.soak.clock()
            self.soak.say(f"fault {name}: {'right' if f.ok else 'WRONG'}: found {f.found}; after the fix: {f.fixed}")
