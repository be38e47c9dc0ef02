"""How long a `check --fleet` outlives one of its ranks, and what it keeps.

  python3 benchmarks/fleet_dead_rank.py [--trials 3] [--victims rank0,leader] [--launchers srun,mpiexec]
                                        [--cap 300] [--out PREFIX]

Each trial starts a real fleet of 3 nodes of 2 ranks (the mpich wheel's
MPI), each node check a saved document that takes NODEMAP_FLEET_SLOW
seconds, and once every rank has joined, at a random moment, takes the
victim (rank 0, or rank 2, the leader of node n2) away:
- srun: in the Slurm test cluster (scripts/slurm-test-cluster, started
  here), `srun --mpi=pmi2 --kill-on-bad-exit=0` as docs/fleet.md says, the
  victim SIGKILLed;
- mpiexec: the mpich wheel's Hydra (`-disable-auto-cleanup`), ranks acting
  as nodes (NODEMAP_FLEET_NODE), the victim SIGSTOPped: a rank that stops
  answering (Hydra ends the whole job when a rank is killed by a signal,
  so a SIGKILL there tests Hydra, not the fleet).
It then times each other process of the fleet (every rank, the launcher)
until it exits, or until --cap seconds. Recorded per trial: the moment,
the seconds from the death to the last exit, which node documents are on
disk, and what the fleet report (rank 0's, or `check --fleet --from` the
folder when rank 0 died) says of each node.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fleet_docs import node_doc  # noqa: E402

BIN = Path(sys.executable).parent
MPIEXEC = BIN / "mpiexec"
NODES = ("n1", "n2", "n3")
# Ranks per node: under srun one (two tasks of a node of the test cluster failed in MPI_Init: "MPIDI_POSIX_
# comm_bootstrap: Out of memory", Slurm 22.05's pmi2 with the mpich wheel); under Hydra two: n1 = ranks 0, 1
# (its leader is 1), n2 = 2 (leader), 3, n3 = 4 (leader), 5.
PER_NODE = {"srun": 1, "mpiexec": 2}
FAULT = {"srun": signal.SIGKILL, "mpiexec": signal.SIGSTOP}
VICTIMS = {"rank0": lambda per_node: 0, "leader": lambda per_node: per_node}  # n2's leader
LAUNCHER_S = 15.0  # how long the launcher is waited for once every rank left has ended
SLOW_S = 6.0  # each node check's length (NODEMAP_FLEET_SLOW)
WINDOW_S = 10.0  # the death comes at a random moment this long after every rank joined
LOOSE_LINKS = "[fleet]\nlink_bad = 1e-9\nlink_latency = 1e6\n"  # ranks on one VM: pair figures are noise
MARK = "NODEMAP_DEAD_RANK_TRIAL"


def command(launcher: str, out: Path, site: Path, mark: str) -> list[str]:
    fleet = [sys.executable, "-m", "nodemap", "check", "--fleet", "-o", str(out), "--pair-size", "64KiB",
             "--expect", str(site)]
    if launcher == "srun":
        return ["srun", "--mpi=pmi2", "--kill-on-bad-exit=0", f"-N{len(NODES)}",
                f"--ntasks-per-node={PER_NODE[launcher]}", f"--export=ALL,{MARK}={mark}", *fleet]
    cmd = [str(MPIEXEC), "-disable-auto-cleanup"]
    for node in NODES:
        for _ in range(PER_NODE[launcher]):
            cmd += [":"] if len(cmd) > 2 else []
            cmd += ["-n", "1", "-env", "NODEMAP_FLEET_NODE", node, "-env", MARK, mark, *fleet]
    return cmd


def processes(mark: str) -> dict[int, int | None]:
    """pid -> MPI rank (None: a process a rank forked, e.g. its watchdog) of every process carrying `mark`."""
    found: dict[int, tuple[int | None, int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = Path(f"/proc/{d}/environ").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if f"{MARK}={mark}".encode() in env:
            rank = next((int(e.split(b"=")[1]) for e in env if e.startswith((b"PMI_RANK=", b"SLURM_PROCID="))),
                        None)
            found[int(d)] = (rank, ppid)
    return {pid: (rank if ppid not in found else None) for pid, (rank, ppid) in found.items()}


def trial(victim: str, moment: float, work: Path, launcher: str = "mpiexec", env: dict[str, str] | None = None,
          cap: float = 120.0) -> dict[str, Any]:
    """One fleet, its `victim` taken away `moment` s after every rank
    joined: what ended when, and what was kept. `env`: the launcher's
    (srun: the test cluster's SLURM_CONF)."""
    work.mkdir(parents=True, exist_ok=True)
    doc, site, out = work / "doc.json", work / "site.toml", work / "out"
    doc.write_text(json.dumps(node_doc("template", random.Random(7), gpus=2, noise=0.0)))
    site.write_text(LOOSE_LINKS)
    mark = uuid.uuid4().hex
    env = dict(env or os.environ, CUDA_VISIBLE_DEVICES="", NODEMAP_FLEET_NODE_DOC=str(doc),
               NODEMAP_FLEET_SLOW=str(SLOW_S))
    with open(work / "stdout", "w") as so, open(work / "stderr", "w") as se:
        p = subprocess.Popen(command(launcher, out, site, mark), stdout=so, stderr=se, env=env,
                             start_new_session=True)
    try:
        got = _watch(p, VICTIMS[victim](PER_NODE[launcher]), FAULT[launcher], moment, work, mark, cap)
        return got | {"launcher": launcher, "fault": FAULT[launcher].name, "victim": victim,
                      "moment_s": round(moment, 2)}
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        for pid in processes(mark):
            _kill(pid)


def _watch(p: subprocess.Popen, victim: int, fault: signal.Signals, moment: float, work: Path, mark: str,
           cap: float) -> dict[str, Any]:
    at = time.monotonic() + 180
    while not re.search(r"\d+ of \d+ ranks joined", (work / "stderr").read_text()):
        if time.monotonic() > at or p.poll() is not None:
            raise RuntimeError(f"the fleet did not start: {(work / 'stderr').read_text()[-2000:]}")
        time.sleep(0.1)
    time.sleep(moment)
    procs = processes(mark)
    target = next((pid for pid, rank in procs.items() if rank == victim and pid != p.pid), None)
    if target is None:
        raise RuntimeError(f"no rank {victim} to take away {moment:.1f} s after the join: the fleet "
                           f"{'ended ' + str(p.returncode) if p.poll() is not None else 'runs without it'}")
    os.kill(target, fault)
    died = time.monotonic()
    stopped = {target} | {pid for pid in procs if fault == signal.SIGSTOP and _parent(pid) == target}
    alive = {pid: f"rank {r}" if r is not None else "a rank's child" for pid, r in procs.items()
             if pid not in stopped and pid != p.pid}
    launcher = Path(p.args[0]).name
    alive[p.pid] = launcher
    ended: dict[str, float] = {}
    # the launcher too, but a launcher holding a stopped rank 0 never ends: waited for LAUNCHER_S past the ranks
    while time.monotonic() - died < cap and (set(alive.values()) - {launcher} or launcher in alive.values() and
                                              time.monotonic() - died < max(ended.values(), default=0) + LAUNCHER_S):
        for pid in [x for x in alive if not _running(x, p)]:
            ended[f"{alive.pop(pid)} (pid {pid})"] = round(time.monotonic() - died, 2)
        time.sleep(0.1)
    ranks = [v for k, v in ended.items() if not k.startswith(launcher)]
    return {"ended_s": ended, "still_running": sorted(alive.values()), "last_rank_exit_s": max(ranks, default=None),
            "launcher_exit_s": ended.get(f"{launcher} (pid {p.pid})"), "exit_status": p.poll(),
            "kept": kept(work / "out"), "stderr": (work / "stderr").read_text()[-6000:]}


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _running(pid: int, p: subprocess.Popen) -> bool:
    if pid == p.pid:
        return p.poll() is None
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def kept(out: Path) -> dict[str, Any]:
    """The node documents on disk, and each node's status in the fleet report (rank 0's fleet.json, or one
    made with --from when there is none)."""
    docs = sorted(p.name for p in (out / "nodes").glob("*.json")) if (out / "nodes").is_dir() else []
    report = out / "fleet.json"
    made = "rank 0"
    if not report.exists() and docs:
        again = out.parent / "from"
        subprocess.run([sys.executable, "-m", "nodemap", "check", "--fleet", "--from", str(out), "-o", str(again),
                        "--no-html", "-q"], capture_output=True, timeout=120)
        report, made = again / "fleet.json", "--from"
    status = {}
    if report.exists():
        fleet = json.loads(report.read_text())
        status = {n["name"]: n["status"] for n in fleet["nodes"]}
    return {"documents": docs, "report": made if status else None, "nodes": status}


def cluster(top: Path) -> dict[str, str]:
    """The Slurm test cluster's environment (started in `top`; stop it with `scripts/slurm-test-cluster stop`)."""
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "slurm-test-cluster"), "start", str(top), "--json",
                        "--nodes", str(len(NODES))], capture_output=True, text=True, timeout=180)
    if p.returncode:
        sys.exit(f"the Slurm test cluster did not start: {p.stderr}")
    info = json.loads(p.stdout)
    return dict(os.environ, **info["env"], PATH=os.pathsep.join((str(BIN), os.environ.get("PATH", ""))))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--victims", default="rank0,leader")
    ap.add_argument("--launchers", default="srun,mpiexec")
    ap.add_argument("--cap", type=float, default=300.0, help="seconds a trial waits for the last exit")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default="", help="write PREFIX.json")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    rows = []
    base = Path(tempfile.mkdtemp(prefix="nmdead-"))  # short: munge's socket path must fit in 108 bytes
    try:
        for launcher in args.launchers.split(","):
            env = cluster(base / "slurm") if launcher == "srun" else None
            for victim in args.victims.split(","):
                for i in range(args.trials):
                    r = trial(victim, rng.uniform(0, WINDOW_S), base / f"{launcher}-{victim}-{i}", launcher, env,
                              args.cap)
                    rows.append(r)
                    print(f"{launcher:7s} {r['fault']} {victim:6s} at +{r['moment_s']:5.2f} s: ranks ended "
                          f"{r['last_rank_exit_s']} s after, {launcher} {r['launcher_exit_s']} s; still running "
                          f"{r['still_running']}; report ({r['kept']['report']}) {r['kept']['nodes']}", flush=True)
    finally:
        if (base / "slurm").exists():
            subprocess.run([sys.executable, str(ROOT / "scripts" / "slurm-test-cluster"), "stop", str(base / "slurm")],
                           capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)
    meta = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.node()} {os.cpu_count()} CPUs",
            "load": os.getloadavg(), "seed": seed, "slow_s": SLOW_S, "window_s": WINDOW_S}
    if args.out:
        Path(args.out + ".json").write_text(json.dumps({"meta": meta, "trials": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
