"""A new kind is one file and a registry line (issue 37, DESIGN.md point 5):
tests/kind_fixture.py, registered here in every process (the test process
by monkeypatch, the ones it starts by a sitecustomize on their path), is run
by `nodemap bench`, saved, read back and judged by `report`, planned,
measured and judged by `check` (its steps, cost, priority, figures, the
finding a slow one tells, failed part and its cause) and probed by `compare`: nothing in src/ names it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import kind_fixture as kf
import nodes
from nodemap.bench import kinds, resultfile
from nodemap.errors import InputError

TESTS = Path(__file__).resolve().parent
LINE = (kf.KIND, ("kind_fixture", "host buffer copies (a kind in one file)"))  # its line in bench/kinds.py


@pytest.fixture
def registered(monkeypatch, tmp_path):
    """The registry line in this process and in every nodemap it starts."""
    monkeypatch.setitem(kinds.BENCHES, *LINE)
    (tmp_path / "sitecustomize.py").write_text(f"from nodemap.bench import kinds\nkinds.BENCHES.update([{LINE!r}])\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return tmp_path


def nodemap(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodemap", *args], capture_output=True, text=True, timeout=timeout)


def test_it_is_run_saved_read_back_and_judged_by_report(registered):
    assert "--corrupt" in nodemap("bench", kf.KIND, "--help").stdout  # its options from its one file
    out = registered / "r.json"
    p = nodemap("bench", kf.KIND, "--size", "64K", "--repeats", "3", "-q", "-o", str(out))
    assert p.returncode == 0, p.stderr
    rs = resultfile.decode("r.json", out.read_bytes())  # its Params checked
    assert [r.params["part"] for r in rs.results] == [0, 1] and rs.complete
    d = json.loads(out.read_text())
    d["results"][1]["params"]["bytes"] = 16  # below its declared bound
    with pytest.raises(InputError, match=r"results\[1\].params.bytes: expected `int` >= 256"):
        resultfile.convert("r.json", d)
    p = nodemap("report", str(out), "--json")
    assert p.returncode in (0, 1, 2), p.stderr
    judged = {f["key"]: f for f in json.loads(p.stdout)["figures"]}
    assert set(judged) == {"bytecopy/0", "bytecopy/1"}  # its figures, each against its peer
    assert all(f["area"] == "host memory" and "peers" in f["rule"] for f in judged.values()), judged


def test_check_plans_it_by_its_priority_and_cost(registered):
    from nodemap.check import budget, suite

    steps, _ = suite.plan(nodes.build(nodes.Spec(1, 2, 1, 4)), "quick", env={"NODEMAP_CHECK_TINY": "1"})
    kinds_run = [s.kind for s in steps if s.kind != "mpi"]
    assert kinds_run == ["memory", kf.KIND, "latency", "numa"]  # priority 45: after STREAM, before latency
    step = steps[kinds_run.index(kf.KIND)]
    assert step.options == kf.Options(size="64K", repeats=5) and step.argv == ("--repeats", "5", "--size", "64K")
    assert budget.estimate(kf.KIND, "quick", 0, 2) == 0.5 and budget.estimate(kf.KIND, "full", 0, 2) == 1.0


def _check(monkeypatch, options):
    from nodemap.check import expectations, node, suite

    step = suite.Step(kf.KIND, (), "host buffer copies", options)
    monkeypatch.setattr(node, "plan", lambda topo, level, in_job=None: ([step], []))
    from nodemap.check.busy import Sample

    idle = Sample()
    detector = SimpleNamespace(sample=lambda seconds=0: idle, begin=lambda: None, end=lambda utilisation=False: idle)
    return node.run_check("quick", expectations.shipped(), detector=detector)


def test_check_measures_and_judges_it_and_its_failed_part(registered, monkeypatch):
    doc = _check(monkeypatch, kf.Options(size="64K", repeats=5))
    judged = {j.figure.key: j for j in doc.judged}
    assert set(judged) == {"bytecopy/0", "bytecopy/1"}
    assert all(j.verdict != "info" and "peers" in j.rule for j in judged.values())  # judged, not only recorded
    doc = _check(monkeypatch, kf.Options(size="64K", repeats=3, corrupt=True))
    [c] = [c for c in doc.checks if c.key == "verification/bytecopy/copy1"]
    assert (c.verdict, c.area, c.cause) == ("fail", "host memory", "hardware") and "memtester" in c.fix


def test_check_explains_its_slow_figure_by_its_story(registered):
    from nodemap.bench.results import make_result
    from nodemap.check.findings import derive
    from nodemap.check.verdicts import Bounds, Judged

    slow, peer = kf.figures([make_result(kf.KIND, "copy", "GB/s", [gb], verified=True,
                                         params={"part": i, "bytes": 1 << 20}) for i, gb in ((0, 5.0), (1, 10.0))],
                            kf.Given())
    [f] = derive([Judged.of(slow, "fail", "below its peers", Bounds(median_of_peers=10.0), 0.5),
                  Judged.of(peer, "pass", "", Bounds(), 1.0)], [])
    assert (f.text, f.fix, f.keys, f.cause) == ("copy 0 of 1 MiB: 5.00 GB/s, 50% of the median of its peers on this "
                                                "node, slower than its peer", "test the DIMMs (memtester)",
                                                ("bytecopy/0",), "hardware")


def test_compare_probes_it(registered):
    p = nodemap("compare", "--probes", kf.KIND, "--tasks", "1", "--bindings", "none,plan", "--rounds", "1",
                "--size", "64K", "--json", "-q")
    assert p.returncode == 0, p.stderr + p.stdout
    by = {b["name"]: b["probes"][kf.KIND] for b in json.loads(p.stdout)["bindings"]}
    assert set(by) == {"none", "plan"} and all(v["total"] > 0 and v["unit"] == "GB/s" for v in by.values()), by
    assert by["plan"]["verdict"].startswith(f"{kf.KIND}: ") and "(the reference;" in by["plan"]["verdict"]
