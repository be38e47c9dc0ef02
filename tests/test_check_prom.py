"""`nodemap check --prom FILE`: the check as a Prometheus text file, read
back by prometheus_client's own parser."""

import json
import os
import subprocess
import sys

import pytest

import check_synth as syn
import nodes
from nodemap.check import expectations
from nodemap.report import prom
from nodemap.check.document import CheckDoc, Spent, exit_status

parser = pytest.importorskip("prometheus_client.parser")
BOUNDED = {"node", "level", "of", "area", "key", "path_class", "unit", "verdict", "step", "cut"}


def families(text):
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def karolina_doc(hbm):
    doc = CheckDoc(level="quick", topology=nodes.karolina(), expectations=expectations.shipped(),
                   results=[syn.hbm(hbm)])
    doc.rejudge()
    return doc


def test_figures_and_verdicts_parse_back_with_bounded_labels_and_no_timestamps():
    doc = karolina_doc({g: (700.0 if g == 3 else 1400.0) for g in range(8)})  # GPU3 at half its HBM
    text = prom.render(doc, exit_status(doc))
    fams = families(text)
    assert set(fams) == {prom.PREFIX + n for n in prom.HELP if n not in prom.BUDGET_ONLY}
    for name in set(prom.HELP) - set(prom.BUDGET_ONLY):  # one HELP and one TYPE per metric
        assert text.count(f"# HELP {prom.PREFIX}{name} ") == 1 and text.count(f"# TYPE {prom.PREFIX}{name} gauge") == 1
    samples = [s for f in fams.values() for s in f.samples]
    assert all(s.timestamp is None for s in samples)
    assert all(set(s.labels) <= BOUNDED for s in samples)
    assert {s.labels["node"] for s in samples} == {doc.host}
    values = {s.labels["key"]: s.value for s in fams["nodemap_check_figure"].samples}
    verdicts = {s.labels["key"]: s.value for s in fams["nodemap_check_figure_verdict"].samples}
    by_key = {j.figure.key: j for j in doc.judged}
    assert values == {k: j.figure.value for k, j in by_key.items()}
    assert verdicts["gpu/3/hbm_triad"] == 4 and verdicts["gpu/0/hbm_triad"] == 1  # fail, pass
    status = fams["nodemap_check_status"].samples[0]
    assert status.value == exit_status(doc) == 1
    assert {s.labels["area"]: s.value for s in fams["nodemap_check_area_verdict"].samples}["GPU memory"] == 4
    assert {s.labels["unit"] for s in fams["nodemap_check_figure"].samples} == {"GB/s"}


def test_a_budgeted_check_says_its_budget_and_each_step_it_left_out():
    doc = karolina_doc({g: 1400.0 for g in range(8)})
    doc.budget = Spent(30.0, 29.5, cut="STREAM placement sweep",
                       left_out=("latency against working-set size", "MPI point-to-point, host and device buffers"))
    fams = families(prom.render(doc, exit_status(doc)))
    assert fams["nodemap_check_budget_seconds"].samples[0].value == 30
    left = {(s.labels["step"], s.labels["cut"]): s.value for s in fams["nodemap_check_left_out"].samples}
    assert left == {("latency against working-set size", "0"): 1, ("MPI point-to-point, host and device buffers", "0"): 1,
                    ("STREAM placement sweep", "1"): 1}
    assert all(set(s.labels) <= BOUNDED for f in fams.values() for s in f.samples)


def test_odd_label_text_is_escaped_and_a_repeated_series_written_once():
    doc = karolina_doc({0: 1400.0})
    doc.host = 'n"1\\\nx'
    text = prom.render(doc, 0)
    fams = families(text)
    assert {s.labels["node"] for f in fams.values() for s in f.samples} == {'n"1\\\nx'}
    figure = text.splitlines()[-1]
    assert prom.render(doc, 0).count(figure) == 1
    assert prom._number(float("nan")) == "NaN" and prom._number(float("inf")) == "+Inf"


def run(args, tmp_path):
    return subprocess.run([sys.executable, "-m", "nodemap", "check", *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))


def test_the_command_writes_the_file_and_refuses_a_link_before_checking(tmp_path):
    out = tmp_path / "nodemap.prom"
    p = run(["--level", "health", "-q", "--json", "--prom", str(out)], tmp_path)
    assert p.returncode in (0, 1), p.stderr
    doc = json.loads(p.stdout)
    fams = families(out.read_text())
    assert fams["nodemap_check_status"].samples[0].value == p.returncode
    assert {s.labels["level"] for s in fams["nodemap_check_status"].samples} == {"health"}
    assert {s.labels["node"] for s in fams["nodemap_check_status"].samples} == {doc["host"]}
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]  # temp + rename, nothing left
    link = tmp_path / "link.prom"
    link.symlink_to(out)
    p = run(["--level", "health", "-q", "--prom", str(link)], tmp_path)
    assert p.returncode == 2 and "--prom" in p.stderr and "symbolic link" in p.stderr, p.stderr
    assert p.stderr.count("\n") == 1 and not p.stdout  # one line, before the check ran
    p = run(["--fleet", "--prom", str(out)], tmp_path)
    assert p.returncode == 2 and "--prom: per node" in p.stderr, p.stderr


def test_the_status_help_names_every_status_the_check_exits_with():
    from nodemap.check.document import HEALTHY, INTERRUPTED, NOT_JUDGED, UNHEALTHY

    for status in (HEALTHY, UNHEALTHY, NOT_JUDGED, INTERRUPTED, 128 + 15):  # 143: SIGTERM (a time limit)
        assert f"{status} " in prom.HELP["status"], status
