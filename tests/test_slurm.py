"""nodemap under a real Slurm: a 3-node cluster on this machine
(scripts/slurm-test-cluster through the `slurm_cluster` fixture), jobs
started by srun. Skips where Slurm's packages are absent (the reason names
the install command); `make test` installs them as root."""

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from slurm_cluster import SCRIPT, Cluster, unavailable

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]
PY = sys.executable
NODEMAP = [PY, "-m", "nodemap"]
# Three "nodes" share two cores: pair figures are noise, so links are not judged (as in test_fleet_mpi.py)
LOOSE_LINKS = "[fleet]\nlink_bad = 1e-9\nlink_latency = 1e6\nrail_bad = 1e-9\nrail_latency = 1e6\nrail_tail = 1e6\n"

MPI_HELLO = """
import os
from mpi4py import MPI
c = MPI.COMM_WORLD
print(c.Get_rank(), c.Get_size(), os.environ["SLURMD_NODENAME"], c.allreduce(c.Get_rank() + 1), flush=True)
"""


def alive(pid: int) -> bool:
    """Running, not a zombie that init has yet to reap (the daemons' parent, the script, is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def tasks(marker: str) -> list[int]:
    """Live processes running `sleep MARKER`."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read().split(b"\0")[:2] in ([b"sleep", marker.encode()], [b"/usr/bin/sleep", marker.encode()]):
                    found.append(int(entry))
        except OSError:
            pass
    return [pid for pid in found if alive(pid)]


def test_three_nodes_idle_in_seconds(slurm_cluster):
    p = subprocess.run([PY, str(SCRIPT), "status", str(slurm_cluster.top), "--json"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    status = json.loads(p.stdout)
    assert status["nodes"] == {"n1": "idle", "n2": "idle", "n3": "idle"}
    assert sorted(status["daemons"]) == ["munged", "slurmctld", "slurmd-n1", "slurmd-n2", "slurmd-n3"]
    assert slurm_cluster.start_s < 30, f"the cluster took {slurm_cluster.start_s} s to start"


def test_mpi_job_across_three_nodes_each_task_on_its_own(slurm_cluster):
    p = slurm_cluster.srun("--mpi=pmi2", "-N3", "-n3", PY, "-c", MPI_HELLO)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = sorted(line.split() for line in p.stdout.splitlines())
    # one MPI world of 3 (the sum over ranks proves they talk), each task on its own Slurm node
    assert rows == [["0", "3", "n1", "6"], ["1", "3", "n2", "6"], ["2", "3", "n3", "6"]], p.stderr


def test_nodemap_run_binds_every_task_as_the_plan_says(slurm_cluster):
    plan = json.loads(subprocess.run([*NODEMAP, "plan", "--tasks", "2", "--json"], capture_output=True, text=True,
                                     check=True, timeout=60).stdout)["tasks"]
    # srun binds each task (task/affinity); nodemap run widens it to the step's CPUs and binds by the plan
    p = slurm_cluster.srun("--mpi=pmi2", "-N3", "--ntasks-per-node=2", *NODEMAP, "run", "--",
                           *NODEMAP, "show", "--json", "--timeout", "15")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = json.loads(p.stdout)["rows"]  # gathered by rank 0 over MPI: one document
    assert len(rows) == 6
    assert sorted((r["host"], r["local_rank"]) for r in rows) == [(n, i) for n in ("n1", "n2", "n3") for i in (0, 1)]
    for r in rows:
        task = plan[r["local_rank"]]
        assert (r["cpus"], r["mem_nodes"]) == (task["cpus"], task["mems"]), r
        assert r["thread_env"]["OMP_NUM_THREADS"] == str(task["threads"]), r
        assert not any("shared" in v for v in r["verdicts"]), r  # nodes on one host are told apart


def test_show_without_a_pmi_tells_the_tasks_apart_and_says_why_each_prints_alone(slurm_cluster):
    p = slurm_cluster.srun("--label", "-N3", "-n3", *NODEMAP, "show", "--json", "--timeout", "15")  # MpiDefault=none
    assert p.returncode == 0, p.stdout + p.stderr
    by_task: dict[str, str] = {}  # the tasks' lines interleave: srun --label says whose each is
    for line in p.stdout.splitlines():
        task, _, text = line.partition(": ")
        by_task[task] = by_task.get(task, "") + text + "\n"
    docs = [json.loads(text) for text in by_task.values()]
    rows = sorted((r["rank"], r["host"]) for d in docs for r in d["rows"])
    assert rows == [(0, "n1"), (1, "n2"), (2, "n3")]  # each MPI_COMM_WORLD was of one: rank 0 thrice before
    assert p.stderr.count("MPI sees 1 rank of the 3 srun started") == 1, p.stderr


def test_fleet_check_refuses_tasks_srun_started_without_a_pmi(slurm_cluster, tmp_path):
    # each task would be a fleet of one, three writing one folder (before: "fleet: 1 nodes" three times)
    p = slurm_cluster.srun("-N3", "-n3", *NODEMAP, "check", "--fleet", "-o", str(tmp_path / "out"), "--no-pairs",
                           env={"NODEMAP_CHECK_TINY": "1"})
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.count("MPI sees 1 rank of the 3 srun started") == 3 and "srun --mpi=pmi2" in p.stderr
    assert not (tmp_path / "out" / "fleet.json").exists()


@pytest.mark.slow
def test_fleet_check_judges_three_nodes(slurm_cluster, tmp_path):
    site = tmp_path / "site.toml"
    site.write_text(LOOSE_LINKS)
    out = tmp_path / "out"
    t0 = time.monotonic()
    p = slurm_cluster.srun("--mpi=pmi2", "-N3", "-n3", *NODEMAP, "check", "--fleet", "-o", str(out),
                           "--pair-size", "64KiB", "--expect", str(site), timeout=300,
                           env={"NODEMAP_CHECK_TINY": "1"})
    took = time.monotonic() - t0
    assert p.returncode in (0, 1), p.stdout + p.stderr
    assert "3 of 3 ranks joined, 3 nodes" in p.stdout + p.stderr, p.stdout + p.stderr
    fleet = json.loads((out / "fleet.json").read_text())
    assert sorted(n["name"] for n in fleet["nodes"]) == ["n1", "n2", "n3"]
    assert all(n["status"] == "complete" for n in fleet["nodes"]), fleet["nodes"]
    lines = [json.loads(x) for x in (out / "nodes.jsonl").read_text().splitlines()]
    assert {x["host"] for x in lines} == {"n1", "n2", "n3"}
    assert {x["hostname"] for x in lines} == {os.uname().nodename.split(".")[0]}  # the host beside the node
    assert fleet["links"], "no pair test ran between the nodes"
    print(f"fleet check on 3 Slurm nodes: {took:.1f} s")


SPANK_PROBE = r"""
#include <stddef.h>
#include <slurm/spank.h>
SPANK_PLUGIN(nodemap_probe, 1);
static int asked = 0;
static int ask(int val, const char *arg, int remote) { asked = 1; return 0; }
struct spank_option spank_options[] = {
    {"nodemap-probe", NULL, "a test plugin of the cluster's own plugstack.conf", 0, 0, ask},
    SPANK_OPTIONS_TABLE_END
};
int slurm_spank_task_init(spank_t sp, int ac, char **av) {
    return asked ? spank_setenv(sp, "NODEMAP_PROBE", "seen", 1) : 0;
}
"""


def test_a_spank_plugin_loads_through_the_clusters_own_plugstack_conf(tmp_path):
    """How issue 25's plugin will go in: srun takes its option, slurmstepd runs it in the task."""
    if not shutil.which("cc") or not os.path.exists("/usr/include/slurm/spank.h"):
        pytest.skip("needs a C compiler and spank.h (libslurm-dev: scripts/install-test-packages)")
    (tmp_path / "probe.c").write_text(SPANK_PROBE)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "probe.so"), str(tmp_path / "probe.c")],
                   check=True, timeout=60)
    cluster = Cluster.start(nodes=1, plugstack=f"required {tmp_path / 'probe.so'}\n")
    try:
        assert "--nodemap-probe" in cluster.srun("--help").stdout
        p = cluster.srun("-N1", "--nodemap-probe", "printenv", "NODEMAP_PROBE")
        assert (p.returncode, p.stdout.strip()) == (0, "seen"), p.stderr
        p = cluster.srun("-N1", "printenv", "NODEMAP_PROBE")
        assert p.returncode == 1 and not p.stdout, p.stdout  # not asked: not set
    finally:
        cluster.stop()


@pytest.mark.slow
def test_a_port_taken_between_choosing_and_binding_gets_new_ports(tmp_path, capsys):
    """Free ports are chosen, then bound by the daemons: another program may
    take one in between (tests of other checkouts start clusters too)."""
    import importlib.machinery
    import importlib.util
    import socket

    if unavailable():
        pytest.skip(unavailable())
    loader = importlib.machinery.SourceFileLoader("slurm_test_cluster", str(SCRIPT))
    script = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(script)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    chosen = []

    def first_taken(count):
        ports = free_ports(count)
        chosen.append(ports)
        return [blocker.getsockname()[1], *ports[1:]] if len(chosen) == 1 else ports

    free_ports, script.free_ports = script.free_ports, first_taken
    top = tmp_path / "c"
    try:
        assert script.main(["start", str(top), "--nodes", "1", "--json"]) == 0
        assert len(chosen) == 2  # slurmctld could not listen on the first SlurmctldPort: a second try
        assert json.loads(capsys.readouterr().out.splitlines()[-1])["nodes"] == ["n1"]
    finally:
        script.main(["stop", str(top)])
        blocker.close()


def test_a_second_cluster_beside_the_first_and_nothing_left_after_stop(slurm_cluster):
    """Private ports, munge and state: a second cluster runs beside the
    session's, and stop leaves none of its processes, nor a running job's
    tasks (they do not carry the cluster's mark: the job's step ends them)."""
    t0 = time.monotonic()
    other = Cluster.start(nodes=1)
    started = time.monotonic() - t0
    marker = f"{os.getpid()}{int(t0)}"  # a sleep no one else runs
    job = None
    try:
        pids = json.loads((other.top / "pids.json").read_text())
        assert sorted(pids) == ["munged", "slurmctld", "slurmd-n1"]
        p = other.srun("-N1", "-n1", "printenv", "SLURMD_NODENAME")
        assert (p.returncode, p.stdout.strip()) == (0, "n1"), p.stderr
        assert slurm_cluster.srun("-N3", "-n3", "true").returncode == 0  # the first one still answers
        job = subprocess.Popen(["srun", "-N1", "-n2", "sleep", marker], env=other.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        for _ in range(100):
            if len(tasks(marker)) == 2:
                break
            time.sleep(0.1)
        assert len(tasks(marker)) == 2
    finally:
        t1 = time.monotonic()
        other.stop()
        stopped = time.monotonic() - t1
    assert not [pid for pid in pids.values() if alive(pid)]
    assert not tasks(marker)  # before: stop TERMed slurmd at once and the job's tasks lived on
    assert job.wait(timeout=30) != 0  # srun itself ends: its job was cancelled
    print(f"one-node cluster: start {started:.1f} s, stop {stopped:.1f} s")


def test_two_clusters_number_their_jobs_apart():
    """MPICH names a node's shared-memory segments after the job and step only, in the /dev/shm every
    cluster on this host shares: a job 1.0 killed in one cluster left segments on which every later
    job 1.0 of any cluster failed MPI_Init ("Out of memory", 2026-12-02). Each cluster's job ids
    start at a number of its own."""
    first = []
    for _ in range(2):
        cluster = Cluster.start(nodes=1)
        try:
            p = cluster.srun("-N1", "-n1", "printenv", "SLURM_JOB_ID")
            assert p.returncode == 0, p.stderr
            first.append(int(p.stdout))
        finally:
            cluster.stop()
    assert first[0] != first[1], first
