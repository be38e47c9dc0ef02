"""Every reader of a saved document against damage (issue 31): a valid
document made by nodemap's own writer, with one change at any depth (a value
of another type, a field gone, NaN or infinity, the text cut short), is read
or refused in one line naming the file (exit 2), never a traceback. The
readers run in this process (cli.main), so hypothesis tries many changes."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

import check_synth as syn
import mutants
from nodemap import cli

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def one_line_or_read(capsys, code: int, path: str) -> None:
    """What a reader may do with a damaged document: read it (exit 0 or 1,
    nothing on stderr; 2 is also a busy check's status), or refuse it in
    one line that names the file."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) <= 1, err
    if lines:
        assert code == 2 and path in lines[0] and "Traceback" not in err, err
    else:
        assert code in (0, 1, 2), code


def _check_doc() -> dict:
    from test_records import _check_doc

    return _check_doc()


DOCS = {"results": lambda: json.loads(syn.stream({"1/core": (4, 100.0), "spread": (8, 120.0)}).to_json()),
        "gpu results": lambda: json.loads(syn.copies({(0, 0): 20.0}, {0: 0}, {(0, 1): 250.0}).to_json()),
        "check": _check_doc}


@pytest.mark.parametrize("kind", DOCS)
@pytest.mark.parametrize("how", [[], ["--json"], ["--html", "page.html"]])
def test_report_reads_or_refuses_a_damaged_document_in_one_line(tmp_path, capsys, kind, how):
    doc = DOCS[kind]()
    path = str(tmp_path / "doc.json")
    how = [str(tmp_path / w) if w.endswith(".html") else w for w in how]

    @SETTINGS
    @given(mutants.damaged(doc))
    def read(case):
        with open(path, "wb") as f:
            f.write(case[1])
        one_line_or_read(capsys, cli.main(["report", path, *how]), path)

    read()


@pytest.mark.parametrize("kind", ["results", "check"])
def test_what_report_writes_reads_back(tmp_path, capsys, kind):
    """writer -> reader: the document `report --json` prints is read again to the same document."""
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(DOCS[kind]()))
    assert cli.main(["report", str(path), "--json"]) in (0, 1)
    once = capsys.readouterr().out
    path.write_text(once)
    assert cli.main(["report", str(path), "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out) == json.loads(once)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("kind, at, value, words", [
    ("results", ["results", 0, "stats", "median"], NAN, "field results[0].stats: median is nan, not a finite number"),
    ("results", ["results", 1, "samples", 0], INF, "field results[1]: samples holds inf, not a finite number"),
    ("results", ["results", 0, "peak"], NAN, "field results[0]: peak is nan, not a finite number"),
    ("check", ["figures", 0, "value"], NAN, "field figures[0]: value is nan, not a finite number"),
    ("check", ["figures", 1, "low"], INF, "field figures[1]: low is inf, not a finite number"),
    ("check", ["results", 0, "results", 0, "stats", "best"], NAN, "results[0].results[0].stats: best is nan"),
    # the min-median-max bars of the STREAM sweep plot: a matplotlib ValueError (negative error bar)
    ("results", ["results", 0, "stats", "median"], 1e6, "field results[0].stats: min 9"),
    ("results", ["results", 0, "stats", "min"], 0.0, "not 0 < min <= median, best <= max"),
])
def test_numbers_the_reports_need_are_checked(tmp_path, capsys, kind, at, value, words):
    """A statistic or figure that is NaN reached text.number: an IndexError
    traceback on the HTML page (and 'nan' in the terminal summary)."""
    doc = DOCS[kind]()
    parent = doc
    for k in at[:-1]:
        parent = parent[k]
    parent[at[-1]] = value
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["report", str(path), "--html", str(tmp_path / "page.html")]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.splitlines()) == 1, err
