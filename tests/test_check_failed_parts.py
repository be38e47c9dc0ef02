"""A step whose part failed is judged, not taken for an interruption.

A kind's ResultSet is incomplete when the user stopped it and also when a
part failed (NCCL received wrong elements, a Jacobi or ring halo came out
wrong) or a case ran past --timeout. The check ended every such step as
"interrupted" (exit 130) and lost the steps after it: a node whose NCCL
corrupts data, the fault a health check most needs to find, was never
failed. Steps are test doubles (no GPU here), through check's own runner."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

import check_synth as syn
from test_jacobi_fake import fake  # noqa: F401 (the fixture: a NumPy stand-in for CuPy)
from nodemap.bench import driver, harness, interrupt
from nodemap.bench.results import Failure, ResultSet
from nodemap.check import busy, document, expectations, failed, node, suite
from nodemap.units import format_size

NCCL = suite.Step("nccl", (), "NCCL all_reduce bus bandwidth")
STREAM = suite.Step("memory", (), "STREAM placement sweep")
IDLE = busy.Sample()
DETECTOR = SimpleNamespace(sample=lambda seconds=0: IDLE, begin=lambda: None, end=lambda utilisation=False: IDLE)


def nccl_wrong_elements(monkeypatch) -> Failure:
    """The Failure `bench nccl` records for an operation whose received data
    is wrong: its own case's verification over stand-ins for the GPUs, 5
    elements wrong (every operation, while these stand-ins are in place)."""
    from nodemap.bench.comm import collectives
    from nodemap.bench.driver import PartFailed

    for name in ("fill", "enqueue"):
        monkeypatch.setattr(collectives, name, lambda *a: None)
    monkeypatch.setattr(collectives, "wrong", lambda *a: 5)
    monkeypatch.setattr(collectives.OpCase, "run", lambda self: 1e-3)
    w = SimpleNamespace(cp=None, n=2, sync=lambda: None, max_all=float, comm=None)
    case = collectives.OpCase(w, "all_reduce", 1 << 28, False, collectives.Options(iters=1), "2 ranks: gpu0, gpu1")
    with pytest.raises(PartFailed) as got:
        case.verify()
    assert isinstance(got.value.failure, Failure) and str(got.value) == got.value.failure.message
    return got.value.failure


def failed_set(command: str, *failures: Failure) -> ResultSet:
    """A kind's set whose parts failed, as the kind leaves it (ResultSet.fail)."""
    rs = ResultSet(command)
    for f in failures:
        rs.fail(f)
    return rs


def jacobi_halo(variant: str, transport: str, dtype: str = "fp64") -> Failure:
    """What bench/app/jacobi.py's decomposed() records for a variant whose field differs."""
    why = "norm 1.5 != 1.25"
    return Failure("jacobi", variant, f"Jacobi {variant} halos", "the single-GPU run's field", f"{dtype}: {why}",
                   transport=transport, message=f"{variant} {dtype}: differs from the single-GPU run: {why}: the "
                   "halo exchange is wrong; no time reported")


def ring_halo(transport: str, size: int) -> Failure:
    """What bench/comm/ring.py records for wrong halo elements (7 of them)."""
    return Failure("ring", transport, f"ring halos over {transport}", "0 wrong elements",
                   f"7 wrong halo elements ({format_size(size)})", transport=transport, count=7, size=size,
                   message=f"{transport} at {size} B: 7 wrong halo elements: the transport corrupts data")


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
    failure = nccl_wrong_elements(monkeypatch)
    rs = syn.nccl_all_reduce(300.0, 2, size=1 << 30)  # the other size passed verification
    rs.fail(failure)  # as `bench nccl` leaves it (the driver, given its case's PartFailed)
    doc, ran = check(monkeypatch, rs)
    assert ran == ["nccl", "memory"]  # NCCL runs first (check/budget.py), STREAM still after it
    assert doc.complete and document.exit_status(doc) == document.UNHEALTHY
    [c] = [c for c in doc.checks if c.key == "verification/nccl/all_reduce"]
    assert (c.verdict, c.cause, c.area) == ("fail", "hardware", "NCCL")
    assert c.value == "5 wrong elements (out-of-place, 256 MiB)" and failure.message in c.rule and "nvlink" in c.fix
    assert doc.node_verdict() == "fail" and doc.areas()["NCCL"] == "fail"
    [f] = [f for f in doc.findings if c.key in f.keys]
    assert f.verdict == "fail" and f.cause == "hardware" and "5 wrong elements" in f.text
    assert {j.figure.key for j in doc.judged} >= {"nccl/all_reduce", "host/stream/triad"}  # both steps judged


def test_the_reports_and_slurm_name_the_wrong_data(monkeypatch):
    from nodemap.report import prom
    from nodemap.report import html, terminal
    from nodemap.slurm.verdict import health

    rs = failed_set("bench nccl", nccl_wrong_elements(monkeypatch))
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
    again = failed_set("bench nccl", nccl_wrong_elements(monkeypatch))
    doc, ran = check(monkeypatch, syn.nccl_all_reduce(300.0, 2), again, exp=expectations.load(str(site)))
    assert ran == ["nccl", "memory", "nccl"] and doc.complete
    assert [c.cause for c in doc.checks if c.key == "verification/nccl/all_reduce"] == ["hardware"]
    assert doc.remeasured[0].note == "measuring again failed"  # its samples not pooled
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


@pytest.mark.parametrize("variant, transport, cause", [
    ("nccl-overlap", "nccl", "hardware"), ("peer", "peer", "hardware"), ("mpi-aware", "mpi-aware", "configuration"),
    ("mpi-staged-overlap", "mpi-staged", "configuration")])
def test_a_wrong_jacobi_halo_fails_for_the_transport_that_carried_it(variant, transport, cause):
    [c] = failed.parts("jacobi", failed_set("bench jacobi", jacobi_halo(variant, transport)))
    assert (c.key, c.verdict, c.cause, c.area) == (f"verification/jacobi/{variant}", "fail", cause, "GPU<->GPU")
    assert c.value == "fp64: norm 1.5 != 1.25"
    assert ("UCX_MEMTYPE_CACHE" in c.fix) == (cause == "configuration")


def test_wrong_ring_halos_at_several_sizes_are_one_failing_check_per_transport():
    [c] = failed.parts("ring", failed_set("bench ring", *(ring_halo("nccl", s) for s in (4096, 65536))))
    assert (c.key, c.cause) == ("verification/ring/nccl", "hardware")
    assert c.value == "7 wrong halo elements (4 KiB), at 1 more size"


def test_bench_nccl_records_its_wrong_elements_as_a_failure(monkeypatch):
    """Each kind records a typed Failure beside its line (the check judges
    the record, never the words): bench nccl's own loop, GPUs stood in."""
    from nodemap.bench.comm import collectives

    nccl_wrong_elements(monkeypatch)  # the case's stand-ins: every operation has 5 wrong elements
    from nodemap.bench.comm.world import World

    monkeypatch.setattr(collectives, "allocate", lambda w, nbytes: None)
    pool = SimpleNamespace(free_all_blocks=lambda: None)
    w = World(cp=SimpleNamespace(__version__="0", get_default_memory_pool=lambda: pool),
              nccl=SimpleNamespace(get_version=lambda: 22000), gpu_keys=["GPU0", "GPU1"])
    monkeypatch.setattr(World, "sync", lambda self: None)
    monkeypatch.setattr(collectives, "open_gpus", lambda *a, **k: w)
    rs = driver.measure(collectives, collectives.Options(sizes="256M", inplace="out", ops="all_reduce", iters=1,
                                                         repeats=3, timeout=60.0))
    [f] = rs.failures
    assert (f.kind, f.part, f.transport, f.count, f.size) == ("nccl", "all_reduce", "nccl", 5, 1 << 28)
    assert f.message == ("all_reduce out-of-place 268435456 B: 5 wrong elements after the operation: NCCL or the "
                         "GPUs' links corrupt data") and f.message in rs.messages  # the line people read, as it was
    assert not rs.complete and not rs.results
    [c] = failed.parts("nccl", rs)
    assert (c.key, c.label, c.value, c.expected) == ("verification/nccl/all_reduce", "NCCL all_reduce",
                                                     "5 wrong elements (out-of-place, 256 MiB)", "0 wrong elements")


def test_bench_ring_records_its_wrong_halos_as_a_failure(monkeypatch):
    from nodemap.bench.comm import mpi_common, ring

    monkeypatch.setattr(ring, "make_fields", lambda ctx, size: [SimpleNamespace(h=size // 4)])
    monkeypatch.setattr(ring.Phase, "run", lambda self: 1e-3)
    monkeypatch.setattr(ring, "poison", lambda ctx, fields: None)
    monkeypatch.setitem(ring.STEPS, "nccl", lambda ctx, fields: None)
    monkeypatch.setattr(ring, "check", lambda ctx, fields: 7)
    monkeypatch.setattr(mpi_common, "deadline", lambda seconds, what: contextlib.nullcontext())
    pool = SimpleNamespace(free_all_blocks=lambda: None)
    from nodemap.bench.comm.world import World

    w = World(gpu_keys=["GPU0", "GPU1"], nccl=object(), cp=SimpleNamespace(get_default_memory_pool=lambda: pool))
    monkeypatch.setattr(ring, "open_gpus", lambda *a, **k: w)
    rs = driver.measure(ring, ring.Options(transports="nccl", sizes="4K,64K", steps=1, no_overlap=True,
                                           timeout=60.0))
    assert [(f.kind, f.part, f.transport, f.count, f.size) for f in rs.failures] == [
        ("ring", "nccl", "nccl", 7, 4096), ("ring", "nccl", "nccl", 7, 65536)]
    assert "nccl at 4096 B: 7 wrong halo elements: the transport corrupts data" in rs.messages
    [c] = failed.parts("ring", rs)
    assert (c.key, c.label, c.value) == ("verification/ring/nccl", "ring halos over nccl",
                                         "7 wrong halo elements (4 KiB), at 1 more size")


def test_bench_jacobi_records_a_wrong_halo_as_a_failure_its_file_keeps(fake, tmp_path, capsys):
    """The decomposed run of a variant whose halo is lost (NumPy stand-in
    for CuPy), saved with -o and read back as `report` and `check --from` read it."""
    from nodemap import cli
    from nodemap.bench import resultfile

    out = tmp_path / "jacobi.json"
    assert cli.main(["bench", "jacobi", "--mode", "single", "--size", "34x21", "--gpus", "0,0", "--variants", "peer",
                     "--iters", "4", "--repeats", "1", "--inject-halo-fault", "-q", "-o", str(out)]) == 1
    capsys.readouterr()
    rs = resultfile.decode(str(out), out.read_bytes())
    [f] = rs.failures
    assert (f.kind, f.part, f.transport, f.what) == ("jacobi", "peer", "peer", "Jacobi peer halos")
    assert f.message.startswith("peer fp32: differs from the single-GPU run: ") and f.message in rs.messages
    [c] = failed.parts("jacobi", rs)
    assert (c.key, c.cause, c.expected) == ("verification/jacobi/peer", "hardware", "the single-GPU run's field")
    assert c.value.startswith("fp32: ") and c.value == f.got


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
    rs.fail(nccl_wrong_elements(monkeypatch))
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
    peer, nccl = failed_set("bench ring", ring_halo("peer", 4096)), failed_set("bench ring", ring_halo("nccl", 4096))
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
