"""`python -m nodemap topo` end to end: real fixture nodes, saved JSON, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_paths import NV4, sample_node

from nodemap.topology.model import Link, Topology


def nodemap(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodemap", "topo", *map(str, args)],
                          capture_output=True, text=True, timeout=60, cwd=cwd)


def one_line_error(r: subprocess.CompletedProcess, *words: str) -> str:
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("nodemap topo: error: ")
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def reader(name: str):
    """The reader module a fixture needs, or an explicit skip saying it is not built yet."""
    return pytest.importorskip(f"nodemap.topology.{name}", reason=f"nodemap.topology.{name} not written yet")


@pytest.fixture
def saved(tmp_path):
    t = sample_node(links=[Link("GPU0", "GPU2", count=18, bandwidth=18 * NV4)])
    p = tmp_path / "node.json"
    p.write_text(t.to_json())
    return p


# --- a saved nodemap JSON -------------------------------------------------------


def test_tree_of_saved_json(saved):
    r = nodemap("--input", saved)
    assert r.returncode == 0, r.stderr
    assert "Package L#1 P#1 Intel Xeon" in r.stdout
    assert "GPU2 NVIDIA H200, 141 GiB" in r.stdout


def test_matrix_of_saved_json(saved):
    r = nodemap("--input", saved, "--matrix")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].split()[:4] == ["GPU0", "X", "PXB", "NV18"]
    assert "NIC Legend:" in r.stdout


def test_json_with_matrix_and_atomic_export(saved, tmp_path):
    out = tmp_path / "sub" / "again.json"
    out.parent.mkdir()
    r = nodemap("--input", saved, "--json", "--matrix", "--export", out)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["paths"]["GPU2"]["GPU0"]["label"] == "NV18"
    assert Topology.from_json(json.dumps(doc["topology"])) == Topology.from_json(saved.read_text())
    assert Topology.from_json(out.read_text()) == Topology.from_json(saved.read_text())
    assert [p.name for p in out.parent.iterdir()] == ["again.json"]  # no temp file left


def test_help_teaches_with_examples():
    r = nodemap("--help")
    assert r.returncode == 0
    assert "examples:" in r.stdout and "--input snapshot.tar.bz2" in r.stdout


# --- bad input: one line, exit 2, no traceback ------------------------------------


def test_nonexistent_path(tmp_path):
    one_line_error(nodemap("--input", tmp_path / "nope.xml"), "nope.xml", "no such file")


def test_empty_directory(tmp_path):
    one_line_error(nodemap("--input", tmp_path), str(tmp_path), "not a sysfs snapshot: it is empty")


def test_empty_and_unrecognized_files(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    one_line_error(nodemap("--input", tmp_path / "empty"), "empty file")
    (tmp_path / "junk").write_bytes(b"\x00\x01garbage")
    one_line_error(nodemap("--input", tmp_path / "junk"), "unrecognized format")


def test_json_of_the_wrong_schema(tmp_path):
    p = tmp_path / "results.json"
    p.write_text(json.dumps({"schema": "nodemap.results/1", "results": []}))
    one_line_error(nodemap("--input", p), "results.json", "not a nodemap topology")
    p.write_text("[1, 2]")
    one_line_error(nodemap("--input", p), "a JSON object is expected")
    p.write_text('{"schema": "nodemap.topology/1", "gpus": [{"index": 0, "vendor": "X", "bogus": 1}]}')
    one_line_error(nodemap("--input", p), "field gpus[0].bogus is not one nodemap writes")
    p.write_text('{"schema": "nodemap.topology/1", "pus": [{"os_index": 0}], "allowed_mems": "zz"}')
    one_line_error(nodemap("--input", p), "field allowed_mems: bad CPU list 'zz'")
    p.write_text('{"schema": "nodemap.topology/1", ')
    one_line_error(nodemap("--input", p), "not JSON")


def test_source_that_contradicts_the_input(saved):
    one_line_error(nodemap("--input", saved, "--source", "hwloc"), "--source hwloc reads this machine")


def test_unwritable_export(saved, tmp_path):
    one_line_error(nodemap("--input", saved, "--export", tmp_path / "no" / "dir" / "x.json"), "--export", "does not exist")


# --- fixtures through the readers -----------------------------------------------


def test_hwloc_xml_power8_with_nvlink(fixtures):
    reader("hwloc_xml")
    xml = fixtures / "hwloc-xml" / "power8gpudistances.xml"
    tree = nodemap("--input", xml)
    assert tree.returncode == 0, tree.stderr
    assert "GPU0" in tree.stdout and "GPU3" in tree.stdout
    r = nodemap("--input", xml, "--matrix")
    assert r.returncode == 0, r.stderr
    row = r.stdout.splitlines()[1].split()
    assert row[0] == "GPU0" and any(c.startswith("NV") for c in row[1:5]), r.stdout


def test_hwloc_xml_with_gpu_and_infiniband(fixtures):
    reader("hwloc_xml")
    xml = fixtures / "hwloc-xml" / "32em64t-2n8c2t-pci-normalio.xml"
    r = nodemap("--input", xml)
    assert r.returncode == 0, r.stderr
    assert "GPU0" in r.stdout and "NIC mlx5_0" in r.stdout and "ib0" in r.stdout
    m = nodemap("--input", xml, "--matrix")
    assert m.returncode == 0 and "NIC0: mlx5_0" in m.stdout


def test_sysfs_tarball(fixtures):
    reader("snapshot")
    r = nodemap("--input", fixtures / "hwloc-linux" / "16amd64-8n2c.tar.bz2", "--json")
    assert r.returncode == 0, r.stderr
    t = Topology.from_json(r.stdout)
    assert len(t.numa_nodes) == 8 and len(t.pus) == 16


def test_truncated_xml(fixtures, tmp_path):
    reader("hwloc_xml")
    data = (fixtures / "hwloc-xml" / "power8gpudistances.xml").read_bytes()
    p = tmp_path / "cut.xml"
    p.write_bytes(data[: len(data) // 2])
    one_line_error(nodemap("--input", p), "cut.xml")


def test_billion_laughs_xml(tmp_path):
    reader("hwloc_xml")
    lol = "".join(f'<!ENTITY l{i} "{("&l%d;" % (i - 1)) * 10}">' for i in range(1, 10))
    p = tmp_path / "lol.xml"
    p.write_text(f'<?xml version="1.0"?><!DOCTYPE topology [<!ENTITY l0 "lol">{lol}]><topology>&l9;</topology>')
    one_line_error(nodemap("--input", p), "lol.xml")


# --- source dispatch (readers replaced by fakes: this tests discover, not them) --


@pytest.fixture
def fake_reader(monkeypatch):
    import types

    import nodemap.topology as pkg

    def install(name: str, **funcs):
        mod = types.ModuleType(f"nodemap.topology.{name}")
        for k, v in funcs.items():
            setattr(mod, k, v)
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
        monkeypatch.setattr(pkg, name, mod, raising=False)
        return mod

    return install


def test_live_sysfs_applies_cuda_visible_devices(fake_reader, monkeypatch):
    from nodemap.topology.discover import discover
    from nodemap.topology.model import GPU

    seen = []
    fake_reader("sysfs", read=lambda root="/": seen.append(root) or Topology(
        gpus=(GPU(0, "NVIDIA"), GPU(1, "NVIDIA")), source="sysfs:/"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    t = discover(source="sysfs")
    assert seen == ["/"] and t.source == "sysfs:/"
    assert [g.visible for g in t.gpus] == [False, True]


def test_live_sysfs_applies_this_process_affinity():
    """sysfs.read applies what this process may use (discover no longer applies it again)."""
    import os

    from nodemap.topology.cpuset import CpuSet
    from nodemap.topology.discover import discover

    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2 or not os.path.isdir("/sys/devices/system/cpu"):
        pytest.skip("needs Linux sysfs and two CPUs")
    os.sched_setaffinity(0, {min(cpus)})
    try:
        t = discover(source="sysfs")
    finally:
        os.sched_setaffinity(0, cpus)
    assert t.allowed_cpus == CpuSet([min(cpus)])


def test_live_auto_adds_nvml(fake_reader, monkeypatch):
    from nodemap.topology.discover import discover
    from nodemap.topology.model import GPU

    fake_reader("sysfs", read=lambda root="/": Topology(gpus=(GPU(0, "NVIDIA"),), source="sysfs:/"))
    fake_reader("allowed", apply=lambda t: t)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    t = discover()
    assert any("nvidia-ml-py is not installed" in n for n in t.notes)


def test_live_hwloc_without_lstopo_says_what_to_install(fake_reader):
    from nodemap.errors import NodemapError
    from nodemap.topology.discover import discover

    fake_reader("live", available=lambda: False, read=lambda: pytest.fail("must not read"))
    with pytest.raises(NodemapError, match="install hwloc"):
        discover(source="hwloc")


def test_unknown_source():
    from nodemap.errors import InputError
    from nodemap.topology.discover import discover

    with pytest.raises(InputError, match="unknown source 'magic'"):
        discover(source="magic")


def test_unpacked_snapshot_directory_and_tarball_by_content(fake_reader, tmp_path):
    from nodemap.errors import InputError
    from nodemap.topology.discover import discover

    roots = []
    fake_reader("sysfs", read=lambda root="/": roots.append(root) or Topology(source=f"sysfs:{root}"))
    (tmp_path / "NAME" / "sys").mkdir(parents=True)
    (tmp_path / "NAME" / "proc").mkdir()
    assert discover(tmp_path).source == f"sysfs:{tmp_path / 'NAME'}"
    assert discover(tmp_path / "NAME", source="sysfs").source == f"sysfs:{tmp_path / 'NAME'}"

    def broken(path):
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")

    fake_reader("snapshot", read_tarball=broken)
    tarball = tmp_path / "named.xml"  # the name lies; the bytes decide
    tarball.write_bytes(b"BZh91AY&SY" + b"\x00" * 20)
    with pytest.raises(InputError, match=r"named.xml: cannot read \(EOFError: Compressed file ended"):
        discover(tarball)
