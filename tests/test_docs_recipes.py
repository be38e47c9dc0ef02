"""The recipes of docs/slurm.md and docs/fleet.md, run verbatim (issue 35).

Every fenced block of those two pages carries a marker on the line before
it: `<!-- recipe: NAME -->` (a test below runs it), `<!-- output: NAME -->`
(what recipe NAME prints, compared line by line) or `<!-- not a recipe:
why -->`. A recipe runs as written but for the substitutions of SUBSTITUTE
(paths of a machine this test may not touch, named where the page names
them), in one pass so that no replacement is replaced again; shell recipes
run with `sh -e`. A block without a marker, an indented code block, a
recipe that no test runs (RUN_BY) or a test that names no recipe fails
here. The Slurm parts run in clusters of scripts/slurm-test-cluster
(tests/slurm_cluster.py) and skip without Slurm's packages.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from slurm_cluster import ROOT, SBIN, Cluster, unavailable

DOCS = ("docs/slurm.md", "docs/fleet.md")
VENV = Path(sys.prefix)

# recipe -> the test that runs it
RUN_BY = {
    "venv": "test_the_install_recipe_gives_a_nodemap_with_its_extras",
    "class": "test_health_prolog_epilog_and_a_measuring_check_share_nodes_without_draining_them",
    "health-program": "test_health_prolog_epilog_and_a_measuring_check_share_nodes_without_draining_them",
    "prolog-epilog": "test_health_prolog_epilog_and_a_measuring_check_share_nodes_without_draining_them",
    "slurm.conf": "test_health_prolog_epilog_and_a_measuring_check_share_nodes_without_draining_them",
    "check-by-hand": "test_health_prolog_epilog_and_a_measuring_check_share_nodes_without_draining_them",
    "measuring-prolog": "test_the_measuring_prolog_lets_a_job_start_on_a_busy_node",
    "gres": "test_gres_and_features_merged_into_the_nodes_own_line",
    "features": "test_gres_and_features_merged_into_the_nodes_own_line",
    "spank-build": "test_srun_nodemap_through_the_documented_plugstack_line",
    "plugstack.conf": "test_srun_nodemap_through_the_documented_plugstack_line",
    "srun-nodemap": "test_srun_nodemap_through_the_documented_plugstack_line",
    "spank-cache-reset": "test_srun_nodemap_through_the_documented_plugstack_line",
    "test-cluster": "test_the_test_cluster_recipe",
    "network-test-cluster": "test_the_networked_test_cluster_recipe",
    "fleet-network": "test_a_slow_rail_is_found_named_and_drained_on_a_networked_cluster",
    "fleet-batch": "test_a_fleet_as_a_batch_job",
    "fleet-site": "test_the_fleet_site_file",
    "fleet-one-machine": "test_the_fleet_proof_on_one_machine",
}


@dataclass(frozen=True)
class Recipe:
    name: str
    lang: str  # the fence's info string: sh, toml, or "" (configuration lines)
    text: str
    where: str  # docs/slurm.md:42


MARK = re.compile(r"<!-- (recipe|output|not a recipe): ?(.*?) -->")


def blocks(doc: str) -> list[tuple[str, str, Recipe]]:
    """(marker kind or "", marker text, the block) for every fenced block of `doc`."""
    lines = (ROOT / doc).read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        m = MARK.fullmatch(lines[i - 1].strip()) if i else None
        block = Recipe(m.group(2) if m else "", lines[i][3:].strip(), "\n".join(lines[i + 1:end]) + "\n",
                       f"{doc}:{i + 1}")
        out.append((m.group(1) if m else "", m.group(2) if m else "", block))
        i = end + 1
    return out


def recipes(kind: str = "recipe") -> dict[str, Recipe]:
    return {name: b for doc in DOCS for k, name, b in blocks(doc) if k == kind}


@dataclass(frozen=True)
class Paths:
    """Where a recipe's paths point in a test: folders of its own."""
    top: Path
    venv: Path = VENV
    slurm_conf: str = ""  # the test cluster's, where a recipe edits it (sed -i replaces a link with a file)

    def table(self) -> dict[str, str]:
        t = self.top
        return {
            "/opt/nodemap/venv": str(self.venv),  # the test's own nodemap (the install recipe: a new one)
            "/opt/nodemap/src": str(ROOT),  # this checkout
            "/opt/nodemap": str(t / "opt"),  # where the SPANK plugin is installed
            "/etc/nodemap": str(t / "etc"),
            "/var/lib/node_exporter/textfile": str(t / "prom"),
            "/var/lib/nodemap": str(t / "lib"),
            "/var/log/nodemap": str(t / "log"),
            "/run/nodemap": str(t / "run"),  # the node's lock: every cluster on this machine would share /run's
            "/etc/slurm/slurm.conf": self.slurm_conf or str(t / "slurm.conf"),  # else a link to it, once it runs
            "/tmp/cn": str(t / "cn"),
            "/tmp/c": str(t / "c"),
            "/shared/nodemap": str(t / "shared"),
            # not paths: a shorter interval gives two checks 60 times the chances to meet; this machine's
            # hostname is no node's name (the test cluster's nodes share it); an application that says what it got
            "HealthCheckInterval=300": "HealthCheckInterval=5",
            "$(hostname -s)": "n1",
            "./app": str(t / "app"),
        }


SUBSTITUTE = tuple(Paths(Path("/T")).table())  # what is replaced, documented in docs/slurm.md's last section


def verbatim(recipe: Recipe, paths: Paths) -> str:
    """The recipe's text with SUBSTITUTE's replacements, in one pass (longest first)."""
    table = paths.table()
    pattern = re.compile("|".join(re.escape(k) for k in sorted(table, key=len, reverse=True)))
    return pattern.sub(lambda m: table[m.group(0)], recipe.text)


def run(name: str, paths: Paths, env: dict | None = None, cwd: Path | None = None, timeout: float = 300,
        check: bool = True) -> subprocess.CompletedProcess:
    """Run shell recipe `name` with `sh -e`; `env` adds to this process's environment."""
    r = recipes()[name]
    assert r.lang == "sh", f"{r.where}: recipe {name} is not a shell recipe"
    from nodemap.proc import start_group, wait_group

    script = paths.top / f"recipe-{name}.sh"
    script.write_text(verbatim(r, paths))
    cmd = ["sh", "-e", str(script)]
    # its own process group, killed whole at the timeout (an mpiexec and its ranks outlived a killed sh)
    code, out, err = wait_group(start_group(cmd, dict(os.environ, **(env or {})), cwd=cwd or paths.top), timeout)
    p = subprocess.CompletedProcess(cmd, code, out, err)
    if check:
        assert p.returncode == 0, f"recipe {name} ({r.where}) exited {p.returncode}:\n{p.stdout}\n{p.stderr}"
    return p


def lines(name: str, paths: Paths) -> list[str]:
    """A configuration recipe's lines (slurm.conf, plugstack.conf), substituted."""
    return [ln for ln in verbatim(recipes()[name], paths).splitlines() if ln.strip() and not ln.startswith("#")]


@pytest.fixture
def paths(tmp_path) -> Paths:
    (tmp_path / "opt").mkdir()  # /opt/nodemap, which the install recipe made; each recipe makes its other folders
    return Paths(tmp_path)


def slurm_env(cluster: Cluster, **extra: str) -> dict:
    return dict(cluster.env, **extra)


def states(cluster: Cluster) -> dict[str, tuple[str, str]]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], capture_output=True, text=True, timeout=30,
                         env=cluster.env).stdout
    return {n: (s.rstrip("*~#"), r) for n, s, r in (ln.split("|", 2) for ln in out.splitlines() if ln.count("|") == 2)}


def wait_for(cluster: Cluster, ok, seconds: float = 60.0) -> dict:
    end = time.monotonic() + seconds
    while True:
        got = states(cluster)
        if ok(got) or time.monotonic() > end:
            return got
        time.sleep(0.5)


def needs_slurm() -> None:
    if unavailable():
        pytest.skip(unavailable())


# --- the pages themselves ---------------------------------------------------------------------------------------


def test_every_block_is_marked_and_every_recipe_is_run():
    for doc in DOCS:
        unmarked = [b.where for kind, _, b in blocks(doc) if not kind]
        assert not unmarked, f"fenced blocks without a recipe/output/not a recipe marker: {unmarked}"
        text = (ROOT / doc).read_text().split("\n")
        fenced, indented = False, []
        for i, line in enumerate(text):
            fenced ^= line.startswith("```")
            if not fenced and line.startswith("    ") and line.strip() and i and not text[i - 1].strip():
                indented.append(f"{doc}:{i + 1}")
        assert not indented, f"indented code blocks (fence and mark them): {indented}"
    found = recipes()
    assert sorted(found) == sorted(RUN_BY), "a recipe no test runs, or a test for a recipe that is gone"
    assert all(name in globals() for name in RUN_BY.values())
    assert set(recipes("output")) <= set(found)
    names = [name for doc in DOCS for kind, name, _ in blocks(doc) if kind == "recipe"]
    assert len(names) == len(set(names)), "two recipes of one name"


def test_the_substitutions_replace_paths_once_and_nothing_else(tmp_path):
    p = Paths(tmp_path)
    r = Recipe("x", "sh", "/opt/nodemap/venv/bin/nodemap /opt/nodemap/nodemap_spank.so /etc/nodemap/class.json "
                          "/var/lib/nodemap/prolog /var/lib/node_exporter/textfile/a.prom ./app\n", "-")
    assert verbatim(r, p).split() == [f"{VENV}/bin/nodemap", f"{tmp_path}/opt/nodemap_spank.so",
                                      f"{tmp_path}/etc/class.json", f"{tmp_path}/lib/prolog",
                                      f"{tmp_path}/prom/a.prom", f"{tmp_path}/app"]
    assert verbatim(Recipe("x", "sh", "/opt/nodemap-x /etcx\n", "-"), p) == f"{tmp_path}/opt-x /etcx\n"


# --- the supported setup ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_install_recipe_gives_a_nodemap_with_its_extras(paths):
    venv = paths.top / "venv"
    own = Paths(paths.top, venv=venv)
    t0 = time.monotonic()
    run("venv", own, timeout=600)
    took = time.monotonic() - t0
    p = subprocess.run([str(venv / "bin" / "python"), "-c", "import mpi4py, pynvml, nodemap.native"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr  # the extras named, and the C library built
    p = subprocess.run([str(venv / "bin" / "nodemap"), "check", "--level", "health", "-q"], capture_output=True,
                       text=True, timeout=120)
    print(f"install recipe: {took:.0f} s")


def gate(paths: Paths, conf: tuple[str, ...] = (), nodes: int = 3, recipes_run=("class", "health-program",
                                                                                 "prolog-epilog")) -> Cluster:
    """The supported setup's scripts (recipes_run) and a cluster with its slurm.conf lines."""
    needs_slurm()
    for name in recipes_run:
        run(name, paths)
    cluster = Cluster.start(conf_lines=(*lines("slurm.conf", paths), *conf), nodes=nodes)
    (paths.top / "slurm.conf").symlink_to(cluster.conf)  # /etc/slurm/slurm.conf of the health program
    return cluster


@pytest.mark.slurm
@pytest.mark.slow
def test_health_prolog_epilog_and_a_measuring_check_share_nodes_without_draining_them(paths):
    # Issue 35, defect 1: the docs' health program (every 5 s here), prolog and epilog took one lock; the
    # loser exited 2 and slurmd drained the node "Prolog error"/"Epilog error", never resumed: 3 of 3 nodes
    # drained by job 28 of 60 (2-vCPU VM, 2026-12-02). Now health checks share the lock, a measuring check (the
    # recipe run by hand on n2, during the first jobs) holds it alone, and a check that steps aside in a prolog exits 0.
    cluster = gate(paths)
    by_hand = []

    def measure() -> None:  # once: it loads this 2-vCPU VM, and every job on n2 meanwhile waits for the lock
        env = slurm_env(cluster, SLURMD_NODENAME="n2", NODEMAP_RUNTIME_DIR=str(paths.top / "run"),
                        NODEMAP_CHECK_TINY="1")
        by_hand.append(run("check-by-hand", paths, env=env, check=False, timeout=120))

    try:
        assert wait_for(cluster, lambda n: all(s == "idle" for s, _ in n.values()))
        worker = threading.Thread(target=measure, daemon=True)
        worker.start()
        t0, failed, drained = time.monotonic(), [], {}
        for job in range(60):
            try:
                p = cluster.srun("-N3", "-n3", "true", timeout=60)
                if p.returncode:
                    failed.append((job, p.stderr.strip()[-300:]))
            except subprocess.TimeoutExpired as e:  # its nodes drained (by a failed epilog: after the last job)
                failed.append((job, f"srun waited 60 s: {e.stderr}"))
            drained = {n: r for n, (s, r) in states(cluster).items() if "drain" in s}
            if drained or failed:
                break
        took = time.monotonic() - t0
        worker.join(timeout=150)
        # the last job's epilogs, after srun returned
        last = wait_for(cluster, lambda n: all(s == "idle" for s, _ in n.values()), 30)
        drained.update({n: r for n, (s, r) in last.items() if "drain" in s})
        assert drained == {} and failed == [], (job, drained, failed)
        aside = sum(f.read_text().count("steps aside") for f in (paths.top / "log").glob("*.log"))
        aside += sum(f.read_text().count("steps aside") for f in Path(cluster.top, "log").glob("slurmd-*.log"))
        statuses = [p.returncode for p in by_hand]
        assert by_hand and all(s in (0, 2) for s in statuses), [(p.returncode, p.stderr[-500:]) for p in by_hand]
        assert aside > 0, "no check met the measuring one: the test did not test the composition"
        print(f"60 jobs in {took:.0f} s, 0 nodes drained; a measuring check by hand on n2 (exit {statuses[0]}), "
              f"{aside} health checks stepped aside meanwhile")
    finally:
        cluster.stop()


@pytest.mark.slurm
def test_the_supported_setup_drains_a_faulty_node_and_resumes_it(paths):
    # the same recipes still do their job: a class that says one NIC more drains every node with nodemap's
    # reason (the health program, every 5 s here), and they are resumed once the class is right again
    cluster = gate(paths)
    try:
        assert wait_for(cluster, lambda n: all(s == "idle" for s, _ in n.values()))
        cls_path = paths.top / "etc" / "class.json"
        good = cls_path.read_text()
        cls = json.loads(good)
        cls["nics"].append({"name": "mlx5_9", "kind": "InfiniBand"})
        cls_path.write_text(json.dumps(cls))
        why = f"nodemap: inventory: NICs {len(cls['nics']) - 1} (limit {len(cls['nics'])})"
        got = wait_for(cluster, lambda n: all("drain" in s for s, _ in n.values()), 60)
        assert all("drain" in s and r == why for s, r in got.values()), got
        cls_path.write_text(good)
        got = wait_for(cluster, lambda n: all(s == "idle" for s, _ in n.values()), 60)
        assert all(s == "idle" for s, _ in got.values()), got
    finally:
        cluster.stop()


@pytest.mark.slurm
@pytest.mark.slow
def test_the_measuring_prolog_lets_a_job_start_on_a_busy_node(paths):
    # Issue 35, defect 2: the docs' measuring prolog exec'd `check --level quick --budget 30`, whose exit 2
    # (busy: could not judge) slurmd turned into a "Prolog error" drain. Other work spins on every CPU here.
    cluster = gate(paths, nodes=1, recipes_run=("class", "health-program", "prolog-epilog", "measuring-prolog"))
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        assert wait_for(cluster, lambda n: all(s == "idle" for s, _ in n.values()))
        t0 = time.monotonic()
        p = cluster.srun("-N1", "printenv", "SLURMD_NODENAME", timeout=120)
        took = time.monotonic() - t0
        log = (paths.top / "log" / "prolog.log")
        assert p.returncode == 0 and p.stdout.split() == ["n1"], (p.stderr, log.read_text() if log.exists() else "")
        doc = json.loads((paths.top / "lib" / "prolog" / "check.json").read_text())
        assert doc["level"] == "quick" and doc["budget"]["seconds"] == 30 and doc["complete"], doc["budget"]
        after = wait_for(cluster, lambda n: n["n1"][0] == "idle", 60)  # once its epilog is done: not drained
        assert after["n1"] == ("idle", "none"), after
        prom = (paths.top / "prom" / "nodemap-prolog.prom").read_text()
        status = re.search(r'^nodemap_check_status\{node="n1",level="quick"\} (\d+)', prom, re.M)
        assert status and status.group(1) in ("0", "2"), prom[:500]
        # the budget, start-up, the report and srun's own (48 s at load 19 on the 2-vCPU VM); past
        # PrologEpilogTimeout=60 slurmd would have killed the prolog and drained the node
        assert took < 60 + 10, took
        print(f"measuring prolog on a busy node: job started after {took:.0f} s, check status {status.group(1)}, "
              f"busy={doc['busy'].get('busy')}")
    finally:
        for s in spin:
            s.kill()
            s.wait()
        cluster.stop()


# --- gres, features, srun --nodemap -----------------------------------------------------------------------------


@pytest.mark.slurm
def test_gres_and_features_merged_into_the_nodes_own_line(paths):
    out = run("gres", paths).stdout.splitlines()
    assert out == recipes("output")["gres"].text.splitlines()
    needs_slurm()
    cluster = Cluster.start(nodes=2)
    try:
        run("features", Paths(paths.top, slurm_conf=cluster.conf), env=cluster.env)
        conf = Path(cluster.conf).read_text()
        n1 = [ln for ln in conf.splitlines() if ln.startswith("NodeName=n1 ")]
        assert len(n1) == 1 and " Features=" in n1[0], conf  # merged: one line per node (defect 8)
        want = n1[0].split(" Features=")[1]
        got = {}
        end = time.monotonic() + 30
        while time.monotonic() < end and got.get("n1") != want:
            p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %f"], capture_output=True, text=True, timeout=30,
                               env=cluster.env)
            got = dict(ln.split() for ln in p.stdout.splitlines() if len(ln.split()) == 2)
            time.sleep(0.5)
        assert got == {"n1": want, "n2": "(null)"}, got  # slurmctld took it, and is up
        feature = want.split(",")[0]
        p = cluster.srun("-N1", "-C", feature, "printenv", "SLURMD_NODENAME", timeout=60)
        assert p.stdout.split() == ["n1"], p.stderr
    finally:
        cluster.stop()


APP = """#!/bin/sh
# what a task got: the NODEMAP_ variables of the plugin's plan (not the test's cache folder) and its CPUs
echo "task $SLURM_PROCID on $SLURMD_NODENAME: $(env | grep '^NODEMAP_' | grep -vc '^NODEMAP_CACHE_DIR=') NODEMAP_ variables, CPUs \
$(grep Cpus_allowed_list /proc/self/status | cut -f2)"
"""


@pytest.mark.slurm
def test_srun_nodemap_through_the_documented_plugstack_line(paths):
    needs_slurm()
    import shutil

    if not shutil.which("cc") or not Path("/usr/include/slurm/spank.h").exists():
        pytest.skip("the SPANK plugin needs a C compiler and Slurm's spank.h (apt-get install libslurm-dev)")
    run("spank-build", paths)
    (paths.top / "app").write_text(APP)
    (paths.top / "app").chmod(0o755)
    cluster = Cluster.start(plugstack="\n".join(lines("plugstack.conf", paths)) + "\n", nodes=2)
    cache = paths.top / "cache"  # the plugin's plan cache: this test's own, not the machine's user folder
    cache.mkdir(mode=0o700)
    env = slurm_env(cluster, NODEMAP_CACHE_DIR=str(cache))
    try:
        p = run("srun-nodemap", paths, env=env, timeout=240)
        said = [ln for ln in p.stdout.splitlines() if ln.startswith("task ")]
        # 2 nodes x 2 tasks, then one task each: threads=8,verbose; strict; off
        assert len(said) == 4 + 3, p.stdout + p.stderr
        bound = [int(ln.split(": ")[1].split()[0]) for ln in said]
        assert all(n > 0 for n in bound[:6]) and bound[6] == 0, said  # the plugin's plan, then off: none
        assert list(cache.glob("spank-*")), "the plugin cached no plan"
        run("spank-cache-reset", paths, env=env)
        assert not list(cache.glob("spank-*"))
    finally:
        cluster.stop()


@pytest.mark.slurm
@pytest.mark.slow
def test_the_test_cluster_recipe(paths):
    needs_slurm()
    env = {"PATH": os.pathsep.join((str(VENV / "bin"), SBIN)), "NODEMAP_CHECK_TINY": "1", "CUDA_VISIBLE_DEVICES": ""}
    try:
        p = run("test-cluster", paths, env=env, cwd=ROOT, timeout=500)
    finally:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "slurm-test-cluster"), "stop", str(paths.top / "c")],
                       capture_output=True, timeout=60)
    fleet = json.loads((paths.top / "c" / "fleet" / "fleet.json").read_text())
    assert sorted(n["name"] for n in fleet["nodes"]) == ["n1", "n2", "n3"], p.stdout
    assert "n3" in p.stdout and "stopped" in p.stdout + p.stderr, p.stdout + p.stderr


def run_networked(name: str, paths: Paths, timeout: float) -> subprocess.CompletedProcess:
    """A recipe that starts a networked test cluster in /tmp/cn (its folder), stopped after it either way."""
    needs_slurm()
    import shutil

    if not (shutil.which("ip", path=SBIN) and shutil.which("tc", path=SBIN)):
        pytest.skip("no ip or tc (iproute2): sh scripts/install-test-packages")
    env = {"PATH": os.pathsep.join((str(VENV / "bin"), SBIN)), "CUDA_VISIBLE_DEVICES": ""}
    try:
        return run(name, paths, env=env, cwd=ROOT, timeout=timeout)
    finally:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "slurm-test-cluster"), "stop", str(paths.top / "cn")],
                       capture_output=True, timeout=60)


@pytest.mark.slurm
@pytest.mark.slow
def test_the_networked_test_cluster_recipe(paths):
    p = run_networked("network-test-cluster", paths, 500)
    nics = sorted(ln for ln in p.stdout.splitlines() if re.fullmatch(r"n\d ctl ctl0 lo .*", ln))
    assert nics == [f"n{k} ctl ctl0 lo rail0 rail1" for k in (1, 2, 3)], p.stdout  # each node its own two rails
    assert "n2/rail1: 20mbit" in p.stdout and "stopped" in p.stdout
    shown = [ln.split() for ln in p.stdout.splitlines() if ln.startswith("n") and " bind:" in ln]
    assert sorted((r[0], r[2], r[7]) for r in shown) == [(f"n{k}", str(lr), f"rail{lr}") for k in (1, 2, 3)
                                                         for lr in (0, 1)], p.stdout  # local rank k on rail k


# --- docs/fleet.md ------------------------------------------------------------------------------------------------


@pytest.mark.slurm
@pytest.mark.slow
def test_a_slow_rail_is_found_named_and_drained_on_a_networked_cluster(paths):
    """n2's rail1 at a tenth of its rate: the fleet finds n2, names the rail and drains it in Slurm;
    n1 and n3 stay idle."""
    p = run_networked("fleet-network", paths, 560)
    fleet = json.loads((paths.top / "cn" / "fleet" / "fleet.json").read_text())
    assert [d["node"] for d in fleet["drain"]] == ["n2"] and "rail1" in fleet["drain"][0]["reason"], p.stdout
    drained = [ln for ln in p.stdout.splitlines() if ln.startswith("n2 nodemap: fleet: pairs mpi bw host rail1")]
    assert len(drained) == 1 and not re.search(r"^n[13] ", p.stdout, re.M), p.stdout  # sinfo -R: n2 alone


@pytest.mark.slurm
@pytest.mark.slow
def test_a_fleet_as_a_batch_job(paths):
    needs_slurm()
    cluster = Cluster.start(nodes=3)
    try:
        p = run("fleet-batch", paths, env=slurm_env(cluster, NODEMAP_CHECK_TINY="1"), timeout=500, check=False)
        job = re.search(r"Submitted batch job (\d+)", p.stdout)
        assert job, p.stdout + p.stderr
        out = paths.top / "shared" / f"fleet-{job.group(1)}"
        log = (paths.top / f"slurm-{job.group(1)}.out").read_text()
        # 0 nothing to drain, 1 nodes to drain: three "nodes" sharing two cores may be judged against each other
        assert p.returncode in (0, 1), (p.returncode, p.stderr, log)
        fleet = json.loads((out / "fleet.json").read_text())
        assert sorted(n["name"] for n in fleet["nodes"]) == ["n1", "n2", "n3"]
        assert all(n["status"] == "complete" for n in fleet["nodes"]), fleet["nodes"]
        assert (out / "fleet.html").exists()
    finally:
        cluster.stop()


def test_the_fleet_site_file(tmp_path):
    from nodemap.check import expectations

    r = recipes()["fleet-site"]
    assert r.lang == "toml"
    site = tmp_path / "site.toml"
    site.write_text(r.text)
    t = expectations.load(str(site)).fleet_rules()  # the same file as nodemap check's --expect
    assert (t.warn, t.fail, t.link_bad, t.min_nodes) == (0.95, 0.90, 0.93, 3)
    d = expectations.fleet_defaults()
    assert (t.rail_bad, t.rail_latency, t.rail_tail) == (0.5, 2.0, 3.0) == (d.rail_bad, d.rail_latency, d.rail_tail)


@pytest.mark.mpi
@pytest.mark.slow
def test_the_fleet_proof_on_one_machine(tmp_path):
    import random

    from fleet_docs import node_doc

    if not (VENV / "bin" / "mpiexec").exists():
        pytest.skip("no mpiexec next to sys.executable (pip install mpich)")
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps(node_doc("template", random.Random(7), gpus=2, noise=0.0)))
    env = {"PATH": os.pathsep.join((str(VENV / "bin"), os.environ["PATH"])), "NODEMAP_FLEET_NODE_DOC": str(doc),
           "CUDA_VISIBLE_DEVICES": ""}
    p = run("fleet-one-machine", Paths(tmp_path), env=env, timeout=300, check=False)
    assert p.returncode != 0, p.stdout  # nodes to drain; the silent rank ended with MPI_Abort
    fleet = json.loads((tmp_path / "out" / "fleet.json").read_text())
    drain = [d["node"] for d in fleet["drain"]]
    assert drain[:2] == ["d", "b"], (drain, p.stderr[-2000:])  # d missing, b 20% slower (the page's promise)
    status = {n["name"]: n["status"] for n in fleet["nodes"]}
    assert status == {"a": "complete", "b": "complete", "c": "complete", "d": "missing"}
