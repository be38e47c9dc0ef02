"""A part whose output was wrong is a typed record on its ResultSet
(bench/results.py Failure), saved with the set: a result file written with
--output and a check document keep it for `report` and `check --from`,
damage is named by its field path, and files saved before it existed
(no "failures") read as sets with none."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings

import check_synth as syn
import mutants
from nodemap import cli
from nodemap.bench import resultfile
from nodemap.bench.results import SCHEMA, Failure, ResultSet
from nodemap.check import failed
from test_check_failed_parts import failed_set, jacobi_halo, ring_halo

NCCL = Failure("nccl", "all_reduce", "NCCL all_reduce", "0 wrong elements", "5 wrong elements (out-of-place, 8 B)",
               transport="nccl", count=5, size=8, message="all_reduce out-of-place 8 B: 5 wrong elements after the "
               "operation: NCCL or the GPUs' links corrupt data")


def nccl_set() -> ResultSet:
    """A bench nccl set whose one size passed and another's elements came back wrong."""
    rs = syn.nccl_all_reduce(300.0, 2)
    rs.fail(NCCL)
    return rs


def test_fail_keeps_the_record_and_the_line_people_read():
    rs = nccl_set()
    assert rs.failures == [NCCL] and rs.messages == [NCCL.message] and not rs.complete


def test_a_result_file_keeps_its_failures():
    rs = failed_set("bench ring", ring_halo("peer", 4096), ring_halo("nccl", 65536))
    back = resultfile.decode("r.json", rs.to_json().encode())
    assert back.failures == rs.failures and back.messages == rs.messages and not back.complete
    assert failed.parts("ring", back) == failed.parts("ring", rs)


def test_a_check_document_keeps_its_steps_failures():
    """check --from reads the sets inside a check document as a result file's."""
    from nodemap.check import document, expectations
    from nodemap.check.document import CheckDoc

    rs = failed_set("bench jacobi", jacobi_halo("mpi-aware", "mpi-aware"))
    doc = CheckDoc(level="quick", topology=None, expectations=expectations.shipped(), results=[nccl_set(), rs],
                   host="n1", checks=failed.parts("jacobi", rs))
    doc.rejudge()
    back = document.decode("check.json", doc.to_json().encode())
    assert [s.failures for s in back.results] == [[NCCL], rs.failures]
    assert json.loads(back.to_json()) == json.loads(doc.to_json())


def test_a_result_file_saved_before_failures_were_typed_reads_with_none():
    """Old files (schema nodemap.results/1, no "failures") still decode; the
    schema did not change, as the field is one more with a default."""
    d = json.loads(nccl_set().to_json())
    del d["failures"]
    assert d["schema"] == SCHEMA == "nodemap.results/1"
    back = resultfile.decode("old.json", json.dumps(d).encode())
    assert back.failures == [] and back.messages == [NCCL.message] and not back.complete
    assert failed.parts("nccl", back) == []  # an old file's failed part is said in its messages only


def test_report_keeps_a_result_file_s_failures(tmp_path, capsys):
    """`report --json` of a bench file is a check document holding the set, its failures with it."""
    path = tmp_path / "r.json"
    path.write_text(nccl_set().to_json())
    assert cli.main(["report", str(path), "--json"]) in (0, 1)
    [rs] = json.loads(capsys.readouterr().out)["results"]
    assert rs["failures"] == [dataclasses.asdict(NCCL)] and rs["messages"] == [NCCL.message]


@pytest.mark.parametrize("change, words", [
    (lambda f: f.update(count="5"), "field failures[0].count is str, not an integer"),
    (lambda f: f.pop("part"), "field failures[0].part is missing"),
    (lambda f: f.update(size=-8), "field failures[0]: count 5, size -8: not the counts of a case"),
    (lambda f: f.update(kind=None), "field failures[0].kind is null, not text"),
])
def test_a_damaged_failure_is_named_by_its_field(tmp_path, capsys, change, words):
    d = json.loads(nccl_set().to_json())
    change(d["failures"][0])
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    assert cli.main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert words in err and str(path) in err and len(err.splitlines()) == 1, err


def _check_doc_with_failures() -> dict:
    from nodemap.check import expectations
    from nodemap.check.document import CheckDoc

    rs = failed_set("bench ring", ring_halo("nccl", 4096))
    doc = CheckDoc(level="quick", topology=None, expectations=expectations.shipped(), results=[nccl_set(), rs],
                   host="n1", checks=failed.parts("ring", rs))
    doc.rejudge()
    return json.loads(doc.to_json())


@pytest.mark.parametrize("make", [lambda: json.loads(failed_set("bench nccl", NCCL, NCCL).to_json()),
                                  _check_doc_with_failures], ids=["result file", "check document"])
def test_report_reads_or_refuses_damaged_failures_in_one_line(tmp_path, capsys, make):
    """hypothesis: one change anywhere in a document with failures (a value
    of another type, a field gone, the text cut short): read, or one line."""
    from test_documents_damaged import one_line_or_read

    doc = make()
    path = str(tmp_path / "doc.json")

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(mutants.damaged(doc))
    def read(case):
        with open(path, "wb") as f:
            f.write(case[1])
        one_line_or_read(capsys, cli.main(["report", path]), path)

    read()


def test_a_damaged_failure_in_a_check_document_is_named_by_its_path(tmp_path, capsys):
    d = _check_doc_with_failures()
    d["results"][1]["failures"][0]["count"] = "7"
    path = tmp_path / "check.json"
    path.write_text(json.dumps(d))
    assert cli.main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert "field results[1].failures[0].count is str, not an integer" in err and len(err.splitlines()) == 1, err
