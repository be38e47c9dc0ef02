"""`nodemap check` and `nodemap report` end to end, as a user runs them
(subprocess). Host arrays are shrunk by the testing knob NODEMAP_CHECK_TINY
so CI stays short; the interruption test runs the real quick level."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from nodemap.check.suite import TINY_ENV


def nodemap(*args, env=None, timeout=120):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "nodemap", *args], capture_output=True, text=True,
                          timeout=timeout, env=e)


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    out = tmp_path_factory.mktemp("check") / "report"
    r = nodemap("check", "--level", "quick", "-o", str(out), env={TINY_ENV: "1"})
    return out, r


def test_quick_check_completes_with_verdicts_for_every_host_figure(checked):
    out, r = checked
    assert r.returncode in (0, 1, 2), r.stderr  # 1 when a figure fails, 2 when the (shared) machine was busy
    d = json.loads((out / "check.json").read_text())
    assert d["schema"] == "nodemap.check/2" and d["complete"] is True and d["level"] == "quick"
    keys = {f["key"] for f in d["figures"]}
    assert {"host/stream/triad", "host/latency/L1d"} <= keys
    numa_nodes = [n for n in d["topology"]["numa_nodes"] if n["cpuset"]]
    assert ("numa/bw/numa0->numa0" in keys) == (len(numa_nodes) > 1)
    for f in d["figures"]:
        assert f["verdict"] in ("pass", "warn", "fail", "inconclusive"), f  # every host figure judged by some rule
        assert f["rule"] and f["unit"] and f["value"] > 0
    assert {rs["command"] for rs in d["results"]} >= {"bench memory", "bench latency"}
    assert d["summary"]["verdict"] in ("pass", "warn", "fail", "inconclusive")
    assert (r.returncode == 2) == (d["busy"]["busy"] and d["summary"]["node"] != "fail")
    skipped = " ".join(s["what"] + s["reason"] for s in d["skipped"])
    if not d["topology"]["gpus"]:
        assert "no GPU" in skipped  # said, never failed
    mpi = [f for f in d["figures"] if f["area"] == "MPI"]
    if any(rs["command"].startswith("bench mpi") for rs in d["results"]):  # mpiexec beside Python: 2 ranks ran
        assert {f["key"] for f in mpi} == {"mpi/HH/latency", "mpi/HH/bw"}  # judged by the loop above
        assert any(c["key"] == "inventory/mpi/cuda_aware" for c in d["checks"])
    else:
        assert "MPI" in skipped
    assert f"report: {out / 'check.json'}" in r.stdout and f"report: {out / 'check.html'}" in r.stdout
    assert "host memory" in r.stdout and len(r.stdout.splitlines()) <= 40  # one screen


def test_html_is_self_contained_with_plots(checked):
    out, _ = checked
    html = (out / "check.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html
    import re

    # nothing fetched: no external URL outside XML namespace declarations
    assert not re.findall(r"(?<!xmlns=\")(?<!xmlns:xlink=\")https?://", html)
    assert "@import" not in html and "<link" not in html
    for pid in ("plot-stream-sweep", "plot-latency"):
        assert f"id='{pid}'" in html and html.count("<svg") >= 2


def test_report_renders_saved_check_again(checked, tmp_path):
    out, _ = checked
    r = nodemap("report", str(out / "check.json"))
    assert r.returncode in (0, 1, 2) and "nodemap check --level quick" in r.stdout
    r = nodemap("report", str(out / "check.json"), "--json")
    assert json.loads(r.stdout)["figures"] == json.loads((out / "check.json").read_text())["figures"]
    r = nodemap("report", str(out / "check.json"), "--html", str(tmp_path / "again.html"))
    assert (tmp_path / "again.html").read_text().count("<svg") >= 2


def test_report_judges_bench_results_and_compares(checked, tmp_path):
    out, _ = checked
    d = json.loads((out / "check.json").read_text())
    mem = next(rs for rs in d["results"] if rs["command"] == "bench memory")
    (tmp_path / "mem.json").write_text(json.dumps(mem))
    r = nodemap("report", str(tmp_path / "mem.json"), "--json")
    assert [f["key"] for f in json.loads(r.stdout)["figures"]] == ["host/stream/triad"]
    # the shared VM is often busy or noisy: such figures are not compared (inconclusive); an idle node's
    # steady ones are: the memory repetitions made to agree within 0.5%, the figure decided
    from dataclasses import asdict

    from nodemap.bench.results import Stats

    d["busy"] = {}
    for rs in d["results"]:
        rs["environment"].pop("busy", None)
    slower = json.loads(json.dumps(d))
    for doc, scale in ((d, 1.0), (slower, 0.8)):  # after: every repetition 20% slower
        for res in (res for rs in doc["results"] for res in rs["results"] if res["benchmark"] == "memory"):
            m = res["stats"]["median"] * scale
            res["samples"] = [m * (1 - 0.001 * i) for i in range(len(res["samples"]))]
            res["stats"] = asdict(Stats.of(tuple(res["samples"]), True))
    (tmp_path / "before.json").write_text(json.dumps(d))
    (tmp_path / "after.json").write_text(json.dumps(slower))
    r = nodemap("report", "--compare", str(tmp_path / "before.json"), str(tmp_path / "after.json"), "--expect",
                str(tmp_path / "none.toml"))
    assert r.returncode == 2 and "none.toml" in r.stderr
    (tmp_path / "site.toml").write_text("[thresholds]\ncompare_fail = 0.7\n")
    r = nodemap("report", "--compare", str(tmp_path / "before.json"), str(tmp_path / "after.json"))
    assert r.returncode == 1 and "regressed" in r.stdout, r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("host/stream/triad"))
    assert "0.800" in line and "fail" in line
    r = nodemap("report", "--compare", str(tmp_path / "before.json"), str(tmp_path / "after.json"), "--expect",
                str(tmp_path / "site.toml"), "--json")
    c = {c["key"]: c for c in json.loads(r.stdout)["changes"]}
    # another figure of the shared VM's check may be undecided on a side: then, and only then, exit 2
    undecided = any(x["verdict"] == "inconclusive" for x in c.values())
    assert c["host/stream/triad"]["verdict"] == "warn" and r.returncode == (2 if undecided else 0), r.stdout


def test_bad_output_and_input_are_one_line_errors(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    r = nodemap("check", "-o", str(f))
    assert r.returncode == 2 and "not a folder" in r.stderr and "Traceback" not in r.stderr
    r = nodemap("check", "-o", str(tmp_path / "no" / "such"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = nodemap("report", str(f))
    assert r.returncode == 2 and "not JSON" in r.stderr
    (tmp_path / "other.json").write_text('{"schema": "x"}')
    r = nodemap("report", str(tmp_path / "other.json"))
    assert r.returncode == 2 and "schema 'x'; nodemap report reads check documents" in r.stderr


@pytest.mark.parametrize("schema, what", [
    ("nodemap.fleet/2", "a fleet summary (nodemap.fleet/2, from nodemap check --fleet): give the fleet's folder to "
                        "nodemap check --from DIR; "),
    ("nodemap.report.compare/1", "a compare document (nodemap.report.compare/1, from nodemap report --compare "
                                 "--json); "),
])
def test_report_of_another_nodemap_document_says_what_it_is(tmp_path, schema, what):
    """fleet.json and compare.json were "not a check document (nodemap.check/2)", though /1 is read too."""
    (tmp_path / "doc.json").write_text(json.dumps({"schema": schema}))
    for args in (["doc.json"], ["--compare", "doc.json", "doc.json"]):
        r = nodemap("report", *(str(tmp_path / a) if a.endswith(".json") else a for a in args))
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert f"doc.json: {what}nodemap report reads check documents (nodemap.check/1, nodemap.check/2), bench " \
               "result files (nodemap.results/1) and watch folders" in r.stderr, r.stderr


@pytest.mark.slow
def test_interrupted_check_keeps_what_was_measured(tmp_path):
    out = tmp_path / "r"
    p = subprocess.Popen([sys.executable, "-m", "nodemap", "check", "-o", str(out)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    for line in p.stderr:  # progress: interrupt once the second step has started
        if line.startswith("[check 2/"):
            time.sleep(0.5)
            p.send_signal(signal.SIGINT)
            break
    stdout, _ = p.communicate(timeout=120)
    assert p.returncode == 130, stdout
    d = json.loads((out / "check.json").read_text())
    assert d["complete"] is False and "INCOMPLETE" in stdout
    assert any(rs["command"] == "bench memory" for rs in d["results"])
    assert any(f["key"] == "host/stream/triad" for f in d["figures"])
    assert "INCOMPLETE" in (out / "check.html").read_text()
    assert time.monotonic() - t0 < 120
