"""The prolog and epilog recipes of docs/slurm.md in a real 3-node Slurm
(tests/slurm_cluster.py): the prolog's health check with --slurm-drain and
--prom; a node that fails it is drained with nodemap's reason and the job
does not run there (Slurm's own rule for a failed prolog); the epilog
leaves each node's Prometheus file. Skips where Slurm's packages are absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from slurm_cluster import Cluster

pytestmark = [pytest.mark.slurm]
parser = pytest.importorskip("prometheus_client.parser")

# The recipe of docs/slurm.md, with the test's folder for /etc/nodemap and the
# textfile collector's folder. slurmd gives a prolog few variables: PATH and
# SLURM_CONF are set here (the cluster writes its slurm.conf path to DIR/conf).
RECIPE = """#!/bin/sh
# nodemap {what}: a node whose hardware fails its class is drained ('nodemap: ...') and the exit status
# tells Slurm (1: the prolog failed, so the job does not start here)
[ -f {top}/conf ] || exit 0
export SLURM_CONF="$(cat {top}/conf)" PATH={bin}:/usr/bin:/bin:/usr/sbin:/sbin NODEMAP_RUNTIME_DIR={top}/run
class={top}/class-$SLURMD_NODENAME.json; [ -f "$class" ] || class={top}/class.json
exec {python} -m nodemap check --level health -q --expect-topology "$class" --slurm-drain \\
    --prom {top}/prom/{what}-$SLURMD_NODENAME.prom >> {top}/{what}.log 2>&1
"""


def states(cluster: Cluster) -> dict[str, tuple[str, str]]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], capture_output=True, text=True, timeout=30,
                         env=cluster.env).stdout
    return {n: (s.rstrip("*"), r) for n, s, r in (line.split("|", 2) for line in out.splitlines())}


def metrics(path, seconds: float = 60) -> dict:
    """The file's metric families, once it is there (an epilog runs after srun returns)."""
    end = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.2)
    return {f.name: f for f in parser.text_string_to_metric_families(path.read_text())}


def scripts(top, recipe: str, *whats: str) -> None:
    """This node's class (class.json), the folders and each recipe's script (WHAT.sh) in `top`."""
    for sub in ("run", "prom"):
        (top / sub).mkdir(mode=0o700)
    p = subprocess.run([sys.executable, "-m", "nodemap", "topo", "--export", str(top / "class.json")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for what in whats:
        script = top / f"{what}.sh"
        script.write_text(recipe.format(what=what, top=top, bin=os.path.dirname(sys.executable),
                                        python=sys.executable))
        script.chmod(0o755)


def test_a_failed_prolog_check_drains_its_node_and_the_epilog_leaves_metrics(tmp_path):
    top = tmp_path
    scripts(top, RECIPE, "prolog", "epilog")
    cluster = Cluster.start(conf_lines=(f"Prolog={top}/prolog.sh", f"Epilog={top}/epilog.sh"))
    try:
        (top / "conf").write_text(cluster.conf)
        ok = cluster.srun("-N3", "-n3", "printenv", "SLURMD_NODENAME")
        assert ok.returncode == 0 and sorted(ok.stdout.split()) == ["n1", "n2", "n3"], ok.stderr
        for node in ("n1", "n2", "n3"):
            for what in ("prolog", "epilog"):
                status = metrics(top / "prom" / f"{what}-{node}.prom")["nodemap_check_status"].samples[0]
                assert (status.labels["node"], status.value) == (node, 0)

        cls = json.loads((top / "class.json").read_text())
        cls["nics"].append({"name": "mlx5_9", "kind": "InfiniBand"})  # n3's class says one NIC more: a fault
        (top / "class-n3.json").write_text(json.dumps(cls))
        bad = cluster.srun("-N1", "-w", "n3", "printenv", "SLURMD_NODENAME", timeout=60)
        assert "n3" not in bad.stdout.split(), (bad.stdout, bad.stderr)  # the job never ran there
        state, reason = states(cluster)["n3"]
        assert state.startswith("drain"), (state, reason)
        # nodemap drained it first; Slurm's own drain for the failed prolog keeps that reason
        assert reason == f"nodemap: inventory: NICs {len(cls['nics']) - 1} (limit {len(cls['nics'])})", reason
        assert metrics(top / "prom" / "prolog-n3.prom")["nodemap_check_status"].samples[0].value == 1
        assert states(cluster)["n1"][0] == states(cluster)["n2"][0] == "idle"
    finally:
        (top / "conf").unlink(missing_ok=True)  # a prolog or epilog from now on does nothing
        cluster.stop()


# docs/slurm.md's measuring prolog within a budget, at the tiny test arrays
# (NODEMAP_CHECK_TINY) and 3 s; a node too busy to judge (this VM is shared)
# exits 0 in a prolog (SLURM_SCRIPT_CONTEXT=prolog_slurmd), so the job starts.
BUDGETED = """#!/bin/sh
[ -f {top}/conf ] || exit 0
export SLURM_CONF="$(cat {top}/conf)" PATH={bin}:/usr/bin:/bin:/usr/sbin:/sbin NODEMAP_RUNTIME_DIR={top}/run
export NODEMAP_CHECK_TINY=1
exec {python} -m nodemap check --level quick --budget 3 -q --expect-topology {top}/class.json --slurm-drain \\
    -o {top}/prolog-$SLURMD_NODENAME --prom {top}/prom/prolog-$SLURMD_NODENAME.prom >> {top}/prolog.log 2>&1
"""


def test_a_measuring_prolog_within_its_budget_lets_the_job_run(tmp_path):
    top = tmp_path
    scripts(top, BUDGETED, "prolog")
    cluster = Cluster.start(conf_lines=(f"Prolog={top}/prolog.sh", "PrologEpilogTimeout=20"), nodes=1)
    try:
        (top / "conf").write_text(cluster.conf)
        t0 = time.monotonic()
        ok = cluster.srun("-N1", "printenv", "SLURMD_NODENAME", timeout=60)
        took = time.monotonic() - t0
        assert ok.returncode == 0 and ok.stdout.split() == ["n1"], (ok.stderr, (top / "prolog.log").read_text())
        d = json.loads((top / "prolog-n1" / "check.json").read_text())
        assert d["complete"] is True and d["budget"]["seconds"] == 3 and d["budget"]["spent"] <= 3.5, d["budget"]
        assert "MPI point-to-point, host and device buffers" in d["budget"]["left_out"] or not any(
            s["what"].startswith("MPI point-to-point") and "budget" not in s["reason"] for s in d["skipped"])
        assert metrics(top / "prom" / "prolog-n1.prom")["nodemap_check_status"].samples[0].value in (0, 2)
        assert took < 3 + 12, took  # the budget, Python's start-up, the report, srun's own
    finally:
        (top / "conf").unlink(missing_ok=True)
        cluster.stop()
