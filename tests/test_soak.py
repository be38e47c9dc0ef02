"""benchmarks/soak.py, short: every recipe of docs/slurm.md on at once in a
real test cluster, a few dozen jobs and a few faults, so that CI keeps the
composition honest (the full soak, 500 jobs and every fault, is the
benchmark: benchmarks/results/soak_*.md). And how it judges, and that it
leaves nothing behind when interrupted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from slurm_cluster import ROOT, Cluster, unavailable

sys.path.insert(0, str(ROOT / "benchmarks"))

import soak  # noqa: E402
import soak_faults  # noqa: E402

SOAK = [sys.executable, str(ROOT / "benchmarks" / "soak.py")]


def test_judging_drains_and_failed_jobs():
    mismatch = soak.Fault("class-mismatch", ["n2"], "", fails_jobs=True, drains=True, start=100, end=130)
    restart = soak.Fault("slurmctld-restarted", [], "", fails_jobs=True, drains=False, start=300, end=310)
    spans = [soak.Drain("n2", "drained", "nodemap: inventory: NICs 1 (limit 2)", 104, 125),
             soak.Drain("n2", "drained", "Prolog error", 105, 125),  # Slurm's, during the fault: still false
             soak.Drain("n1", "draining", "nodemap: inventory: NICs 1 (limit 2)", 110, 120),  # not its node
             soak.Drain("n3", "drained", "Epilog error", 200, 230)]
    jobs = [soak.Job(1, "srun -N3 -n3", "A", [], 110, 2, 1, [], "srun: error: Job prolog failed"),  # the fault's
            soak.Job(2, "srun -N3 -n3", "A", [], 200, 2, 1, ["n1"], "srun: error: Job prolog failed"),
            soak.Job(3, "srun --nodemap", "A", [], 210, 2, 0, ["n1"],
                     "nodemap: `nodemap plan` failed: x; the task runs with Slurm's binding"),
            soak.Job(4, "srun -N3 -n3", "A", [], 220, 2, 1, ["n1"], "srun: error: Socket timed out"),
            soak.Job(5, "srun -N3 -n3", "A", [], 305, 2, 1, [], "srun: error: Unable to contact slurm controller"),
            soak.Job(6, "fleet", "A", [], 400, 90, 1, ["n1", "n2", "n3"], ""),  # nodes to drain: its answer
            soak.Job(7, "fleet", "A", [], 500, 300, 137, [], "srun: error: n1: task 0: Killed"),
            soak.Job(8, "srun -N3 -n3", "A", [], 600, 1, 0, ["n1", "n2", "n3"], "")]
    soak.judge(spans, jobs, [mismatch, restart], now=1000)
    assert [s.verdict for s in spans] == ["expected (class-mismatch)", "false", "false", "false"]
    assert [j.verdict for j in jobs] == ["explained (class-mismatch)", "failed by nodemap", "plugin fell back",
                                         "failed", "explained (slurmctld-restarted)", "ok", "failed by nodemap",
                                         "ok"]


def test_the_job_shapes_are_the_docs_srun_nodemap_lines():
    shapes = soak.shapes(soak.docs.recipes()["srun-nodemap"].text)
    assert "srun -N3 -n3" in shapes and any(k.startswith("srun --nodemap") for k in shapes)
    assert all(argv[-1] == "./app" for k, argv in shapes.items() if "--nodemap" in k)
    assert soak.bare(["srun", "--nodemap=strict", "-N1", "./app"]) == ["srun", "-N1", "./app"]
    assert soak.fewer_nodes(["srun", "-N3", "-n3", "x"], 2) == ["srun", "-N2", "-n2", "x"]


@pytest.mark.slurm
@pytest.mark.slow
def test_a_job_whose_prolog_slurmd_died_in_is_found_and_cancelled(tmp_path):
    """Slurm's, whatever the prolog: slurmd SIGKILLed while a job's prolog (here `sleep`) runs and started
    again leaves the job allocated, reason "Prolog", for good. The soak's slurmd-killed fault judged its node
    "not idle within 120 s" (the short soak below and the full one, 2026-12-02, load 12-18); it finds such jobs and
    cancels them, as an admin would."""
    prolog = tmp_path / "prolog"
    prolog.write_text("#!/bin/sh\nsleep 6\n")
    prolog.chmod(0o755)
    c = Cluster.start(conf_lines=(f"Prolog={prolog}", "PrologFlags=Alloc", "PrologEpilogTimeout=60"), nodes=1)
    run = lambda argv: c.run(*argv, timeout=30).stdout  # noqa: E731
    job = subprocess.Popen(["srun", "-N1", "-n1", "true"], env=c.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        assert soak_faults.wait_until(lambda: "|Prolog|" in run(["squeue", "-h", "-o", "%i|%r|"]), 60, 0.2) is not None
        script = soak.cluster_script()
        paths = script.paths(str(c.top))
        os.kill(script.load_pids(paths)["slurmd-n1"], 9)
        time.sleep(2)
        script.spawn(paths, script.load_pids(paths), "slurmd-n1", ["slurmd", "-D", "-N", "n1", "-f", c.conf],
                     os.path.join(paths["log"], "slurmd-n1.out"))
        t_restart = time.time()
        time.sleep(10)  # the prolog, `sleep 6`, has long ended
        stranded = soak_faults.in_prolog(run, "n1", t_restart)
        assert len(stranded) == 1 and job.poll() is None, run(["squeue", "-h", "-o", "%i|%T|%r|%S"])
        assert soak_faults.in_prolog(run, "n1", t_restart - 3600) == []  # allocated after: not this one's
        c.run("scancel", *stranded)
        job.wait(60)
        assert job.returncode != 0
        assert soak_faults.wait_until(lambda: run(["sinfo", "-h", "-N", "-o", "%T"]).split() == ["idle"], 60) \
            is not None
    finally:
        if job.poll() is None:
            job.kill()
        c.stop()


def soak_json(args: list[str], timeout: float) -> tuple[subprocess.CompletedProcess, dict]:
    p = subprocess.run([*SOAK, *args, "--json"], capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    return p, json.loads(lines[-1]) if lines else {}


@pytest.mark.slurm
@pytest.mark.slow
def test_a_short_soak_drains_no_healthy_node_and_judges_its_faults_right():
    if unavailable():
        pytest.skip(unavailable())
    faults = "class-mismatch,stale-lock,busy-node,output-full,slurmd-killed"
    p, r = soak_json(["--jobs", "16", "--faults", faults, "--fleet-every", "0", "--settle", "5"], timeout=600)
    assert r, p.stderr[-3000:]
    print(p.stderr[-2500:])
    assert r["jobs"]["A"] >= 16 and r["jobs"]["B"] >= 16 and r["jobs"]["C"] >= 16, r["jobs"]
    assert r["added_s"]["jobs"] >= 8 and r["added_s"]["nodemap_median_s"] is not None, r["added_s"]
    assert set(soak.RECIPES) <= set(r["recipes"])
    assert any(line.startswith("Prolog=") for line in r["slurm_conf_lines"])
    assert r["false_drains"] == [], r["false_drains"]
    assert r["failed_by_nodemap"] == [], r["failed_by_nodemap"]
    assert sorted(f["name"] for f in r["faults"]) == sorted(faults.split(","))
    assert [f for f in r["faults"] if not f["ok"]] == []
    assert r["processes"]["prolog"]["seen"] >= 1 and r["processes"]["HealthCheckProgram"]["seen"] >= 3
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.slurm
@pytest.mark.slow
def test_an_interrupted_soak_leaves_no_daemon_no_mount_no_folder():
    if unavailable():
        pytest.skip(unavailable())
    p = subprocess.Popen([*SOAK, "--jobs", "12", "--faults", "output-full", "--fleet-every", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(p.stderr), daemon=True)
    reader.start()
    try:
        end = time.monotonic() + 300
        while not any(ln.startswith("soak: in ") for ln in said) and time.monotonic() < end:
            time.sleep(0.2)
        top = next(ln for ln in said if ln.startswith("soak: in ")).split()[2]
        while top not in open("/proc/mounts").read() and p.poll() is None and time.monotonic() < end:
            time.sleep(0.2)  # the fault's tmpfs: the soak is interrupted while it is mounted
        assert top in open("/proc/mounts").read(), "".join(said)
        p.send_signal(2)
        p.wait(180)
    finally:
        if p.poll() is None:
            p.kill()
    reader.join(10)
    assert p.returncode == 130, "".join(said)
    assert top not in open("/proc/mounts").read()
    assert not os.path.exists(top)
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if top.encode() in f.read():  # a daemon of its clusters carries its folder in its environment
                    left.append(pid)
        except OSError:
            pass
    assert left == [], left
