"""The node's verdict apart from its job environment's, and the one
mapping from a check document to the exit status schedulers act on."""

import json

import pytest

import check_synth as syn
import nodes
from nodemap.check import expectations
from nodemap.check.document import Busy, CheckDoc, exit_status, from_dict
from nodemap.check.inventory import Check

NOT_AWARE = Check("inventory/mpi/cuda_aware", "MPI is not CUDA-aware", "device buffers are staged", "", "fail",
                  "staged", "configuration", "use a CUDA-aware MPI", "MPI")
ECC = Check("inventory/nvml/gpu0/ecc_uncorrected", "GPU0 uncorrected ECC errors", "3", "0", "fail",
            "uncorrected memory errors", "hardware", "drain the node")


def doc_of(*sets, checks=(), complete=True, busy=None):
    doc = CheckDoc(level="quick", topology=nodes.karolina(), expectations=expectations.shipped(),
                   results=list(sets), checks=list(checks), complete=complete, busy=busy)
    doc.rejudge()
    return doc


def healthy_gpus():
    return syn.hbm({g: 1400.0 for g in range(8)})


def test_a_configuration_fail_leaves_the_node_healthy():
    doc = doc_of(healthy_gpus(), checks=[NOT_AWARE])
    assert doc.verdict() == "fail"  # the worst of all, as before
    assert doc.node_verdict() == "pass" and doc.environment_verdict() == "fail"
    assert doc.environment_reasons() == ["MPI is not CUDA-aware"]
    assert exit_status(doc) == 0
    s = json.loads(doc.to_json())["summary"]
    assert (s["node"], s["environment"]) == ("pass", "fail")


def test_a_hardware_fail_is_unhealthy():
    vals = {g: 1400.0 for g in range(8)}
    vals[5] = 1100.0
    assert exit_status(doc_of(syn.hbm(vals))) == 1
    assert exit_status(doc_of(healthy_gpus(), checks=[ECC, NOT_AWARE])) == 1


def test_busy_cannot_judge_unless_the_hardware_failed():
    busy = Busy(True, ["load 14 from other jobs"])
    assert exit_status(doc_of(healthy_gpus(), busy=busy)) == 2
    assert exit_status(doc_of(healthy_gpus(), checks=[ECC], busy=busy)) == 1


def test_nothing_measured_cannot_judge():
    from nodemap.report import terminal

    doc = doc_of()  # every step failed (no tools): no figure at a measuring level
    assert exit_status(doc) == 2 and "node: could not judge (nothing measured)" in terminal.summary(doc)
    doc.level = "health"  # the passive level measures nothing by design
    assert exit_status(doc) == 0


def test_a_step_whose_only_output_was_wrong_for_a_configuration_cause_was_measured():
    """The only measuring step's output was wrong for the job's setting (MPI
    halos, a forced NCCL_ALGO): no figure, yet the node was measured and not
    shown unhealthy. It exited 2 "nothing measured", which fails a Slurm
    prolog and drains the node ("Prolog error") for a user's environment."""
    from nodemap.check import failed
    from nodemap.report import terminal
    from nodemap.slurm import verdict

    from test_check_failed_parts import failed_set, jacobi_halo

    wrong = failed.parts("jacobi", failed_set("bench jacobi", jacobi_halo("mpi-aware", "mpi-aware")))
    doc = doc_of(checks=wrong)
    assert not doc.judged and [c.cause for c in wrong] == ["configuration"]
    assert exit_status(doc) == 0 and verdict.health(doc) == (True, "")
    line = terminal.summary(doc, width=200).splitlines()[1]
    assert line.startswith("node: healthy (") and line.endswith("job environment: FAIL (Jacobi mpi-aware halos)")
    hw = failed.parts("jacobi", failed_set("bench jacobi", jacobi_halo("peer", "peer")))
    assert exit_status(doc_of(checks=hw)) == 1  # the same wrong data over peer copies is the node's


def test_interrupted_unless_read_again():
    doc = doc_of(healthy_gpus(), checks=[ECC], complete=False)
    assert exit_status(doc) == 130 and exit_status(doc, saved=True) == 1


def test_saved_document_keeps_busy_and_verdicts():
    doc = doc_of(healthy_gpus(), checks=[NOT_AWARE], busy=Busy(True, ["x"]))
    back = from_dict(json.loads(doc.to_json()))
    # its figures passed, but a busy node is not judged: inconclusive, as its exit status 2 says
    assert back.is_busy() and back.node_verdict() == "inconclusive" and exit_status(back, saved=True) == 2
    assert [j.verdict for j in back.judged] == [j.verdict for j in doc.judged]  # the figures' own are kept


# --- what a person reads -----------------------------------------------------------


def _reported():
    vals = {g: 1400.0 for g in range(8)}
    vals[3] = 1300.0
    lat = syn.latency({"L1d": (32, 1.2), "DRAM": (131072 << 10, 547.0)})
    return doc_of(syn.hbm(vals), lat, checks=[NOT_AWARE])


def test_terminal_says_node_apart_from_job_environment():
    from nodemap.report import terminal

    line = terminal.summary(_reported(), width=110).splitlines()[1]
    assert line.startswith("node: healthy (WARN); job environment: FAIL (MPI is not CUDA-aware")


@pytest.mark.parametrize("width", [80, 100])
def test_terminal_wraps_and_never_cuts_a_value(width, monkeypatch):
    from nodemap.report import terminal

    doc = _reported()
    monkeypatch.setenv("COLUMNS", str(width))  # as piped output or a narrow terminal reports it
    text = terminal.summary(doc)
    assert all(len(ln) <= width for ln in text.splitlines()), text
    flat = " ".join(ln.strip() for ln in text.splitlines())
    for key, shown in (("host/latency/DRAM", "median 550 ns [547, 552], best 547"),
                       ("gpu/3/hbm_triad", "median 1294 GB/s [1287, 1300], best 1300")):
        assert shown in flat, (key, text)  # whole, though wrapped
    assert "[1287," not in text.replace("[1287, 1300]", "")  # an interval is never split across lines
    assert "MPI is not CUDA-aware" in flat


def test_html_shows_the_interval_and_both_verdicts():
    from nodemap.report import html

    page = html.render(_reported())
    assert "node: healthy (WARN); job environment: FAIL" in page
    assert "1294 [1287, 1300]<br><span class='note'>3 repetitions, 75%" in page


def test_slurm_never_acts_on_what_exits_2():
    # a node nodemap drained must not be resumed by a check that measured nothing (a broken install)
    from nodemap.slurm import verdict

    doc = doc_of()
    assert exit_status(doc) == 2 and verdict.health(doc) == (None, "could not judge (nothing measured)")
    busy = Busy(True, ["load 14 from other jobs"])
    assert verdict.health(doc_of(healthy_gpus(), busy=busy))[0] is None
    assert verdict.health(doc_of(healthy_gpus())) == (True, "")
