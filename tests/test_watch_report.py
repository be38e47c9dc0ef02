"""`nodemap report DIR` on `nodemap run --watch` timelines: terminal, JSON, HTML, beside a check document."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import check_synth as syn
import nodes
from nodemap.check import expectations
from nodemap.check.document import CheckDoc
from test_watch import _write

from nodemap.units import GiB, MiB

RULES = expectations.shipped().table(expectations.WatchRules)


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
    assert doc["schema"] == "nodemap.watch.report/2"
    (job,) = doc["jobs"]
    assert job["job"] == "j1" and [f["kind"] for f in job["analysis"]["findings"]] == ["growth", "imbalance"]
    assert len(job["series"]) == 2 and len(job["series"][0]["t"]) == 100 and job["series"][0]["gpu_what"] == "own"


def test_a_site_files_watch_table_judges_the_timelines(tmp_path):
    """`report DIR --expect SITE`: [watch] of a site file: a 4.8 GiB rise is no growth under 8 GiB, nor a 2x
    peak an imbalance at 3x; a hostile value is one line naming the file, line and key, exit 2."""
    d = _timelines(tmp_path / "w")
    (tmp_path / "site.toml").write_text("[watch]\nmin_growth_mib = 8192\nimbalance = 3\n")
    r = nodemap("report", str(d), "--json", "--expect", str(tmp_path / "site.toml"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["jobs"][0]["analysis"]["findings"] == []
    (tmp_path / "site.toml").write_text("[watch]\n\nwindows = 1\n")
    r = nodemap("report", str(d), "--expect", str(tmp_path / "site.toml"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"nodemap report: error: {tmp_path / 'site.toml'}, line 3: "
                                             "watch.windows = 1 must be a count of windows, 2 to 1000"]



def test_the_report_json_reads_back_as_the_class_that_wrote_it(tmp_path):
    """One class both ways: what --json wrote decodes into report/watch.py's Report, equal to the one it was
    made from; a damaged one is one line naming the field path."""
    from nodemap import records
    from nodemap.errors import InputError
    from nodemap.report import watch
    from nodemap.watch import timeline

    d = _timelines(tmp_path / "w")
    r = nodemap("report", str(d), "--json")
    back = records.decode("r.json", r.stdout.encode(), watch.Report, watch.WHAT)
    assert back == watch.document(watch.runs(timeline.read_dir(str(d)), RULES))
    assert back.jobs[0].analysis.findings[0].kind == "growth" and back.jobs[0].analysis.gpus[0].margin > 0
    bad = json.loads(r.stdout)
    bad["jobs"][0]["analysis"]["ranks"][1]["gpu"]["peak"] = "x"
    with pytest.raises(InputError, match=r"^r.json: field jobs\[0\].analysis.ranks\[1\].gpu.peak is str, not an integer"):
        records.decode("r.json", json.dumps(bad).encode(), watch.Report, watch.WHAT)


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
    assert both["watch"]["schema"] == "nodemap.watch.report/2" and "schema" in both


def test_broken_timeline_is_one_line(tmp_path):
    f = tmp_path / "x.watch"
    f.write_text("not json\n")
    r = nodemap("report", str(f))
    assert r.returncode == 2 and "x.watch, line 1: not JSON" in r.stderr and "Traceback" not in r.stderr


def _with_unreadable(d):
    """Two good timelines beside three that cannot be read: a FIFO, a folder and a damaged header."""
    import os

    _timelines(d)
    os.mkfifo(d / "n1.r2.3.watch")
    (d / "n1.r3.4.watch").mkdir()
    (d / "n1.r4.5.watch").write_text('{"schema": "nodemap.watch/1", "rank": "x"}\n')
    return d


def _said(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("nodemap watch: skipped ")]


def test_unreadable_timelines_are_each_said_in_one_line_and_the_rest_reported(tmp_path, capsys):
    """They were skipped silently: a summary of 2 ranks where 5 ran, nothing saying why."""
    from nodemap import cli

    d = _with_unreadable(tmp_path / "w")
    assert cli.main(["report", str(d)]) == 0
    out, err = capsys.readouterr()
    assert "2 rank(s) on n1" in out
    said = _said(err)
    assert len(said) == 3, err
    assert "n1.r2.3.watch: is a FIFO" in said[0] and "n1.r3.4.watch: is a folder" in said[1]
    assert "n1.r4.5.watch, line 1: field rank" in said[2] and "Traceback" not in err


def test_unreadable_timelines_are_named_in_the_json_too(tmp_path, capsys):
    """They were said only on stderr: a scheduler reading --json never learned a rank's timeline was skipped."""
    from nodemap import cli

    d = _with_unreadable(tmp_path / "w")
    assert cli.main(["report", str(d), "--json"]) == 0
    out, err = capsys.readouterr()
    skipped = json.loads(out)["unreadable"]
    assert [s["path"] for s in skipped] == [str(d / n) for n in ("n1.r2.3.watch", "n1.r3.4.watch", "n1.r4.5.watch")]
    assert skipped[0]["reason"].startswith("is a FIFO") and skipped[1]["reason"].startswith("is a folder")
    assert skipped[2]["reason"].startswith("line 1: field rank")
    assert len(_said(err)) == 3  # the stderr lines stay


def test_a_folder_read_whole_has_an_empty_unreadable_list(tmp_path):
    r = nodemap("report", str(_timelines(tmp_path / "w")), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["unreadable"] == []


def test_the_run_watch_summary_says_the_unreadable_timelines_too(tmp_path, capsys, monkeypatch):
    from nodemap.watch import monitor, timeline

    d = _with_unreadable(tmp_path / "w")
    monkeypatch.setattr(monitor, "_await_peers", lambda d, header: None)
    w = monitor.Watch(-1, str(d / "n1.r0.1.watch"), timeline.Header(timeline.SCHEMA, "n1", "j1"), 0.1)
    monitor._summary(w)
    err = capsys.readouterr().err
    assert len(_said(err)) == 3 and "2 rank(s) on n1" in err


def test_a_start_time_beyond_the_platforms_clock_is_shown_unknown(tmp_path, capsys):
    """hypothesis found it (test_documents_damaged): a header's start of 1e30
    is finite, read, then localtime() raised OverflowError: a traceback."""
    from nodemap import cli

    d = tmp_path / "w"
    d.mkdir()
    _write(d / "n1.r0.1.watch", 0, [4 * GiB] * 20, start=1e30)
    assert cli.main(["report", str(d)]) == 0
    assert "started ?" in capsys.readouterr().out


def _two_runs(d):
    """Two separate one-rank runs written into one folder: 2 GiB (older) and 12 GiB (newer), both on GPU 0."""
    d.mkdir()
    _write(d / "n1.r0.100.watch", 0, [2 * GiB] * 50, job="ppid100", pid=100, start=1000.0)
    _write(d / "n1.r0.200.watch", 0, [12 * GiB] * 50, job="ppid200", pid=200, start=2000.0)
    return d


def test_two_runs_in_one_folder_are_reported_apart_newest_first(tmp_path):
    d = _two_runs(tmp_path / "w")
    r = nodemap("report", str(d))
    assert r.returncode == 0, r.stderr
    assert "2 runs (jobs)" in r.stdout and "far above" not in r.stdout and r.stdout.count("no memory findings") == 2
    assert r.stdout.index("job ppid200") < r.stdout.index("job ppid100")
    # each GPU line sums only its own run's ranks
    assert r.stdout.count("ranks 0 peaked at 2.00 GiB together") == 1, r.stdout
    assert r.stdout.count("ranks 0 peaked at 12.00 GiB together") == 1, r.stdout
    doc = json.loads(nodemap("report", str(d), "--json").stdout)
    assert [j["job"] for j in doc["jobs"]] == ["ppid200", "ppid100"]
    assert all(j["analysis"]["findings"] == [] and len(j["series"]) == 1 for j in doc["jobs"])


def test_report_job_option_picks_one_run(tmp_path):
    d = _two_runs(tmp_path / "w")
    r = nodemap("report", str(d), "--job", "ppid100")
    assert r.returncode == 0 and "job ppid100" in r.stdout and "ppid200" not in r.stdout, r.stderr
    r = nodemap("report", str(d), "--job", "nope")
    assert r.returncode == 2 and "ppid100" in r.stderr and "Traceback" not in r.stderr


def test_two_runs_html_has_a_section_each(tmp_path):
    d = _two_runs(tmp_path / "w")
    out = tmp_path / "m.html"
    assert nodemap("report", str(d), "--html", str(out)).returncode == 0
    text = out.read_text()
    assert "id='watch'" in text and "id='watch-2'" in text and "job ppid100" in text and "GiB/min" in text


def test_empty_folder_says_it_holds_no_timelines(tmp_path):
    r = nodemap("report", str(tmp_path))
    assert r.returncode == 2 and "no watch timelines" in r.stderr and "Is a directory" not in r.stderr


def test_a_gap_in_the_samples_is_a_short_series_not_a_crash():
    """Samples at 0-0.6 s, then one at 30 s (a suspended job): no samples are
    left between warm-up and teardown; it classified with an empty window."""
    from nodemap.watch import analysis

    s = analysis.classify([0.0, 0.2, 0.4, 0.6, 30.0], [GiB, GiB, GiB, GiB, 2 * GiB], RULES)
    assert s.kind == "short" and s.peak == 2 * GiB


def test_a_header_with_a_non_number_is_one_line(tmp_path):
    f = tmp_path / "x.watch"
    _write(f, 0, [GiB] * 10)
    lines = f.read_text().splitlines()
    head = json.loads(lines[0])
    head["start"] = None
    f.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    r = nodemap("report", str(f))
    assert r.returncode == 2 and "x.watch, line 1: field start is null, not a number" in r.stderr
    assert "Traceback" not in r.stderr
    r = nodemap("report", str(tmp_path))  # in a folder it is skipped like any unreadable file
    assert r.returncode == 2 and "no readable timelines" in r.stderr and "Traceback" not in r.stderr
