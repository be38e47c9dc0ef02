"""`nodemap check --level health --slurm-drain` as the HealthCheckProgram
of a real 3-node Slurm (tests/slurm_cluster.py): a fault injected on one
node (its expected topology says one NIC more) drains that node with
nodemap's reason in `sinfo -R`; removing the fault resumes it; the other
nodes stay idle. Skips where Slurm's packages are absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from slurm_cluster import Cluster

pytestmark = [pytest.mark.slurm]

# slurmd runs the program with an environment of SLURMD_NODENAME only: the
# script finds the cluster's slurm.conf (written once it is up), nodemap and
# its node's expected topology (the fault: expect-NODE.json beside class.json).
SCRIPT = """#!/bin/sh
[ -f {top}/conf ] || exit 0
export SLURM_CONF="$(cat {top}/conf)" PATH={bin}:/usr/bin:/bin:/usr/sbin:/sbin NODEMAP_RUNTIME_DIR={top}/run
f={top}/expect-$SLURMD_NODENAME.json
[ -f "$f" ] || f={top}/class.json
exec {python} -m nodemap check --level health -q --expect-topology "$f" --slurm-drain \
    >> {top}/health-$SLURMD_NODENAME.log 2>&1
"""


def nodes(cluster: Cluster) -> dict[str, tuple[str, str]]:
    """Node -> (state, reason) from sinfo."""
    p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], capture_output=True, text=True, timeout=30,
                       env=cluster.env)
    rows = [line.split("|", 2) for line in p.stdout.splitlines() if line.count("|") == 2]
    return {n: (s.rstrip("*"), r) for n, s, r in rows}


def wait_for(cluster: Cluster, ok, seconds: float = 60) -> dict:
    end = time.monotonic() + seconds
    while True:
        got = nodes(cluster)
        if ok(got) or time.monotonic() > end:
            return got
        time.sleep(1)


def test_health_check_program_drains_the_faulty_node_and_resumes_it(tmp_path):
    top = tmp_path
    (top / "run").mkdir(mode=0o700)
    p = subprocess.run([sys.executable, "-m", "nodemap", "topo", "--export", str(top / "class.json")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    script = top / "health.sh"
    script.write_text(SCRIPT.format(top=top, bin=os.path.dirname(sys.executable), python=sys.executable))
    script.chmod(0o755)
    cluster = Cluster.start(conf_lines=(f"HealthCheckProgram={script}", "HealthCheckInterval=2",
                                        "HealthCheckNodeState=ANY"))
    try:
        (top / "conf").write_text(cluster.conf)
        assert wait_for(cluster, lambda n: all(s == "idle" for s, _ in n.values()))
        cls = json.loads((top / "class.json").read_text())
        want = len(cls["nics"]) + 1
        cls["nics"].append({"name": "mlx5_9", "kind": "InfiniBand"})
        (top / "expect-n2.json").write_text(json.dumps(cls))

        reason = f"nodemap: inventory: NICs {want - 1} (limit {want})"
        got = wait_for(cluster, lambda n: n.get("n2", ("", ""))[0].startswith("drain"))
        assert got["n2"] == ("drained", reason), got
        assert got["n1"][0] == got["n3"][0] == "idle", got
        listed = subprocess.run(["sinfo", "-R", "-h", "-o", "%E|%N"], capture_output=True, text=True, timeout=30,
                                env=cluster.env).stdout
        assert f"{reason}|n2" in listed

        (top / "expect-n2.json").unlink()
        got = wait_for(cluster, lambda n: n.get("n2", ("", ""))[0] == "idle")
        assert got["n2"] == ("idle", "none"), got
        assert got["n1"][0] == got["n3"][0] == "idle", got
    finally:
        (top / "conf").unlink(missing_ok=True)  # a health check started from now on exits without acting
        cluster.stop()
    # one still running when slurmd stopped ends by itself (scontrol fails, at worst after --slurm-timeout, or
    # --health-timeout, 45 s, ends it) and drops its lock; 20 s failed at load 13 on the 2-vCPU VM
    end = time.monotonic() + 50
    while held(top / "run") and time.monotonic() < end:
        time.sleep(0.2)
    assert not held(top / "run")


def held(folder) -> list[str]:
    """The lock files in `folder` some process holds (the files stay; a hold ends with its holder)."""
    import fcntl

    out = []
    for path in folder.glob("*.lock"):
        with open(path) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                out.append(path.name)
    return out
