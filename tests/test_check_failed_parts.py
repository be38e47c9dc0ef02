"""A step whose part failed is judged, not taken for an interruption.

A kind's ResultSet is incomplete when the user stopped it and also when a
part failed (NCCL received wrong elements, a Jacobi or ring halo came out
wrong) or a case ran past --timeout. The check ended every such step as
"interrupted" (exit 130) and lost the steps after it: a node whose NCCL
corrupts data, the fault a health check most needs to find, was never
failed. Steps are test doubles (no GPU here), through check's own runner."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

import check_synth as syn
from nodemap.bench import harness, interrupt
from nodemap.bench.results import ResultSet
from nodemap.check import document, expectations, failed, node, suite

NCCL = suite.Step("nccl", (), "NCCL all_reduce bus bandwidth")
STREAM = suite.Step("memory", (), "STREAM placement sweep")
IDLE = {"busy": False, "reasons": []}
DETECTOR = SimpleNamespace(sample=lambda seconds=0: IDLE, begin=lambda: None, end=lambda utilisation=False: IDLE)


def nccl_wrong_elements(monkeypatch) -> str:
    """The message `bench nccl` gives for an operation whose received data
    is wrong: its own `one` over stand-ins for the GPUs, 5 elements wrong."""
    from nodemap.bench.comm import collectives

    for name in ("fill", "enqueue"):
        monkeypatch.setattr(collectives, name, lambda *a: None)
    monkeypatch.setattr(collectives, "wrong", lambda *a: 5)
    monkeypatch.setattr(collectives, "repeat", lambda once, repeats, warmup: [1e-3] * repeats)
    ctx = SimpleNamespace(cp=None, n=2, sync=lambda: None, max_all=float)
    got = collectives.one(ctx, "all_reduce", 1 << 28, False, 1, 3, "2 ranks: gpu0, gpu1")
    assert isinstance(got, str)
    return got


def check(monkeypatch, *nccl: ResultSet, exp=None):
    """run_check over two steps: NCCL returning `nccl` in turn (a re-run the
    next), then STREAM; measured again only where more than one is given."""
    ran = []

    def measure(kind, request, level="full", *job_and_topology):
        ran.append(kind)
        return nccl[ran.count("nccl") - 1] if kind == "nccl" else syn.stream({"1/core": (4, 20.0)})

    monkeypatch.setattr(node, "plan", lambda topo, level, in_job=None: ([STREAM, NCCL], []))
    monkeypatch.setattr(node, "measure", measure)
    doc = node.run_check("quick", exp or expectations.shipped(), detector=DETECTOR,
                         remeasure_budget=None if len(nccl) > 1 else 0)
    return doc, ran


def test_nccl_that_corrupts_data_fails_the_node_and_the_check_goes_on(monkeypatch):
    message = nccl_wrong_elements(monkeypatch)
    rs = syn.nccl_all_reduce(300.0, 2, size=1 << 30)  # the other size passed verification
    rs.messages.append(message)
    rs.complete = False  # as `bench nccl` leaves it (collectives.run: a part failed)
    doc, ran = check(monkeypatch, rs)
    assert ran == ["nccl", "memory"]  # NCCL runs first (check/budget.py), STREAM still after it
    assert doc.complete and document.exit_status(doc) == document.UNHEALTHY
    [c] = [c for c in doc.checks if c.key == "verification/nccl/all_reduce"]
    assert (c.verdict, c.cause, c.area) == ("fail", "hardware", "NCCL")
    assert c.value == "5 wrong elements (out-of-place, 256 MiB)" and message in c.rule and "nvlink" in c.fix
    assert doc.node_verdict() == "fail" and doc.areas()["NCCL"] == "fail"
    [f] = [f for f in doc.findings if c.key in f.keys]
    assert f.verdict == "fail" and f.cause == "hardware" and "5 wrong elements" in f.text
    assert {j.figure.key for j in doc.judged} >= {"nccl/all_reduce", "host/stream/triad"}  # both steps judged


def test_the_reports_and_slurm_name_the_wrong_data(monkeypatch):
    from nodemap.check import prom
    from nodemap.report import html, terminal
    from nodemap.slurm.verdict import health

    rs = ResultSet("bench nccl", messages=[nccl_wrong_elements(monkeypatch)], complete=False)
    doc, _ = check(monkeypatch, rs)
    text = terminal.summary(doc, width=200)
    assert "node: UNHEALTHY (FAIL)" in text and "INCOMPLETE" not in text
    assert "NCCL         FAIL 1 checks; NCCL all_reduce: 5 wrong elements" in text
    assert health(doc) == (False, "nodemap: NCCL: NCCL all_reduce 5 wrong elements (out-of-place, 256 MiB) "
                                  "(limit 0 wrong elements)")
    page = html.render(doc)
    assert "verification/nccl/all_reduce" in page and "NCCL all_reduce: 5 wrong elements (out-of-place, 256 MiB)" in page
    from prometheus_client.parser import text_string_to_metric_families

    metrics = {(f.name, s.labels.get("area")): s.value for f in text_string_to_metric_families(
        prom.render(doc, document.exit_status(doc))) for s in f.samples}
    assert metrics["nodemap_check_status", None] == 1 and metrics["nodemap_check_complete", None] == 1
    assert metrics["nodemap_check_area_verdict", "NCCL"] == 4  # fail


def test_wrong_data_in_a_step_measured_again_fails_the_node_and_the_check_completes(monkeypatch, tmp_path):
    """Measuring again (check/remeasure.py) took any incomplete re-run for Ctrl-C."""
    site = tmp_path / "site.toml"  # 297-300 GB/s straddles 299: undecided, so NCCL is measured again
    site.write_text('[[limit]]\nkind = "nccl"\nmatch = "."\nwarn_below = 299.5\nfail_below = 299.0\nsource = "t"\n')
    again = ResultSet("bench nccl", messages=[nccl_wrong_elements(monkeypatch)], complete=False)
    doc, ran = check(monkeypatch, syn.nccl_all_reduce(300.0, 2), again, exp=expectations.load(str(site)))
    assert ran == ["nccl", "memory", "nccl"] and doc.complete
    assert [c.cause for c in doc.checks if c.key == "verification/nccl/all_reduce"] == ["hardware"]
    assert doc.remeasured[0]["note"] == "measuring again failed"  # its samples not pooled
    assert document.exit_status(doc) == document.UNHEALTHY


def test_a_step_that_ran_past_its_timeout_is_skipped_not_failed_nor_an_interruption(monkeypatch):
    rs = ResultSet("bench nccl")
    with harness.session(rs, SimpleNamespace(timeout=60.0, output=None), watchdog=False):
        rs.add(syn.nccl_all_reduce(300.0, 2).results[0])
        interrupt.request(harness.TIMEOUT)  # what the harness's watchdog does at --timeout
    assert not rs.complete
    doc, ran = check(monkeypatch, rs)
    assert ran == ["nccl", "memory"] and doc.complete
    [s] = [s for s in doc.skipped if s.what == "NCCL all_reduce bus bandwidth (bench nccl)"]
    assert s.reason.startswith("timeout: a case ran longer than --timeout 60 s") and "1 result(s) kept" in s.reason
    assert not [c for c in doc.checks if c.key.startswith("verification/")]
    assert doc.node_verdict() != "fail" and document.exit_status(doc) != document.INTERRUPTED


@pytest.mark.parametrize("how", ["message", "signal"])
def test_a_real_interruption_still_ends_the_check_incomplete(monkeypatch, how):
    rs = ResultSet("bench nccl")
    with harness.session(rs, SimpleNamespace(timeout=None, output=None), watchdog=False):
        rs.add(syn.nccl_all_reduce(300.0, 2).results[0])
        interrupt.request()  # the first Ctrl-C's stop flag (interrupt.sigint_stops)
    if how == "signal":  # the user's signal, whatever the kind wrote
        rs.messages.remove(harness.INTERRUPTED)
        monkeypatch.setattr(interrupt, "signalled", lambda: True)
    doc, ran = check(monkeypatch, rs)
    assert ran == ["nccl"] and not doc.complete
    assert document.exit_status(doc) == document.INTERRUPTED


def test_an_incomplete_set_no_rule_knows_is_skipped_with_its_messages(monkeypatch):
    rs = ResultSet("bench nccl", messages=["nccl: something went wrong in a part"], complete=False)
    doc, ran = check(monkeypatch, rs)
    assert ran == ["nccl", "memory"] and doc.complete
    [s] = [s for s in doc.skipped if s.what == "NCCL all_reduce bus bandwidth (bench nccl)"]
    assert s.reason == "a part did not complete: nccl: something went wrong in a part"


@pytest.mark.parametrize("variant, cause", [("nccl-overlap", "hardware"), ("peer", "hardware"),
                                            ("mpi-aware", "configuration"), ("mpi-staged-overlap", "configuration")])
def test_a_wrong_jacobi_halo_fails_for_the_transport_that_carried_it(variant, cause):
    msg = (f"{variant} fp64: differs from the single-GPU run: norm 1.5 != 1.25: the halo exchange is wrong; "
           "no time reported")  # bench/app/jacobi.py's line for a variant whose field differs
    [c] = failed.parts("jacobi", ResultSet("bench jacobi", messages=[msg], complete=False))
    assert (c.key, c.verdict, c.cause, c.area) == (f"verification/jacobi/{variant}", "fail", cause, "GPU<->GPU")
    assert c.value == "fp64: norm 1.5 != 1.25"
    assert ("UCX_MEMTYPE_CACHE" in c.fix) == (cause == "configuration")


def test_wrong_ring_halos_at_several_sizes_are_one_failing_check_per_transport():
    msgs = [f"nccl at {s} B: 7 wrong halo elements: the transport corrupts data" for s in (4096, 65536)]
    [c] = failed.parts("ring", ResultSet("bench ring", messages=msgs, complete=False))
    assert (c.key, c.cause) == ("verification/ring/nccl", "hardware")
    assert c.value == "7 wrong halo elements (4 KiB), at 1 more size"


def test_the_rules_follow_the_kinds_own_messages():
    """failed.WRONG matches the lines the kinds write: a kind that rewords
    its line must change its rule here too, or wrong data goes unjudged."""
    from nodemap.bench.app import jacobi
    from nodemap.bench.comm import collectives, ring

    sources = {"nccl": collectives, "jacobi": jacobi, "ring": ring}
    for rule in failed.WRONG:
        assert rule.said in inspect.getsource(sources[rule.kind]), rule.kind


@pytest.mark.parametrize("forced", [{"NCCL_ALGO": "Ring"}, {"NCCL_PROTO": "LL128"},
                                    {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}])
def test_wrong_nccl_data_under_a_forced_algorithm_or_protocol_is_the_jobs_not_the_nodes(monkeypatch, forced):
    """NCCL_ALGO/NCCL_PROTO force a path NCCL would not pick: the node was
    failed (exit 1, drained) for a user's setting. The cause follows what the
    check's inventory saw (inventory/env/NAME), not a second read of the environment."""
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        monkeypatch.delenv(name, raising=False)
    for name, value in forced.items():
        monkeypatch.setenv(name, value)
    rs = syn.nccl_all_reduce(300.0, 2, size=1 << 30)
    rs.messages.append(nccl_wrong_elements(monkeypatch))
    rs.complete = False
    doc, _ = check(monkeypatch, rs)
    assert {f"inventory/env/{n}" for n in forced} <= {c.key for c in doc.checks if c.verdict == "warn"}
    [c] = [c for c in doc.checks if c.key == "verification/nccl/all_reduce"]
    assert (c.verdict, c.cause) == ("fail", "configuration")
    assert c.fix.startswith(f"unset {'/'.join(sorted(forced))} and run again")
    assert doc.node_verdict() != "fail" and document.exit_status(doc) == document.HEALTHY
    from nodemap.slurm.verdict import health

    assert health(doc)[0]  # nothing to drain


def test_a_forced_nccl_variable_does_not_excuse_wrong_data_over_peer_copies_or_mpi():
    inv = [failed.Check("inventory/env/NCCL_ALGO", "NCCL_ALGO", "Ring", "unset", "warn", "", "configuration")]
    assert failed.forced_nccl(inv) == ["NCCL_ALGO"]
    peer = ResultSet("bench ring", messages=["peer at 4096 B: 7 wrong halo elements: the transport corrupts data"])
    nccl = ResultSet("bench ring", messages=["nccl at 4096 B: 7 wrong halo elements: the transport corrupts data"])
    assert [c.cause for c in failed.parts("ring", peer, inv)] == ["hardware"]
    assert [c.cause for c in failed.parts("ring", nccl, inv)] == ["configuration"]
    assert [c.cause for c in failed.parts("ring", nccl)] == ["hardware"]  # not forced: the node's


def test_check_help_says_wrong_data_fails_the_node():
    """`nodemap check --help`'s exit status 1 names wrong data with the figures and health checks."""
    from nodemap.commands import check as command

    text = " ".join(command.DESCRIPTION.split())
    status_1 = text.split(" 1 unhealthy (", 1)[1].split(" 2 bad usage", 1)[0]
    assert "wrong data" in status_1, status_1


@pytest.mark.parametrize("said, why", [(f"{harness.TIMEOUT}: a case ran longer than --timeout 0.5 s", "a case ran past "
                                        "its --timeout"), (harness.INTERRUPTED, "interrupted"),
                                       ("all_reduce out-of-place 8 B: 5 wrong elements after the operation",
                                        "a part failed")])
def test_a_saved_bench_set_says_why_it_is_incomplete(tmp_path, capsys, said, why):
    # report printed every incomplete bench result file as "INCOMPLETE (interrupted: ...)", a timeout too
    from nodemap.cli import main

    rs = syn.stream({"1/core": (4, 20.0)})
    rs.messages.append(said)
    rs.complete = False
    (tmp_path / "r.json").write_text(rs.to_json())
    main(["report", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")])
    main(["report", str(tmp_path / "r.json")])
    assert f"INCOMPLETE ({why}: what was measured only)" in " ".join(capsys.readouterr().out.split())
    assert f"INCOMPLETE: {why}, what was measured only" in (tmp_path / "r.html").read_text()
