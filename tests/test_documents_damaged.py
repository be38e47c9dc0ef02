"""Every reader of a saved document against damage (issue 31): a valid
document made by nodemap's own writer, with one change at any depth (a value
of another type, a field gone, NaN or infinity, the text cut short), is read
or refused in one line naming the file (exit 2), never a traceback. The
readers run in this process (cli.main), so hypothesis tries many changes."""

from __future__ import annotations

import json
import os

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


def _check_doc_of_a_node() -> dict:
    """A check document with its topology (a GPU node) and its pair figures."""
    import nodes
    from nodemap.check import expectations
    from nodemap.check.document import CheckDoc

    numa = dict(enumerate(nodes.KAROLINA_GPU_NUMA))
    d = CheckDoc(level="full", topology=nodes.karolina(), expectations=expectations.shipped(), host="n1",
                 results=[syn.hbm({0: 1400.0, 1: 1390.0}), syn.copies({(1, 0): 24.0, (3, 1): 20.0}, numa,
                                                                     {(0, 1): 250.0, (1, 0): 150.0})])
    d.rejudge()
    return json.loads(d.to_json())


DOCS = {"results": lambda: json.loads(syn.stream({"1/core": (4, 100.0), "spread": (8, 120.0)}).to_json()),
        "gpu results": lambda: json.loads(syn.copies({(0, 0): 20.0}, {0: 0}, {(0, 1): 250.0}).to_json()),
        "check": _check_doc, "check of a node": _check_doc_of_a_node}


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


# the parts of a check document check/busy.py's samples and verdicts.py's Bounds are read into
SAMPLED = (("busy",), ("results", 0, "environment", "busy"), ("figures", 0, "expectation"))


def test_a_damaged_busy_sample_or_bound_is_read_or_refused_naming_its_field():
    """Busy.before and .steps, a step's sample and a figure's expectation were dicts read as they came: damaged,
    each is read or refused in one line that names the damaged field ("busy.steps[0].gpus[1].utilization")."""
    from hypothesis import strategies as st

    from nodemap.check import document
    from nodemap.errors import InputError

    doc = _check_doc()
    where = [p for p in mutants.paths(doc) if any(len(p) > len(s) and p[:len(s)] == s for s in SAMPLED)]
    assert ("busy", "steps", 0, "gpus", 1, "others", 0, "pid") in where

    refused = []

    @SETTINGS
    @given(st.sampled_from(where), st.booleans(), mutants.VALUES)
    def read(path, remove, value):
        what, d = mutants.change(doc, path, remove, value)
        try:
            document.decode("check.json", json.dumps(d).encode())
        except InputError as e:
            named = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")
            assert f"field {named}" in str(e) and len(str(e).splitlines()) == 1, (what, str(e))
            refused.append(what)

    read()
    assert refused  # (read as they came, none was)


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("kind, at, value, words", [
    ("results", ["results", 0, "stats", "median"], NAN, "field results[0].stats: median is nan, not a finite number"),
    ("results", ["results", 1, "samples", 0], INF, "field results[1]: samples holds inf, not a finite number"),
    ("results", ["results", 0, "peak"], NAN, "field results[0]: peak is nan, not a finite number"),
    ("check", ["figures", 0, "value"], NAN, "field figures[0].value is not a finite number"),
    ("check", ["figures", 1, "low"], INF, "field figures[1].low is not a finite number"),
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


# --- the fleet's documents (check --fleet --from DIR) ------------------------------


def _fleet_folder() -> dict[str, list[dict]]:
    """A fleet run's files as its writers (fleet/output.py) lay them out: file -> its objects (a line each)."""
    import random

    import fleet_docs

    rng = random.Random(1)
    nodes = [fleet_docs.node_doc(f"n{i}", rng, gpus=2) for i in range(3)]
    pairs = [{"a": a, "b": b, "key": key, "unit": unit, "value": v, "higher_is_better": hib, "round": 1,
              "samples": [v, v * 1.01], "buffers": "host", "transport": "host", "why": ""}
             for a, b in (("n0", "n1"), ("n1", "n2"), ("n0", "n2"))
             for key, unit, v, hib in (("mpi bw host", "GB/s", 11.0, True), ("mpi latency host", "us", 2.0, False))]
    key = nodes[1]["figures"][0]["key"]
    return {"nodes.jsonl": nodes, "pairs.jsonl": pairs,
            "isolation.json": [{"isolation": {"bad_nodes": [], "bad_links": [["n0", "n1"]], "transient": [],
                                              "unsettled": ["n2"], "tests": 3, "rounds": 1, "all_pairs": 3}}],
            "remeasured.json": [{"remeasured": {"n1": {key: [nodes[1]["figures"][0]]}, "n2": {key: "no answer"}}}]}


def _write_folder(d, files: dict[str, list]) -> None:
    d.mkdir(exist_ok=True)
    for name, objs in files.items():
        (d / name).write_bytes(b"".join((o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n"
                                        for o in objs))


FLEET = _fleet_folder()


def test_the_fleet_folder_reads(tmp_path, capsys):
    _write_folder(tmp_path / "run", FLEET)
    assert cli.main(["check", "--fleet", "--from", str(tmp_path / "run"), "-o", str(tmp_path / "out")]) in (0, 1)
    out = capsys.readouterr()
    assert "3 saved node documents" in out.out and not out.err, out


@pytest.mark.parametrize("name", FLEET)
def test_check_fleet_from_reads_or_refuses_a_damaged_document_in_one_line(tmp_path, capsys, name):
    """pairs.jsonl and isolation.json were walked as dicts: a key that is
    not text, a value of 0 or an object, isolation's lists as numbers were
    TypeError, ZeroDivisionError, AttributeError, ValueError tracebacks."""
    from hypothesis import strategies as st

    @SETTINGS
    @given(st.data())
    def read(data):
        files = dict(FLEET)
        i = data.draw(st.integers(0, len(files[name]) - 1))
        damaged = data.draw(mutants.damaged(files[name][i]))[1]
        files[name] = files[name][:i] + [damaged] + files[name][i + 1:]
        _write_folder(tmp_path / "run", files)
        one_line_or_read(capsys, cli.main(["check", "--fleet", "--from", str(tmp_path / "run"), "-o",
                                           str(tmp_path / "out"), "--no-html"]), str(tmp_path / "run" / name))

    read()


@pytest.mark.parametrize("name, change, words", [
    ("pairs.jsonl", lambda d: d.update(value=0), "pairs.jsonl, line 1: field the document: value is 0"),
    ("pairs.jsonl", lambda d: d.update(key=True), "pairs.jsonl, line 1: field key is bool, not text"),
    ("isolation.json", lambda d: d["isolation"].update(bad_links="ab"), "field isolation.bad_links is str"),
    ("isolation.json", lambda d: d.update(isolation="x"), "field isolation is str, not an object"),
    ("remeasured.json", lambda d: d["remeasured"].update(n1=[1]), "field remeasured[...] is array, not an object"),
    # the node's topology as fleet/facts.py reads it: AttributeError, TypeError tracebacks
    ("nodes.jsonl", lambda d: d["topology"]["pus"].__setitem__(3, "text"), "line 1: field topology.pus[3] is str"),
    ("nodes.jsonl", lambda d: d["topology"]["gpus"][0].update(numa_node="0"), "topology.gpus[0].numa_node is str"),
])
def test_the_fleet_s_pair_and_re_measure_documents_name_the_field(tmp_path, capsys, name, change, words):
    import copy

    files = copy.deepcopy(FLEET)
    change(files[name][0])
    _write_folder(tmp_path / "run", files)
    assert cli.main(["check", "--fleet", "--from", str(tmp_path / "run"), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("data, words", [
    (b'{"schema": "nodemap.check/1", "host": "n1"', "not JSON"),  # was json's JSONDecodeError
    (b"[1]", "field the document is array, not an object"),  # was a TypeError at doc["host"]
    (b'{"schema": "nodemap.check/1", "complete": true, "figures": [{"key": 3}]}', "field figures[0].key is int"),
])
def test_a_replayed_node_document_is_read_as_the_fleet_reads_one(tmp_path, monkeypatch, data, words):
    """NODEMAP_FLEET_NODE_DOC (the test hook that replays a saved document as a node's check)."""
    from nodemap.errors import InputError
    from nodemap.fleet import nodecheck

    (tmp_path / "doc.json").write_bytes(data)
    monkeypatch.setenv(nodecheck.DOC_ENV, str(tmp_path / "doc.json"))
    with pytest.raises(InputError) as e:
        nodecheck.run_check(lambda *a: {}, "n1", "quick", None)
    assert str(e.value).startswith(str(tmp_path / "doc.json")) and words in str(e.value), e.value
    (tmp_path / "doc.json").write_text(json.dumps(_fleet_folder()["nodes.jsonl"][0]))
    assert nodecheck.run_check(lambda *a: {}, "n7", "quick", None).host == "n7"


# --- watch timelines (nodemap report FILE.watch; the summary of run --watch) ---------


def _timeline(tmp_path) -> str:
    """A timeline as the monitor writes it (monitor.prepare: the header; monitor._write: each line)."""
    from nodemap.mapping.nodeplan import PlannedTask
    from nodemap.watch import monitor

    task = PlannedTask(0, "0", "0", [0], [], 1, "", {}, [0], [0], ["0000:01:00.0"])
    w = monitor.prepare(str(tmp_path / "w"), 0.2, local_rank=0, local_size=1, task=task, argv=["app"],
                        env={"SLURM_JOB_ID": "7", "UCX_TLS": "rc"})
    for rec in ([{"gpus": [{"index": 0, "uuid": "GPU-0", "name": "H100", "total": 80 << 30}]}, {"libs": ["cupy"]},
                 {"others": {"0": [[77, "jupyter", [1]]]}}]
                + [[round(0.2 * i, 3), 2 << 30, 400 << 30, [(4 << 30) + i], [5 << 30], [1 << 30]] for i in range(6)]
                + [{"note": "a note"}, {"end": {"t": 1.2, "samples": 6, "exit": 0}}]):
        monitor._write(w.fd, rec)
    os.close(w.fd)
    return w.path


def test_a_timeline_reads_back_as_the_monitor_wrote_it(tmp_path):
    from nodemap.watch import timeline

    tl = timeline.read(_timeline(tmp_path))
    assert (tl.job, tl.rank, tl.header.planned_gpus, tl.header.env, tl.header.argv) == ("7", 0, [0], {"UCX_TLS": "rc"},
                                                                                        ["app"])
    assert [g.name for g in tl.gpus] == ["H100"] and tl.libs == ["cupy"] and tl.notes == ["a note"]
    assert tl.other_procs == {0: [(77, "jupyter", [1])]} and tl.end.exit == 0 and tl.end.samples == 6
    assert tl.t == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0] and tl.own[-1] == [(4 << 30) + 5] and tl.torn == 0


def test_report_reads_or_refuses_a_damaged_timeline_in_one_line(tmp_path, capsys):
    """Any line of a timeline changed (the header, a sample, an event): read,
    or one line naming the file and the line, never a traceback."""
    from hypothesis import strategies as st

    path = _timeline(tmp_path)
    with open(path, "rb") as f:
        lines = f.read().splitlines()

    @SETTINGS
    @given(st.data())
    def read(data):
        i = data.draw(st.integers(0, len(lines) - 1))
        what, damaged = data.draw(mutants.damaged(json.loads(lines[i])))
        with open(path, "wb") as f:
            f.write(b"\n".join(lines[:i] + [damaged] + lines[i + 1:]) + b"\n")
        code = cli.main(["report", path])
        err = capsys.readouterr().err
        if err:
            assert f"{path}, line {i + 1}: " in err, (what, err)
        one_line_or_read(capsys, code, path)

    read()


@pytest.mark.parametrize("line, change, words", [
    (0, lambda d: d.update(schema="nodemap.watch/9"), "line 1: field the document: schema is 'nodemap.watch/9'"),
    (0, lambda d: d.update(start=float("nan")), "line 1: field the document: start is nan, not a finite number"),
    (0, lambda d: d.update(rank="3"), "line 1: field rank is str, not an integer"),  # a TypeError in sorting
    (1, lambda d: d["gpus"][0].pop("index"), "line 2: field gpus[0].index is missing"),  # a KeyError in analysis
    (3, lambda d: d["others"].update({"x": []}), "line 4: a key of field others is str, not an integer"),
    (5, lambda d: d.__setitem__(0, float("inf")), "line 6: field [0] is not a finite number"),
])
def test_a_damaged_timeline_line_names_the_line_and_field(tmp_path, capsys, line, change, words):
    path = _timeline(tmp_path)
    with open(path) as f:
        lines = [json.loads(x) for x in f]
    change(lines[line])
    with open(path, "w") as f:
        f.write("".join(json.dumps(x) + "\n" for x in lines))
    assert cli.main(["report", path]) == 2
    err = capsys.readouterr().err
    assert f"{path}, {words}" in err and len(err.splitlines()) == 1, err
