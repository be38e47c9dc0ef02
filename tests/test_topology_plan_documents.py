"""A saved Topology (nodemap.topology/1) or Plan (nodemap.plan/1) damaged
anywhere is one line naming the file and the field path, exit 2 from every
command that reads it; what nodemap wrote reads back equal (issue 31)."""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import nodes
from hostile import nodemap, refused
from nodemap.cli import main
from nodemap.errors import InputError
from nodemap.mapping.plan import plan
from nodemap.mapping.request import Plan, Request
from nodemap.topology import discover
from nodemap.topology.model import Topology
from test_paths import sample_node

TOPOLOGIES = {"karolina": nodes.karolina(), "perlmutter": nodes.perlmutter(), "sample": sample_node()}
PLANS = {name: plan(t, Request(tasks=4, threads=2)) for name, t in TOPOLOGIES.items()}
CPU_FIELDS = {"cpuset", "cpus", "mems", "allowed_mems", "places", "restrict_cpus", "restrict_mems"}
# one value of each JSON type, and the numbers JSON cannot hold (Python's json writes them)
VALUES = [0, 7, 2.5, "x", True, None, [], [1], {}, {"a": 1}, math.nan, math.inf, -math.inf]


def _kind(v: object) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return "non-finite"
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict"}.get(type(v), "null")


def _locations(doc: object, at: str = ""):
    """(path as nodemap names it, container, key) of every value in a JSON document."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        path = f"{at}[{k}]" if isinstance(doc, list) else f"{at}.{k}" if at else k
        if path != "schema":
            yield path, doc, k
            yield from _locations(v, path)


def _mutated(d: dict, data) -> tuple[dict, str, bool]:
    """A copy of `d` with one value changed: (document, the start of its error, whether it must be
    refused). A value of its field's JSON type may be valid; "" when any error but one naming a field
    would be wrong."""
    d = json.loads(json.dumps(d))
    path, box, key = data.draw(st.sampled_from(list(_locations(d))), label="where")
    old = box[key]
    how = data.draw(st.sampled_from(["type", "drop", "unknown", "cpus"]), label="how")
    if how == "drop" and isinstance(box, dict):
        del box[key]  # (fields with a default may be left out)
        return d, f"field {path} is missing", False
    if how == "unknown" and isinstance(old, dict):
        old["colour"] = "green"
        return d, f"field {path}.colour is not one nodemap writes", True
    if how == "cpus" and isinstance(old, str) and CPU_FIELDS & set(path.replace("[", ".").split(".")):
        box[key] = "3-1"
        return d, f"field {path}: descending range", True
    new = data.draw(st.sampled_from(VALUES), label="new")
    box[key] = new
    same = _kind(new) == _kind(old) or (_kind(old), _kind(new)) == ("float", "int")
    if same or old is None:  # (a null field, restrict_cpus, takes a CPU list too)
        return d, "field ", False
    finite = _kind(new) == "non-finite" and _kind(old) == "float"
    return d, f"field {path} is not a finite number" if finite else f"field {path} is", True


def _refused_in_one_line(read, d: dict, expected: str, refused: bool) -> None:
    text = json.dumps(d).encode()  # NaN and Infinity as Python's json writes them
    try:
        read(text, "t.json")
    except InputError as e:
        assert "\n" not in str(e) and str(e).startswith(f"t.json: {expected}"), (expected, str(e))
    else:
        assert not refused, f"read, not refused: {expected}"


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(sorted(TOPOLOGIES)), data=st.data())
def test_a_damaged_topology_names_its_field(name, data):
    _refused_in_one_line(Topology.from_json, *_mutated(TOPOLOGIES[name].to_dict(), data))


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(sorted(PLANS)), data=st.data())
def test_a_damaged_plan_names_its_field(name, data):
    _refused_in_one_line(Plan.from_json, *_mutated(PLANS[name].to_dict(), data))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_nodemap_topo_input_refuses_a_damaged_export_with_exit_2(tmp_path, data):
    d, expected, must = _mutated(TOPOLOGIES["karolina"].to_dict(), data)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(d))
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["topo", "--input", str(path)])
    if must:
        assert code == 2 and err.getvalue().count("\n") == 1, err.getvalue()
        assert err.getvalue().startswith(f"nodemap topo: error: {path}: {expected}"), (expected, err.getvalue())
    else:  # valid, or refused in one line (a value no machine reports: a repeated index...)
        assert code == 0 or (code == 2 and err.getvalue().count("\n") == 1), err.getvalue()


@pytest.mark.parametrize("args", [["topo"], ["plan", "--tasks", "2"], ["show"], ["run", "--dry-run", "--", "true"]],
                         ids=lambda a: a[0])
def test_every_reader_of_a_topology_names_the_field(tmp_path, args):
    d = TOPOLOGIES["karolina"].to_dict()
    d["numa_nodes"][2]["cpuset"] = 5
    d["nics"][0]["ports"][0]["rate_gbps"] = math.nan
    (tmp_path / "t.json").write_text(json.dumps(d))
    refused(nodemap(*args[:1], "--input", str(tmp_path / "t.json"), *args[1:]), "t.json: field numa_nodes[2].cpuset "
            "is int, not text")


def test_a_non_finite_number_is_refused_where_json_holds_it(tmp_path):
    d = TOPOLOGIES["karolina"].to_dict()
    d["pci_devices"][1]["link_speed"] = math.inf
    (tmp_path / "t.json").write_text(json.dumps(d))
    refused(nodemap("topo", "--input", str(tmp_path / "t.json")), "field pci_devices[1].link_speed is not a finite number")


def test_a_check_document_names_its_damaged_topology(tmp_path):
    from nodemap.check import document

    d = {"schema": document.SCHEMA, "host": "n1", "started": "2026-11-28T00:00:00", "level": "health",
         "complete": True, "topology": {**TOPOLOGIES["sample"].to_dict(), "pus": [{"os_index": "0"}]}}
    with pytest.raises(InputError, match=r"^c.json: field topology.pus\[0\].os_index is str, not an integer"):
        document.from_dict(d, where="c.json")


# --- round trips --------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PLANS))
def test_a_plan_reads_back_equal(name):
    assert Plan.from_json(PLANS[name].to_json()) == PLANS[name]


# real machines' sysfs: allowed cpusets, offline PUs, s390 groups (books), ARM
SNAPSHOTS = ["16amd64-8n2c-cpusets", "16em64t-4s2c2t-offlines", "20s390-2g6s4c", "2arm-2c"]


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_a_sysfs_fixture_reads_back_equal(fixtures, name):
    # (every hwloc XML fixture: tests/test_hwloc_xml.py)
    t = discover.discover(fixtures / "hwloc-linux" / f"{name}.tar.bz2")
    assert Topology.from_json(t.to_json(), name) == t


# --- a check document as --input ------------------------------------------------------


def _check_doc(topology: dict | None) -> str:
    from nodemap.check import document, expectations

    doc = json.loads(document.CheckDoc(level="quick", topology=None, expectations=expectations.shipped(), results=[],
                                       checks=[]).to_json())
    return json.dumps({**doc, "topology": topology})


READERS = [["topo"], ["plan", "--tasks", "2"], ["show"], ["run", "--dry-run", "--", "true"]]


@pytest.mark.parametrize("args", READERS, ids=lambda a: a[0])
def test_every_reader_of_a_topology_takes_a_check_document(tmp_path, args):
    """It was refused ("not a nodemap topology export"), although check.json holds the node."""
    d = TOPOLOGIES["karolina"].to_dict()
    (tmp_path / "t.json").write_text(json.dumps(d))
    (tmp_path / "check.json").write_text(_check_doc(d))
    export, check = (nodemap(*args[:1], "--input", str(tmp_path / f), *args[1:]) for f in ("t.json", "check.json"))
    assert check.returncode == 0, check.stderr
    assert _steady(args[0], check.stdout) == _steady(args[0], export.stdout) and check.stdout


def _steady(command: str, out: str) -> list[list[str]]:
    """show's "on" column is the CPU the process ran on at that moment (two runs may differ): left out."""
    rows = [line.split() for line in out.splitlines()]
    return [r[:4] + r[5:] for r in rows] if command == "show" else rows


@pytest.mark.parametrize("args", READERS, ids=lambda a: a[0])
def test_a_damaged_check_document_is_one_line_naming_the_topologys_field(tmp_path, args):
    d = TOPOLOGIES["karolina"].to_dict()
    d["numa_nodes"][2]["cpuset"] = 5
    (tmp_path / "check.json").write_text(_check_doc(d))
    refused(nodemap(*args[:1], "--input", str(tmp_path / "check.json"), *args[1:]),
            "check.json: field topology.numa_nodes[2].cpuset is int, not text")


@pytest.mark.parametrize("topology, said", [(None, "field topology is missing or null"),
                                            ([1], "field topology is array"),
                                            ({"schema": "x"}, "field topology.schema is 'x'")])
def test_a_check_document_without_a_node_is_one_line_naming_the_field(tmp_path, topology, said):
    (tmp_path / "check.json").write_text(_check_doc(topology))
    refused(nodemap("topo", "--input", str(tmp_path / "check.json")), "check.json: " + said)


@pytest.mark.parametrize("kind, steps", [("export", ["schema_of", "decode"]),
                                         ("check", ["schema_of", "decode"])])
def test_a_topology_file_is_read_once(tmp_path, monkeypatch, kind, steps):
    """Its schema read once, its node decoded and checked once (an export's
    schema was read twice; issue 37). A check document's node: the
    document's head, then the node decoded in the document's one pass (it was
    parsed as a dict, then converted again)."""
    from nodemap import records

    calls = []
    for name in ("schema_of", "decode", "convert"):
        real = getattr(records, name)
        monkeypatch.setattr(records, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
    d = TOPOLOGIES["karolina"].to_dict()
    (tmp_path / "node.json").write_text(json.dumps(d) if kind == "export" else _check_doc(d))
    assert discover.discover(tmp_path / "node.json") == TOPOLOGIES["karolina"]
    assert calls == steps


def test_this_machine_is_narrowed_to_what_this_process_may_use_once(monkeypatch):
    """discover applied the allowed set (affinity, cgroup cpuset) again
    over sysfs.read's, reading /proc and the cgroup files twice (issue 37)."""
    from nodemap.topology import allowed

    if not discover._has_sysfs():
        pytest.skip("no Linux sysfs here")
    calls = []
    real = allowed.read_allowed
    monkeypatch.setattr(allowed, "read_allowed", lambda *a, **k: calls.append(1) or real(*a, **k))
    discover.discover(source="sysfs")
    assert len(calls) == 1


def test_the_check_schemas_the_topology_reader_knows_are_the_checks():
    from nodemap.check import document

    assert discover.CHECK_SCHEMAS == document.SCHEMAS
