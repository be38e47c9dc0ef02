"""Names and texts from saved documents reach the fleet's summary, HTML page
and fleet.json printable and bounded, every node still told apart (issue
36: host names in `check --fleet --from` documents holding a newline, a
terminal escape or 100,000 characters were printed as they were), and a
busy reason is cut at a word (issue 35 defect 9: nodes._busy kept 200
characters, cut mid-word)."""

import contextlib
import io
import json
import random
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet_docs import node_doc
from nodemap.fleet import driver, merge
from nodemap.fleet import nodes as fnodes
from nodemap.text import ELLIPSIS

HOSTILE = ["n\nfake: drain none", "\x1b]0;owned\x07\x1b[2J", "x" * 100_000, "a\u202eb", "lone \ud800", "a\\x1b",
           "a$x^$b", "tab\there", ELLIPSIS, "n1", "n1" + "x" * 200, "n1" + "x" * 201, "\u00e9\u4e2d", " ", ""]
NAMES = st.lists(st.one_of(st.sampled_from(HOSTILE), st.text(max_size=300)), min_size=3, max_size=5,
                 unique_by=fnodes.name)
LINE_MAX = 2000  # characters of any line the fleet prints: a drain reason, a note


def _fleet(names, html=False):
    """`--from` a folder of one document per name (the first 20% slow: a drain line): stdout, fleet.json, page."""
    with tempfile.TemporaryDirectory() as d:
        docs, out = Path(d) / "docs", Path(d) / "out"
        docs.mkdir()
        rng = random.Random(5)
        for i, name in enumerate(names):
            doc = node_doc(name, rng, gpus=2, noise=0.0, slow={"gpu/1/hbm_triad": 0.8} if i == 0 else None)
            doc["busy"] = {"busy": True, "reasons": [f"{name} ran beside the check"]}
            (docs / f"{i}.json").write_text(json.dumps(doc))
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            driver.run_from([str(docs)], driver.Config(outdir=str(out), html=html))
        page = (out / "fleet.html").read_text() if html else ""
        return said.getvalue(), json.loads((out / "fleet.json").read_text()), page


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(NAMES)
def test_any_host_name_is_printed_clean_and_every_node_told_apart(names):
    said, fleet, _ = _fleet(names)
    for line in said.splitlines():
        assert line.isprintable() and len(line) <= LINE_MAX, ascii(line[:200])
    shown = [n["name"] for n in fleet["nodes"]]
    assert sorted(shown) == sorted(fnodes.name(n) for n in names)  # one node each, told apart
    assert all(len(n) <= fnodes.NAME_CHARS for n in shown)
    for text in _strings({k: fleet[k] for k in ("nodes", "drain", "findings", "notes", "messages")}):
        assert text.isprintable() and len(text) <= LINE_MAX, ascii(text[:200])
    assert [d["node"] for d in fleet["drain"]] == [fnodes.name(names[0])], fleet["drain"]
    assert f"  1. {fnodes.name(names[0])}: " in said  # the drained node, as fleet.json names it


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(NAMES)
def test_any_host_name_reaches_the_html_page_clean(names):
    _, fleet, page = _fleet(names, html=True)
    assert all(c.isprintable() or c in "\n\t" for c in page), "a character that is not printable in fleet.html"
    assert "<svg" in page and fleet["nodes"]


def test_the_hostile_names_of_the_issue_are_shown_escaped():
    said, fleet, _ = _fleet(["n\nfake: drain none", "\x1b]0;owned\x07", "x" * 100_000])
    shown = {n["name"] for n in fleet["nodes"]}
    assert "n\\nfake: drain none" in shown and "\\x1b]0;owned\\x07" in shown
    long = next(n for n in shown if n.startswith("xxx"))
    assert len(long) == fnodes.NAME_CHARS and ELLIPSIS + "#" in long
    assert "fake: drain none" not in said.splitlines()  # no line of its own


def test_a_busy_reason_is_cut_at_a_word_with_an_ellipsis():
    reason = "the node was busy: " + " ".join(f"pid {i} python3 using 99% of CPU {i}" for i in range(20))
    doc = node_doc("n1", random.Random(1), gpus=2) | {"busy": {"busy": True, "reasons": [reason]}}
    got = fnodes.node_from_doc(doc).busy
    assert len(got) <= fnodes.BUSY_CHARS and got.endswith(ELLIPSIS), got
    assert reason.startswith(got[:-1]) and reason[len(got) - 1] == " ", got  # whole words, cut before a space
    short = "pid 42 python3 using 99% of a CPU"
    assert fnodes.node_from_doc(doc | {"busy": {"busy": True, "reasons": [short]}}).busy == short
