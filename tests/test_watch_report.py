"""`nodemap report DIR` on `nodemap run --watch` timelines: terminal, JSON, HTML, beside a check document."""

from __future__ import annotations

import json
import subprocess
import sys

import check_synth as syn
import nodes
from nodemap.check import expectations
from nodemap.check.document import CheckDoc
from test_watch import _write

from nodemap.watchlog import GiB, MiB


def nodemap(*args):
    return subprocess.run([sys.executable, "-m", "nodemap", *args], capture_output=True, text=True, timeout=120)


def _timelines(d):
    d.mkdir()
    _write(d / "n1.r0.1.watch", 0, [4 * GiB + i * 50 * MiB for i in range(100)], libs=["cupy"])
    _write(d / "n1.r1.2.watch", 1, [4 * GiB] * 100, gpus=(1,))
    return d


def test_report_dir_prints_the_summary_with_findings(tmp_path):
    d = _timelines(tmp_path / "w")
    r = nodemap("report", str(d))
    assert r.returncode == 0, r.stderr
    assert "2 rank(s) on n1" in r.stdout and "GPU memory grows steadily" in r.stdout and "growing" in r.stdout


def test_report_dir_json_has_analysis_and_series(tmp_path):
    d = _timelines(tmp_path / "w")
    r = nodemap("report", str(d), "--json")
    doc = json.loads(r.stdout)
    assert doc["schema"] == "nodemap.watch.report/1"
    assert [f["kind"] for f in doc["analysis"]["findings"]] == ["growth", "imbalance"]
    assert len(doc["series"]) == 2 and len(doc["series"][0]["t"]) == 100 and doc["series"][0]["gpu_what"] == "own"


def test_report_dir_html_has_the_memory_plot_and_findings(tmp_path):
    d = _timelines(tmp_path / "w")
    out = tmp_path / "m.html"
    r = nodemap("report", str(d), "--html", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "id='plot-watch-memory'" in text and "<svg" in text and "id='watch-findings'" in text
    assert "http://" not in text.split("<svg", 1)[0]  # self-contained before the inline SVG


def test_watch_section_joins_a_check_report(tmp_path):
    d = _timelines(tmp_path / "w")
    doc = CheckDoc(level="quick", topology=nodes.karolina(), expectations=expectations.shipped(),
                   results=[syn.hbm({g: 1400.0 for g in range(8)})], checks=[])
    doc.rejudge()
    check = tmp_path / "check.json"
    check.write_text(doc.to_json())
    out = tmp_path / "all.html"
    r = nodemap("report", str(check), str(d), "--html", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert "nodemap check" in text and "id='watch'" in text and "id='plot-watch-memory'" in text
    r = nodemap("report", str(check), str(d), "--json")
    both = json.loads(r.stdout)
    assert both["watch"]["schema"] == "nodemap.watch.report/1" and "schema" in both


def test_broken_timeline_is_one_line(tmp_path):
    f = tmp_path / "x.watch"
    f.write_text("not json\n")
    r = nodemap("report", str(f))
    assert r.returncode == 2 and "not a nodemap watch timeline" in r.stderr and "Traceback" not in r.stderr
