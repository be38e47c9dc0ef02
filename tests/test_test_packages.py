"""Where Slurm's packages are absent (a laptop), `make test` says what to
install and the Slurm tests skip naming the command; nothing fails."""

import os
import subprocess

import slurm_cluster

ROOT = slurm_cluster.ROOT


def shim(tmp_path, **commands):
    """A PATH whose first folder holds these fake commands (name -> shell body)."""
    for name, body in commands.items():
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return f"{tmp_path}:{os.environ['PATH']}"


def test_install_script_without_root_names_what_is_missing_and_succeeds(tmp_path):
    path = shim(tmp_path, **{"dpkg-query": "exit 1", "id": "echo 1000", "apt-get": "echo apt-get ran >&2; exit 9"})
    p = subprocess.run(["sh", str(ROOT / "scripts" / "install-test-packages")], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ, PATH=path))
    assert p.returncode == 0, p.stderr
    assert "not installed: slurmctld slurmd slurm-client munge libslurm-dev iproute2" in p.stderr
    assert "apt-get install slurmctld" in p.stderr and "apt-get ran" not in p.stderr


def test_install_script_is_quiet_when_everything_is_installed(tmp_path):
    path = shim(tmp_path, **{"dpkg-query": "echo 'install ok installed'", "apt-get": "exit 9"})
    p = subprocess.run(["sh", str(ROOT / "scripts" / "install-test-packages")], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ, PATH=path))
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")


def test_without_slurm_the_cluster_tests_skip_naming_the_install_command(monkeypatch):
    monkeypatch.setattr(slurm_cluster.shutil, "which", lambda name, path=None: None)
    reason = slurm_cluster.unavailable()
    assert "slurmctld" in reason and "scripts/install-test-packages" in reason


def test_no_module_name_is_both_a_test_helper_and_a_benchmark():
    # tests put benchmarks/ first on sys.path: a twin there hid tests/slurm_cluster.py from every later
    # test in the same run (test_spank_apply imported it, then a Slurm test got the benchmark's module)
    names = lambda d: {p.name for p in (ROOT / d).glob("*.py")}  # noqa: E731
    assert names("tests") & names("benchmarks") == set(), "rename the benchmark (benchmarks/NAME_speed.py)"
