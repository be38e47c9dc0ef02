"""A real Slurm cluster for the tests: scripts/slurm-test-cluster started
once per session (fixture `slurm_cluster`, in conftest.py), or by a test
module with its own slurm.conf lines (`Cluster.start(conf_lines=...)`, e.g.
a HealthCheckProgram or a PlugStackConfig), and always stopped: by the
fixture's finalizer and, should pytest itself be killed, at exit.

Where Slurm's packages are absent or the tests do not run as root, the
tests that need a cluster skip, naming the install command.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "slurm-test-cluster"
INSTALL = ("sh scripts/install-test-packages (as root; it runs apt-get install slurmctld slurmd slurm-client munge "
           "iproute2)")
NEEDED = ("slurmctld", "slurmd", "munged", "srun", "sinfo", "scontrol")
SBIN = os.pathsep.join((os.environ.get("PATH", ""), "/usr/sbin", "/sbin"))


def unavailable(network: bool = False) -> str:
    """Why no test cluster (with `network`: a networked one) can start here ("" when it can)."""
    missing = [c for c in NEEDED + (("ip", "tc") if network else ()) if not shutil.which(c, path=SBIN)]
    if missing:
        return f"Slurm test cluster: {', '.join(missing)} not installed: {INSTALL}"
    if os.geteuid() != 0:
        return "Slurm test cluster: needs root (slurmd starts each task as the job's user); run the tests as root"
    return ""


class Cluster:
    """A running cluster: its folder, SLURM_CONF, node names, and an `srun`
    that runs in it with this interpreter's bin folder first on PATH."""

    def __init__(self, top: Path, info: dict) -> None:
        self.top = top
        self.conf = info["slurm_conf"]
        self.nodes = info["nodes"]
        self.start_s = info["start_s"]
        self.network = info.get("network")  # with network=True: id, nics, namespaces, addresses, links
        self.env = dict(os.environ, **info["env"], CUDA_VISIBLE_DEVICES="",
                        PATH=os.pathsep.join((str(Path(sys.executable).parent), SBIN)))
        for k in [k for k in self.env if k.startswith(("SLURM_", "SLURMD_")) and k != "SLURM_CONF"]:
            del self.env[k]  # a test run inside a job talks to this cluster, not the job's
        self._stopped = False

    @classmethod
    def start(cls, conf_lines: tuple[str, ...] = (), plugstack: str | None = None, nodes: int = 3,
              network: bool = False, nics: int = 2, rate: str | None = None) -> "Cluster":
        """A new cluster; with `network`, every node in its own network namespace with `nics` rails of
        `rate` (the script's default when None)."""
        reason = unavailable(network)
        if reason:
            pytest.skip(reason)
        top = Path(tempfile.mkdtemp(prefix="nmslurm-"))  # short: munge's socket path must fit in 108 bytes
        cmd = [sys.executable, str(SCRIPT), "start", str(top), "--json", "--nodes", str(nodes)]
        if network:
            cmd += ["--network", "--nics", str(nics), *(["--rate", rate] if rate else [])]
        for line in conf_lines:
            cmd += ["--conf-line", line]
        if plugstack is not None:
            (top / "plugstack.in").write_text(plugstack)
            cmd += ["--plugstack", str(top / "plugstack.in")]
        atexit.register(_stop, top)  # registered first: a start that fails half-way is cleaned up too
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if p.returncode:
            _stop(top)
            pytest.fail(f"the Slurm test cluster did not start (exit {p.returncode}):\n{p.stderr}")
        return cls(top, json.loads(p.stdout))

    def srun(self, *args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
        return self.run("srun", *args, timeout=timeout, env=env)

    def run(self, *argv: str, timeout: float = 120, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
        """A Slurm command (srun, salloc, sbatch...) in this cluster; `env` adds to or overrides its environment."""
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env=dict(self.env, **(env or {})))

    def link(self, node: str, nic: str, *settings: str) -> dict:
        """Change one link (`slurm-test-cluster link`): its state after the change."""
        p = subprocess.run([sys.executable, str(SCRIPT), "link", str(self.top), node, nic, *settings, "--json"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)[f"{node}/{nic}"]

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            _stop(self.top)


def _stop(top: Path) -> None:
    if not top.exists():
        return
    subprocess.run([sys.executable, str(SCRIPT), "stop", str(top)], capture_output=True, timeout=60, check=False)
    shutil.rmtree(top, ignore_errors=True)
