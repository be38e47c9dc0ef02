"""Issue 16, item 6: no silent wrong answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import nodes
from hostile import _cap, env, nodemap, refused, snapshot
from nodemap.errors import InputError
from nodemap.topology import sysfs


def test_an_unreadable_gpu_pci_folder_is_an_error_not_a_missing_gpu(tmp_path, monkeypatch):
    snapshot(tmp_path)
    dev = tmp_path / "sys/devices/pci0000:00/0000:01:00.0"
    for name, value in (("class", "0x030200"), ("vendor", "0x10de"), ("device", "0x2330")):
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).write_text(value + "\n")
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("/sys/devices/pci0000:00/0000:01:00.0", tmp_path / "sys/bus/pci/devices/0000:01:00.0")
    assert len(sysfs.read(tmp_path).gpus) == 1
    real = os.scandir

    def scandir(path):  # what mode 000 does to a user who is not root
        if str(path).endswith("0000:01:00.0"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(InputError, match="0000:01:00.0: cannot list: permission denied"):
        sysfs.read(tmp_path)


def test_an_unreadable_gpu_pci_folder_from_the_cli(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads a folder of mode 000")
    snapshot(tmp_path)
    dev = tmp_path / "sys/devices/pci0000:00/0000:01:00.0"
    dev.mkdir(parents=True)
    (dev / "class").write_text("0x030200\n")
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("/sys/devices/pci0000:00/0000:01:00.0", tmp_path / "sys/bus/pci/devices/0000:01:00.0")
    dev.chmod(0)
    try:
        refused(nodemap("topo", "--input", str(tmp_path)), "0000:01:00.0", "permission denied")
    finally:
        dev.chmod(0o755)


@pytest.fixture
def perlmutter(tmp_path):
    path = tmp_path / "perlmutter.json"
    path.write_text(nodes.perlmutter().to_json())
    return str(path)


def test_show_with_a_gpu_that_does_not_exist_is_not_ok(tmp_path, perlmutter):
    r = nodemap("show", "--no-mpi", "--input", perlmutter, "--json", env_=env(tmp_path, CUDA_VISIBLE_DEVICES="7"))
    row = json.loads(r.stdout)["rows"][0]
    assert row["gpus"] == [] and any("'7' names no GPU" in v for v in row["verdicts"]), row


def test_gpu_sharing_is_said(perlmutter):
    r = nodemap("plan", "--input", perlmutter, "--tasks", "2", "--gpus-per-task", "3", "--json")
    plan = json.loads(r.stdout)
    gpus = [set(t["gpus"]) for t in plan["tasks"]]
    assert gpus[0] & gpus[1]  # 6 GPUs asked of 4: some are shared...
    assert any("shared by several tasks" in n for n in plan["notes"])  # ...and the plan says so
    r = nodemap("plan", "--input", perlmutter, "--tasks", "4", "--gpus-per-task", "1", "--json")
    assert not any("shared" in n for n in json.loads(r.stdout)["notes"])


def test_source_nvml_without_nvml_is_an_error(tmp_path):
    (tmp_path / "pynvml.py").write_text("raise ImportError('No module named pynvml')\n")
    refused(nodemap("topo", "--source", "nvml", env_=env(tmp_path, PYTHONPATH=str(tmp_path))),
            "--source nvml", "--source sysfs")


def test_source_amdsmi_without_amd_smi_is_an_error(tmp_path):
    # the package present but its library missing, as pip leaves it on a node without ROCm
    (tmp_path / "amdsmi.py").write_text("raise OSError('libamd_smi.so: cannot open shared object file')\n")
    refused(nodemap("topo", "--source", "amdsmi", env_=env(tmp_path, PYTHONPATH=str(tmp_path))),
            "--source amdsmi", "libamd_smi.so", "--source sysfs")


def test_closed_stdout_is_not_success(tmp_path):
    r = subprocess.run([sys.executable, "-m", "nodemap", "plan", "--tasks", "1"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=10, env=env(tmp_path),
                       preexec_fn=lambda: (_cap(), os.close(1)))
    refused(r, "standard output is closed")


@pytest.mark.parametrize("args", [["--help"], ["plan", "--help"], ["--version"]])
def test_help_into_a_closed_stdout_is_not_success(tmp_path, args):
    """argparse ignores the failed write and exits 0; nodemap says so."""
    r = subprocess.run([sys.executable, "-m", "nodemap", *args], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=10, env=env(tmp_path),
                       preexec_fn=lambda: (_cap(), os.close(1)))
    refused(r, "standard output is closed")


def test_help_into_a_pipe_that_closes_early_is_quiet(tmp_path):
    p = subprocess.Popen(f"{sys.executable} -m nodemap --help | head -c 1 >/dev/null; echo ${{PIPESTATUS[0]}}",
                         shell=True, executable="/bin/bash", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env(tmp_path))
    out, err = p.communicate(timeout=10)
    assert out.strip() == "0" and err == "", (out, err)


@pytest.mark.parametrize("option, value", [("--threads", "0"), ("--gpus-per-task", "-1"), ("--threads", "-1"),
                                           ("--gpus-per-task", "-2")])
def test_the_internal_auto_values_are_not_options(option, value):
    refused(nodemap("plan", "--tasks", "1", option, value), option, "out of range", "leave the option out")


def test_a_sysfs_file_over_the_limit_is_refused_not_cut(tmp_path):
    snapshot(tmp_path)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-1" + "," * (1 << 20))  # cut, it read "0-1,,,,"
    refused(nodemap("topo", "--input", str(tmp_path)), "cpu/online", "1 MiB", "intact snapshot")


def test_cpuinfo_of_a_big_node_is_read_whole(tmp_path):
    """/proc/cpuinfo is ~1.5 KB per PU: over 1 MiB from ~700 PUs on, so it has a limit of its own."""
    snapshot(tmp_path)
    block = "processor\t: {}\nmodel name\t: Big CPU\nflags\t\t: " + "x" * 1500 + "\n\n"
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("".join(block.format(i) for i in range(1000)))
    assert (tmp_path / "proc/cpuinfo").stat().st_size > 1 << 20
    r = nodemap("topo", "--input", str(tmp_path), "--json")
    assert r.returncode == 0 and "Big CPU" in r.stdout, r.stderr
